"""The demo report's split of the held-out outcome by identification and its reward-gain shares."""

from __future__ import annotations

import doctest
import importlib
import json

import pytest

from ragym.envs import events as ev
from ragym.envs.kbvqa import events as kbvqa_ev
from ragym.rl.demo.report import gain_shares, outcome_by_identification, trained_entities, write_report

GOLD = "E000001"


def episode(decision: str, entity: str | None, outcome: float, gold: str = GOLD) -> dict:
    """A trace line of one K=1 episode: one batch holding the gold, one decision on it, an answer."""
    events = [
        kbvqa_ev.task(1, [gold], 2, 1, 8),
        ev.action(0, "search_image", True),
        kbvqa_ev.search_image(0, 1, 0, [gold], gold, 0),
        ev.action(1, decision, True),
        kbvqa_ev.verification(1, decision, entity, 1, 0, [gold], gold),
        ev.action(2, "answer", True),
        ev.answer(2, "1732"),
    ]
    return {"env_id": "KBVQA-Demo-v0", "events": events, "terms": {"outcome": outcome}}


def test_outcome_is_split_by_whether_the_gold_entity_was_confirmed() -> None:
    episodes = [
        episode("rerank", GOLD, 1.0),
        episode("rerank", GOLD, 0.0),
        episode("rerank", GOLD, 1.0),
        episode("reject", None, 1.0),
        episode("reject", None, 0.0),
    ]
    assert outcome_by_identification(episodes) == {
        "outcome_identified": 2 / 3,
        "num_identified": 3,
        "outcome_not_identified": 0.5,
        "num_not_identified": 2,
    }
    assert outcome_by_identification([episode("reject", None, 0.0)])["outcome_identified"] is None


def test_outcome_is_split_by_whether_a_training_question_asks_about_the_entity() -> None:
    """Seen: the question's entity is a training row's gold entity (its answer could be recalled); unseen: it is not
    (a right answer was read from the passage)."""
    unseen = "E000002"
    episodes = [
        episode("rerank", GOLD, 1.0),
        episode("rerank", unseen, 0.0, unseen),
        episode("rerank", unseen, 1.0, unseen),
        episode("rerank", unseen, 1.0, unseen),
        episode("reject", None, 0.0),
        episode("reject", None, 1.0, unseen),
    ]
    seen = trained_entities(
        [
            {"extra_info": {"env_options": json.dumps({"gold_entities": [GOLD]})}},
            {"extra_info": {"env_options": json.dumps({"gold_entities": ["E000009"]})}},
        ]
    )
    assert seen == {GOLD, "E000009"}
    assert outcome_by_identification(episodes, seen) == {
        "outcome_identified": 3 / 4,
        "num_identified": 4,
        "outcome_not_identified": 0.5,
        "num_not_identified": 2,
        "outcome_identified_seen": 1.0,
        "num_identified_seen": 1,
        "outcome_identified_unseen": 2 / 3,
        "num_identified_unseen": 3,
        "outcome_not_identified_seen": 0.0,
        "num_not_identified_seen": 1,
        "outcome_not_identified_unseen": 1.0,
        "num_not_identified_unseen": 1,
    }
    split = outcome_by_identification(episodes[:1], set())  # nothing seen in training: every question unseen
    assert (
        split["num_identified_unseen"],
        split["num_identified_seen"],
        split["outcome_identified_seen"],
    ) == (1, 0, None)


def test_gain_shares_are_each_terms_change_over_the_total_change() -> None:
    before = {"reward_mean": 1.2, "outcome": 0.0, "format": 1.0, "verification": 0.2}
    after = {"reward_mean": 2.2, "outcome": 0.6, "format": 0.9, "verification": 0.7}
    shares = gain_shares(before, after)  # a gain of 1.0: 0.6 from outcome, 0.5 verification, -0.1 format
    assert shares == pytest.approx({"outcome": 0.6, "format": -0.1, "verification": 0.5})
    assert gain_shares(before, before) == {"outcome": None, "format": None, "verification": None}


def test_report_shows_outcome_by_identification_and_the_shares_of_the_gain(tmp_path) -> None:
    summary = {
        "reward_mean": 1.25,
        "outcome": 0.0,
        "format": 1.0,
        "verification": 0.25,
        "ident_acc": 0.0,
        "actions": {"reject": 3.0},
        "outcome_identified": None,
        "num_identified": 0,
        "outcome_not_identified": 0.0,
        "num_not_identified": 48,
        "outcome_identified_unseen": None,
        "num_identified_unseen": 0,
        "outcome_identified_seen": None,
        "num_identified_seen": 0,
        "outcome_not_identified_unseen": 0.0,
        "num_not_identified_unseen": 48,
        "outcome_not_identified_seen": None,
        "num_not_identified_seen": 0,
    }
    after = {
        **summary,
        "reward_mean": 2.25,
        "outcome": 0.5,
        "verification": 0.75,
        "ident_acc": 0.75,
        "outcome_identified": 2 / 3,
        "num_identified": 36,
        "num_not_identified": 12,
        "outcome_identified_unseen": 2 / 3,
        "num_identified_unseen": 36,
        "num_not_identified_unseen": 12,
    }
    warm = {
        "reject_noise": 0.8,
        "noise": 0.0,
        "episodes": 128,
        "epochs": 6,
        "protocol_share": 0.5,
        "steps": 10,
        "first_loss": 2.0,
        "final_loss": 0.1,
        # A warm start restarted once (ragym.demo.warm_start_target.restarts): the report says so.
        "attempts": [
            {"attempt": 0, "seed": 0, "missed": ["copy accuracy 0.871 < 0.97"]},
            {"attempt": 1, "seed": 1000, "missed": []},
        ],
    }
    result = {
        "seed": 0,
        "task": "answer",
        "grpo_steps": 1,
        "wall_time_s": 1.0,
        "peak_rss_mb": 1.0,
        "warm_start": warm,
        "unused_recipe_keys": [],
        "before": summary,
        "after": after,
    }
    step = {
        "step": 1,
        "reward/total": 1.0,
        "reward/verification": 0.2,
        "episode/ident_acc": 0.0,
        "episode/rejections": 1.0,
        "episode/actions/rerank": 0.0,
        "grpo/zero_adv_group_share": 0.5,
    }
    text = write_report(tmp_path, json.loads(json.dumps(result)), [step]).read_text()
    assert "Task `answer` (`ragym demo --task answer`); seed 0;" in text
    assert (
        "Kept at attempt 2 (draws 1000); before it, draws 0 missed the target on the training questions: "
        "copy accuracy 0.871 < 0.97." in text
    )
    assert "| outcome, entity confirmed | n/a | 0.667 |" in text
    assert "| outcome, entity not confirmed | 0.000 | 0.000 |" in text
    assert "| questions with the entity confirmed | 0 | 36 |" in text
    assert "| outcome, entity confirmed, unseen in training | n/a | 0.667 |" in text
    assert "| questions with the entity confirmed, unseen in training | 0 | 36 |" in text
    assert "| questions without, seen in training | 0 | 0 |" in text
    assert "num_identified_unseen" not in text  # the split has its own rows, not the metric table's
    assert "| outcome | 0.000 | 0.500 | 0.500 |" in text  # half of the 1.0 gain
    assert "| verification | 0.250 | 0.750 | 0.500 |" in text
    assert "| format | 1.000 | 1.000 | 0.000 |" in text


@pytest.mark.parametrize("module_name", ["ragym.rl.demo.report", "ragym.rl.tiny.warm_start"])
def test_doctests(module_name: str) -> None:
    """The examples in the docstrings (gain shares, copy spans, the quoting expert) hold."""
    result = doctest.testmod(importlib.import_module(module_name))
    assert result.failed == 0 and result.attempted > 0
