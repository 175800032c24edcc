"""``MEMORA-v0``: committee reranking with episodic factor memory (seed 000, issue 16).

Reset shows the query (text, and its image or image description), the K_m nearest episodes of the
domain's memory (never an episode of the same query: ``query_id``, text, or nearly the same words; one per
other query) and the top K_c of the first stage's K_0 candidates. The policy plays MEMORA's factor
committee and controller: ``decompose`` (factors with priorities), ``subquery`` (retrieval that grows the
pool), ``extract`` (factor-document evidence into the bipartite graph), ``judge`` (listwise verdict) and
``stop``; each kind has a call budget. After every action the env recomputes the factor-aware score
(``ragym.envs.memora.scoring``) and shows the new top candidates with the controller's signals. On ``stop`` (or
when the turn budget runs out) it emits the final ranking and writes the episode to the domain memory,
with each factor's outcome judged against the qrels the reset options carry (never shown). Grammar:
``ragym.envs.memora.actions``. Events: ``ragym.envs.memora.events``.

Reset options: ``{"query", "query_id", "domain", "qrels", "excluded_ids", "image_path",
"image_description", "first_stage"}`` (only ``query`` is required; ``first_stage`` is a precomputed
``[[docid, score], ...]`` run, otherwise the first stage runs). No options: a query of the built-in
synthetic domain.

Retrieval: ``MemoraEnv(config=None, *, retriever=None, **overrides)``. The documents are ``corpus_path``'s (or
the synthetic domain's); ``retriever`` (a ``RetrieverSource``) is asked for ``first_stage``, the retriever
that serves the reset's first stage and every subquery (hits' ``docid`` must be document ids of the corpus).
None: BM25 over the documents, built once per corpus per process.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from ragym.envs import events as ev
from ragym.envs.core import EnvConfig, check_least, env_config
from ragym.envs.image_budget import budget_of, shrunk_size
from ragym.envs.image_cache import UnreadableImageError, decode_image
from ragym.envs.memora import events as memora_ev
from ragym.envs.memora import views as views
from ragym.envs.memora.actions import (
    STOP_STRINGS,
    Decompose,
    Extract,
    Judge,
    ParseError,
    Stop,
    Subquery,
    parse_action,
)
from ragym.envs.memora.corpus import Collection, corpus_collection, corpus_texts, synthetic_collection
from ragym.envs.memora.memory import OWN_QUERY_SIMILARITY, EpisodicMemory
from ragym.envs.memora.scoring import ScoreWeights
from ragym.envs.memora.state import EpisodeState
from ragym.envs.observations import shorten_evenly
from ragym.envs.retrieval.hits import RetrieverSource
from ragym.envs.spaces import FreeText, text_image_space
from ragym.envs.turns import Outcome, TurnEnv

FIRST_STAGE = "first_stage"
"""The name MEMORA asks its ``retriever`` source for: the first-stage retriever over the corpus."""

_OPTION_KEYS = {
    "query",
    "query_id",
    "domain",
    "qrels",
    "excluded_ids",
    "image_path",
    "image_description",
    "first_stage",
}


@dataclass(frozen=True)
class MemoraConfig(ScoreWeights, EnvConfig):
    """Every MEMORA-v0 knob: the paper's numbers (section 4.2) where it gives them, ragym's elsewhere."""

    k0: int = 50
    """K_0: first-stage candidates."""
    kc: int = 30
    """K_c: candidates shown (top of the pool by factor-aware score)."""
    k: int = 10
    """K: length of the final ranking."""
    k_min: int = 2
    """K_min: fewest factors a decomposition may have."""
    k_max: int = 5
    """K_max: most factors a decomposition may have (the paper's default N = 3 is the baseline's choice)."""
    k_m: int = 4
    """K_m: memories retrieved at reset."""
    evidence_scale: float = 10.0
    """Raw evidence scores are in [0, evidence_scale]; the edge weight is score / scale."""
    subquery_k: int = 10
    """Documents one subquery retrieves (new ones join the pool)."""
    max_pool: int = 100
    """Pool size cap: a subquery adds nothing past it."""
    max_decompose: int = 2
    """Decompose calls per episode (a second one replaces the factors and clears the graph)."""
    max_subqueries: int = 5
    """Subquery calls per episode."""
    max_extracts: int = 10
    """Extract calls per episode (one call scores many documents for one factor)."""
    max_judges: int = 2
    """Judge calls per episode (the latest verdict counts)."""
    max_turns: int = 16
    """Turn budget, format errors included; at the end the final ranking is forced."""
    factor_match: float = 0.5
    """Cosine between factor texts for a memory factor to count towards the factor prior (h, l)."""
    memory_dir: str | None = None
    """Folder of per-domain memory files (``<domain>.jsonl``); None keeps memory in this env instance only
    (rows run by the agent loop, which builds one env per episode, must name one: ``ragym.rl.data.rows``)."""
    own_query_similarity: float = OWN_QUERY_SIMILARITY
    """Content-word cosine from which a memory record's query counts as the reading query's own (a copy or a
    rewording under another id), so the query never reads it (``ragym.envs.memora.memory.OWN_QUERY_SIMILARITY``
    says why 0.6)."""
    memory_frozen: bool = False
    """Evaluation: read memory, never write it."""
    domain: str = "default"
    """Domain used when reset options name none."""
    corpus_path: str | None = None
    """``documents.jsonl`` of ``ragym prep``; None uses the built-in synthetic domain."""
    synthetic_seed: int = 0
    """Seed of the built-in synthetic domain."""
    doc_chars: int = 200
    """Characters of each candidate's text shown."""
    repeat_doc_text: bool = False
    """Show every listed candidate's text after every turn; by default a candidate's text is shown the first
    time it is listed and later lists give its number, score and id (its text is already in the context)."""
    memory_query_chars: int = 120
    """Characters of each memory's query shown."""
    show_image: bool = True
    """Attach the query image (``image_path``) to the reset observation."""
    describe_in_first_stage: bool = True
    """The first stage searches with the query text plus its image description, when there is one."""
    image_max_side: int = 1024
    """Longer side of the query image."""
    max_obs_chars: int = 16384
    """Bound of the text observation space. A view over it cuts the texts of the candidates it shows evenly (each
    ending "… [cut]"), keeping the query and every candidate's number and id; a text still over it loses its end.
    Either is an ``observation_cut`` event."""

    def __post_init__(self) -> None:
        # Settings that make no episode possible are refused here, naming the field, before any work starts.
        sizes = ("k_min", "k_max", "k", "kc", "k0", "max_pool")
        check_least(
            self,
            {name: 1 for name in (*sizes, "max_turns", "max_turn_chars", "max_obs_chars", "image_max_side")},
        )
        if not self.k_min <= self.k_max or not self.k <= self.kc <= self.k0 <= self.max_pool:
            got = ", ".join(f"{name}={getattr(self, name)}" for name in sizes)
            raise ValueError(f"MemoraConfig: need k_min <= k_max and k <= kc <= k0 <= max_pool, got {got}")
        if not 0 < self.own_query_similarity <= 1:
            raise ValueError(
                f"MemoraConfig.own_query_similarity must be in (0, 1], got {self.own_query_similarity}"
            )


class MemoraEnv(TurnEnv):
    """MEMORA's committee reranking as a text-in, text-out environment with persistent domain memory."""

    metadata = {"render_modes": []}
    stop_strings: tuple[str, ...] = STOP_STRINGS
    system_prompt: str = views.SYSTEM_PROMPT

    def __init__(
        self,
        config: MemoraConfig | None = None,
        *,
        retriever: RetrieverSource | None = None,
        **overrides: Any,
    ):
        """``retriever`` serves the first stage (module docstring); ``overrides`` replace config fields."""
        self.config = c = env_config("MemoraEnv", MemoraConfig, config, overrides)
        self.image_budget = budget_of(c)  # a budget no image fits is refused here, naming the field
        self.retrievers = retriever
        """Where the first stage comes from: the source passed in, else None (BM25 in process)."""
        self._collection: Collection | None = None
        self._memories: dict[str, EpisodicMemory] = {}
        self.observation_space = text_image_space(c.max_obs_chars, 1, c.image_max_side)
        self.action_space = FreeText(c.max_turn_chars)
        self.turn = 0
        self.events: list[dict[str, Any]] = []
        self.done = True  # until reset()

    def collection(self) -> Collection:
        """The documents (a corpus file, or the synthetic domain) and the first-stage retriever over them."""
        if self._collection is None:
            c = self.config
            if self.retrievers is not None:
                synthetic = not c.corpus_path
                texts = (
                    synthetic_collection(c.synthetic_seed)[0].corpus
                    if synthetic
                    else corpus_texts(c.corpus_path)
                )
                self._collection = Collection(texts, self.retrievers.retriever(FIRST_STAGE))
            elif c.corpus_path:
                self._collection = corpus_collection(c.corpus_path)
            else:
                self._collection = synthetic_collection(c.synthetic_seed)[1]
        return self._collection

    def memory(self, domain: str) -> EpisodicMemory:
        """The domain's episodic memory (re-read from disk when other writers changed it)."""
        c = self.config
        if domain not in self._memories:
            path = Path(c.memory_dir) / f"{domain}.jsonl" if c.memory_dir else None
            self._memories[domain] = EpisodicMemory(path, frozen=c.memory_frozen)
        store = self._memories[domain]
        store.refresh()
        return store

    def freeze_memory(self) -> None:
        """From now on read every domain's memory without writing it (the held-out phase after warm-up)."""
        self.config = replace(self.config, memory_frozen=True)
        for store in self._memories.values():
            store.frozen = True

    def _options(self, options: dict[str, Any] | None) -> dict[str, Any]:
        if not options:
            c = self.config
            if c.corpus_path:
                raise ValueError(
                    "MemoraEnv.reset needs options with a 'query' unless it uses the synthetic domain"
                )
            domain = synthetic_collection(c.synthetic_seed)[0]
            row = domain.queries[int(self.np_random.integers(len(domain.queries)))]
            return {
                "query_id": row["id"],
                "query": row["query"],
                "qrels": row["qrels"],
                "domain": domain.name,
            }
        unknown = set(options) - _OPTION_KEYS
        if unknown or not isinstance(options.get("query"), str) or not options["query"].strip():
            raise ValueError(
                f"MEMORA reset options need a non-empty str 'query'; unknown keys {sorted(unknown)}"
            )
        return dict(options)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode: memory, first-stage candidates and the reset view (module docstring)."""
        super().reset(seed=seed)
        opts = self._options(options)
        c, domain = self.config, opts.get("domain") or self.config.domain
        memory = self.memory(domain)
        self.state = EpisodeState.start(c, opts, domain, memory, self.collection())
        self.turn, self.done = 0, False
        self._shown: set[str] | None = None if c.repeat_doc_text else set()
        sims, queries = [s for _, s in self.state.memories], [r.query for r, _ in self.state.memories]
        self.events = [memora_ev.memory_read(domain, len(memory), sims, queries)]
        self.events.append(
            memora_ev.first_stage(
                opts.get("query_id"),
                list(self.state.pool),
                self.state.first_scores,
                self.state.first_stage_ndcg(),
            )
        )
        images = self._query_image(opts.get("image_path"))
        head = [
            views.query_view(opts["query"], bool(images), opts.get("image_description")),
            views.memory_view(self.state.memories, len(memory), c.memory_query_chars, c.k),
        ]
        return self._bounded(self._view(head, c.max_turns, turn=-1), images, turn=-1), self._info()

    # ----- the turn loop's hooks (``ragym.envs.turns.TurnEnv.step``) ----------------------------------
    def _episode(self) -> MemoraEnv:
        return self

    def _parse(self, action: Any) -> Any:
        return parse_action(action, self.config.max_turn_chars)

    def _turns_left(self, turn: int) -> int:
        """Turns the policy has after turn ``turn``."""
        return self.config.max_turns - turn - 1

    def _malformed(self, error: ParseError, turn: int) -> Outcome:
        return Outcome(views.error_view(error.reason, self._turns_left(turn)))

    def _act(self, action: Decompose | Subquery | Extract | Judge | Stop, turn: int) -> Outcome:
        violation = self.state.violation(action)
        if violation is not None:
            self.events.append(ev.protocol_violation(turn, violation[0]))
            return Outcome(views.error_view(f"{violation[0]}: {violation[1]}", self._turns_left(turn)))
        if isinstance(action, Stop):
            return Outcome("Episode finished.", terminated=True)
        return Outcome(self._apply(action, turn))

    def _out_of_turns(self, outcome: Outcome, turn: int) -> Outcome:
        return replace(outcome, text="No turns left; the final ranking is the current one.")

    def _end(self, outcome: Outcome, turn: int) -> None:
        self._finish(turn, forced=outcome.truncated)

    def _apply(self, action: Decompose | Subquery | Extract | Judge, turn: int) -> str:
        """Run a well-formed, allowed action, record its event, and show the new status."""
        s = self.state
        if isinstance(action, Decompose):
            s.decompose(action.factors)
            texts, raw = [t for t, _ in s.factors], [p for _, p in s.factors]
            self.events.append(memora_ev.decompose(turn, texts, raw, list(s.priorities), s.priors))
        elif isinstance(action, Subquery):
            retrieved, added = s.subquery(action.text)
            self.events.append(
                memora_ev.subquery(turn, action.factor, action.text, retrieved, added, len(s.pool))
            )
        elif isinstance(action, Extract):
            docs, weights, snippets = s.extract(action.factor - 1, action.evidence)
            self.events.append(memora_ev.factor_evidence(turn, action.factor, docs, weights, snippets))
        else:
            s.judge([n - 1 for n in action.order])
            self.events.append(memora_ev.verdict(turn, [s.pool[n - 1] for n in action.order]))
        return self._view([], self._turns_left(turn), turn)

    def _view(self, head: list[str], turns_left: int, turn: int) -> str:
        """``head`` (reset's query and memory views), then the factors, the top candidates and what is left of each
        budget, ``turns_left`` turns included. Over ``max_obs_chars`` the texts of the candidates shown are cut
        evenly, so that every candidate's number and id stay (an ``observation_cut`` event of ``turn``)."""
        s, c = self.state, self.config
        rows, signals = s.top_rows(), s.signals()
        left = {kind: c_max - s.calls[kind] for kind, c_max in s.budgets.items()}

        def render(text_chars: int | None) -> str:
            status = [
                views.factors_view(s.factors, s.priorities, s.priors),
                views.candidates_view(rows, len(s.pool), signals, c.doc_chars, self._shown, text_chars),
                views.budget_view(left, turns_left),
            ]
            return "\n\n".join([*head, "\n".join(status)])

        fresh = {docid: text for _, docid, _, text in rows if self._shown is None or docid not in self._shown}
        lengths = [len(text[: c.doc_chars]) for text in fresh.values()]
        text, num_chars = shorten_evenly(render, lengths, c.max_obs_chars)
        if num_chars:
            self.events.append(ev.observation_cut(turn, "documents", num_chars))
        if self._shown is not None:  # their texts are in the policy's context now (cut ones with the mark)
            self._shown.update(fresh)
        return text

    def _finish(self, turn: int, forced: bool) -> None:
        """Emit the final ranking and write the episode to the domain memory."""
        s = self.state
        order, scores = s.final_ranking()
        signals = s.signals()
        self.events.append(
            memora_ev.final_ranking(
                turn, order, scores, self.config.k, forced, signals["margin"], signals["support"]
            )
        )
        written, reason, record = s.memory_record(order)
        if record is not None and written:
            written = s.memory.write(record)
            reason = "written" if written else "frozen"
        ndcg = record.ndcg if record is not None else None
        outcomes = [f.outcome for f in record.factors] if record is not None else []
        self.events.append(
            memora_ev.memory_write(turn, s.domain, written, reason, ndcg, s.first_stage_ndcg(), outcomes)
        )

    def _query_image(self, path: str | None) -> list[np.ndarray]:
        if not path or not self.config.show_image:
            return []
        pixels = decode_image(path)
        height, width = pixels.shape[:2]
        # Within image_max_side a photo also fits the default budget: the fit below then resizes nothing. Not
        # PIL's thumbnail: it rounded a 20 x 4,000 strip (ratio 200) to 5 x 1,024, which the budget refuses.
        if max(height, width) > self.config.image_max_side:
            new_height, new_width = shrunk_size(height, width, self.config.image_max_side)
            shrunk = Image.fromarray(pixels).resize(
                (new_width, new_height), Image.Resampling.BICUBIC, reducing_gap=2.0
            )
            pixels = np.asarray(shrunk, dtype=np.uint8)
        try:
            return [self.image_budget.fit(pixels, "query")]
        except ValueError as err:  # past the aspect ratio the budget accepts
            raise UnreadableImageError.of(path, err) from err

    def _info(self) -> dict[str, Any]:
        return {"events": copy.deepcopy(self.events), "view": self.state.view()}
