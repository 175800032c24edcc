"""KBVQA-v0 episode metrics (``ragym.envs.kbvqa.metrics``): hand-computed values and the paper's Ident."""

from __future__ import annotations

import pytest

from ragym.envs import events as ev
from ragym.envs.kbvqa import events as kbvqa_ev
from ragym.envs.kbvqa.metrics import rejects_at_limit
from ragym.envs.metrics import episode_metrics

CANDS = ["e1", "e2"]


def _kbvqa(
    golds: list[str | None], *decisions: tuple[int, str | None], max_rejections: int = 2
) -> list[dict]:
    """A KB-VQA episode: per (image, entity) one search and one decision (None: Reject), then an answer."""
    events = [kbvqa_ev.task(len(golds), golds, max_rejections, 2, 8)]
    for turn, (image, entity) in enumerate(decisions):
        gold = golds[image - 1]
        events += [
            ev.action(2 * turn, "search_image", True),
            kbvqa_ev.search_image(2 * turn, image, turn, CANDS, gold, 0),
        ]
        kind = "reject" if entity is None else "rerank"
        events += [ev.action(2 * turn + 1, kind, True)]
        events += [kbvqa_ev.verification(2 * turn + 1, kind, entity, image, turn, CANDS, gold)]
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
    events += [kbvqa_ev.boundary(4, 1, 1), ev.protocol_violation(4, "no_active_batch", entity=None)]
    events += [ev.format_error(5, "no_action"), ev.action(5, "invalid", False)]
    metrics = episode_metrics("KBVQA-v0", events)
    expected = {
        "turns": 6.0,
        "format_errors": 1.0,
        "protocol_violations": 1.0,
        "truncated": 0.0,
        "answered": 1.0,
        "truncated_by_policy": 0.0,
        "truncated_by_observation": 0.0,
        "truncated_by_images": 0.0,
        "retrieval_errors": 0.0,
        "errors": 0.0,
        "unstarted": 0.0,
        "actions/search_image": 2.0,
        "actions/search_text": 0.0,
        "actions/rerank": 1.0,
        "actions/reject": 1.0,
        "actions/answer": 1.0,
        "actions/invalid": 1.0,
        "ident_acc": 0.0,
        "ident_image_share": 0.0,
        "rejections": 1.0,
        "needless_rejections": 0.0,
        "rejects_at_limit": 0.0,
        "verification_acc": 0.5,
        "boundaries": 1.0,
        "searches": 2.0,
    }
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


REJECT_LIMIT_CASES = [
    # (name, Rej_max, golds, decisions, rejections, rejects_at_limit, needless): Algorithm S1's RejCount per
    # image, so `rejections` never exceeds Rej_max per image; the image's (Rej_max + 1)-th batch is the last.
    ("Rej_max 0: the one Reject is at the limit", 0, ["e9"], [(1, None)], 0.0, 1.0, 0.0),
    ("Rej_max 1: the first Reject is below it", 1, ["e9"], [(1, None)], 1.0, 0.0, 0.0),
    ("Rej_max 1: the second is at it", 1, ["e9"], [(1, None), (1, None)], 1.0, 1.0, 0.0),
    ("Rej_max 2: three Rejects count two", 2, ["e9"], [(1, None)] * 3, 2.0, 1.0, 0.0),
    ("a needless Reject at the limit is not a rejection", 0, ["e1"], [(1, None)], 0.0, 1.0, 0.0),
    ("each image has its own limit", 0, ["e9", "e8"], [(1, None), (2, None)], 0.0, 2.0, 0.0),
    ("a Rerank of the last batch is no Reject", 0, ["e1"], [(1, "e1")], 0.0, 0.0, 0.0),
]


@pytest.mark.parametrize(
    ("max_rejections", "golds", "decisions", "rejections", "at_limit", "needless"),
    [c[1:] for c in REJECT_LIMIT_CASES],
    ids=[c[0] for c in REJECT_LIMIT_CASES],
)
def test_kbvqa_rejections_stop_at_rej_max(
    max_rejections, golds, decisions, rejections, at_limit, needless
) -> None:
    metrics = episode_metrics("KBVQA-v0", _kbvqa(golds, *decisions, max_rejections=max_rejections))
    assert (metrics["rejections"], metrics["rejects_at_limit"]) == (rejections, at_limit)
    assert metrics["needless_rejections"] == needless


def _rejected(image: int, batch_id: int) -> dict:
    return kbvqa_ev.verification(batch_id, "reject", None, image, batch_id, CANDS, None)


def test_rejects_at_limit_follow_each_image_s_rejcount() -> None:
    """Image 1 rejects batches 0, 2 and 3, image 2 rejects batch 1: RejCount per image, in decision order."""
    rejects = [_rejected(image, b) for b, image in enumerate([1, 2, 1, 1])]
    assert rejects_at_limit(rejects, 0) == {(1, 0), (2, 1), (1, 2), (1, 3)}
    assert rejects_at_limit(rejects, 1) == {(1, 2), (1, 3)}
    assert rejects_at_limit(rejects, 2) == {(1, 3)}
    assert rejects_at_limit(rejects + rejects[:1], 0) == {
        (1, 0),
        (2, 1),
        (1, 2),
        (1, 3),
    }  # one decision a batch
    rerank = kbvqa_ev.verification(0, "rerank", "e1", 1, 0, CANDS, None)
    assert rejects_at_limit([rerank, _rejected(1, 1)], 0) == {(1, 1)}  # a Rerank is not a rejection


def test_batches_paged_by_search_image_do_not_move_the_limit() -> None:
    """Algorithm S1 checks RejCount alone: three batches served by SearchImage, then one Reject of the third,
    is one counted rejection at Rej_max = 2 (until issue #46 the third batch was "the last allowed one")."""
    served = [kbvqa_ev.search_image(t, 1, t, CANDS, "e9", 2 * t) for t in range(3)]
    events = [kbvqa_ev.task(1, ["e9"], 2, 2, 8), *served, _rejected(1, 2)]
    assert rejects_at_limit(events, 2) == set()
    metrics = episode_metrics("KBVQA-v0", [*events, ev.answer(4, "x")])
    assert (metrics["rejections"], metrics["rejects_at_limit"]) == (1.0, 0.0)


def test_kbvqa_metrics_need_the_task_event() -> None:
    with pytest.raises(ValueError, match="exactly one 'task' event"):
        episode_metrics("KBVQA-v0", [ev.action(0, "answer", True)])
