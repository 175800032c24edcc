"""KBVQA-v0's own event kinds, one constructor each (images are 1-based, as the policy
writes ``SearchImage(j)``).

The kinds every env records (``action``, ``format_error``, ``answer``, ...) are made by ``ragym.envs.events``.
"""

from __future__ import annotations

from collections.abc import Sequence

from ragym.envs.events import (
    Event,
    bool_field,
    int_field,
    make_event,
    register_event_kinds,
    str_field,
    str_list,
)

KINDS = ("task", "search_image", "search_text", "verification", "boundary")
"""The event kinds KBVQA-v0 adds to the shared vocabulary."""
register_event_kinds(*KINDS)


def task(
    num_images: int,
    gold_entities: Sequence[str | None],
    max_rejections: int,
    candidates_per_batch: int,
    max_turns: int,
    text_retriever: str | None = None,
    allow_reject: bool = True,
) -> Event:
    """Emitted by ``reset`` (turn -1): the episode's images, gold entities and the limits it runs with.

    Metrics read the image count from it (Ident. needs every image, searched or not) and the verification
    reward reads Rej_max from it, so a reward recipe cannot silently score with another limit.
    ``text_retriever`` is what SearchText searches (``bm25`` or ``dense``; None where no env says), so an
    evaluation reports which text search its numbers came from. ``allow_reject`` False: the episode had no
    Reject action (Table 5's "w/o Reject"), so the format check reads ``Reject()`` as malformed and the
    verification reward pays no Reject.
    """
    gold = str_list("task", "gold_entities", gold_entities, optional=True)
    num = int_field("task", "num_images", num_images, minimum=1)
    if len(gold) != num:
        raise ValueError(f"task event: {len(gold)} gold_entities for {num} images")
    return make_event(
        "task",
        -1,
        num_images=num,
        gold_entities=gold,
        max_rejections=int_field("task", "max_rejections", max_rejections, minimum=0),
        candidates_per_batch=int_field("task", "candidates_per_batch", candidates_per_batch, minimum=1),
        max_turns=int_field("task", "max_turns", max_turns, minimum=1),
        text_retriever=str_field("task", "text_retriever", text_retriever, optional=True),
        allow_reject=bool_field("task", "allow_reject", allow_reject),
    )


def search_image(
    turn: int,
    image: int,
    batch_id: int,
    candidates: Sequence[str],
    gold_entity: str | None,
    offset: int,
    retriever_version: str | None = None,
) -> Event:
    """A candidate batch was served (``gold_in_batch`` is derived here, so it cannot disagree);
    ``retriever_version``: the query-encoder version that searched it (``ragym.envs.retrieval.versions``; None: the
    KB's own query side, or stored candidate lists)."""
    names = str_list("search_image", "candidates", candidates)
    gold = str_field("search_image", "gold_entity", gold_entity, optional=True)
    return make_event(
        "search_image",
        turn,
        image=int_field("search_image", "image", image, minimum=1),
        batch_id=int_field("search_image", "batch_id", batch_id, minimum=0),
        candidates=names,
        gold_entity=gold,
        gold_in_batch=gold is not None and gold in names,
        offset=int_field("search_image", "offset", offset, minimum=0),
        retriever_version=str_field("search_image", "retriever_version", retriever_version, optional=True),
    )


def search_text(turn: int, queries: Sequence[str], passage_ids: Sequence[str]) -> Event:
    """Passages were returned for the queries (``num_passages`` is derived)."""
    ids = str_list("search_text", "passage_ids", passage_ids)
    return make_event(
        "search_text",
        turn,
        queries=str_list("search_text", "queries", queries),
        num_passages=len(ids),
        passage_ids=ids,
    )


def verification(
    turn: int,
    decision: str,
    entity: str | None,
    image: int,
    batch_id: int,
    candidates: Sequence[str],
    gold_entity: str | None,
    at_limit: bool = False,
) -> Event:
    """The first decision on a batch; ``gold_in_batch`` and ``correct`` (Rerank(e*), or Reject when e* is not
    in the batch) are derived from the batch here. ``at_limit``: a Reject issued when the image's RejCount
    already equalled Rej_max, which brought the boundary prompt and is not counted as a rejection (Algorithm
    S1, lines 14-20); readers recompute it from the decisions (``ragym.envs.kbvqa.metrics.rejects_at_limit``)."""
    if decision not in ("rerank", "reject"):
        raise ValueError(f"verification event: decision must be 'rerank' or 'reject', got {decision!r}")
    entity = str_field("verification", "entity", entity, optional=True)
    if (entity is None) != (decision == "reject"):
        raise ValueError(
            f"verification event: a {decision} {'needs' if decision == 'rerank' else 'takes no'} entity"
        )
    names = str_list("verification", "candidates", candidates)
    gold = str_field("verification", "gold_entity", gold_entity, optional=True)
    in_batch = gold is not None and gold in names
    if at_limit and decision != "reject":
        raise ValueError("verification event: only a reject can be at the rejection limit")
    return make_event(
        "verification",
        turn,
        decision=decision,
        entity=entity,
        image=int_field("verification", "image", image, minimum=1),
        batch_id=int_field("verification", "batch_id", batch_id, minimum=0),
        candidates=names,
        gold_entity=gold,
        gold_in_batch=in_batch,
        correct=entity == gold if decision == "rerank" else not in_batch,
        at_limit=bool_field("verification", "at_limit", at_limit),
    )


def boundary(turn: int, image: int, rejections: int) -> Event:
    """The boundary prompt was returned instead of a batch; ``rejections``: the image's counted rejections so far
    (never more than Rej_max)."""
    return make_event(
        "boundary",
        turn,
        image=int_field("boundary", "image", image, minimum=1),
        rejections=int_field("boundary", "rejections", rejections, minimum=0),
    )
