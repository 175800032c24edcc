"""The event vocabulary environments record in ``info["events"]``; rewards read nothing else.

Every event is a JSON-serialisable dict with at least ``type`` and ``turn`` (0-based index of the policy
turn that caused it). Events travel from the env through verl's ``extra_fields`` to the reward, and are
saved in episode jsonl files, so they hold only plain data (str, int, float, bool, None, list, dict).

KB-VQA event types (``KBVQA-v0``):

- ``action``: one per policy turn. Keys: ``kind`` (``search_image`` | ``search_text`` | ``rerank`` |
  ``reject`` | ``answer`` | ``invalid``), ``well_formed`` (bool: the turn matched the grammar exactly).
- ``format_error``: the turn could not be parsed. Keys: ``reason`` (short machine-readable code, e.g.
  ``no_action``, ``multiple_actions``, ``nested_tags``, ``oversized``, ``bad_argument``; the full list is
  ``envs.kbvqa_actions.ParseError.reason``).
- ``search_image``: a candidate batch was served. Keys: ``image`` (query image index j, 1-based as the
  policy writes it in ``SearchImage(j)``; every KB-VQA event uses this numbering), ``batch_id``
  (int, unique within the episode), ``candidates`` (entity ids in shown order), ``gold_entity``,
  ``gold_in_batch`` (bool), ``offset`` (rank of the first candidate in the full ranking).
- ``search_text``: keys ``queries`` (list[str]), ``num_passages`` (int), ``passage_ids`` (list[str]).
- ``verification``: the first decision on a batch. Keys: ``decision`` (``rerank`` | ``reject``),
  ``entity`` (entity id chosen, None for reject), ``image``, ``batch_id``, ``candidates``,
  ``gold_entity``, ``gold_in_batch`` (bool), ``correct`` (bool: rerank of the gold entity, or reject when
  the gold entity is not in the batch).
- ``protocol_violation``: a well-formed action that the protocol forbids; it changes no state. Keys:
  ``reason`` (``second_decision_on_batch``, ``no_active_batch``, ``unknown_entity`` (name not in the active
  batch), ``image_out_of_range``, ``no_more_candidates`` (ranking exhausted), ``too_many_queries``), plus
  ``image`` / ``batch_id`` / ``entity`` / ``decision`` where they apply.
- ``boundary``: the boundary prompt was returned instead of a new batch (after a Reject at ``Rej_max``, or a
  SearchImage once the image has had ``Rej_max + 1`` batches). Keys: ``image``, ``rejections``.
- ``answer``: keys ``text`` (the answer string), ``forced`` (bool: produced by the truncation rule; the
  KB-VQA forced answer is the empty string, recorded at the last turn).
- ``truncated``: a budget ended the episode. Keys: ``reason`` (``max_turns`` | ``max_response_length`` | ``generated_vision_token``: the policy emitted an image placeholder token, which the agent loop cuts).

DocMemo event types (``DocMemo-v0``; full key lists in ``envs/docmemo.py``; pages are 1-based; events
emitted by ``reset`` carry ``turn`` -1):

- ``action``, ``format_error``, ``protocol_violation``, ``truncated``: as above, with DocMemo's kinds
  (``select`` | ``refine`` | ``answer`` | ``invalid``) and reasons; ``truncated.reason`` may be ``max_rounds``.
- ``candidates``: a round's top-M pages. Keys: ``round``, ``query``, ``lambda``, ``pages``, ``scores``,
  ``means`` (every page's posterior mean).
- ``selected``: keys ``round``, ``pages``, ``accumulated`` (the set A_t so far, in order).
- ``evidence``: pages shown to the policy. Keys: ``round``, ``pages``, ``means``, ``new`` (the pages shown for the first time, in belief order).
- ``feedback``: a refinement. Keys: ``round``, ``query``, ``note``, ``useful``, ``irrelevant``.
- ``beliefs``: after the update. Keys: ``round``, ``means``.
- ``answer``: keys ``text``, ``not_answerable`` (bool), ``forced`` (false), ``round``.
"""

from __future__ import annotations

from typing import Any

EVENT_TYPES_KBVQA = (
    "action",
    "format_error",
    "search_image",
    "search_text",
    "verification",
    "protocol_violation",
    "boundary",
    "answer",
    "truncated",
)

EVENT_TYPES_DOCMEMO = (
    "action",
    "format_error",
    "protocol_violation",
    "candidates",
    "selected",
    "evidence",
    "feedback",
    "beliefs",
    "answer",
    "truncated",
)


def make_event(kind: str, turn: int, /, **fields: Any) -> dict[str, Any]:
    """One event dict; ``kind`` becomes its ``type`` (positional-only: the ``action`` event has a ``kind`` field)."""
    return {"type": kind, "turn": turn, **fields}


def events_of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The events of one type, in order."""
    return [e for e in events if e["type"] == kind]
