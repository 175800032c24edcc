"""The metrics every env shares, the per-env registry and means (``ragym.envs.metrics``); episodes are KB-VQA's."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ragym.envs import events as ev
from ragym.envs.kbvqa import events as kbvqa_ev
from ragym.envs.metrics import (
    episode_metrics,
    eval_figures,
    mean_metrics,
    register_metrics,
    registered_metrics,
)
from ragym.envs.r3g import events as r3g_ev
from ragym.rl.core.metrics import summarize


def test_turns_count_a_turn_the_agent_loop_cut() -> None:
    events = [
        kbvqa_ev.task(1, ["e1"], 2, 2, 8),
        ev.action(0, "search_image", True),
        ev.truncated(1, "max_response_length"),
    ]
    metrics = episode_metrics("KBVQA-v0", events)
    assert (metrics["turns"], metrics["truncated"], metrics["answered"]) == (2.0, 1.0, 0.0)


@pytest.mark.parametrize(
    ("cut", "by_policy", "by_observation", "by_images"),
    [
        (ev.truncated(1, "max_response_length"), 1.0, 0.0, 0.0),
        (ev.truncated(1, "generated_vision_token"), 1.0, 0.0, 0.0),
        (ev.truncated(1, "max_response_length", observation_tokens=900, visual_tokens=780), 0.0, 1.0, 1.0),
        (ev.truncated(1, "max_response_length", observation_tokens=40, visual_tokens=0), 0.0, 1.0, 0.0),
        (ev.truncated(1, "max_turns"), 0.0, 0.0, 0.0),
    ],
)
def test_truncations_are_told_apart_by_cause(cut, by_policy, by_observation, by_images) -> None:
    metrics = episode_metrics(
        "KBVQA-v0", [kbvqa_ev.task(1, ["e1"], 2, 2, 8), ev.action(0, "search_image", True), cut]
    )
    assert metrics["truncated"] == 1.0
    assert (metrics["truncated_by_policy"], metrics["truncated_by_observation"]) == (
        by_policy,
        by_observation,
    )
    assert metrics["truncated_by_images"] == by_images


def test_forced_answer_is_not_answered() -> None:
    events = [
        kbvqa_ev.task(1, ["e1"], 2, 2, 1),
        ev.action(0, "invalid", False),
        ev.answer(0, "", forced=True),
    ]
    assert episode_metrics("KBVQA-v0", events)["answered"] == 0.0


def test_unknown_env_and_unknown_action_kind_fail_loudly() -> None:
    with pytest.raises(KeyError, match="no episode metrics registered for 'Nope-v0'"):
        episode_metrics("Nope-v0", [])
    with pytest.raises(ValueError, match=r"action kinds \['select'\]"):
        episode_metrics("KBVQA-v0", [kbvqa_ev.task(1, ["e"], 2, 2, 8), ev.action(0, "select", True)])


def test_duplicate_registration_is_an_error() -> None:
    assert "KBVQA-v0" in registered_metrics()
    with pytest.raises(ValueError, match="already registered"):
        register_metrics("KBVQA-v0", action_kinds=("answer",))(lambda events: {})


def test_mean_skips_episodes_where_a_metric_does_not_apply() -> None:
    means = mean_metrics([{"a": 1.0, "b": None}, {"a": 0.0, "b": 1.0}, {"a": 0.5, "b": None}])
    assert means == {"a": 0.5, "b": 1.0}
    assert mean_metrics([{"b": None}]) == {"b": None}


def test_an_episode_the_env_ended_by_raising_counts_as_not_identified() -> None:
    task = kbvqa_ev.task(1, ["Q1"], 2, 5, 6)
    crashed = episode_metrics("KBVQA-v0", [task, ev.episode_error(0, "step", "boom")])
    assert (crashed["ident_acc"], crashed["ident_image_share"], crashed["errors"]) == (0.0, 0.0, 1.0)
    assert "searches" not in crashed  # the env's counts still do not apply
    identified = episode_metrics(
        "KBVQA-v0", [task, kbvqa_ev.verification(0, "rerank", "Q1", 1, 0, ["Q1"], "Q1"), ev.answer(1, "x")]
    )
    assert mean_metrics([identified, crashed])["ident_acc"] == 0.5  # the crash stays in the denominator
    no_gold = episode_metrics(
        "KBVQA-v0", [kbvqa_ev.task(1, [None], 2, 5, 6), ev.episode_error(0, "step", "x")]
    )
    assert no_gold["ident_acc"] is None  # Ident. never applied to a row with no gold entity
    unstarted = episode_metrics("KBVQA-v0", [ev.episode_error(-1, "reset", "no such image")])
    assert unstarted["ident_acc"] is None  # no event names its golds: ragym eval decides (eval_figures)


@dataclass
class _Record:
    """What ``ragym eval`` keeps of an episode for ``eval_figures`` (``record_episode``'s fields)."""

    correct: float
    ident: float | None
    gold_ranks: list[int | None]
    started: bool


def test_training_and_eval_count_an_episode_that_could_not_start_alike() -> None:
    identified = [
        kbvqa_ev.task(1, ["Q1"], 2, 5, 6),
        kbvqa_ev.verification(0, "rerank", "Q1", 1, 0, ["Q1"], "Q1"),
        ev.answer(1, "x"),
    ]
    unstarted = [ev.episode_error(-1, "reset", "no such image")]
    metrics = [episode_metrics("KBVQA-v0", events) for events in (identified, unstarted)]
    training = summarize([1.0, 0.0], [{}, {}], metrics, ["a", "a"])
    records = [
        _Record(1.0, metrics[0]["ident_acc"], [], True),
        _Record(0.0, metrics[1]["ident_acc"], [], False),
    ]
    # Not identified on both sides, counted once: 1 of 2.
    assert training["episode/ident_acc"] == eval_figures(records)["ident"] == 0.5
    assert training["episode/ident_image_share"] == 0.5 and training["episode/unstarted"] == 0.5
    assert training["episode/verification_acc"] == 1.0  # a rate its failed metrics do not name: left out


def test_an_unstarted_episode_counts_only_where_another_episode_reports_the_metric() -> None:
    no_gold = episode_metrics("KBVQA-v0", [kbvqa_ev.task(1, [None], 2, 5, 6), ev.answer(0, "x")])
    unstarted = episode_metrics("KBVQA-v0", [ev.episode_error(-1, "reset", "boom")])
    assert (
        mean_metrics([no_gold, unstarted])["ident_acc"] is None
    )  # as eval_figures: no Ident. to count it in
    assert mean_metrics([unstarted])["ident_acc"] is None
    crashed = episode_metrics(
        "KBVQA-v0", [kbvqa_ev.task(1, [None], 2, 5, 6), ev.episode_error(0, "step", "x")]
    )
    identified = {**no_gold, "ident_acc": 1.0}
    assert mean_metrics([identified, crashed])["ident_acc"] == 1.0  # it started: its row names no gold


def test_a_crashed_r3g_episode_recalls_nothing() -> None:
    events = [r3g_ev.r3g_task(["g"], "Angle", 5, 1, "fused", True), ev.episode_error(0, "step", "boom")]
    metrics = episode_metrics("R3G-v0", events)
    assert (metrics["recall@1"], metrics["recall@5"], metrics["gold_in_pool"]) == (0.0, 0.0, 0.0)
