"""DocMemo reward terms: table-driven cases over hand-built events, and one real env episode scored."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import ragym.rewards.docmemo  # noqa: F401  (registers the DocMemo rewards)
from ragym.envs.docmemo.env import DocMemoEnv
from ragym.rewards.episode import Episode
from ragym.rewards.registry import get_reward
from ragym.rewards.rubric import Rubric

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "rewards" / "docmemo.yaml"
GT = {"answer": "1337", "answer_format": "Int", "evidence_pages": [4, 6]}
NA = {"answer": "Not answerable", "answer_format": "None", "evidence_pages": []}


def action(turn, kind="select", ok=True):
    return {"type": "action", "turn": turn, "kind": kind, "well_formed": ok}


def answer(turn, text):
    return {
        "type": "answer",
        "turn": turn,
        "text": text,
        "not_answerable": text == "Not answerable",
        "round": 0,
    }


def feedback(turn, useful=(), irrelevant=()):
    return {
        "type": "feedback",
        "turn": turn,
        "round": 0,
        "useful": list(useful),
        "irrelevant": list(irrelevant),
        "query": "q",
        "note": "",
    }


def evidence(turn, pages):
    return {"type": "evidence", "turn": turn, "round": 0, "pages": list(pages), "means": [0.5] * len(pages)}


CASES = [
    # (reward, params, ground truth, events, turns, expected)
    ("docmemo_answer", {}, GT, [answer(0, "1337")], 1, 1.0),
    ("docmemo_answer", {}, GT, [answer(0, "1338")], 1, 0.0),
    ("docmemo_answer", {}, GT, [answer(0, "1337</answer>")], 1, 0.0),
    ("docmemo_answer", {}, NA, [answer(0, "Not answerable")], 1, 1.0),
    ("docmemo_answer", {}, NA, [answer(0, "12")], 1, 0.0),
    ("docmemo_answer", {}, GT, [], 1, 0.0),
    (
        "docmemo_answer",
        {"unanswered": -0.5},
        GT,
        [{"type": "truncated", "turn": 0, "reason": "max_turns"}],
        1,
        -0.5,
    ),
    ("docmemo_format", {}, GT, [action(0), action(1, "answer")], 2, 1.0),
    ("docmemo_format", {}, GT, [action(0, "invalid", False), action(1, "answer")], 2, 0.0),
    ("docmemo_format", {"mode": "fraction"}, GT, [action(0, "invalid", False), action(1, "answer")], 2, 0.5),
    # turn 1 never reached the env (length budget): judged by the DocMemo parser
    ("docmemo_format", {"mode": "fraction"}, GT, [action(0)], 2, 0.5),
    ("docmemo_useful_gold", {}, GT, [feedback(1, useful=[4, 6])], 2, 1.0),
    ("docmemo_useful_gold", {}, GT, [feedback(1, useful=[4, 9])], 2, 0.5),
    ("docmemo_useful_gold", {"non_gold_cost": 1.0}, GT, [feedback(1, useful=[9])], 2, -1.0),
    # re-marking a gold page in later rounds is no new evidence: each page counts once
    (
        "docmemo_useful_gold",
        {},
        GT,
        [feedback(1, useful=[4, 9]), feedback(3, useful=[4]), feedback(5, useful=[4])],
        6,
        0.5,
    ),
    (
        "docmemo_useful_gold",
        {"non_gold_cost": 1.0},
        GT,
        [feedback(1, useful=[9]), feedback(3, useful=[9, 4])],
        4,
        0.0,
    ),
    ("docmemo_useful_gold", {}, GT, [feedback(1, irrelevant=[9])], 2, 0.0),
    ("docmemo_useful_gold", {}, NA, [feedback(1, useful=[9])], 2, None),
    ("docmemo_irrelevant_gold", {}, GT, [feedback(1, irrelevant=[4, 9])], 2, -0.5),
    (
        "docmemo_irrelevant_gold",
        {"cost": 2.0},
        GT,
        [feedback(1, irrelevant=[4]), feedback(3, irrelevant=[6])],
        4,
        -2.0,
    ),
    ("docmemo_irrelevant_gold", {}, GT, [feedback(1, useful=[4])], 2, 0.0),
    ("docmemo_irrelevant_gold", {}, NA, [feedback(1, irrelevant=[4])], 2, None),
    ("docmemo_evidence_recall", {}, GT, [evidence(0, [4, 5]), evidence(2, [6])], 3, 1.0),
    ("docmemo_evidence_recall", {"scope": "final"}, GT, [evidence(0, [4, 5]), evidence(2, [7])], 3, 0.0),
    ("docmemo_evidence_recall", {}, GT, [], 1, 0.0),
    ("docmemo_evidence_recall", {}, NA, [evidence(0, [4])], 1, None),
]


@pytest.mark.parametrize("name,params,truth,events,num_turns,expected", CASES)
def test_reward_table(name, params, truth, events, num_turns, expected):
    turns = ["<reason>r</reason><select>4</select>", "<select>cut off"][:num_turns] + ["t"] * max(
        0, num_turns - 2
    )
    result = get_reward(name)(Episode("mmlongbench_doc", turns, events, truth), **params)
    assert result == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize(
    "name,params", [("docmemo_format", {"mode": "all"}), ("docmemo_evidence_recall", {"scope": "best"})]
)
def test_bad_params_are_errors(name, params):
    with pytest.raises(ValueError):
        get_reward(name)(Episode("mmlongbench_doc", [], [], GT), **params)


def test_missing_evidence_pages_is_an_error():
    with pytest.raises(ValueError, match="evidence_pages"):
        get_reward("docmemo_evidence_recall")(Episode("mmlongbench_doc", [], [], {"answer": "1"}))


def test_recipe_scores_a_real_episode():
    """An oracle run on the synthetic report: select gold, mark it useful, answer right."""
    rubric = Rubric.from_recipe(yaml.safe_load(RECIPE.read_text()))
    env = DocMemoEnv(num_candidates=20)  # every page is a candidate, so the gold pages are selectable
    _, info = env.reset(seed=0, options=None)
    turns = [
        "<reason>r</reason><select>4,6</select>",
        "<reason>r</reason><refine><query>q</query><useful>4,6</useful></refine>",
        "<reason>r</reason><select>4</select>",
        "<reason>r</reason><answer>137</answer>",
    ]
    for text in turns:
        _, _, term, trunc, info = env.step(text)
    assert term
    truth = {"answer": "137", "answer_format": "Int", "evidence_pages": [4, 6]}
    result = rubric.score(Episode("mmlongbench_doc", turns, info["events"], truth))
    assert result.breakdown == {
        "answer": 1.0,
        "format": 1.0,
        "useful_gold": 1.0,
        "irrelevant_gold": 0.0,
        "evidence_recall": 1.0,
    }
    assert result.total == pytest.approx(1.0 * 1.0 + 0.5 * 1.0 + 0.2 * 1.0 + 0.2 * 0.0 + 0.2 * 1.0)
