"""What the DocMemo policy reads: the system prompt, the candidate view, the evidence view, error notes.

Views take plain data (no env state), so they are easy to test and never see gold annotations.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image

from ragym.envs.core import IMAGE_PLACEHOLDER, defuse
from ragym.envs.docmemo.store import DocStore
from ragym.envs.image_budget import ImageBudget
from ragym.envs.observations import CUT_MARK

SYSTEM_PROMPT = """You answer questions about one long document by finding its evidence pages.
Each round you see candidate pages (number, type, summary); select the ones worth reading, then read the
evidence pages shown to you and either answer or refine the search.
Every turn is <reason>your reasoning</reason> followed by exactly one action:
  <select>12,14</select>   pick candidate pages (1-based page numbers) to read
  <refine><query>new search query</query><note>what is still missing</note><useful>12</useful><irrelevant>14</irrelevant></refine>
                           search again; mark pages you have seen as useful or irrelevant (both optional)
  <answer>final answer</answer>   or <answer>Not answerable</answer> when the document cannot answer
Put only the final answer inside <answer>: a number, a short phrase, or a list like ["a", "b"]."""


def _pages(pages: Sequence[int]) -> str:
    return ", ".join(map(str, pages)) or "none"


def memory_lines(episodic: Sequence[dict]) -> list[str]:
    """Episodic memory: one line per earlier round (evidence read, refinement, note, page marks)."""
    return [
        f'  Round {m["round"] + 1}: read pages {_pages(m["evidence"])}; query "{m["query"]}"'
        + (f"; note: {m['note']}" if m["note"] else "")
        + f"; useful: {_pages(m['useful'])}; irrelevant: {_pages(m['irrelevant'])}"
        for m in episodic
    ]


def earlier_evidence(episodic: Sequence[dict], exclude: Sequence[int]) -> str:
    """Reminder of evidence pages read in earlier rounds (outside ``exclude``) with their latest mark."""
    marks: dict[int, str] = {}  # the latest mark wins; candidates marked without being read are left out
    for m in episodic:
        marks.update({p: marks.get(p, "unmarked") for p in m["evidence"]})
        marks.update({p: "useful" for p in m["useful"] if p in marks})
        marks.update({p: "irrelevant" for p in m["irrelevant"] if p in marks})
    pages = [p for p in sorted(marks) if p not in exclude]
    if not pages:
        return ""
    listed = ", ".join(f"p{p} {marks[p]}" for p in pages)
    return f"Read in earlier rounds, not shown again (see your notes in memory): {listed}"


def candidate_view(
    question: str,
    store: DocStore,
    max_sections: int | None,
    episodic: Sequence[dict],
    round_index: int,
    max_rounds: int,
    query: str,
    candidates: Sequence[int],
    accumulated: Sequence[int],
    max_chars: int,
) -> tuple[str, list[int], int]:
    """Start of a round: question, schema memory (None: not shown), episodic memory, candidate pages (1-based).

    Over ``max_chars``, episodic memory is shortened first (``shorten_memory``) so that the candidates stay
    whole; returns the text, the rounds whose memory was shortened and the number of characters that saved.
    """
    head = [f"Question: {question}"] + ([] if max_sections is None else [store.schema_text(max_sections)])
    tail = [
        f"Round {round_index + 1} of {max_rounds}. Search query: {query}",
        "Candidate pages (best first):",
    ]
    tail += [f"  [p{p}] ({store.page_types[p - 1]}) {store.summaries[p - 1]}" for p in candidates]
    if accumulated:
        tail.append("Pages already selected: " + ", ".join(map(str, accumulated)))
    tail.append("Select pages to read with <select>..</select>, or answer.")

    def render(memory: Sequence[dict]) -> str:
        shown = ["Memory of earlier rounds:", *memory_lines(memory)] if memory else []
        return clean("\n".join(head + shown + tail))

    text = render(episodic)
    if len(text) <= max_chars:
        return text, [], 0
    memory, rounds, num_chars = shorten_memory(episodic, len(text) - max_chars)
    return render(memory), rounds, num_chars


def shorten_memory(episodic: Sequence[dict], excess: int) -> tuple[list[dict], list[int], int]:
    """Episodic memory up to ``excess`` characters shorter: the policy's notes, oldest round first, then its
    queries, each shortened text ending in ``CUT_MARK``; also the rounds shortened and the characters saved
    (less than ``excess`` when even the marks alone do not fit)."""
    memory = [dict(m) for m in episodic]
    rounds: list[int] = []
    num_chars = 0
    for field in ("note", "query"):  # notes first: a round's query and marks say more per character
        for m in memory:
            saved = min(len(m[field]) - len(CUT_MARK), excess - num_chars)
            if saved <= 0:  # nothing left to save here (an empty note is not shown at all)
                continue
            m[field] = m[field][: len(m[field]) - len(CUT_MARK) - saved] + CUT_MARK
            num_chars += saved
            rounds.append(m["round"])
    return memory, sorted(set(rounds)), num_chars


def evidence_view(
    store: DocStore,
    pages: Sequence[int],
    new: Sequence[int],
    text_chars: int,
    images_per_page: Sequence[int],
    is_last: bool,
    earlier: str = "",
) -> str:
    """Evidence pages in belief order (those outside ``new`` tagged as shown before) with text excerpts."""
    lines = ["Evidence pages (most believed first):"]
    for p, num_images in zip(pages, images_per_page, strict=True):
        again = "" if p in new else ", shown before"
        lines.append(f"Page {p} ({store.page_types[p - 1]}{again}): {IMAGE_PLACEHOLDER * num_images}")
        excerpt = clean(" ".join(store.texts[p - 1].split())[:text_chars])
        if excerpt:
            lines.append(f"  Text: {excerpt}")
    if earlier:
        lines.append(earlier)
    tail = "This is the last round: answer now." if is_last else "Answer, or refine with feedback."
    lines.append(tail)
    return "\n".join(lines)


def error_view(reason: str, phase: str, turns_left: int) -> str:
    """Format errors and protocol violations: what went wrong and what is expected now."""
    expected = (
        "<select>pages</select> or <answer>" if phase == "select" else "<refine>..</refine> or <answer>"
    )
    return (
        f"Your last turn was not accepted ({reason}). Expected <reason>..</reason> then {expected}. "
        f"{turns_left} turn(s) left."
    )


def retrieval_unavailable_view(turns_left: int) -> str:
    """The page search got no answer from the retrieval service: no candidates this turn, how to retry."""
    return (
        "Retrieval is unavailable right now: no candidate pages were retrieved. Search again with "
        "<refine><query>..</query></refine> (the same or a new query), or answer. "
        f"{turns_left} turn(s) left."
    )


def fit(image: np.ndarray, max_side: int, budget: ImageBudget | None = None) -> np.ndarray:
    """``image`` as uint8 (H, W, 3), downscaled so its longer side is at most ``max_side``; when the page
    budget (``budget``'s candidate pixels) binds at that size, resampled once, straight to the budget's
    fitted size instead (multiples of its factor, as the processor would resize it: docs/scale.md)."""
    pil = Image.fromarray(image).convert("RGB")
    height, width = image.shape[:2]
    scale = min(1.0, max_side / max(height, width))
    side_h, side_w = max(1, round(height * scale)), max(1, round(width * scale))
    if budget is not None and budget.needs_resize(side_h, side_w, "candidate"):
        fitted_h, fitted_w = budget.fitted_size(side_h, side_w, "candidate")
        return np.asarray(pil.resize((fitted_w, fitted_h), Image.Resampling.BICUBIC), dtype=np.uint8).copy()
    pil.thumbnail((max_side, max_side), Image.Resampling.BILINEAR)
    return np.asarray(pil, dtype=np.uint8).copy()


def dense_crops(image: np.ndarray, max_side: int, budget: ImageBudget | None = None) -> list[np.ndarray]:
    """Top and bottom halves of a dense page, each at the full size budget (about twice the detail)."""
    half = image.shape[0] // 2
    return [fit(image[:half], max_side, budget), fit(image[half:], max_side, budget)]


def clean(text: str) -> str:
    """Document text with the image placeholder defused, so placeholders match ``obs["images"]`` exactly."""
    return defuse(text)
