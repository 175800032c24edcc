"""``KBVQA-Demo-v0``: ``KBVQA-v0`` plus the aids that let the CPU demo's ~0.5M-parameter policy learn.

None of this is in the paper. A VLM compares the query image with each candidate's image; a tiny policy
trained on CPU for minutes cannot. The demo therefore states, in text, what that comparison would find:

- ``show_visual_signature``: a short code per image (``(signature: #A3)``) on the query and candidate lines;
  the right Rerank is the candidate whose code equals the query's, Reject is right when none does.
- ``visual_check``: every batch ends with ``Visual check: X matches the query image.`` (or that none does),
  X being the candidate as Rerank takes it. The policy still has to act on it, then search and answer.
- ``visual_check_accuracy``: below 1 the check errs (misses the match, names a wrong candidate, or a
  false one) on a share of batches, deterministically per episode, so confirming, rejecting and paging to
  the next batch trade off and the reward's delta matters.
- ``rerank_by_index``: Rerank may name a candidate by its number in the batch (``1`` or ``[1]``): with K=1
  the demo's Rerank is one constant token, so its decision is Rerank-or-Reject.
- ``verification_actions``: False removes Rerank and Reject (MMAgent-R² Table 5's "w/o Rerank, w/o
  Reject"): SearchImage(j) takes the retriever's top-1 as image j's entity, which is all the policy sees.

The transition, the events and the rewards are exactly ``KBVQA-v0``'s: the aids only change what the
policy reads (three text hooks) and which Rerank arguments resolve.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ragym.envs.core import IMAGE_PLACEHOLDER
from ragym.envs.kbvqa import prompts as prompts
from ragym.envs.kbvqa.env import KBVQAConfig, KBVQAEnv
from ragym.envs.kbvqa.state import Batch
from ragym.envs.retrieval.hits import RetrieverSource

_NUMBER = re.compile(r"[0-9]{1,6}")
"""A candidate number as Rerank may give it: ``str.isdigit`` also holds for "²", which ``int`` refuses, and
``int`` refuses a string of more than 4300 digits (both raised out of ``step``)."""

TOP1_LINE = (
    "- In this setting SearchImage(j) returns only the retriever's best candidate for image j, taken as its "
    "entity: there is no Rerank and no Reject."
)
"""Grammar line of the system prompt without verification actions (``verification_actions=False``)."""
INDEX_RERANK_LINE = (
    "- <rerank>N</rerank>: instead of the name, you may give the number N of the matching candidate ([N]) "
    "in the current batch."
)
"""Grammar line added to the system prompt with ``rerank_by_index``."""


@dataclass(frozen=True)
class DemoAids:
    """The CPU demo's aids; all off is exactly ``KBVQA-v0``."""

    show_visual_signature: bool = False
    """Show each query and candidate image's visual-signature code (a stand-in for what a VLM sees)."""
    rerank_by_index: bool = False
    """Also accept a candidate's number in the current batch (``2`` or ``[2]``) as the Rerank argument."""
    visual_check: bool = False
    """End every batch with the env's visual check: the candidate sharing the query's signature (its number
    with ``rerank_by_index``, else its name), or that none does. Needs a KB with signatures."""
    visual_check_accuracy: float = 1.0
    """Probability that the visual check tells the truth about a batch. Otherwise it errs as a VLM's
    comparison would: on a batch holding the match it misses it (or, with K > 1, names another candidate
    half the time); on a batch without it, it names a random candidate. 1.0 is an oracle check."""
    verification_actions: bool = True
    """False: no ``<rerank>`` action at all (Table 5's "w/o Rerank, w/o Reject"): the grammar lists neither
    Rerank nor Reject, a ``<rerank>`` turn is a ``no_verification_actions`` protocol violation, and
    SearchImage(j) shows only the retriever's top-1 candidate and records it as image j's entity (a Rerank
    decision made by the env), so identification is the retriever's R@1. Needs ``max_rejections=0``."""
    visual_check_seed: int = 0
    """Seed of the check's errors. Each error is drawn from this seed and the batch's content (question,
    query image, offset, candidates), so it is deterministic per episode, and the G episodes of a GRPO
    group see the same check, as they would from a deterministic VLM."""

    def __post_init__(self) -> None:
        accuracy = self.visual_check_accuracy
        if isinstance(accuracy, bool) or not isinstance(accuracy, (int, float)) or not 0 <= accuracy <= 1:
            raise ValueError(f"DemoAids.visual_check_accuracy must be a number in [0, 1], got {accuracy!r}")


AID_FIELDS = tuple(f.name for f in fields(DemoAids))
"""Env kwargs that are demo aids (the rest are ``KBVQAConfig`` fields)."""


def split_aids(kwargs: dict[str, Any]) -> tuple[DemoAids, dict[str, Any]]:
    """(the demo aids, the ``KBVQAConfig`` kwargs) of one env-kwargs dict."""
    aids = DemoAids(**{k: v for k, v in kwargs.items() if k in AID_FIELDS})
    return aids, {k: v for k, v in kwargs.items() if k not in AID_FIELDS}


class KBVQADemoEnv(KBVQAEnv):
    """``KBVQA-v0`` whose observations carry the demo aids; kwargs are ``KBVQAConfig`` and ``DemoAids`` fields."""

    def __init__(
        self, config: KBVQAConfig | None = None, *, retriever: RetrieverSource | None = None, **overrides: Any
    ):
        """As ``KBVQAEnv``; the ``DemoAids`` fields among ``overrides`` set the aids (all off by default)."""
        self.aids, overrides = split_aids(overrides)
        super().__init__(config, retriever=retriever, **overrides)
        signatures = self.kb.queries["signature"]
        if (self.aids.visual_check or self.aids.show_visual_signature) and signatures.isna().all():
            raise ValueError(
                f"the visual-signature aids need signatures, and the KB at {self.kb.root} has none"
            )
        if self.aids.rerank_by_index:
            self.system_prompt = prompts.system_prompt(
                self.config.max_turns, [INDEX_RERANK_LINE], allow_reject=self.config.allow_reject
            )
            self.rerank_argument = "a name or candidate number"
        if not self.aids.verification_actions:
            if self.config.max_rejections != 0:
                raise ValueError(
                    "verification_actions=False (no Rerank, no Reject) needs max_rejections=0, "
                    f"got {self.config.max_rejections}"
                )
            self.system_prompt = no_verification_prompt(self.config.max_turns)

    def _signature(self, image: int) -> str | None:
        """Visual-signature code of query image ``image`` (None for an image outside the KB's query table)."""
        row = self._running().query_rows[image - 1]
        return None if row is None else self.kb.queries["signature"].iloc[row]

    def _note(self, signature: str | None) -> str:
        shown = self.aids.show_visual_signature and signature
        return f" (signature: {signature})" if shown else ""

    def _task_text(self) -> str:
        state = self._running()
        notes = [self._note(self._signature(j)) for j in range(1, state.num_images + 1)]
        return prompts.task_prompt(state.question, state.num_images, notes)

    def _batch_text(self, image: int, offset: int, hits: list[Any]) -> str:
        query = self._signature(image)
        notes = [self._note(h.payload.get("signature")) for h in hits]
        text = prompts.batch_text(image, offset, hits, self._note(query), notes)
        if not self.aids.visual_check:
            return text
        number = next(
            (i for i, h in enumerate(hits, 1) if query and h.payload.get("signature") == query), None
        )
        if self.aids.visual_check_accuracy < 1 and hits:
            key = f"{self._running().question}|{image}|{offset}|{'|'.join(h.docid for h in hits)}"
            draws = np.random.default_rng([self.aids.visual_check_seed, zlib.crc32(key.encode())]).random(3)
            number = faulty_check(number, len(hits), self.aids.visual_check_accuracy, draws)
        return f"{text}\n{visual_check_text(None if number is None else self._argument(hits, number))}"

    def _serve_batch(self, image: int, hits: list[Any]) -> tuple[str, list[np.ndarray]]:
        """Without verification actions: the batch's top-1 becomes the image's entity, and only it is shown."""
        text, images = super()._serve_batch(image, hits)
        if self.aids.verification_actions:
            return text, images
        state = self._running()
        batch = state.batches[-1]
        state.decide(batch, "rerank", batch.candidates[0])
        return top1_text(image, batch.names[0]), images[:1]

    def _rerank(self, name: str) -> str:
        if not self.aids.verification_actions:
            return self._violation("no_verification_actions", NO_VERIFICATION, entity=name)
        return super()._rerank(name)

    def _reject(self) -> tuple[str, list[np.ndarray]]:
        if not self.aids.verification_actions:
            return self._violation("no_verification_actions", NO_VERIFICATION), []
        return super()._reject()

    def _argument(self, hits: list[Any], number: int) -> str:
        """How Rerank names candidate ``number`` of a batch: ``[number]`` or its name."""
        return f"[{number}]" if self.aids.rerank_by_index else hits[number - 1].payload["name"]

    def _resolve(self, batch: Batch, argument: str) -> str | None:
        entity = super()._resolve(batch, argument)
        if entity is None and self.aids.rerank_by_index:
            entity = entity_numbered(batch, argument)
        return entity


NO_VERIFICATION = "this setting has no Rerank or Reject: SearchImage(j) already took the retriever's top-1."


def no_verification_prompt(max_turns: int) -> str:
    """The system prompt without the Rerank and Reject lines, saying that SearchImage takes the top-1."""
    lines = [
        line for line in prompts.system_prompt(max_turns).splitlines() if not line.startswith("- <rerank>")
    ]
    answer = next(i for i, line in enumerate(lines) if line.startswith("- <answer>"))
    return "\n".join([*lines[:answer], TOP1_LINE, *lines[answer:]])


def top1_text(image: int, name: str) -> str:
    """What SearchImage shows without verification actions: the top-1 candidate, taken as the entity."""
    return f"{prompts.confirmation_text(image, name)} (the retriever's top-1; no verification)\n[1] {IMAGE_PLACEHOLDER} {name}"


def faulty_check(true_number: int | None, num_candidates: int, accuracy: float, draws: Any) -> int | None:
    """The candidate number a check of ``accuracy`` names, given the true match and three uniform ``draws``.

    ``draws[0] < accuracy``: the truth. Else, with the match in the batch: another candidate when
    ``draws[1] < 0.5`` and there is one (picked by ``draws[2]``), a miss (None) otherwise; without it: a
    false match, the candidate picked by ``draws[2]``.

    >>> faulty_check(2, 3, 0.8, [0.1, 0.9, 0.0]), faulty_check(2, 3, 0.8, [0.9, 0.9, 0.0])
    (2, None)
    >>> faulty_check(None, 3, 0.8, [0.9, 0.0, 0.5]), faulty_check(1, 1, 0.0, [0.5, 0.0, 0.0])
    (2, None)
    """
    if draws[0] < accuracy:
        return true_number
    if true_number is None:
        return 1 + min(int(draws[2] * num_candidates), num_candidates - 1)
    others = [i for i in range(1, num_candidates + 1) if i != true_number]
    if others and draws[1] < 0.5:
        return others[min(int(draws[2] * len(others)), len(others) - 1)]
    return None


def entity_numbered(batch: Batch, number: str) -> str | None:
    """The candidate shown as ``[number]`` (``"2"`` or ``"[2]"``, 1-based) in ``batch``, else None."""
    text = number.strip()
    text = text[1:-1].strip() if text.startswith("[") and text.endswith("]") else text
    if not _NUMBER.fullmatch(text) or not 1 <= int(text) <= len(batch.candidates):
        return None
    return batch.candidates[int(text) - 1]


def visual_check_text(match: str | None) -> str:
    """The visual-check line ending a batch: the matching candidate, or none."""
    if match is None:
        return "Visual check: no candidate matches the query image."
    return f"Visual check: {match} matches the query image."
