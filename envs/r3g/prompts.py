"""Texts the R3G environment shows the policy: system prompt, task, pool, evidence and notices.

The paper's prompts are not in its text; these follow its description: plan first from the question and
query image alone, judge each pooled image with three sub-scores and a rationale, answer with the plan and
the selected evidence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ragym.envs.core import IMAGE_PLACEHOLDER, defuse
from ragym.envs.turns import LAST_TURN_NOTICE  # noqa: F401  (the loop adds it; scripted policies read it)

_STEPS_PLAN = (
    "1. <plan>CUES</plan>: from the question and the query image alone, list the visual cues you need.\n"
)
_STEPS_RETRIEVE = (
    "{n}. <retrieve></retrieve>: retrieve the {pool} corpus images most similar to the query image.\n"
)
_STEPS_RETRIEVE_GIVEN = (
    "{n}. <retrieve></retrieve>: receive the images the benchmark retrieved for the query image.\n"
)
_STEPS_JUDGE = (
    "{n}. <judge>one line per candidate</judge>: for each candidate write `[i] r=R t=T a=A rationale`, scores in "
    "[0, 1]: r semantic relatedness to the question, t target correspondence (same target, comparable view), "
    "a answerability (with the query image it decides the question). The best {k} become your evidence.\n"
)
_STEPS_JUDGE_NO_GUIDELINES = (
    "{n}. <judge>one line per candidate</judge>: for each candidate write `[i] r=R t=T a=A rationale`, three "
    "scores in [0, 1] and a rationale. The best {k} become your evidence.\n"
)
"""The judge step of the paper's reranking-without-guidelines ablation: the same line, no criteria
(ragym's reading: the paper's prompts are in its repository, not its text)."""
_STEPS_ANSWER = "{n}. <answer>LETTER</answer>: answer with the option letter.\n"


def system_prompt(
    use_plan: bool,
    judge: bool,
    pool_size: int,
    top_k: int,
    max_turns: int,
    *,
    benchmark_pool: bool = False,
    guidelines: bool = True,
) -> str:
    """The grammar for the steps this configuration has, with its P, k and turn budget."""
    steps = [_STEPS_PLAN] if use_plan else []
    steps.append(_STEPS_RETRIEVE_GIVEN if benchmark_pool else _STEPS_RETRIEVE)
    if judge:
        steps.append(_STEPS_JUDGE if guidelines else _STEPS_JUDGE_NO_GUIDELINES)
    steps.append(_STEPS_ANSWER)
    body = "".join(s.format(n=i, pool=pool_size, k=top_k) for i, s in enumerate(steps, 1))
    return (
        "You answer visual questions with the help of retrieved evidence images. Each turn, give exactly one "
        f"action tag and nothing outside it:\n{body}You have at most {max_turns} turns."
    )


def task_text(question: str, options: Mapping[str, str] | None) -> str:
    """The first observation: the query image, the question and its options."""
    lines = [f"Query image: {IMAGE_PLACEHOLDER}", f"Question: {defuse(question)}"]
    lines += [f"{letter}. {defuse(text)}" for letter, text in (options or {}).items()]
    return "\n".join(lines)


def _caption(caption: str, show: bool) -> str:
    return f" {defuse(caption)}" if show and caption else ""


def pool_text(captions: Sequence[str], show_captions: bool) -> str:
    """The Stage-1 pool, one numbered image per candidate, and the request to judge it."""
    lines = [f"Candidate pool ({len(captions)} images, most similar first):"]
    lines += [f"[{i}] {IMAGE_PLACEHOLDER}{_caption(c, show_captions)}" for i, c in enumerate(captions, 1)]
    lines.append("Judge every candidate: <judge>[i] r=.. t=.. a=.. rationale</judge>, one line each.")
    return "\n".join(lines)


def evidence_text(captions: Sequence[str], show_captions: bool, plan: str | None, mode: str) -> str:
    """The selected evidence images, the plan written before them, and the request to answer."""
    order = "in retrieval order" if mode == "none" else f"by {mode} score"
    lines = [f"Evidence ({len(captions)} image{'s' if len(captions) != 1 else ''}, {order}):"]
    lines += [f"[{i}] {IMAGE_PLACEHOLDER}{_caption(c, show_captions)}" for i, c in enumerate(captions, 1)]
    if plan:
        lines.append(f"Your plan: {defuse(plan)}")
    lines.append("Answer with <answer>LETTER</answer>.")
    return "\n".join(lines)


def judge_notice(num_unscored: int, num_ignored: int) -> str:
    """Said after the evidence when some candidates had no usable scores or some lines named no candidate."""
    notes = []
    if num_unscored:
        notes.append(
            f"{num_unscored} candidate(s) had missing, invalid or repeated scores and were ranked with Stage-2 = 0."
        )
    if num_ignored:
        notes.append(f"{num_ignored} judge line(s) named no candidate of the pool and were ignored.")
    return "Note: " + " ".join(notes)


PLAN_RECORDED = "Plan recorded. Next: <retrieve></retrieve>."


def error_text(message: str) -> str:
    """Notice for a turn that could not be executed."""
    return f"Invalid action: {message} Nothing was executed; please try again."
