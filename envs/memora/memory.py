"""MEMORA's episodic domain memory (seed 000, sections 3.4 and 3.11; the text of 3.4 is lost).

ragym's reading: one store per domain holds one record per query, of its latest finished episode: the query,
the factors it used (text, priority, and whether each helped, hurt or stayed neutral once the episode was
scored against its qrels), the final top-K document ids and the episode's nDCG@K. At reset the K_m records whose query
is nearest (bag-of-words cosine) are shown; from them the env derives the two priors of Table 6:

- the factor prior (h_k, l_k): for a factor text, how many near memories used a similar factor that
  helped (h) or hurt (l);
- the document prior m_j: the outcome-weighted share of near memories that ranked document j in their
  final top-K (weighted by nDCG, so a frequent but unsuccessful document gains little; Table 6 found the
  unweighted count harmful).

A store holds one record per query (its ``query_id``, else its normalised text): a later write of the same
query replaces the earlier record, whether it comes from another GRPO sibling (G rollouts of a query each
finish and write: the last to finish is the one kept), a later epoch or a rerun, so the store, and what other
queries read, never holds G x epochs copies of a query. A store with a ``path`` keeps its records in one JSON
line each and rewrites the file on every write (under a lock, through a temporary file renamed over it), so
memory persists across episodes, env instances and processes (the verl agent loop builds an env per episode)
and a reader never sees half a file; ``frozen`` stops writes for evaluation. A query never reads its own past:
its records carry the nDCG and factor outcomes computed from its qrels, so ``nearest`` skips every record of
the same query: the same id, the same words once case and punctuation are set aside, or a near copy under
another id, a content-word cosine of at least ``OWN_QUERY_SIMILARITY`` (section 5.3: memory without leakage).

>>> m = EpisodicMemory()
>>> m.write(MemoryRecord("why do glaciers melt", (FactorOutcome("ice melt rate", 0.6, "helped"),), ("d1",), 1.0))
True
>>> [r.query for r, _ in m.nearest("how fast do glaciers move", 4)]  # another question on glaciers
['why do glaciers melt']
>>> m.nearest("why do glaciers melt", 4)  # its own episode is never shown
[]
>>> m.nearest("Why do glaciers melt?", 4, query_id="q7")  # nor a copy of it under another id
[]
>>> m.nearest("What makes glaciers melt?", 4, query_id="q8")  # nor a rewording (content-word cosine 0.82)
[]
"""

from __future__ import annotations

import fcntl
import functools
import json
import math
import os
import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

OUTCOMES = ("helped", "hurt", "neutral")
_WORD = re.compile(r"[a-z0-9]+")
OWN_QUERY_SIMILARITY = 0.6
"""Content-word cosine (``content_words``) from which a record's query counts as the reading query itself under
another id. Over all words the cosine measures function words: distinct long posts share them (of 1,066 real
Stack Exchange answers, median 274 words, 82% have a distinct neighbour at 0.6 or more, 14% at 0.8), so the
threshold had to stay at 0.95 and a short rewording passed ("why do glaciers melt" / "what makes glaciers melt?":
0.5). Over content words a rewording of the function words keeps the cosine high (0.82 there), while of those
answers 0.8% have a distinct neighbour at 0.6, and of 1,066 real short questions (median 9 words) 2.5% (at 0.5:
3.1% and 7.8%; ``benchmarks/memora_own_query.py``, docs/memora.md). A rewording that replaces half the content
words (synonyms) still passes."""
_TOLERANCE = 1e-9
"""Float slack of that comparison (a cosine of 9 / 10 computes as 0.8999999999999999)."""


def bag_of_words(text: str) -> Counter:
    """Lower-cased alphanumeric tokens with counts."""
    return Counter(_WORD.findall(text.lower()))


@functools.cache
def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN_PLUS  # NLTK's English list; bm25s is imported only when needed

    return frozenset(STOPWORDS_EN_PLUS)


def content_words(text: str) -> Counter:
    """``bag_of_words`` without English stop words: what a rewording of the same question keeps.

    >>> sorted(content_words("What makes the glaciers melt?"))
    ['glaciers', 'makes', 'melt']
    """
    stop = _stopwords()
    return Counter({w: n for w, n in bag_of_words(text).items() if w not in stop})


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
    """nDCG@K of the final ranking (K: the writing env's ``config.k``, 10 by default)."""
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


def query_key(record: MemoryRecord) -> str:
    """The query a record is of: its id, else (records without one) its normalised text."""
    return f"id:{record.query_id}" if record.query_id is not None else f"text:{normalised(record.query)}"


class EpisodicMemory:
    """A domain's episodic store, one record per query: in memory, or in a JSON-lines file at ``path``."""

    def __init__(self, path: Path | None = None, frozen: bool = False) -> None:
        self.path = Path(path) if path is not None else None
        self.frozen = frozen
        # query_key -> (record, its query's bag of words, content words, normalised text); insertion order is
        # write order, a replaced query moving to the end.
        self._entries: dict[str, tuple[MemoryRecord, Counter, Counter, str]] = {}
        self._version: tuple[int, int, int] | None = None  # the file read last: inode, size, mtime
        self.refresh()

    @property
    def records(self) -> list[MemoryRecord]:
        """The stored records, oldest write first."""
        return [entry[0] for entry in self._entries.values()]

    def refresh(self) -> None:
        """Re-read the file when it changed, for the records other writers stored since the last read (complete
        lines only)."""
        if self.path is None or not self.path.exists():
            return
        with self.path.open("rb") as f:
            stat = os.fstat(f.fileno())
            version = (stat.st_ino, stat.st_size, stat.st_mtime_ns)  # a write replaces the file: a new inode
            if version != self._version:
                self._load(f.read())
                self._version = version

    def _load(self, data: bytes) -> None:
        self._entries = {}
        end = data.rfind(b"\n") + 1
        for line_no, line in enumerate(data[:end].decode("utf-8").split("\n")[:-1], 1):
            if (
                line.strip()
            ):  # a later line of the same query replaces the earlier (files written before issue 46)
                self._put(MemoryRecord.from_json(line, f"{self.path}:{line_no}"))

    def _put(self, record: MemoryRecord) -> None:
        key = query_key(record)
        self._entries.pop(key, None)
        self._entries[key] = (
            record,
            bag_of_words(record.query),
            content_words(record.query),
            normalised(record.query),
        )

    def write(self, record: MemoryRecord) -> bool:
        """Store ``record``, replacing its query's earlier one (and rewrite the file when there is one); False
        when the memory is frozen."""
        if self.frozen:
            return False
        if self.path is None:
            self._put(record)
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(self.path):
            self.refresh()  # other writers' records, then this one on top
            self._put(record)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text("".join(r.to_json() + "\n" for r in self.records), encoding="utf-8")
            os.replace(tmp, self.path)  # readers see the old file or the new one, never a part
        return True

    def nearest(
        self, query: str, k: int, query_id: str | None = None, own_similarity: float = OWN_QUERY_SIMILARITY
    ) -> list[tuple[MemoryRecord, float]]:
        """The k records most similar to ``query`` (bag-of-words cosine > 0), most similar first, one per other
        query text and none of the query's own: the same id, the same normalised text, or a content-word cosine
        of at least ``own_similarity`` (ids can be absent, and a copy or a rewording can carry another id)."""
        bag, content, key = bag_of_words(query), content_words(query), normalised(query)
        latest: dict[str, tuple[float, int]] = {}  # another query's normalised text -> (similarity, index)
        for i, (record, record_bag, record_content, record_key) in enumerate(self._entries.values()):
            similarity = cosine(bag, record_bag)
            same_id = query_id is not None and record.query_id == str(query_id)
            near_copy = cosine(content, record_content) >= own_similarity - _TOLERANCE
            if similarity <= 0 or same_id or record_key == key or near_copy:
                continue
            latest[record_key] = (similarity, i)  # copies of one text under several ids: the latest written
        # Most similar first, older first on ties.
        records = self.records
        scored = sorted(latest.values(), key=lambda item: (-item[0], item[1]))[:k]
        return [(records[i], similarity) for similarity, i in scored]

    def __len__(self) -> int:
        return len(self._entries)


class _locked:
    """An exclusive lock on ``path``'s current file (``flock``), held while a writer reads and replaces it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> None:
        while True:  # the file locked must still be the one at ``path``: another writer may have replaced it
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                self.fd = fd
                return
            os.close(fd)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # releases the lock


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
