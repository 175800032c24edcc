"""MEMORA's episodic domain memory (seed 000, sections 3.4 and 3.11; the text of 3.4 is lost).

ragym's reading: one store per domain holds one record per finished episode: the query, the factors it
used (text, priority, and whether each helped, hurt or stayed neutral once the episode was scored against
its qrels), the final top-K document ids and the episode's nDCG@10. At reset the K_m records whose query
is nearest (bag-of-words cosine) are shown; from them the env derives the two priors of Table 6:

- the factor prior (h_k, l_k): for a factor text, how many near memories used a similar factor that
  helped (h) or hurt (l);
- the document prior m_j: the outcome-weighted share of near memories that ranked document j in their
  final top-K (weighted by nDCG, so a frequent but unsuccessful document gains little; Table 6 found the
  unweighted count harmful).

A store with a ``path`` appends one JSON line per record, so memory persists across episodes, env
instances and processes (the verl agent loop builds an env per episode); ``frozen`` stops writes for
evaluation. A query never reads its own past: its records carry the nDCG and factor outcomes computed
from its qrels, so ``nearest`` skips every record of the same query (same id, the same words once case and
punctuation are set aside, or a bag-of-words cosine of at least ``OWN_QUERY_SIMILARITY``: a copy with another
id or a trailing "?"), whether it comes from an earlier epoch, a rerun or a GRPO sibling (section 5.3: memory
without leakage). ``nearest`` also shows at most one record per query (its latest): under GRPO every rollout
of a query writes one, and the K_m nearest would otherwise often be K_m rollouts of one other query.

>>> m = EpisodicMemory()
>>> m.write(MemoryRecord("why do glaciers melt", (FactorOutcome("ice melt rate", 0.6, "helped"),), ("d1",), 1.0))
True
>>> [r.query for r, _ in m.nearest("glaciers melt fast", 4)]
['why do glaciers melt']
>>> m.nearest("why do glaciers melt", 4)  # its own episode is never shown
[]
>>> m.nearest("Why do glaciers melt?", 4, query_id="q7")  # nor a copy of it under another id
[]
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

OUTCOMES = ("helped", "hurt", "neutral")
_WORD = re.compile(r"[a-z0-9]+")
OWN_QUERY_SIMILARITY = 0.95
"""Bag-of-words cosine from which a record's query counts as the reading query itself (a near-identical copy):
a twenty-word query with one word replaced is at it (19 / 20), with two below (0.9). In MEMORA's synthetic
domain 0-3 of the 12,720 pairs of distinct queries reach it (domain seeds 0-2: the same words permuted); at 0.9,
9-14 do (same topic words, shared fillers), which cost the memory benchmark 0.04 nDCG@10 at 100 warm-up
episodes (docs/memora.md)."""
_TOLERANCE = 1e-9
"""Float slack of that comparison (a cosine of 9 / 10 computes as 0.8999999999999999)."""


def bag_of_words(text: str) -> Counter:
    """Lower-cased alphanumeric tokens with counts."""
    return Counter(_WORD.findall(text.lower()))


def cosine(a: Counter, b: Counter) -> float:
    """Cosine similarity of two token counters (0 when either is empty)."""
    dot = sum(count * b[token] for token, count in a.items())
    norm = math.sqrt(sum(v * v for v in a.values())) * math.sqrt(sum(v * v for v in b.values()))
    return dot / norm if norm else 0.0


@dataclass(frozen=True)
class FactorOutcome:
    """One factor an episode used and how it fared after evaluation."""

    text: str
    """The factor as the policy wrote it."""
    priority: float
    """Its normalised priority in that episode."""
    outcome: str
    """``helped`` (it supported a relevant document), ``hurt`` (it supported only irrelevant ones) or ``neutral``."""

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"factor outcome must be one of {OUTCOMES}, got {self.outcome!r}")


@dataclass(frozen=True)
class MemoryRecord:
    """One finished episode of a domain."""

    query: str
    """The query text."""
    factors: tuple[FactorOutcome, ...]
    """Factors used, with outcomes."""
    top_docs: tuple[str, ...]
    """The final top-K document ids."""
    ndcg: float
    """nDCG@10 of the final ranking."""
    query_id: str | None = None
    """The query's id, when the episode had one (records written before ids were kept have none)."""

    def to_json(self) -> str:
        """One JSON line."""
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str, where: str) -> MemoryRecord:
        """Inverse of ``to_json``; a bad line raises naming ``where``."""
        try:
            row = json.loads(line)
            return cls(
                str(row["query"]),
                tuple(
                    FactorOutcome(str(f["text"]), float(f["priority"]), f["outcome"]) for f in row["factors"]
                ),
                tuple(str(d) for d in row["top_docs"]),
                float(row["ndcg"]),
                None if row.get("query_id") is None else str(row["query_id"]),
            )
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{where}: bad memory record: {err}") from err


def normalised(text: str) -> str:
    """The words of ``text``, lower-cased, without punctuation, one space apart.

    >>> normalised("  Why do  Glaciers melt?! ")
    'why do glaciers melt'
    """
    return " ".join(_WORD.findall(text.lower()))


class EpisodicMemory:
    """A domain's episodic store: in memory, or appended to a JSON-lines file at ``path``."""

    def __init__(self, path: Path | None = None, frozen: bool = False) -> None:
        self.path = Path(path) if path is not None else None
        self.frozen = frozen
        self.records: list[MemoryRecord] = []
        self._bags: list[Counter] = []
        self._keys: list[str] = []  # each record's normalised query: its query's key in ``nearest``
        self._offset = 0  # bytes of the file already read
        self._line_no = 0
        self.refresh()

    def refresh(self) -> None:
        """Read the records other writers appended since the last read (complete lines only: a line still
        being written is read next time)."""
        if self.path is None or not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        for line in data[:end].decode("utf-8").split("\n")[:-1]:
            self._line_no += 1
            if line.strip():
                self._add(MemoryRecord.from_json(line, f"{self.path}:{self._line_no}"))
        self._offset += end

    def _add(self, record: MemoryRecord) -> None:
        self.records.append(record)
        self._bags.append(bag_of_words(record.query))
        self._keys.append(normalised(record.query))

    def write(self, record: MemoryRecord) -> bool:
        """Store ``record`` (appended to the file when there is one); False when the memory is frozen."""
        if self.frozen:
            return False
        if self.path is None:
            self._add(record)
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:  # one short append per record
            f.write(record.to_json() + "\n")
        self.refresh()  # reads this record back, after any other writer's records appended before it
        return True

    def nearest(
        self, query: str, k: int, query_id: str | None = None, own_similarity: float = OWN_QUERY_SIMILARITY
    ) -> list[tuple[MemoryRecord, float]]:
        """The k records most similar to ``query`` (similarity > 0), most similar first, one per other query (its
        latest record) and none of the query's own: the same id, the same normalised text, or a bag-of-words
        cosine of at least ``own_similarity`` (ids can be absent, and a copy of a query can carry another id)."""
        bag, key = bag_of_words(query), normalised(query)
        latest: dict[str, tuple[float, int]] = {}  # another query's normalised text -> (similarity, index)
        for i, (record, record_bag, record_key) in enumerate(
            zip(self.records, self._bags, self._keys, strict=True)
        ):
            similarity = cosine(bag, record_bag)
            same_id = query_id is not None and record.query_id == str(query_id)
            # The query's own: the same id, the same normalised text, or nearly the same words.
            if similarity <= 0 or same_id or record_key == key or similarity >= own_similarity - _TOLERANCE:
                continue
            latest[record_key] = (similarity, i)
        # Most similar first, older first on ties.
        scored = sorted(latest.values(), key=lambda item: (-item[0], item[1]))[:k]
        return [(self.records[i], similarity) for similarity, i in scored]

    def __len__(self) -> int:
        return len(self.records)


def factor_prior(factor: str, memories: list[tuple[MemoryRecord, float]], min_sim: float) -> tuple[int, int]:
    """(h, l): near memories' factors similar to ``factor`` (cosine >= ``min_sim``) that helped / hurt."""
    bag = bag_of_words(factor)
    helped = hurt = 0
    for record, _ in memories:
        for f in record.factors:
            if cosine(bag, bag_of_words(f.text)) >= min_sim:
                helped += f.outcome == "helped"
                hurt += f.outcome == "hurt"
    return helped, hurt


def document_prior(memories: list[tuple[MemoryRecord, float]]) -> dict[str, float]:
    """m_j: per document, the nDCG-weighted share of near memories that ranked it in their final top-K."""
    if not memories:
        return {}
    prior: defaultdict[str, float] = defaultdict(float)
    for record, _ in memories:
        for docid in record.top_docs:
            prior[docid] += record.ndcg
    return {docid: weight / len(memories) for docid, weight in prior.items()}
