"""Smoke test: the real ``ragym demo`` entry point for one GRPO step at toy sizes."""

from __future__ import annotations

import json

import pytest
import torch

from ragym.rl.demo.run import main
from ragym.rl.models import load_policy

TOY = [
    "ragym.demo.warm_start.num_episodes=4",
    "ragym.demo.warm_start.epochs=1",
    "ragym.demo.warm_start.batch_size=2",
    "data.val_max_samples=2",
    "data.train_batch_size=1",
    "data.max_response_length=64",
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=1",
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
    "trainer.logger=[console]",
    # A 4-episode warm start reaches no target; the toy checks the plumbing (test_a_missed_warm_start_stops_*).
    "ragym.demo.warm_start_target.action=warn",
]


def test_demo_writes_report_metrics_and_checkpoint(tmp_path):
    assert main(["--out", str(tmp_path), "--steps", "1", *TOY]) == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    required = {
        "reward_mean",
        "outcome",
        "format",
        "verification",
        "ident_acc",
        "avg_rejections",
        "zero_adv_group_share",
        "actions",
        "num_identified_unseen",
        "outcome_not_identified_seen",
    }
    for phase in ("before", "after"):
        assert required <= set(metrics[phase])
        assert 0.0 <= metrics[phase]["zero_adv_group_share"] <= 1.0
    assert metrics["grpo_steps"] == 1
    assert metrics["peak_rss_mb"] > 0 and metrics["wall_time_s"] > 0
    report = (tmp_path / "report.md").read_text()
    assert "reward_components.png" in report and (tmp_path / "reward_components.png").stat().st_size > 0
    assert "(view/index.html)" in report and (tmp_path / "view" / "index.html").is_file()
    assert len(list((tmp_path / "view" / "data" / "ep").iterdir())) > 0  # the report's viewer has episodes
    model, tokenizer, processor = load_policy(tmp_path / "checkpoint")
    grpo_state = load_policy(tmp_path / "grpo" / "global_step_1")[0].state_dict()
    assert all(torch.equal(v, grpo_state[k]) for k, v in model.state_dict().items())
    assert tokenizer.eos_token == "<|im_end|>" and processor.image_processor is not None
    # The checkpoint records its recipe as an exported model does: ``ragym eval --model DIR/checkpoint``.
    from ragym.rl.eval.evaluate import main as eval_main

    data = str(tmp_path / "kb" / "data" / "test.parquet")
    argv = [
        "--model",
        str(tmp_path / "checkpoint"),
        "--data",
        data,
        "--limit",
        "1",
        "--out",
        str(tmp_path / "ev"),
    ]
    assert eval_main([*argv, "--backend", "hf"]) == 0
    assert json.loads((tmp_path / "ev" / "metrics.json").read_text())["all"]["num_episodes"] == 1
    # Another seed on this folder would reuse the seed-0 policy, warm start and run: refused, naming the seed.
    from ragym.rl.errors import UsageError

    with pytest.raises(UsageError, match="--seed 0"):
        main(["--out", str(tmp_path), "--steps", "1", "--seed", "1", *TOY])


def test_warm_start_weights_only_the_generated_token_after_the_decision_tag() -> None:
    from ragym.rl.core.grpo import Sample
    from ragym.rl.tiny.warm_start import token_weights

    rerank = 7
    sample = Sample([1, rerank], [5, rerank, 9, 3, rerank], [1, 1, 1, 0, 0], [], 0.0, "0")
    assert token_weights(sample, rerank, 4.0).tolist() == [4.0, 1.0, 4.0, 0.0, 0.0]
    assert token_weights(sample, None, 4.0).tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]


def test_warm_start_weights_the_tokens_inside_copy_spans() -> None:
    from ragym.rl.core.grpo import Sample
    from ragym.rl.tiny.warm_start import token_weights

    answer, end, rerank = 11, 12, 7  # <answer> ... </answer>, and a decision token after <rerank>
    sample = Sample(
        [1], [rerank, 9, answer, 3, 4, end, 5, answer, 6], [1, 1, 1, 1, 1, 1, 1, 1, 0], [], 0.0, "0"
    )
    weights = token_weights(sample, rerank, 2.0, [(answer, end)], 3.0).tolist()
    assert weights == [
        1.0,
        2.0,
        1.0,
        3.0,
        3.0,
        1.0,
        1.0,
        1.0,
        0.0,
    ]  # an unclosed span counts; the mask still wins
    assert token_weights(sample, rerank, 2.0).tolist() == [1.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0]


@pytest.mark.parametrize(("noise", "reject_noise"), [(0.0, 0.0), (0.0, 1.0), (1.0, 0.0)])
def test_noisy_expert_errs_as_configured(noise: float, reject_noise: float) -> None:
    from types import SimpleNamespace

    import numpy as np

    from ragym.rl.tiny.warm_start import NoisyExpert

    class Env:  # not the demo env: the expert reranks by name; Reject is offered
        unwrapped = SimpleNamespace(config=SimpleNamespace(allow_reject=True))

    expert = NoisyExpert(Env(), np.random.default_rng(0), noise, reject_noise)
    hits = [("Ash Moth", "#A1"), ("Elm Moth", "#B2"), ("Oak Moth", "#C3")]
    choices = {expert.choose(hits, "Elm Moth") for _ in range(20)}
    expected = {(0.0, 0.0): {"Elm Moth"}, (0.0, 1.0): {None}, (1.0, 0.0): {"Ash Moth", "Oak Moth"}}
    assert choices == expected[(noise, reject_noise)]


@pytest.fixture
def expert_rows(tiny_policy_dir, tmp_path):
    """Demo-KB rows, an agent-loop factory and the tokenizer, for replaying expert episodes."""
    import asyncio
    from dataclasses import replace

    from ragym.data_prep.synthetic_kb import PRESETS, build_kb
    from ragym.rl.agent_loop.loop import make_agent_loop
    from ragym.rl.engine.trainer import read_rows
    from ragym.rl.models import load_processor
    from tests.rl.fakes import rollout_config

    kb = build_kb(tmp_path / "kb", replace(PRESETS["demo"], num_entities=60, num_rows=60), seed=0)
    processor = load_processor(tiny_policy_dir("qwen2_5_vl"))

    def factory(server):
        return make_agent_loop(rollout_config(response_length=4096), server, processor.tokenizer, processor)

    asyncio.set_event_loop(asyncio.new_event_loop())
    return read_rows(str(kb / "data" / "train.parquet"), 24), factory, processor.tokenizer


def _warm_config(**fields):
    from ragym.rl.tiny.warm_start import WarmStartConfig

    base = dict(
        num_episodes=24,
        noise=0.0,
        reject_noise=0.5,
        protocol_share=0.0,
        decision_weight=5.0,
        epochs=2,
        batch_size=1,
        lr=0.0,
        seed=3,
    )
    return WarmStartConfig(**{**base, **fields})


def _confirmations(samples, tokenizer) -> list[int]:
    """Per episode: how many matches the expert confirmed."""
    return [tokenizer.decode(s.response_ids).count("<rerank>1</rerank>") for s, _ in samples]


def test_expert_noise_is_drawn_afresh_each_epoch_and_reproducibly(expert_rows) -> None:
    from ragym.rl.tiny.warm_start import expert_samples

    rows, factory, tokenizer = expert_rows
    cfg = _warm_config()
    first = _confirmations(expert_samples(rows, factory, tokenizer, cfg, 0), tokenizer)
    assert _confirmations(expert_samples(rows, factory, tokenizer, cfg, 0), tokenizer) == first  # same draws
    assert _confirmations(expert_samples(rows, factory, tokenizer, cfg, 1), tokenizer) != first  # fresh draws
    assert sum(first) > 0  # some matches were confirmed, some rejected (reject_noise 0.5)


def test_protocol_episodes_are_noiseless_and_teach_no_decision(expert_rows) -> None:
    from ragym.rl.tiny.warm_start import expert_samples

    rows, factory, tokenizer = expert_rows
    samples = expert_samples(rows, factory, tokenizer, _warm_config(reject_noise=1.0, protocol_share=1.0))
    assert len(samples) == 2 * len(rows)  # every row: the noisy episode, then its protocol episode
    noisy, protocol = samples[0::2], samples[1::2]
    assert {w for _, w in noisy} == {5.0} and {w for _, w in protocol} == {0.0}
    assert sum(_confirmations(noisy, tokenizer)) == 0  # reject_noise 1: every match rejected
    assert sum(_confirmations(protocol, tokenizer)) > 0  # the noiseless expert confirms them
    assert any("SearchText" in tokenizer.decode(s.response_ids) for s, _ in protocol)


def test_demo_folder_check(tmp_path):
    from ragym.rl.demo.run import check_demo_folder
    from ragym.rl.errors import UsageError

    check_demo_folder(tmp_path, 0, {"arch": "qwen2_5_vl"})
    check_demo_folder(tmp_path, 0, {"arch": "qwen2_5_vl"})  # the same demo resumes
    with pytest.raises(UsageError, match="--seed 0"):
        check_demo_folder(tmp_path, 1, {"arch": "qwen2_5_vl"})
    with pytest.raises(UsageError, match=r"ragym\.demo\.arch"):
        check_demo_folder(tmp_path, 0, {"arch": "qwen3_vl"})
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "warm_start").mkdir()
    with pytest.raises(UsageError, match="no demo.json"):
        check_demo_folder(tmp_path / "old", 0, {})


def test_a_demo_killed_during_copy_pretraining_pretrains_again_on_resume(tmp_path, monkeypatch) -> None:
    """The tiny policy appears under ``tiny_policy/`` only whole: a kill during copy pretraining leaves none, so
    the resumed demo builds and pretrains it again instead of resuming from an un-pretrained policy."""
    from ragym.rl.demo import run
    from ragym.rl.engine.config import RecipeReader
    from ragym.rl.recipe.compose import load_recipe

    reader = RecipeReader(load_recipe(run.DEMO_RECIPE, ["ragym.demo.copy_pretrain.steps=2"]))
    pretrained: list[str] = []

    def killed(policy_dir, cfg) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "_copy_pretrain", killed)
    with pytest.raises(KeyboardInterrupt):
        run._build_inputs(tmp_path, reader, seed=0)
    assert not (tmp_path / "tiny_policy").exists()
    monkeypatch.setattr(run, "_copy_pretrain", lambda policy_dir, cfg: pretrained.append(policy_dir.name))
    _, policy_dir = run._build_inputs(tmp_path, reader, seed=0)
    assert pretrained == ["tiny_policy.building"] and (policy_dir / "config.json").is_file()
    assert not (tmp_path / "tiny_policy.building").exists()
    run._build_inputs(tmp_path, reader, seed=0)  # a whole policy is not built or pretrained again
    assert pretrained == ["tiny_policy.building"]


def test_a_tiny_policy_is_reused_only_when_built_with_the_same_seed_and_settings(tmp_path) -> None:
    """``reusable_policy``: another demo folder's whole tiny policy, when its seed and ``ragym.demo`` settings
    other than the warm start's are this demo's; anything else builds its own."""
    from ragym.rl.demo.run import DEMO_STATE, reusable_policy

    demo = {"arch": "qwen2_5_vl", "copy_pretrain": {"steps": 800}, "warm_start": {"reject_noise": 0.3}}
    folder = tmp_path / "full"
    (folder / "tiny_policy").mkdir(parents=True)
    (folder / DEMO_STATE).write_text(json.dumps({"seed": 0, "ragym.demo": demo}))
    assert reusable_policy(folder, 0, demo) is None  # no config.json: not whole
    (folder / "tiny_policy" / "config.json").write_text("{}")
    assert reusable_policy(folder, 0, demo) == folder / "tiny_policy"
    assert reusable_policy(folder, 0, {**demo, "warm_start": {"reject_noise": 0.8}}) == folder / "tiny_policy"
    assert reusable_policy(folder, 1, demo) is None
    assert reusable_policy(folder, 0, {**demo, "copy_pretrain": {"steps": 0}}) is None
    assert reusable_policy(folder, 0, {**demo, "arch": "qwen3_vl"}) is None


def test_a_missed_warm_start_stops_the_demo_before_grpo(tmp_path) -> None:
    """The toy's 4-episode warm start misses the demo's target: with ``action: stop`` the demo ends with one line
    naming what was missed, before any GRPO step (no ``grpo/`` folder), and the probe is kept for the report."""
    from ragym.rl.demo.run import WarmStartMissed

    toy = [o for o in TOY if not o.startswith("ragym.demo.warm_start_target")]
    with pytest.raises(
        WarmStartMissed, match=r"seed 0: the warm start .* missed its target: .*format accuracy"
    ):
        main(["--out", str(tmp_path), "--steps", "1", *toy])
    assert not (tmp_path / "grpo").exists()
    probe = json.loads((tmp_path / "warm_start" / "probe.json").read_text())
    assert set(probe) == {"confirm_match", "reject_no_match", "copy", "other"} and probe["other"]["n"] > 0


def test_soft_decisions_imitate_both_branches_weighted_by_the_experts_odds(expert_rows) -> None:
    """``soft_decisions``: a row whose batch holds the match gives its confirming and its rejecting episode,
    weighted 1 - reject_noise and reject_noise; a row without one gives one episode of weight 1. The expected
    decision target is then the expert's odds exactly, whatever the draws."""
    from ragym.rl.tiny.warm_start import expert_samples

    rows, factory, tokenizer = expert_rows
    samples = expert_samples(rows, factory, tokenizer, _warm_config(reject_noise=0.7, soft_decisions=True))
    assert all(len(s) == 3 for s in samples)
    confirming = [s for s in samples if "<rerank>1</rerank>" in tokenizer.decode(s[0].response_ids)]
    assert confirming and {round(s[2], 6) for s in confirming} == {0.3}
    rejecting = [s for s in samples if s[2] < 1.0 and s not in confirming]
    assert len(rejecting) == len(confirming) and {round(s[2], 6) for s in rejecting} == {0.7}
    assert {s[2] for s in samples if s not in confirming and s not in rejecting} == {1.0}
    assert len(samples) == len(rows) + len(confirming)  # one extra episode per row with a match
    # Noise on which candidate is confirmed is not enumerated: refused rather than silently ignored.
    with pytest.raises(ValueError, match="noise=0"):
        expert_samples(rows, factory, tokenizer, _warm_config(noise=0.1, soft_decisions=True))


def test_a_warm_start_continues_the_one_named_by_init_from(tmp_path) -> None:
    """``ragym.demo.warm_start.init_from``: the imitation starts from that finished warm start's weights, not the
    tiny policy's (at a learning rate of 0 it saves exactly those); a folder that is not a finished warm start, or
    one of another model shape, is refused in one line before any imitation."""
    from safetensors.torch import load_file

    from ragym.rl.demo.run import prepare
    from ragym.rl.errors import UsageError

    def weights(folder):
        return load_file(str(folder / "model.safetensors"))

    def same(a, b) -> bool:
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    toy = [o for o in TOY if o.startswith(("ragym.demo", "data.val_max"))]
    prepare(tmp_path / "first", 0, 0, extra_overrides=toy)
    first = tmp_path / "first" / "warm_start"
    frozen = [*toy, "ragym.demo.warm_start.lr=0"]
    prepare(tmp_path / "own", 0, 0, extra_overrides=frozen, policy_from=tmp_path / "first")
    prepare(
        tmp_path / "continued",
        0,
        0,
        extra_overrides=[*frozen, f"ragym.demo.warm_start.init_from={first}"],
        policy_from=tmp_path / "first",
    )
    tiny = weights(tmp_path / "first" / "tiny_policy")
    assert not same(weights(first), tiny)  # the first warm start moved the policy
    assert same(weights(tmp_path / "own" / "warm_start"), tiny)
    assert same(weights(tmp_path / "continued" / "warm_start"), weights(first))
    info = json.loads((tmp_path / "continued" / "warm_start" / "warm_start.json").read_text())
    assert info["init_from"] == str(first)
    with pytest.raises(UsageError, match=r"init_from=.*not a finished warm start \(no warm_start.json"):
        prepare(
            tmp_path / "unfinished",
            0,
            0,
            extra_overrides=[
                *frozen,
                f"ragym.demo.warm_start.init_from={tmp_path / 'first' / 'tiny_policy'}",
            ],
            policy_from=tmp_path / "first",
        )
    with pytest.raises(UsageError, match=r"its config.json differs from this run's tiny policy's"):
        prepare(
            tmp_path / "deeper",
            0,
            0,
            extra_overrides=[
                *frozen,
                "ragym.demo.policy.num_layers=3",
                f"ragym.demo.warm_start.init_from={first}",
            ],
        )
