"""Every ``ragym.engine`` setting the ledger listed as a gap reaches its use in the local engine (issue #51 item 1).

One table (``CHECKS``): each entry changes one setting of the tiny-policy engine recipe from its value in ``BASE``
and reads what the engine did with it, at the cheapest place it shows: the rows and episodes a training step's
update received, the sampling parameters the generation server received, the optimiser's and scheduler's numbers,
the metrics it logged, the threads torch runs with, how long the server waits for a late episode. Expected
values are derived here from the changed setting, and each also differs from what ``BASE`` gives.

The recipe is composed once; a case sets its keys on a copy of the composed config (what a command-line override
composes to) and builds the trainer from it as ``ragym train`` does (``read_engine_config``, ``LocalTrainer``).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from ragym.rl.core.metrics import read_metrics
from ragym.rl.engine import trainer as trainer_module
from ragym.rl.engine.config import RecipeReader, read_engine_config
from ragym.rl.engine.trainer import LocalTrainer
from ragym.rl.recipe.compose import load_recipe
from ragym.rl.recipe.counts import SWITCHES
from tests.rl.engine_helpers import VARYING_REWARD

ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
N = 2
"""Episodes per group in ``BASE`` (``rollout.n``)."""
LR = 1e-3
"""The optimiser's rate in ``BASE``."""


@pytest.fixture(scope="module")
def base(tiny_policy_dir, tmp_path_factory: pytest.TempPathFactory):
    """The engine recipe on a small demo KB and the tiny policy, composed once (with a 2-row training file)."""
    from dataclasses import replace

    from ragym.data_prep.synthetic_kb import PRESETS, build_kb

    root = tmp_path_factory.mktemp("engine_settings")
    kb = build_kb(root / "kb", replace(PRESETS["demo"], num_entities=40, num_rows=40), seed=0)
    two = root / "two_rows.parquet"
    pd.read_parquet(kb / "data" / "train.parquet").head(2).to_parquet(two)
    overrides = [
        f"actor_rollout_ref.model.path={tiny_policy_dir('qwen2_5_vl')}",
        f"data.train_files={kb}/data/train.parquet",
        f"data.val_files={kb}/data/test.parquet",
        "trainer.total_training_steps=1",
        "trainer.save_freq=-1",
        "trainer.logger=[console]",
        "data.train_batch_size=1",
        "data.val_max_samples=1",
        "data.max_response_length=16",
        f"{ROLLOUT}.n={N}",
        f"{ACTOR}.ppo_mini_batch_size=1",
        f"{ACTOR}.optim.lr={LR}",
        f"{ROLLOUT}.multi_turn.max_assistant_turns=1",
        "ragym.engine.trace_groups_per_step=0",
        *VARYING_REWARD,
    ]
    return load_recipe("kbvqa_tiny_cpu", overrides), two


@contextmanager
def engine(base, out: Path, **settings: Any) -> Iterator[LocalTrainer]:
    """The trainer of ``base`` with ``settings`` (dotted key -> value) set, writing to ``out``."""
    config = OmegaConf.create(OmegaConf.to_container(base[0]))
    for key, value in {"trainer.default_local_dir": str(out), **settings}.items():
        OmegaConf.update(config, key, value, force_add=True)
    threads = torch.get_num_threads()
    trainer = LocalTrainer(config, read_engine_config(RecipeReader(config)))
    try:
        yield trainer
    finally:
        trainer.close()
        torch.set_num_threads(threads)


def received(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, Any]]:
    """(batch, UpdateConfig) of every GRPO update the trainer runs from now on."""
    calls: list[tuple[Any, Any]] = []
    real = trainer_module.update_policy

    def spy(model, optimizer, image_inputs, batch, actor_config, cfg, generator):
        calls.append((batch, cfg))
        return real(model, optimizer, image_inputs, batch, actor_config, cfg, generator)

    monkeypatch.setattr(trainer_module, "update_policy", spy)
    return calls


def groups(batch) -> list[int]:
    """Episodes per group (per dataset row) of an update's batch, in order of first appearance."""
    uids = [s.uid for s in batch.samples]
    return [uids.count(u) for u in dict.fromkeys(uids)]


def server_sampling(trainer: LocalTrainer) -> list[dict[str, Any]]:
    """The sampling parameters of every request the generation server receives from now on."""
    seen: list[dict[str, Any]] = []
    real = trainer.server.generate

    async def spy(request_id, **kwargs):
        seen.append({k: kwargs["sampling_params"][k] for k in ("temperature", "top_p", "top_k")})
        return await real(request_id, **kwargs)

    trainer.server.generate = spy  # the agent loop calls the server object it was given
    return seen


# ----- one check per setting: the base and the changed setting each give what the setting says ---------------
def check_train_batch_size(base, tmp_path, monkeypatch) -> None:
    calls = received(monkeypatch)
    for rows in (1, 3):
        with engine(base, tmp_path / str(rows), **{"data.train_batch_size": rows}) as trainer:
            trainer.train_step()
        assert groups(calls[-1][0]) == [N] * rows
        assert len(read_metrics(tmp_path / str(rows) / "metrics.jsonl")[-1]["rows"]) == rows


def check_rollout_n(base, tmp_path, monkeypatch) -> None:
    calls = received(monkeypatch)
    for n in (N, 3):
        with engine(base, tmp_path / str(n), **{f"{ROLLOUT}.n": n}) as trainer:
            trainer.train_step()
        assert groups(calls[-1][0]) == [n]


def check_val_max_samples(base, tmp_path, monkeypatch) -> None:
    for rows in (1, 3):
        with engine(base, tmp_path / str(rows), **{"data.val_max_samples": rows}) as trainer:
            asked = server_sampling(trainer)
            trainer.evaluate()
        assert len(trainer.val_rows) == rows and len(asked) == rows  # one greedy turn per held-out row


def check_val_sampling(base, tmp_path, monkeypatch) -> None:
    with engine(base, tmp_path / "greedy") as trainer:
        greedy = server_sampling(trainer)
        trainer.evaluate()
    assert greedy == [{"temperature": 0.0, "top_p": 1.0, "top_k": -1}]  # the recipe's do_sample: false
    sampled = {
        f"{ROLLOUT}.val_kwargs.{k}": v
        for k, v in {"do_sample": True, "temperature": 0.7, "top_p": 0.9, "top_k": 5}.items()
    }
    with engine(base, tmp_path / "sampled", **sampled) as trainer:
        asked = server_sampling(trainer)
        trainer.evaluate()
    assert asked == [{"temperature": 0.7, "top_p": 0.9, "top_k": 5}]


UPDATE = {
    # recipe key: (value, UpdateConfig field, what the field then holds)
    f"{ACTOR}.ppo_mini_batch_size": (2, "mini_batch_size", 2 * N),
    f"{ACTOR}.ppo_micro_batch_size_per_gpu": (2, "micro_batch_size", 2),
    f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu": (2, "log_prob_micro_batch_size", 2),
    f"{ACTOR}.ppo_epochs": (2, "ppo_epochs", 2),
    f"{ACTOR}.shuffle": (True, "shuffle", True),
    f"{ROLLOUT}.temperature": (0.5, "temperature", 0.5),
    f"{ACTOR}.grad_clip": (0.25, "grad_clip", 0.25),
    f"{ACTOR}.entropy_coeff": (0.01, "entropy_coeff", 0.01),
    "algorithm.adv_estimator": ("rloo", "adv_estimator", "rloo"),
    "algorithm.norm_adv_by_std_in_grpo": (False, "norm_adv_by_std", False),
}
"""Every ``UpdateConfig`` field, by the recipe key it is read from."""


def check_update(base, tmp_path, monkeypatch) -> None:
    calls = received(monkeypatch)
    with engine(base, tmp_path / "base") as trainer:
        trainer.train_step()
        base_steps = {int(s["step"]) for s in trainer.optimizer.state.values()}
    with engine(base, tmp_path / "changed", **{k: v for k, (v, _, _) in UPDATE.items()}) as trainer:
        trainer.train_step()
        steps = {int(s["step"]) for s in trainer.optimizer.state.values()}
    (_, before), (_, after) = calls
    for key, (_, name, expected) in UPDATE.items():
        assert getattr(after, name) == expected != getattr(before, name), key
    # One group of N episodes: one optimiser step a pass (mini-batch N, then 2N), ppo_epochs passes.
    assert base_steps == {1} and steps == {2}


def check_betas(base, tmp_path, monkeypatch) -> None:
    with engine(base, tmp_path, **{f"{ACTOR}.optim.betas": [0.5, 0.75]}) as trainer:
        assert trainer.optimizer.param_groups[0]["betas"] == (0.5, 0.75)
    with engine(base, tmp_path / "base") as trainer:
        assert trainer.optimizer.param_groups[0]["betas"] != (0.5, 0.75)


def check_weight_decay(base, tmp_path, monkeypatch) -> None:
    with engine(base, tmp_path, **{f"{ACTOR}.optim.weight_decay": 0.3}) as trainer:
        assert trainer.optimizer.param_groups[0]["weight_decay"] == 0.3
    with engine(base, tmp_path / "base") as trainer:
        assert trainer.optimizer.param_groups[0]["weight_decay"] == 0.0  # the recipe's


def check_warmup_steps(base, tmp_path, monkeypatch) -> None:
    # Linear warm-up over W steps: step s (from 0) runs at lr x min(1, (s + 1) / W); the logged rate is the next.
    for warmup, after_one in ((-1, LR), (4, LR * 2 / 4)):
        with engine(base, tmp_path / str(warmup), **{f"{ACTOR}.optim.lr_warmup_steps": warmup}) as trainer:
            assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(LR if warmup < 0 else LR / 4)
            assert trainer.train_step()["actor/lr"] == pytest.approx(after_one)


def check_total_epochs(base, tmp_path, monkeypatch) -> None:
    # No total_training_steps: epochs x (rows // batch) steps; 2 training rows, one a step.
    for epochs in (1, 3):
        out = tmp_path / str(epochs)
        two_rows = {"data.train_files": str(base[1]), "trainer.total_training_steps": None}
        with engine(base, out, **two_rows, **{"trainer.total_epochs": epochs}) as trainer:
            trainer.fit()
        assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == list(range(1, 2 * epochs + 1))


def check_val_before_train(base, tmp_path, monkeypatch) -> None:
    for before in (False, True):
        out = tmp_path / str(before)
        with engine(base, out, **{"trainer.val_before_train": before}) as trainer:
            trainer.fit(max_steps=0)  # nothing but what comes before the first step
        records = read_metrics(out / "metrics.jsonl") if (out / "metrics.jsonl").exists() else []
        assert [r["step"] for r in records if "val/reward/total" in r] == ([0] if before else [])


def check_batch_wait_s(base, tmp_path, monkeypatch, caplog) -> None:
    """One of two announced episodes asks: the server serves it once ``batch_wait_s`` has passed, with a warning
    (the recipe's 5 s would hold it five seconds)."""
    with engine(base, tmp_path, **{"ragym.engine.batch_wait_s": 0.3}) as trainer:
        trainer.server.track_episodes(2)
        request = trainer.server.generate("r0", prompt_ids=[1, 2, 3], sampling_params={"max_tokens": 2})
        start = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="ragym.rl.core.hf_server"):
            trainer.loop.run_until_complete(request)
        waited = time.monotonic() - start
    assert 0.3 <= waited < 3.0
    assert "1 of 2 episodes asked in time" in caplog.text


def check_num_threads(base, tmp_path, monkeypatch) -> None:
    for threads in (1, 2):
        with engine(base, tmp_path / str(threads), **{"ragym.engine.num_threads": threads}):
            assert torch.get_num_threads() == threads


CHECKS: dict[str, Callable[..., None]] = {
    "train_batch_size": check_train_batch_size,
    "rollout_n": check_rollout_n,
    "val_max_samples": check_val_max_samples,
    "val_sampling": check_val_sampling,
    "update": check_update,
    "betas": check_betas,
    "weight_decay": check_weight_decay,
    "warmup_steps": check_warmup_steps,
    "total_epochs": check_total_epochs,
    "val_before_train": check_val_before_train,
    "batch_wait_s": check_batch_wait_s,
    "num_threads": check_num_threads,
}
"""``EngineConfig`` field -> the check that changes it and reads what the engine did with it."""


@pytest.mark.parametrize("field", list(CHECKS))
def test_each_engine_setting_changes_what_the_engine_does(field, base, tmp_path, monkeypatch, caplog) -> None:
    check = CHECKS[field]
    extra = {"caplog": caplog} if "caplog" in check.__code__.co_varnames else {}
    check(base, tmp_path, monkeypatch, **extra)


@pytest.mark.parametrize("key", [*SWITCHES, "ragym.engine.async_rollouts"])
def test_the_engine_reads_every_switch_as_true_or_false(key: str) -> None:
    """A word from the command line (``data.shuffle=no``) stays the string "no", which the engine read as true."""
    from ragym.rl.errors import UsageError

    reader = RecipeReader(load_recipe("kbvqa_tiny_cpu", [f"{key}=no"]))
    with pytest.raises(
        UsageError, match=f"^{re.escape(key)} 'no' is not true or false; set {re.escape(key)}=true"
    ):
        read_engine_config(reader)


def test_lengths_past_the_policys_positions_are_refused_before_the_model_loads(
    base, short_policy_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Hugging Face policy ran positions it never had (vLLM refuses such lengths itself): prompt_length 1024 +
    response_length 17 is one past the short policy's 1040 positions, refused before the model loads; 1024 + 16 fits
    and trains as before."""
    from ragym.rl.errors import UsageError

    loaded: list[Any] = []
    real = trainer_module.load_policy
    monkeypatch.setattr(trainer_module, "load_policy", lambda *args: loaded.append(args) or real(*args))
    policy = {"actor_rollout_ref.model.path": str(short_policy_dir)}
    longer = {**policy, f"{ROLLOUT}.response_length": 17}
    message = (
        "actor_rollout_ref.rollout.prompt_length 1024 + response_length 17 = 1041 exceeds the policy's "
        f"max_position_embeddings 1040 ({short_policy_dir}): lower them (data.max_prompt_length, "
        "data.max_response_length) or use a model with more positions"
    )
    threads = torch.get_num_threads()
    with (
        pytest.raises(UsageError, match=f"^{re.escape(message)}$"),
        engine(base, tmp_path / "long", **longer),
    ):
        pass
    torch.set_num_threads(threads)  # the refused trainer had set them (``engine`` restores a built one's)
    assert loaded == []
    with engine(base, tmp_path / "fits", **policy) as trainer:
        metrics = trainer.train_step()
    assert len(loaded) == 1 and "reward/total" in metrics
