"""R3G action grammar: table of valid, malformed and partly malformed judge turns."""

from __future__ import annotations

import pytest

from ragym.envs.r3g.actions import (
    Answer,
    Judge,
    JudgeError,
    JudgeScore,
    ParseError,
    Plan,
    Retrieve,
    format_action,
    parse_action,
    parse_judge_line,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<plan>find the tail colour</plan>", Plan("find the tail colour")),
        ("  <retrieve></retrieve>\n", Retrieve("")),
        ("<retrieve>the lid</retrieve>", Retrieve("the lid")),
        ("<answer> B </answer>", Answer("B")),
        ("<answer></answer>", ParseError("empty", "<answer> is empty.")),
    ],
)
def test_single_actions(text: str, expected: object) -> None:
    assert parse_action(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "no_action"),
        ("B", "no_action"),
        ("<plan>a</plan><retrieve></retrieve>", "multiple_actions"),
        ("<plan>a<answer>b</answer></plan>", "nested_tags"),
        ("<plan>a", "unbalanced_tags"),
        ("</judge>", "unbalanced_tags"),
        ("so <answer>B</answer>", "text_outside_tags"),
        ("<plan>" + "x" * 9000 + "</plan>", "oversized"),
    ],
)
def test_malformed_turns(text: str, reason: str) -> None:
    parsed = parse_action(text)
    assert isinstance(parsed, ParseError) and parsed.reason == reason


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("[1] r=0.2 t=0.5 a=1 shows the lid", JudgeScore(1, 0.2, 0.5, 1.0, "shows the lid")),
        ("[2] a=0, t=1, r=0.25: wrong object", JudgeScore(2, 0.25, 1.0, 0.0, "wrong object")),
        ("[3] r=1.5 t=0 a=0 too sure", JudgeError(3, "out_of_range")),
        ("[3] r=-0.1 t=0 a=0 negative", JudgeError(3, "out_of_range")),
        ("[4] r=high t=0 a=0 words", JudgeError(4, "bad_score")),
        ("[4] r=nan t=0 a=0 nan", JudgeError(4, "bad_score")),
        ("[5] r=0.1 t=0.2 no answerability", JudgeError(5, "missing_score")),
        ("[6] r=0.1 t=0.2 a=0.3", JudgeError(6, "missing_rationale")),
        ("candidate one is good", JudgeError(None, "bad_line")),
    ],
)
def test_judge_lines(line: str, expected: object) -> None:
    assert parse_judge_line(line) == expected


def test_judge_block_keeps_good_lines_and_reports_bad_ones() -> None:
    text = "<judge>\n[1] r=1 t=1 a=1 ok\n\n[1] r=0 t=0 a=0 again\n[2] r=9 t=0 a=0 bad\nnoise\n</judge>"
    parsed = parse_action(text)
    assert isinstance(parsed, Judge)
    assert parsed.scores == (JudgeScore(1, 1.0, 1.0, 1.0, "ok"),)
    assert parsed.errors == (
        JudgeError(1, "duplicate_candidate"),
        JudgeError(2, "out_of_range"),
        JudgeError(None, "bad_line"),
    )


def test_format_round_trips() -> None:
    judge = Judge((JudgeScore(1, 0.2, 0.35, 0.45, "the lid"), JudgeScore(2, 0.0, 1.0, 0.5, "x")), ())
    for action in (Plan("cues"), Retrieve(""), judge, Answer("C")):
        assert parse_action(format_action(action)) == action
