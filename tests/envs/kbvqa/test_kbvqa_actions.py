"""The one KB-VQA parser: valid turns, invalid turns, adversarial turns (table-driven)."""

from __future__ import annotations

import pytest

from ragym.envs.kbvqa.actions import (
    Answer,
    ParseError,
    Reject,
    Rerank,
    SearchImage,
    SearchText,
    action_kind,
    format_action,
    parse_action,
)

R = "<reason>look at it</reason>"

VALID = [
    (f"{R}<search_call>SearchImage(1)</search_call>", SearchImage(1)),
    (f"{R}<search_call> SearchImage( 12 ) </search_call>", SearchImage(12)),
    (f"{R}<search_call>SearchImage(0)</search_call>", SearchImage(0)),  # range is the env's job
    (
        f'{R}<search_call>SearchText(["year of X", "region of X"])</search_call>',
        SearchText(("year of X", "region of X")),
    ),
    (f'{R}<search_call>SearchText("single query")</search_call>', SearchText(("single query",))),
    # an escaped surrogate pair is one character (a lone half is not: INVALID)
    (f'{R}<search_call>SearchText(["\\ud83d\\ude00 park"])</search_call>', SearchText(("\U0001f600 park",))),
    (f"{R}<rerank>Cobalt Varnel Spire</rerank>", Rerank("Cobalt Varnel Spire")),
    (f"{R}<rerank>  Cobalt\n Varnel   Spire </rerank>", Rerank("Cobalt Varnel Spire")),
    (f"{R}<rerank>Reject()</rerank>", Reject()),
    (f"{R}<rerank> Reject() </rerank>", Reject()),
    (f"{R}<answer>1873</answer>", Answer("1873")),
    (f"  \n{R}\n\n<answer>Paris, France</answer>\n", Answer("Paris, France")),
    ("<reason></reason><answer>x</answer>", Answer("x")),
    (
        f"{R}<rerank>Reject</rerank>",
        Rerank("Reject"),
    ),  # only Reject() rejects; the env reports the unknown name
]

INVALID = [
    ("", "no_action"),
    ("just text", "no_action"),
    (R, "no_action"),
    ("<answer>1873</answer>", "missing_reason"),
    (f"{R}<answer>a</answer><answer>b</answer>", "multiple_actions"),
    (f"{R}<search_call>SearchImage(1)</search_call><rerank>Reject()</rerank>", "multiple_actions"),
    (f"{R}{R}<answer>a</answer>", "multiple_reasons"),
    (f"<answer>a</answer>{R}", "reason_after_action"),
    (f"hello {R}<answer>a</answer>", "text_outside_tags"),
    (f"{R} and so <answer>a</answer>", "text_outside_tags"),
    (f"{R}<answer>a</answer> trailing", "text_outside_tags"),
    ("<reason>x<answer>a</answer></reason>", "nested_tags"),
    (f"{R}<rerank><answer>a</answer></rerank>", "nested_tags"),
    (f"{R}<answer>a", "unbalanced_tags"),
    (f"{R}a</answer>", "unbalanced_tags"),
    (f"{R}<answer>a</rerank>", "unbalanced_tags"),
    ("<reason>x</answer>", "unbalanced_tags"),
    (f"{R}<answer>   </answer>", "bad_argument"),
    (f"{R}<rerank></rerank>", "bad_argument"),
    (f"{R}<search_call>SearchImage(one)</search_call>", "bad_argument"),
    (f"{R}<search_call>SearchImage(1, 2)</search_call>", "bad_argument"),
    (f"{R}<search_call>SearchText([])</search_call>", "bad_argument"),
    (f'{R}<search_call>SearchText(["ok", ""])</search_call>', "bad_argument"),
    (f"{R}<search_call>SearchText([1, 2])</search_call>", "bad_argument"),
    (f"{R}<search_call>SearchText(not json)</search_call>", "bad_argument"),
    # nested deeper than Python's recursion limit: json.loads raises RecursionError, not JSONDecodeError
    (f"{R}<search_call>SearchText({'[' * 3000})</search_call>", "bad_argument"),
    # a lone surrogate (half of an escaped emoji) no tokenizer can encode, echoed in the next observation
    (f'{R}<search_call>SearchText(["\\ud83d"])</search_call>', "bad_argument"),
    (f"{R}<search_call>Lookup(1)</search_call>", "bad_argument"),
    (f"{R}<search_call></search_call>", "bad_argument"),
    (f"{R}<answer>{'x' * 9000}</answer>", "oversized"),
]


@pytest.mark.parametrize(("text", "expected"), VALID)
def test_valid_turns_parse_to_their_action(text: str, expected: object) -> None:
    assert parse_action(text) == expected


@pytest.mark.parametrize(("text", "reason"), INVALID)
def test_invalid_turns_explain_why(text: str, reason: str) -> None:
    result = parse_action(text)
    assert isinstance(result, ParseError)
    assert result.reason == reason
    assert result.message
    assert action_kind(result) == "invalid"


@pytest.mark.parametrize("action", [a for _, a in VALID])
def test_format_action_round_trips(action: object) -> None:
    assert parse_action(format_action(action, "why")) == action


def test_max_chars_is_a_parameter() -> None:
    text = f"{R}<answer>abc</answer>"
    assert isinstance(parse_action(text, max_chars=len(text) - 1), ParseError)
    assert parse_action(text, max_chars=len(text)) == Answer("abc")


@pytest.mark.parametrize(("text", "expected"), VALID)
def test_without_the_reject_action_only_reject_becomes_malformed(text: str, expected: object) -> None:
    """``allow_reject=False`` (Table 5's "w/o Reject"): ``Reject()`` is a ``reject_not_allowed`` error, the
    rest parses as before (``Reject`` without parentheses stays an entity name for the env to refuse)."""
    result = parse_action(text, allow_reject=False)
    if expected == Reject():
        assert isinstance(result, ParseError) and result.reason == "reject_not_allowed"
        assert "no Reject()" in result.message
    else:
        assert result == expected
