"""Episode metrics from events: hand-computed values, the paper's Ident., and the per-env registry."""

from __future__ import annotations

import pytest

from ragym.envs import events as ev
from ragym.envs.metrics import episode_metrics, mean_metrics, register_metrics, registered_metrics

CANDS = ["e1", "e2"]


def _kbvqa(golds: list[str | None], *decisions: tuple[int, str | None]) -> list[dict]:
    """A KB-VQA episode: per (image, entity) one search and one decision (None: Reject), then an answer."""
    events = [ev.task(len(golds), golds, 2, 2, 8)]
    for turn, (image, entity) in enumerate(decisions):
        gold = golds[image - 1]
        events += [
            ev.action(2 * turn, "search_image", True),
            ev.search_image(2 * turn, image, turn, CANDS, gold, 0),
        ]
        kind = "reject" if entity is None else "rerank"
        events += [ev.action(2 * turn + 1, kind, True)]
        events += [ev.verification(2 * turn + 1, kind, entity, image, turn, CANDS, gold)]
    last = 2 * len(decisions)
    return [*events, ev.action(last, "answer", True), ev.answer(last, "x")]


IDENT_CASES = [
    # (name, golds, decisions, ident_acc, ident_image_share)
    ("one image matched", ["e1"], [(1, "e1")], 1.0, 1.0),
    ("one image wrong", ["e1"], [(1, "e2")], 0.0, 0.0),
    ("rejected only", ["e1"], [(1, None)], 0.0, 0.0),
    ("both of two matched", ["e1", "e2"], [(1, "e1"), (2, "e2")], 1.0, 1.0),
    ("one of two matched: the sample fails (4.2.2)", ["e1", "e2"], [(1, "e1"), (2, "e1")], 0.0, 0.5),
    ("second image never searched", ["e1", "e2"], [(1, "e1")], 0.0, 0.5),
    ("a later rerank replaces the first", ["e1"], [(1, "e2"), (1, "e1")], 1.0, 1.0),
    ("no gold: not applicable", [None], [(1, "e1")], None, None),
]


@pytest.mark.parametrize(
    ("golds", "decisions", "ident", "share"), [c[1:] for c in IDENT_CASES], ids=[c[0] for c in IDENT_CASES]
)
def test_kbvqa_ident_counts_a_sample_only_when_every_image_is_matched(golds, decisions, ident, share) -> None:
    metrics = episode_metrics("KBVQA-v0", _kbvqa(golds, *decisions))
    assert (metrics["ident_acc"], metrics["ident_image_share"]) == (ident, share)


def test_kbvqa_counts() -> None:
    events = _kbvqa(["e9"], (1, None), (1, "e1"))  # gold outside both batches: reject right, rerank wrong
    events += [ev.boundary(4, 1, 1), ev.protocol_violation(4, "no_active_batch", entity=None)]
    events += [ev.format_error(5, "no_action"), ev.action(5, "invalid", False)]
    metrics = episode_metrics("KBVQA-v0", events)
    expected = {
        "turns": 6.0, "format_errors": 1.0, "protocol_violations": 1.0, "truncated": 0.0, "answered": 1.0,
        "truncated_by_policy": 0.0, "truncated_by_observation": 0.0, "truncated_by_images": 0.0,
        "retrieval_errors": 0.0, "errors": 0.0, "actions/search_image": 2.0, "actions/search_text": 0.0, "actions/rerank": 1.0, "actions/reject": 1.0,
        "actions/answer": 1.0, "actions/invalid": 1.0, "ident_acc": 0.0, "ident_image_share": 0.0,
        "rejections": 1.0, "needless_rejections": 0.0, "verification_acc": 0.5, "boundaries": 1.0,
        "searches": 2.0,
    }  # fmt: skip
    assert metrics == expected


@pytest.mark.parametrize(
    ("golds", "decisions", "needless"),
    [
        (["e9"], [(1, None), (1, None)], 0.0),  # gold in no batch: both rejections right
        (["e1"], [(1, None), (1, "e1")], 1.0),  # gold e1 was in the rejected batch
        (["e2"], [(1, None), (1, None)], 2.0),
        (["e1"], [(1, "e2")], 0.0),  # a wrong Rerank is not a rejection
    ],
)
def test_kbvqa_needless_rejections_count_rejected_batches_that_held_the_gold(
    golds, decisions, needless
) -> None:
    assert episode_metrics("KBVQA-v0", _kbvqa(golds, *decisions))["needless_rejections"] == needless


def test_turns_count_a_turn_the_agent_loop_cut() -> None:
    events = [
        ev.task(1, ["e1"], 2, 2, 8),
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
        "KBVQA-v0", [ev.task(1, ["e1"], 2, 2, 8), ev.action(0, "search_image", True), cut]
    )
    assert metrics["truncated"] == 1.0
    assert (metrics["truncated_by_policy"], metrics["truncated_by_observation"]) == (
        by_policy,
        by_observation,
    )
    assert metrics["truncated_by_images"] == by_images


def test_forced_answer_is_not_answered() -> None:
    events = [ev.task(1, ["e1"], 2, 2, 1), ev.action(0, "invalid", False), ev.answer(0, "", forced=True)]
    assert episode_metrics("KBVQA-v0", events)["answered"] == 0.0


def test_kbvqa_metrics_need_the_task_event() -> None:
    with pytest.raises(ValueError, match="exactly one 'task' event"):
        episode_metrics("KBVQA-v0", [ev.action(0, "answer", True)])


def test_docmemo_metrics() -> None:
    events = [
        ev.candidates(-1, 0, "q", 1.0, [3, 4], [0.9, 0.8], [0.5] * 6),
        ev.action(0, "select", True), ev.selected(0, 0, [3, 4], [3, 4]), ev.evidence(0, 0, [3, 4], [0.5, 0.5], [3, 4]),
        ev.action(1, "refine", True), ev.feedback(1, 0, "q2", "n", [3], [4, 5]), ev.beliefs(1, 0, [0.5] * 6),
        ev.candidates(1, 1, "q2", 0.5, [2], [0.7], [0.5] * 6),
        ev.action(2, "select", True), ev.selected(2, 1, [2], [3, 4, 2]), ev.evidence(2, 1, [3, 2], [0.6, 0.5], [2]),
        ev.action(3, "answer", True), ev.docmemo_answer(3, "Not answerable", True, 1),
    ]  # fmt: skip
    metrics = episode_metrics("DocMemo-v0", events)
    assert {k: metrics[k] for k in ("rounds", "pages_accumulated", "evidence_pages", "refinements")} == {
        "rounds": 2.0, "pages_accumulated": 3.0, "evidence_pages": 3.0, "refinements": 1.0,
    }  # fmt: skip
    assert (metrics["pages_marked_useful"], metrics["pages_marked_irrelevant"]) == (1.0, 2.0)
    assert (metrics["not_answerable"], metrics["turns"], metrics["actions/select"]) == (1.0, 4.0, 2.0)


def test_unknown_env_and_unknown_action_kind_fail_loudly() -> None:
    with pytest.raises(KeyError, match="no episode metrics registered for 'Nope-v0'"):
        episode_metrics("Nope-v0", [])
    with pytest.raises(ValueError, match=r"action kinds \['select'\]"):
        episode_metrics("KBVQA-v0", [ev.task(1, ["e"], 2, 2, 8), ev.action(0, "select", True)])


def test_duplicate_registration_is_an_error() -> None:
    assert "KBVQA-v0" in registered_metrics()
    with pytest.raises(ValueError, match="already registered"):
        register_metrics("KBVQA-v0", action_kinds=("answer",))(lambda events: {})


def test_mean_skips_episodes_where_a_metric_does_not_apply() -> None:
    means = mean_metrics([{"a": 1.0, "b": None}, {"a": 0.0, "b": 1.0}, {"a": 0.5, "b": None}])
    assert means == {"a": 0.5, "b": 1.0}
    assert mean_metrics([{"b": None}]) == {"b": None}
