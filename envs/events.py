"""The event vocabulary environments record in ``info["events"]``; rewards read nothing else.

Every event is a JSON-serialisable dict with at least ``type`` and ``turn`` (0-based index of the policy
turn that caused it). Events travel from the env through verl's ``extra_fields`` to the reward, and are
saved in episode jsonl files, so they hold only plain data (str, int, float, bool, None, list, dict).

KB-VQA event types (``KBVQA-v0``):

- ``action``: one per policy turn. Keys: ``kind`` (``search_image`` | ``search_text`` | ``rerank`` |
  ``reject`` | ``answer`` | ``invalid``), ``well_formed`` (bool: the turn matched the grammar exactly).
- ``format_error``: the turn could not be parsed. Keys: ``reason`` (short machine-readable code, e.g.
  ``no_action``, ``multiple_actions``, ``nested_tags``, ``oversized``, ``bad_argument``).
- ``search_image``: a candidate batch was served. Keys: ``image`` (query image index j), ``batch_id``
  (int, unique within the episode), ``candidates`` (entity ids in shown order), ``gold_entity``,
  ``gold_in_batch`` (bool), ``offset`` (rank of the first candidate in the full ranking).
- ``search_text``: keys ``queries`` (list[str]), ``num_passages`` (int), ``passage_ids`` (list[str]).
- ``verification``: the first decision on a batch. Keys: ``decision`` (``rerank`` | ``reject``),
  ``entity`` (entity id chosen, None for reject), ``image``, ``batch_id``, ``candidates``,
  ``gold_entity``, ``gold_in_batch`` (bool), ``correct`` (bool: rerank of the gold entity, or reject when
  the gold entity is not in the batch).
- ``protocol_violation``: a well-formed action that the protocol forbids. Keys: ``reason`` (e.g.
  ``second_decision_on_batch``, ``no_active_batch``, ``unknown_entity``, ``image_out_of_range``,
  ``rejection_limit``), plus ``image`` / ``batch_id`` / ``entity`` where they apply.
- ``boundary``: the boundary prompt was returned instead of a new batch. Keys: ``image``, ``rejections``.
- ``answer``: keys ``text`` (the answer string), ``forced`` (bool: produced by the truncation rule).
- ``truncated``: the turn limit ended the episode. Keys: ``reason`` (``max_turns`` | ``max_response_length``).

DocMemo (``DocMemo-v0``) adds its own round events, documented in ``envs/docmemo.py``.
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


def make_event(kind: str, turn: int, **fields: Any) -> dict[str, Any]:
    """One event dict; ``kind`` becomes its ``type``."""
    return {"type": kind, "turn": turn, **fields}


def events_of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The events of one type, in order."""
    return [e for e in events if e["type"] == kind]
