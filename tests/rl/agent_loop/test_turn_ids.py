"""Per-token turn ids in the agent loop's output (``extra_fields["turn_ids"]``, for turn-level credit)."""

from __future__ import annotations

from tests.rl.agent_loop.test_agent_loop import ANSWER, SEARCH, _run, fake_env, processor  # noqa: F401


def _runs_of_turn_ids(turn_ids: list[int], mask: list[int]) -> list[list[int]]:
    """The turn ids of each run of mask-1 tokens."""
    runs, current = [], []
    for turn, m in zip(turn_ids, mask, strict=True):
        if m:
            current.append(turn)
        elif current:
            runs, current = [*runs, current], []
    return runs + ([current] if current else [])


def test_each_generated_token_carries_its_turn_and_observation_tokens_none(processor):  # noqa: F811
    out, server = _run(processor, [SEARCH, "garbage", SEARCH, ANSWER])
    turn_ids = out.extra_fields["turn_ids"]
    assert len(turn_ids) == len(out.response_mask)
    assert all(t == -1 for t, m in zip(turn_ids, out.response_mask, strict=True) if not m)
    expected = [[k] * len(call["output"].token_ids) for k, call in enumerate(server.calls)]
    assert _runs_of_turn_ids(turn_ids, out.response_mask) == expected
    assert len(expected) == len(out.extra_fields["turns"])


def test_a_cut_turn_keeps_its_turn_id(processor):  # noqa: F811
    out, _ = _run(processor, [SEARCH, "<reason>x</reason><|image_pad|><answer>y</answer>"])
    runs = _runs_of_turn_ids(out.extra_fields["turn_ids"], out.response_mask)
    assert [set(run) for run in runs] == [{0}, {1}]
