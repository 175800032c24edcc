"""Every ``ragym.demo.*`` setting the ledger listed as a gap reaches the demo's builders, warm start and target
(issue #51 items 1 and 3), read without GRPO.

- ``ragym.demo.warm_start.*``: ``ragym demo``'s warm start (``run._warm_start``) runs for real at toy sizes with
  ``imitate`` and ``token_weights`` watched; each setting is read back from what the training step received (the
  rows, epochs, per-token weights, batches, the moved weights, the expert's text). The same run on the recipe's
  own values is the verify task's training path: its soft decisions reach ``imitate`` as the expert's odds.
- ``ragym.demo.copy_pretrain.*`` and ``ragym.demo.kb_corpus_repeats``: ``run._build_inputs`` builds the tiny
  policy; the corpus its tokenizer is trained on and the batches copy pretraining trains on are read back.
- ``ragym.demo.warm_start_target.*``: ``run.check_warm_start`` on a probe written here, each threshold moved
  across the probe's figure.

The settings of one builder are changed together in one run against one run of the recipe's values: each
observation reads one setting only (the number of rows, of epochs, the decision tokens' weight, ...), so a
setting that stopped reaching its use fails its own line.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from ragym.rl.demo import run
from ragym.rl.engine.config import RecipeReader
from ragym.rl.errors import UsageError
from ragym.rl.recipe.compose import load_recipe
from ragym.rl.tiny import copy_pretrain as pretrain_module
from ragym.rl.tiny import policy as policy_module
from ragym.rl.tiny import warm_start as warm_start
from tests.rl.demo.recording import record_batches

REAL = {
    "imitate": warm_start.imitate,
    "build_tiny_policy": policy_module.build_tiny_policy,
    "copy_batch": pretrain_module.copy_batch,
    "copy_pretrain": pretrain_module.copy_pretrain,
}
"""The functions the runs below watch, as imported (a second run must not wrap the first's spy)."""
TOY = {"ragym.demo.warm_start.num_episodes": 4, "ragym.demo.warm_start.epochs": 1}
"""The recipe's warm start at toy size (both also changed below, from these)."""


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb

    return build_kb(
        tmp_path_factory.mktemp("demo_settings") / "kb",
        replace(PRESETS["demo"], num_entities=40, num_rows=40),
        seed=0,
    )


@pytest.fixture(scope="module")
def composed(kb: Path):
    """The demo recipe (the verify task) pointing at the small KB, composed once."""
    return load_recipe(
        run.DEMO_RECIPE,
        [f"data.train_files={kb}/data/train.parquet", f"data.val_files={kb}/data/test.parquet"],
    )


def demo_config(composed, **settings: Any) -> tuple[Any, RecipeReader]:
    """A copy of the composed recipe with ``settings`` (dotted key -> value) set, and its reader."""
    config = OmegaConf.create(OmegaConf.to_container(composed))
    for key, value in settings.items():
        OmegaConf.update(config, key, value, force_add=True)
    return config, RecipeReader(config)


# ----- ragym.demo.warm_start: what the warm start's training step received -----------------------------------
def run_warm_start(
    composed, policy: Path, out: Path, monkeypatch, seed: int = 0, **settings
) -> dict[str, Any]:
    """``ragym demo``'s warm start on ``policy``, with what ``imitate`` received and the weights it trained with."""
    seen: dict[str, Any] = {}
    real_imitate = REAL["imitate"]

    def imitate(model, image_inputs, epochs, cfg, decision_after=None, copy_spans=()):
        seen.update(epochs=epochs, cfg=cfg, decision_after=decision_after, copy_spans=copy_spans)
        seen["losses"] = real_imitate(model, image_inputs, epochs, cfg, decision_after, copy_spans)
        return seen["losses"]

    monkeypatch.setattr(run, "imitate", imitate)
    record_batches(seen, monkeypatch)
    config, reader = demo_config(composed, **{**TOY, **settings})
    seen["info"] = run._warm_start(config, reader, policy, out, seed)
    from ragym.rl.models import load_policy

    seen["tokenizer"] = load_policy(policy)[1]
    seen["moved"] = _moved(policy, out)
    return seen


def _moved(before: Path, after: Path) -> bool:
    from safetensors.torch import load_file

    old, new = load_file(before / "model.safetensors"), load_file(after / "model.safetensors")
    return any(not torch.equal(old[k], new[k]) for k in old)


SEARCH = re.compile(r'<reason>([^<]*)</reason><search_call>SearchText\(\[" ([^"]+)"\]\)')
"""A text search turn: (its reason, the name it searches)."""


def _generated(sample, tokenizer) -> str:
    return tokenizer.decode([t for t, m in zip(sample.response_ids, sample.response_mask, strict=True) if m])


def _decision_weights(seen: dict[str, Any]) -> set[float]:
    """The weights ``token_weights`` gave the generated tokens right after ``<rerank>`` (the decision)."""
    rerank = seen["decision_after"]
    found = set()
    for sample, weights in seen["weighed"]:
        previous = [*sample.prompt_ids[-1:], *sample.response_ids[:-1]]
        found |= {
            float(w)
            for p, w, m in zip(previous, weights.tolist(), sample.response_mask, strict=True)
            if p == rerank and m
        }
    return found


WARM_START_CHANGES = {
    "num_episodes": 3,
    "epochs": 2,
    "decision_weight": 7.0,
    "batch_size": 3,
    "lr": 0.0,
    "quote": True,
}
"""``ragym.demo.warm_start`` field -> the value the changed run sets (the recipe's: 4 (toy), 1 (toy), 5, 2, 2e-3,
false)."""

WARM_START_OBSERVED = {
    # field: what the run shows of it
    "num_episodes": lambda s: {len({p[0].uid for p in epoch}) for epoch in s["epochs"]},
    "epochs": lambda s: len(s["epochs"]),
    "decision_weight": lambda s: _decision_weights(s) - {0.0},  # protocol episodes' decisions weigh 0
    # Episodes per optimiser step: batch_size, the last of an epoch fewer.
    "batch_size": lambda s: max(s["batches"]),
    "lr": lambda s: s["moved"],
    # The expert's text-search reason: its own words, or the observation's words before the name it searches.
    "quote": lambda s: sum(
        "<reason>look up the confirmed entities</reason>" in _generated(p[0], s["tokenizer"])
        for e in s["epochs"]
        for p in e
    ),
    "seed": lambda s: s["cfg"].seed,
}
EXPECTED = {
    "base": dict(num_episodes={4}, epochs=1, decision_weight={5.0}, batch_size=2, lr=True, seed=0),
    "changed": dict(
        num_episodes={3}, epochs=2, decision_weight={7.0}, batch_size=3, lr=False, quote=0, seed=7
    ),
}
"""What each run shows of each setting (the recipe's quote: some text-search reasons of the expert's own)."""


def test_each_warm_start_setting_reaches_what_the_training_step_receives(
    composed, tiny_policy_dir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy = tiny_policy_dir("qwen2_5_vl")
    base = run_warm_start(composed, policy, tmp_path / "base", monkeypatch)
    changes = {f"ragym.demo.warm_start.{k}": v for k, v in WARM_START_CHANGES.items()}
    changed = run_warm_start(composed, policy, tmp_path / "changed", monkeypatch, seed=7, **changes)
    for field, observe in WARM_START_OBSERVED.items():
        mine, theirs = observe(changed), observe(base)
        assert mine != theirs, field
        for name, value in (("changed", mine), ("base", theirs)):
            if field in EXPECTED[name]:
                assert value == EXPECTED[name][field], (name, field, value)
    assert WARM_START_OBSERVED["quote"](base) > 0  # quote false: the expert's own reason
    # A quoting reason ends with the name the turn then searches.
    searched = [
        m
        for e in changed["epochs"]
        for p in e
        for m in SEARCH.findall(_generated(p[0], changed["tokenizer"]))
    ]
    assert searched and all(reason.endswith(name) for reason, name in searched)


def test_the_verify_warm_start_imitates_soft_decisions_at_the_experts_odds(
    composed, tiny_policy_dir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verify task's training path (the recipe's warm start: soft decisions, reject_noise 0.7, protocol
    episodes): a row whose batch holds the match reaches ``imitate`` as its confirming and its rejecting episode
    weighted 0.3 and 0.7, each decision token weighs decision_weight (5) before that, a protocol episode's 0, and
    the copy spans weigh 1 (copy_weight 1)."""
    seen = run_warm_start(
        composed,
        tiny_policy_dir("qwen2_5_vl"),
        tmp_path,
        monkeypatch,
        **{"ragym.demo.warm_start.num_episodes": 6, "ragym.demo.warm_start.protocol_share": 1.0},
    )
    tokenizer, (samples,) = seen["tokenizer"], seen["epochs"]
    assert seen["cfg"].soft_decisions and seen["cfg"].reject_noise == 0.7
    # The expert's branches carry their odds; a protocol episode none (it teaches no decision).
    assert {len(p) for p in samples} == {2, 3} and {p[1] for p in samples if len(p) == 2} == {0.0}
    by_row: dict[str, list[tuple[str, float, float]]] = {}
    for sample, decision_weight, *odds in samples:
        text = _generated(sample, tokenizer)
        kind = "confirm" if "<rerank>1</rerank>" in text else "reject" if "Reject()" in text else "none"
        by_row.setdefault(sample.uid, []).append((kind, decision_weight, round(odds[0] if odds else 1.0, 6)))
    assert len(by_row) == 6
    matched = [r for r in by_row.values() if ("confirm", 5.0, 0.3) in r]
    assert matched and all(("reject", 5.0, 0.7) in r for r in matched)
    assert all(
        r[-1][1:] == (0.0, 1.0) for r in by_row.values()
    )  # protocol_share 1: a noiseless episode a row
    assert _decision_weights(seen) == {5.0, 0.0}
    assert len(seen["copy_spans"]) == 2 and seen["cfg"].copy_weight == 1.0
    assert all(set(w.tolist()) <= {0.0, 1.0, 5.0} for _, w in seen["weighed"])


# ----- ragym.demo.copy_pretrain and kb_corpus_repeats: what the tiny policy is built and pretrained on ----------
def build_inputs(composed, kb: Path, out: Path, monkeypatch, seed: int = 0, **settings) -> dict[str, Any]:
    """``run._build_inputs`` into ``out`` (the KB copied in), with the tokenizer corpus and the copy batches."""
    seen: dict[str, Any] = {"batches": [], "cfg": None, "losses": []}
    real_build, real_batch, real_pretrain = (
        REAL["build_tiny_policy"],
        REAL["copy_batch"],
        REAL["copy_pretrain"],
    )

    def build(arch, out_dir, corpus=None, seed=0, config=None):
        seen["corpus"] = list(corpus)
        return real_build(arch, out_dir, corpus=seen["corpus"], seed=seed, config=config)

    def batch(generator, token_ids, cfg):
        made = real_batch(generator, token_ids, cfg)
        seen["batches"].append(made)
        return made

    def pretrain(model, token_ids, cfg):
        seen["cfg"] = cfg
        seen["losses"] = real_pretrain(model, token_ids, cfg)
        return seen["losses"]

    monkeypatch.setattr(policy_module, "build_tiny_policy", build)
    monkeypatch.setattr(pretrain_module, "copy_batch", batch)
    monkeypatch.setattr(pretrain_module, "copy_pretrain", pretrain)
    shutil.copytree(kb, out / "kb")
    run._build_inputs(out, demo_config(composed, **settings)[1], seed)
    return seen


COPY_PRETRAIN = {
    "steps": 2,
    "batch_size": 3,
    "min_span": 2,
    "max_span": 3,
    "max_gap": 1,
    "lr": 5e-4,
    "until_loss": 0.0,  # out of reach: it goes on to max_steps
    "max_steps": 4,
}
"""``ragym.demo.copy_pretrain`` field -> the changed run's value (the recipe's: 0 steps, the dataclass's others)."""


def test_copy_pretraining_and_the_tokenizer_corpus_follow_their_settings(
    composed, kb: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pandas as pd

    names = set(pd.read_parquet(kb / "entities.parquet")["name"])
    base = build_inputs(composed, kb, tmp_path / "base", monkeypatch)
    changes = {f"ragym.demo.copy_pretrain.{k}": v for k, v in COPY_PRETRAIN.items()}
    changed = build_inputs(
        composed,
        kb,
        tmp_path / "changed",
        monkeypatch,
        seed=3,
        **changes,
        **{"ragym.demo.kb_corpus_repeats": 2},
    )
    # kb_corpus_repeats: the KB's names reach the tokenizer's corpus that many times (recipe: 5).
    assert sum(t in names for t in base["corpus"]) == 5 * len(names)
    assert sum(t in names for t in changed["corpus"]) == 2 * len(names)
    # copy_pretrain: the recipe's 0 steps pretrain nothing; the changed run's batches follow every setting.
    assert base["cfg"] is None and base["batches"] == []
    cfg = changed["cfg"]
    assert {k: getattr(cfg, k) for k in COPY_PRETRAIN} == COPY_PRETRAIN and cfg.seed == 3  # seed: ``--seed``
    # steps, then on while the loss is above until_loss, up to max_steps in all; the miss is recorded
    assert len(changed["losses"]) == len(changed["batches"]) == 4
    record = json.loads((tmp_path / "changed" / "tiny_policy" / run.COPY_PRETRAIN_RECORD).read_text())
    assert (record["steps"], record["until_loss"], record["max_steps"], record["met"]) == (4, 0.0, 4, False)
    for tokens, span, start in changed["batches"]:
        lead_and_gap = tokens.shape[1] - 2 * span
        assert (
            tokens.shape[0] == 3 and 2 <= span <= 3 and 0 <= lead_and_gap <= 2
        )  # batch_size, spans, max_gap
        assert start == tokens.shape[1] - span  # the span again, at the end
        lead = start - span - torch.arange(lead_and_gap + 1)  # where the first occurrence may start
        assert any(torch.equal(tokens[:, start:], tokens[:, int(i) : int(i) + span]) for i in lead if i >= 0)


# ----- ragym.demo.warm_start_target: the check before GRPO ---------------------------------------------------
PROBE = {
    "confirm_match": {"mean": 0.4},
    "reject_no_match": {"mean": 0.92},
    "copy": {"greedy_share": 0.5},
    "other": {"greedy_share": 0.96},
}
"""A warm start that meets the recipe's target (P(confirm) 0.1 from the expert's 0.3, reject 0.92, format 0.96,
copy unchecked) and misses each target below by a margin."""
MISSES = {
    "max_confirm_gap": (0.05, "P(confirm a match) 0.400 is 0.100 from the expert's 0.300 (at most 0.05)"),
    "min_confirm": (0.5, "P(confirm a match) 0.400 < 0.5"),
    "min_reject": (0.95, "P(reject a batch without the match) 0.920 < 0.95"),
    "min_format_accuracy": (0.99, "format accuracy 0.960 < 0.99"),
    "min_copy_accuracy": (0.6, "copy accuracy 0.500 < 0.6"),
}
"""``ragym.demo.warm_start_target`` field -> (a value the probe misses, the line that names the miss)."""


@pytest.mark.parametrize("field", [*MISSES, "action"])
def test_each_warm_start_target_setting_moves_the_check(field: str, composed, tmp_path: Path, caplog) -> None:
    (tmp_path / run.WARM_PROBE).write_text(json.dumps(PROBE))
    config, reader = demo_config(composed)
    assert run.check_warm_start(config, reader, tmp_path, 0) == PROBE  # the recipe's target: met
    if (
        field == "action"
    ):  # warn: a miss is logged and the demo goes on; stop (the recipe's): it ends the demo
        miss = {f"ragym.demo.warm_start_target.{k}": v for k, (v, _) in MISSES.items()}
        with pytest.raises(run.WarmStartMissed):
            run.check_warm_start(*demo_config(composed, **miss), tmp_path, 0)
        warn = {**miss, "ragym.demo.warm_start_target.action": "warn"}
        assert run.check_warm_start(*demo_config(composed, **warn), tmp_path, 0) == PROBE
        assert all(line in caplog.text for _, line in MISSES.values())
        return
    value, line = MISSES[field]
    with pytest.raises(run.WarmStartMissed, match=r"missed its target: ") as missed:
        run.check_warm_start(
            *demo_config(composed, **{f"ragym.demo.warm_start_target.{field}": value}), tmp_path, 0
        )
    assert line in str(missed.value) and "; " not in str(missed.value).split("missed its target: ")[1]


@pytest.mark.parametrize(
    "field, value",
    [("min_confirm", "high"), ("min_copy_accuracy", 1.5), ("min_reject", None), ("max_confirm_gap", True)],
)
def test_a_bad_warm_start_threshold_is_one_line_before_the_warm_start(
    field: str, value: Any, composed
) -> None:
    config, reader = demo_config(composed, **{f"ragym.demo.warm_start_target.{field}": value})
    with pytest.raises(
        UsageError, match=rf"ragym.demo.warm_start_target.{field} must be a number in \[0, 1\]"
    ):
        warm_start.WarmStartTarget(**reader.get("ragym.demo.warm_start_target"))


def test_a_warm_start_missing_its_target_on_training_questions_is_imitated_again(
    composed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``restarts``: while a warm start misses the target on the training questions, it is imitated again with the
    next draws (seed + 1000 k), up to ``restarts`` times; the last attempt is kept whole in ``warm_start``, with every
    attempt's seed and misses in its ``warm_start.json``, and the held-out check decides after it as before."""
    made: list[tuple[Path, int]] = []

    def fake_warm_start(config, reader, policy_dir, out_dir: Path, seed: int) -> dict[str, Any]:
        made.append((out_dir, seed))
        out_dir.mkdir(parents=True)
        (out_dir / "weights").write_text(str(seed))
        (out_dir / "warm_start.json").write_text(json.dumps({"seed": seed}))
        return {"seed": seed}

    copy = iter([0.5, 0.5, 0.99])  # the training probe's copy accuracy, attempt by attempt
    monkeypatch.setattr(run, "_warm_start", fake_warm_start)
    # The training questions as read (no values to swap: the probe below is a stand-in that reads none).
    monkeypatch.setattr(
        run, "training_questions", lambda reader, _: (run.read_rows(reader.get("data.train_files"), 4), None)
    )
    monkeypatch.setattr(run, "training_probe", lambda *_: {**PROBE, "copy": {"greedy_share": next(copy)}})
    target = "ragym.demo.warm_start_target."
    warm_dir = tmp_path / "warm_start"

    # restarts 0 (the recipe's): one warm start, straight into its folder, no training probe.
    config, reader = demo_config(composed, **{target + "min_copy_accuracy": 0.9})
    run.warm_start_until_target(config, reader, tmp_path / "policy", warm_dir, seed=7)
    assert made == [(warm_dir, 7)]
    shutil.rmtree(warm_dir)
    made.clear()

    config, reader = demo_config(composed, **{target + "min_copy_accuracy": 0.9, target + "restarts": 2})
    info = run.warm_start_until_target(config, reader, tmp_path / "policy", warm_dir, seed=7)
    assert [seed for _, seed in made] == [7, 1007, 2007]
    assert (warm_dir / "weights").read_text() == "2007" and not list(tmp_path.glob("warm_start.attempt*"))
    recorded = json.loads((warm_dir / "warm_start.json").read_text())["attempts"]
    assert recorded == info["attempts"]
    assert [(a["seed"], a["missed"]) for a in recorded] == [
        (7, ["copy accuracy 0.500 < 0.9"]),
        (1007, ["copy accuracy 0.500 < 0.9"]),
        (2007, []),
    ]
    # Each attempt records the figures its target read: P(confirm a match) as a mean, not a greedy share.
    assert recorded[0]["training_probe"] == {
        "confirm_match": 0.4,
        "reject_no_match": 0.92,
        "copy": 0.5,
        "format": 0.96,
    }

    # Every attempt missing: the last is kept and the held-out check decides (here: it stops the demo).
    shutil.rmtree(warm_dir)
    copy = iter([0.5, 0.5])
    config, reader = demo_config(composed, **{target + "min_copy_accuracy": 0.9, target + "restarts": 1})
    run.warm_start_until_target(config, reader, tmp_path / "policy", warm_dir, seed=0)
    assert (warm_dir / "weights").read_text() == "1000"
    (warm_dir / run.WARM_PROBE).write_text(json.dumps({**PROBE, "copy": {"greedy_share": 0.5}}))
    with pytest.raises(run.WarmStartMissed, match="copy accuracy 0.500 < 0.9"):
        run.check_warm_start(config, reader, warm_dir, 0)


@pytest.mark.parametrize("value", [-1, 1.5, "two", True])
def test_a_bad_restart_count_is_one_line_before_the_warm_start(value: Any, composed) -> None:
    config, reader = demo_config(composed, **{"ragym.demo.warm_start_target.restarts": value})
    with pytest.raises(UsageError, match="ragym.demo.warm_start_target.restarts must be a whole number >= 0"):
        warm_start.WarmStartTarget(**reader.get("ragym.demo.warm_start_target"))
