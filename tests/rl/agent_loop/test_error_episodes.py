"""A row whose env raises (at reset or at a step) becomes a recorded error episode, not a dead run: an
``episode_error`` event, no token with mask 1, reward 0 from the rubric with every term skipped, and
``errors`` in the episode metrics; the local engine's training step goes through such a batch."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

import ragym.rl.agent_loop.loop
from ragym.envs.events import events_of
from ragym.envs.metrics import mean_metrics
from ragym.rl.agent_loop.loop import make_agent_loop
from ragym.rl.models import load_processor
from tests.rl.fakes import FakeSearchEnv, ScriptedServer, rollout_config

SEARCH = "<reason>look</reason><search>red bird</search>"
ANSWER = "<reason>done</reason><answer>a bird</answer>"
RECIPE = {"terms": {"outcome": {"weight": 1.0}, "format": {"weight": 0.5}}}


class FailingEnv(FakeSearchEnv):
    """``FakeSearchEnv`` whose reset, or step number ``fail_step``, raises as a missing file would."""

    def __init__(self, fail_at: str = "", fail_step: int = 0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.fail_at, self.fail_step = fail_at, fail_step

    def reset(self, *, seed=None, options=None):
        if self.fail_at == "reset":
            raise FileNotFoundError("[Errno 2] No such file or directory: 'kb/images/q1.jpg'")
        obs, info = super().reset(seed=seed, options=options)
        if self.fail_at == "reset_text":  # a lone surrogate, which the policy's tokenizer refuses
            obs = {**obs, "text": obs["text"] + " \ud83d"}
        return obs, info

    def step(self, action: str):
        if self.fail_at == "step" and self.turn == self.fail_step:
            raise ConnectionError("retrieval server at http://127.0.0.1:1 is dead\nsecond line")
        turn = self.turn
        obs, reward, terminated, truncated, info = super().step(action)
        if self.fail_at == "observation" and turn == self.fail_step:  # a marker whose image the env forgot
            obs = {**obs, "images": obs["images"][1:]}
        return obs, reward, terminated, truncated, info


@pytest.fixture(autouse=True)
def failing_env(monkeypatch):
    monkeypatch.setattr(ragym.rl.agent_loop.loop, "make_env", lambda env_id, **kwargs: FailingEnv(**kwargs))


@pytest.fixture(scope="module")
def processor(tiny_policy_dir):
    return load_processor(tiny_policy_dir("qwen2_5_vl"))


def _run(processor, env_kwargs: dict, script=(SEARCH, SEARCH, ANSWER), config=None, options=None):
    server = ScriptedServer(processor.tokenizer, list(script))
    loop = make_agent_loop(config or rollout_config(), server, processor.tokenizer, processor)
    row = {
        "index": 3,
        "env_id": "Fake-v0",
        "env_kwargs": json.dumps(env_kwargs),
        "env_options": json.dumps(options or {"question": "which bird?", "num_images": 1}),
    }
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
    return asyncio.run(loop.run(params, extra_info=row, raw_prompt=[])), server


def _score(output) -> dict[str, float]:
    from ragym.rewards.verl import compute_score

    ground_truth = json.dumps({"answers": ["a bird"]})
    return compute_score("generic", "", ground_truth, extra_info=output.extra_fields, recipe=RECIPE)


def test_a_failed_reset_is_an_error_episode_with_no_trainable_token(processor):
    output, server = _run(processor, {"fail_at": "reset"})
    events = output.extra_fields["events"]
    assert events == [
        {
            "type": "episode_error",
            "turn": -1,
            "stage": "reset",
            "error": "FileNotFoundError: [Errno 2] No such file or directory: 'kb/images/q1.jpg'",
        }
    ]
    assert len(output.response_ids) == len(output.response_mask) == len(output.response_logprobs) >= 1
    assert sum(output.response_mask) == 0
    # One request for the weights' step tags, which verl's v1 trainer reads from every trajectory.
    assert len(server.calls) == 1 and server.calls[0]["params"]["max_tokens"] == 1
    assert output.num_turns == 2  # the placeholder prompt and the one generated token, as verl counts them
    assert "min_global_steps" in output.extra_fields and "max_global_steps" in output.extra_fields
    metrics = output.extra_fields["episode_metrics"]
    assert metrics["errors"] == 1.0 and "searches" not in metrics  # the env's own metrics do not apply
    assert _score(output) == {"score": 0.0, "reward/outcome": 0.0, "reward/format": 0.0}


def test_a_step_that_raises_ends_the_episode_with_its_events_kept(processor):
    output, server = _run(processor, {"fail_at": "step", "fail_step": 1})
    events = output.extra_fields["events"]
    assert [e["type"] for e in events] == ["action", "search_image", "episode_error"]
    assert events[-1] == {
        "type": "episode_error",
        "turn": 1,
        "stage": "step",
        "error": "ConnectionError: retrieval server at http://127.0.0.1:1 is dead",
    }
    assert len(server.calls) == 2 and output.extra_fields["turns"] == [SEARCH, SEARCH]
    assert output.num_turns == 1 + 2 + 1  # the prompt, two turns, the observation of the first
    assert sum(output.response_mask) == 0 and len(output.response_ids) > 10
    assert output.extra_fields["episode_metrics"]["errors"] == 1.0
    assert _score(output)["score"] == 0.0


def test_an_observation_the_policy_cannot_be_shown_ends_the_episode_not_the_run(processor):
    """An env's bug in what it shows (a marker without its image, text the tokenizer refuses) is recorded as the
    env's error at that turn, like a step that raised: the run's other episodes go on."""
    output, server = _run(processor, {"fail_at": "observation", "fail_step": 0})
    events = output.extra_fields["events"]
    assert [e["type"] for e in events] == ["action", "search_image", "episode_error"]
    assert events[-1] == {
        "type": "episode_error",
        "turn": 0,
        "stage": "step",
        "error": "ValueError: turn 0: observation text has 2 <image> markers for 1 images",
    }
    assert len(server.calls) == 1 and sum(output.response_mask) == 0
    assert output.extra_fields["episode_metrics"]["errors"] == 1.0 and _score(output)["score"] == 0.0
    # The first observation: the episode cannot start.
    output, server = _run(processor, {"fail_at": "reset_text"})
    [event] = output.extra_fields["events"]
    assert event["stage"] == "reset" and event["turn"] == -1
    assert "observation text is not valid Unicode" in event["error"]
    assert len(server.calls) == 1 and sum(output.response_mask) == 0


@pytest.mark.parametrize("num_images", [0, 2])
def test_a_prompt_over_the_prompt_length_is_recorded_not_cut_nor_fatal(processor, num_images):
    """verl's prompt helper raised on a multimodal prompt over ``rollout.prompt_length`` (every episode of the
    rollout died with it) and cut a text one from its start, system prompt first, with no mark on the episode."""
    options = {"question": "which bird is it? " * 8, "num_images": num_images}
    whole, _ = _run(processor, {}, config=rollout_config(), options=options)
    size = len(whole.prompt_ids)
    config = rollout_config()
    config.actor_rollout_ref.rollout.prompt_length = size  # a prompt at the limit runs as before
    fits, _ = _run(processor, {}, config=config, options=options)
    assert fits.prompt_ids == whole.prompt_ids and sum(fits.response_mask) > 0
    config.actor_rollout_ref.rollout.prompt_length = size - 1
    output, server = _run(processor, {}, config=config, options=options)
    error, cut = output.extra_fields["events"]
    assert (error["type"], error["turn"], error["stage"]) == ("episode_error", -1, "reset")
    assert f"the prompt is {size} tokens" in error["error"]
    assert f"actor_rollout_ref.rollout.prompt_length {size - 1}" in error["error"]
    assert cut == {"type": "truncated", "turn": -1, "reason": "max_prompt_length"}
    assert output.extra_fields["truncated"] is True
    assert len(server.calls) == 1 and sum(output.response_mask) == 0
    metrics = output.extra_fields["episode_metrics"]
    assert (metrics["errors"], metrics["truncated"], metrics["truncated_by_policy"]) == (1.0, 1.0, 0.0)
    assert _score(output)["score"] == 0.0


def test_a_clean_episode_is_unchanged_and_counts_no_error(processor):
    output, _ = _run(processor, {})
    assert not events_of(output.extra_fields["events"], "episode_error")
    assert sum(output.response_mask) > 0 and output.extra_fields["episode_metrics"]["errors"] == 0.0
    assert _score(output)["score"] > 0.0  # the answer scores: the rubric was not bypassed
    failed, _ = _run(processor, {"fail_at": "reset"})
    both = [output.extra_fields["episode_metrics"], failed.extra_fields["episode_metrics"]]
    assert mean_metrics(both)["errors"] == 0.5 and mean_metrics(both)["searches"] == 2.0


class _EngineScript(ScriptedServer):
    """The scripted server plus the local engine's episode hooks."""

    class stats:  # noqa: N801 - the attribute the engine reads
        generate_s = 0.0

    def track_episodes(self, num_episodes: int) -> None:
        """Nothing to batch."""

    def episode_done(self) -> None:
        """Nothing to batch."""


@pytest.mark.slow
def test_the_local_engine_trains_through_a_row_whose_image_vanished(tmp_path: Path, monkeypatch):
    """The row passed the load-time check; its query image is deleted before the step (a missing file)."""
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb
    from ragym.envs.image_cache import clear_image_cache
    from ragym.envs.registry import make_env
    from ragym.rl.tiny.policy import build_tiny_policy
    from ragym.rl.train import build_trainer

    monkeypatch.setattr(ragym.rl.agent_loop.loop, "make_env", make_env)
    kb = build_kb(tmp_path / "kb", PRESETS["tiny"], seed=0)
    policy = build_tiny_policy("qwen2_5_vl", tmp_path / "policy", seed=0)
    trainer = build_trainer(
        "kbvqa_tiny_cpu",
        [
            f"actor_rollout_ref.model.path={policy}",
            f"data.train_files={kb}/data/train.parquet",
            f"data.val_files={kb}/data/test.parquet",
            f"trainer.default_local_dir={tmp_path / 'out'}",
            "trainer.logger=[console]",
            "data.train_batch_size=2",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "data.max_response_length=256",
            "data.shuffle=false",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        ],
    )
    try:
        first, second = (json.loads(trainer.train_rows[i]["extra_info"]["env_options"]) for i in (0, 1))
        assert not set(first["query_images"]) & set(second["query_images"])
        for image in first["query_images"]:
            (kb / image).unlink()
        clear_image_cache()  # the load-time check read it into the decoded-image cache
        script = ["<reason>r</reason><answer>x</answer>"]
        trainer.server = _EngineScript(trainer.tokenizer, script)
        trainer.agent_loop = make_agent_loop(
            trainer.config, trainer.server, trainer.tokenizer, trainer.processor
        )
        metrics = trainer.train_step()
    finally:
        trainer.close()
    assert metrics["episode/errors"] == 0.5  # row 0's two episodes of four
    assert math.isfinite(metrics["actor/pg_loss"]) and trainer.step == 1
