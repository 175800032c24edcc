"""The harvest: checked labels only, held-out questions refused, a buffer that survives resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragym.envs.kbvqa import events as kbvqa_ev
from ragym.envs.kbvqa.harvest import harvest_episode
from ragym.rl.cotrain.config import CotrainConfig
from ragym.rl.cotrain.controller import CoTraining
from tests.rl.cotrain.helpers import options, tiny_rows

OPTS = {"question": "q?", "query_images": ["queries/a.png", "queries/b.png"]}


def v(decision, entity, image, batch, candidates, gold):
    return kbvqa_ev.verification(batch, decision, entity, image, batch, candidates, gold)


# (decisions, positives per image, negatives per image, unverified, wrong confirmations), by hand from the rules
TABLE = [
    # a right Rerank: the gold positive, the batch's other candidates reranked away
    ([v("rerank", "g", 1, 0, ["x", "g", "y"], "g")], {1: ("g",)}, {1: ("x", "y")}, 0, 0),
    # a right Reject: every candidate a negative, no positive
    ([v("reject", None, 1, 0, ["x", "y"], "g")], {1: ()}, {1: ("x", "y")}, 0, 0),
    # a wrong Reject (the gold was there): no label at all
    ([v("reject", None, 1, 0, ["x", "g"], "g")], {}, {}, 0, 0),
    # a wrong Rerank: the confirmed entity is a negative; the gold, not confirmed, is no positive
    ([v("rerank", "x", 1, 0, ["x", "g"], "g")], {1: ()}, {1: ("x",)}, 0, 1),
    # unverified (no gold): a confirmation is never a positive, a rejection never a negative
    ([v("rerank", "x", 1, 0, ["x"], None), v("reject", None, 2, 1, ["y"], None)], {}, {}, 2, 0),
    # two images, reject then confirm
    (
        [
            v("reject", None, 1, 0, ["x"], "g"),
            v("rerank", "g", 1, 1, ["g"], "g"),
            v("rerank", "h", 2, 2, ["h", "z"], "h"),
        ],
        {1: ("g",), 2: ("h",)},
        {1: ("x",), 2: ("z",)},
        0,
        0,
    ),
]


@pytest.mark.parametrize("decisions,positives,negatives,unverified,wrong", TABLE)
def test_only_checked_decisions_are_labels(decisions, positives, negatives, unverified, wrong) -> None:
    harvest = harvest_episode(decisions, OPTS)
    got_pos = {OPTS["query_images"].index(lab.query) + 1: lab.positives for lab in harvest.labels}
    got_neg = {OPTS["query_images"].index(lab.query) + 1: lab.negatives for lab in harvest.labels}
    assert got_pos == positives and got_neg == negatives
    assert (harvest.unverified, harvest.wrong_confirmations) == (unverified, wrong)
    assert harvest.positives == sum(len(p) for p in positives.values())


def _episode(row, confirm: bool):
    """A one-batch episode on ``row``'s first image: the gold confirmed, or a gold-free batch rightly rejected."""
    opts = options(row)
    gold = opts["gold_entities"][0]
    decision = (
        v("rerank", gold, 1, 0, [gold, "E000001"], gold)
        if confirm
        else v("reject", None, 1, 0, ["E000001"], gold)
    )
    return [kbvqa_ev.task(1, [gold], 2, 2, 8), decision], row["extra_info"]


def _cotraining(out: Path, resume_step: int | None = None) -> CoTraining:
    cfg = CotrainConfig(enable=True, every_n_steps=100, background=False)
    return CoTraining(cfg, out, tiny_rows("train"), tiny_rows("test"), resume_step)


def test_a_held_out_question_planted_in_training_never_enters_the_buffer(tmp_path: Path) -> None:
    cotrain = _cotraining(tmp_path)
    train, planted = tiny_rows("train")[0], tiny_rows("test")[0]
    metrics = cotrain.on_step(1, [_episode(train, True), _episode(planted, True)])
    assert metrics["cotrain/heldout_refused"] == 1.0 and metrics["cotrain/positives"] == 1.0
    stored = [r for r in cotrain.buffer.labels()]
    assert [r["query"] for r in stored] == options(train)["query_images"][:1]
    assert (
        options(planted)["query_images"][0]
        not in (tmp_path / "cotrain" / "buffer" / "step_000001.jsonl").read_text()
    )


def test_the_buffer_survives_resume_and_drops_steps_after_the_checkpoint(tmp_path: Path) -> None:
    rows = tiny_rows("train")
    cotrain = _cotraining(tmp_path)
    for step in (1, 2, 3):
        cotrain.on_step(step, [_episode(rows[step], step != 2)])
    before = [r for r in cotrain.buffer.labels(until_step=2)]
    resumed = _cotraining(tmp_path, resume_step=2)
    assert [r for r in resumed.buffer.labels()] == before and len(before) == 2
    assert [s for s, _ in resumed.buffer.shards()] == [1, 2]
    metrics = resumed.on_step(3, [_episode(rows[4], True)])
    assert metrics["cotrain/buffer_labels"] == 3.0
    fresh = _cotraining(tmp_path)  # a new run in the same folder starts an empty buffer
    assert fresh.buffer.num_labels == 0


def test_counts_per_step(tmp_path: Path) -> None:
    rows = tiny_rows("train")
    cotrain = _cotraining(tmp_path)
    unverified = [kbvqa_ev.task(1, [None], 2, 2, 8), v("rerank", "E000001", 1, 0, ["E000001"], None)]
    metrics = cotrain.on_step(
        1, [_episode(rows[0], True), _episode(rows[1], False), (unverified, rows[2]["extra_info"])]
    )
    assert (metrics["cotrain/positives"], metrics["cotrain/negatives"], metrics["cotrain/unverified"]) == (
        1.0,
        2.0,
        1.0,
    )
    assert json.loads((tmp_path / "cotrain" / "serving.json").read_text()) == {"swaps": []}
