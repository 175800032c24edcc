"""Mutable state of one KB-VQA episode: query images, paging offsets, candidate batches, decisions, events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ragym.envs import events as ev
from ragym.envs.image_cache import read_image
from ragym.envs.kbvqa import events as kbvqa_ev
from ragym.envs.kbvqa.kb import KnowledgeBase
from ragym.envs.retrieval.hits import Hit
from ragym.envs.retrieval.retrievers import normalise

REQUIRED_OPTIONS = ("question", "query_images")


@dataclass
class Batch:
    """One served candidate batch and whether its single verification decision has been made."""

    batch_id: int
    image: int
    offset: int
    candidates: tuple[str, ...]
    names: tuple[str, ...]
    gold_entity: str | None
    decided: bool = False

    @property
    def gold_in_batch(self) -> bool:
        """Whether the gold entity of the batch's image is among its candidates."""
        return self.gold_entity is not None and self.gold_entity in self.candidates

    def entity_named(self, name: str) -> str | None:
        """The candidate whose shown name is ``name`` (exact first, then case-insensitive), else None."""
        for wanted, key in ((name, str), (name.casefold(), str.casefold)):
            for entity, shown in zip(self.candidates, self.names, strict=True):
                if key(" ".join(shown.split())) == wanted:
                    return entity
        return None

    def name_of(self, entity: str) -> str:
        """The shown name of a candidate."""
        return self.names[self.candidates.index(entity)]


@dataclass
class EpisodeState:
    """Everything that changes during an episode; the env's transitions read and write only this."""

    kb: KnowledgeBase
    question: str
    query_paths: list[str]
    query_rows: list[int | None]
    gold_entities: list[str | None]
    queries: list[Any]
    turn: int = 0
    done: bool = False
    terminated: bool = False
    active_image: int | None = None
    batches: list[Batch] = field(default_factory=list)
    current: dict[int, Batch] = field(default_factory=dict)
    offsets: dict[int, int] = field(default_factory=dict)
    rejections: dict[int, int] = field(default_factory=dict)
    confirmed: dict[int, str] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def start(cls, options: dict[str, Any], kb: KnowledgeBase, candidate_source: str) -> EpisodeState:
        """Validate a row's env options and set up a fresh episode (errors name the bad key)."""
        missing = [k for k in REQUIRED_OPTIONS if k not in options]
        if missing:
            raise ValueError(f"KB-VQA env options lack {missing}; got keys {sorted(options)}")
        paths = [kb.resolve(p) for p in options["query_images"]]
        if not paths or not isinstance(options["question"], str):
            raise ValueError("KB-VQA env options need a question string and at least one query image")
        gold: list[str | None] = list(options.get("gold_entities") or [None] * len(paths))
        if len(gold) != len(paths):
            raise ValueError(f"{len(gold)} gold_entities for {len(paths)} query_images")
        rows = [kb.query_index(p) for p in paths]
        queries = [_query(kb, p, r, candidate_source) for p, r in zip(paths, rows, strict=True)]
        num = len(paths)
        return cls(
            kb=kb,
            question=options["question"],
            query_paths=paths,
            query_rows=rows,
            gold_entities=gold,
            queries=queries,
            offsets={j: 0 for j in range(1, num + 1)},
            rejections={j: 0 for j in range(1, num + 1)},
        )

    @property
    def num_images(self) -> int:
        """N, the number of query images."""
        return len(self.query_paths)

    def record(self, event: ev.Event) -> None:
        """Append an event (built by an ``ragym.envs.kbvqa.events`` or shared ``ragym.envs.events`` constructor)."""
        self.events.append(event)

    def image_query(self, image: int) -> Any:
        """What the image retriever takes for 1-based ``image``: a stored-list key or an embedding."""
        return self.queries[image - 1]

    def batches_served(self, image: int) -> int:
        """How many batches image ``image`` has received."""
        return sum(1 for b in self.batches if b.image == image)

    def new_batch(self, image: int, offset: int, hits: list[Hit]) -> Batch:
        """Register a served batch as the image's current one and advance its paging offset."""
        batch = Batch(
            batch_id=len(self.batches),
            image=image,
            offset=offset,
            candidates=tuple(h.docid for h in hits),
            names=tuple(h.payload["name"] for h in hits),
            gold_entity=self.gold_entities[image - 1],
        )
        self.batches.append(batch)
        self.current[image] = batch
        self.offsets[image] = offset + len(hits)
        return batch

    def active_batch(self) -> Batch | None:
        """The current batch of the active image, if any."""
        return None if self.active_image is None else self.current.get(self.active_image)

    def decide(self, batch: Batch, decision: str, entity: str | None, at_limit: bool = False) -> None:
        """Record the batch's one verification decision (``at_limit``: a Reject that is not counted)."""
        batch.decided = True
        if decision == "rerank":
            if entity is None:
                raise ValueError(f"a rerank of Image {batch.image} names no entity")
            self.confirmed[batch.image] = entity
        self.record(
            kbvqa_ev.verification(
                self.turn,
                decision,
                entity,
                batch.image,
                batch.batch_id,
                batch.candidates,
                batch.gold_entity,
                at_limit=at_limit,
            )
        )


def _query(kb: KnowledgeBase, path: str, row: int | None, candidate_source: str) -> Any:
    """The retriever query for one image: its path (stored candidate lists) or its embedding (live search)."""
    if candidate_source == "precomputed":
        if row is None:
            raise ValueError(
                f"query image {path} has no precomputed candidate list in {kb.root}/queries.parquet"
            )
        return path
    if row is not None and kb.query_embeddings is not None:
        return kb.query_embeddings[row]
    from ragym.envs.retrieval.encoders import make_image_encoder

    # An unknown query image is encoded with the KB's own image encoder, so it lands in the same space.
    encoder = make_image_encoder(kb.manifest["image_encoder"])
    return normalise(encoder.encode_queries([read_image(path)]))[0]


def copy_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of the event list that shares no mutable object with the env's own."""
    return [{k: (list(v) if isinstance(v, list) else v) for k, v in e.items()} for e in events]
