"""Texts the KB-VQA environment shows the policy: system prompt (with the action grammar), task prompt,
candidate batches, passages, confirmations, the boundary prompt and error notices.

The paper's own templates (Appendix B) are figures not reproduced in its text, so these follow its
description: reason first, then one action tag; candidates are shown as image + entity name.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragym.envs.core import IMAGE_PLACEHOLDER, defuse
from ragym.envs.observations import cut_tail
from ragym.envs.retrieval.hits import Hit
from ragym.envs.turns import LAST_TURN_NOTICE  # noqa: F401  (the loop adds it; scripted policies read it)

SYSTEM_PROMPT = """You answer questions about the entities shown in one or more query images, using a knowledge base.
Each turn, first think inside <reason>...</reason>, then give exactly one action tag:
- <search_call>SearchImage(j)</search_call>: retrieve the next batch of candidate entities (image + name) that look like query image j (j = 1, 2, ...). Repeated calls for the same image return the following candidates.
- <search_call>SearchText(["query 1", "query 2"])</search_call>: retrieve the top passages for each text query.
- <rerank>ENTITY NAME</rerank>: confirm which candidate of the current batch is the entity in the query image (copy its name exactly).
- <rerank>Reject()</rerank>: no candidate of the current batch matches; you get the next batch (a limited number of times per image).
- <answer>ANSWER</answer>: give the final answer and end.
Write nothing outside the <reason> block and the action tag. You have at most {max_turns} turns."""


REJECT_LINE = (
    "\n- <rerank>Reject()</rerank>: no candidate of the current batch matches; you get the next batch "
    "(a limited number of times per image)."
)
"""The Reject line of the action list (absent with ``allow_reject=False``)."""


def system_prompt(max_turns: int, extra_lines: Sequence[str] = (), allow_reject: bool = True) -> str:
    """The system prompt with the turn budget filled in; ``extra_lines`` go where the Reject line is, before
    it (``allow_reject`` False lists no Reject: Table 5's "w/o Reject")."""
    text = SYSTEM_PROMPT.format(max_turns=max_turns)
    extra = "".join(f"\n{line}" for line in extra_lines)
    return text.replace(REJECT_LINE, extra + (REJECT_LINE if allow_reject else ""), 1)


def task_prompt(question: str, num_images: int, image_notes: Sequence[str] = ()) -> str:
    """The first observation: one line per query image (its placeholder, then its note), then the question."""
    notes = list(image_notes) or [""] * num_images
    lines = [f"Image {j}: {IMAGE_PLACEHOLDER}{note}" for j, note in enumerate(notes, 1)]
    return "\n".join([*lines, f"Question: {defuse(question)}"])


def batch_text(
    image: int, offset: int, hits: Sequence[Hit], query_note: str = "", candidate_notes: Sequence[str] = ()
) -> str:
    """A candidate batch: one line per candidate with its image placeholder and entity name (and note)."""
    notes = list(candidate_notes) or [""] * len(hits)
    header = f"Candidates for Image {image}{query_note}, ranks {offset + 1}-{offset + len(hits)}:"
    lines = [
        f"[{i}] {IMAGE_PLACEHOLDER} {defuse(hit.payload['name'])}{note}"
        for i, (hit, note) in enumerate(zip(hits, notes, strict=True), 1)
    ]
    return "\n".join([header, *lines])


def passages_text(
    queries: Sequence[str], results: Sequence[Sequence[Hit]], text_chars: int | None = None
) -> str:
    """Passages for each text query, concatenated in query order; ``text_chars`` (a text over ``max_obs_chars``)
    cuts each passage's text to that many characters, ending in ``CUT_MARK``."""
    parts = []
    for query, hits in zip(queries, results, strict=True):
        parts.append(f'Results for "{defuse(query)}":')
        parts += [
            f"[{i}] {defuse(hit.payload['title'])}: {_excerpt(defuse(hit.payload['text']), text_chars)}"
            for i, hit in enumerate(hits, 1)
        ]
        if not hits:
            parts.append("(no passage found)")
    return "\n".join(parts)


def _excerpt(text: str, text_chars: int | None) -> str:
    return text if text_chars is None else cut_tail(text, text_chars)


def confirmation_text(image: int, name: str) -> str:
    """Echo of a Rerank decision; the confirmed name becomes a premise for later turns."""
    return f"Confirmed: the entity in Image {image} is {defuse(name)}."


def boundary_text(image: int, rejections: int, batches: int, exhausted: bool = False) -> str:
    """The boundary prompt returned instead of a new batch once an image's exploration depth is used up
    (``exhausted``: its candidate list ran out first)."""
    reached = "No more candidates exist" if exhausted else "Rejection limit reached"
    return (
        f"{reached} for Image {image} ({rejections} rejections, {batches} batches served): "
        "no more candidates will be "
        "retrieved for it. Continue with the evidence you have: search text or give your answer."
    )


def error_text(message: str) -> str:
    """Notice for a turn that could not be executed."""
    return f"Invalid action: {message} Nothing was executed; please try again."


def retrieval_unavailable_text() -> str:
    """Notice for a search the retrieval service could not answer (the action itself was valid)."""
    return "Retrieval is unavailable right now: nothing was retrieved. You may search again later, or answer."
