"""``DocMemo-v0``: memory-guided evidence-page retrieval over one long document (seed 002, issue 6).

One round t: similarity c(t) of every page to the current query (min-max normalised); Thompson draw
theta from the page beliefs; score s = lambda_t c(t) + (1 - lambda_t) theta with lambda_t = lambda_0 eta^t;
the top-M pages are shown as candidates (page number, type, summary; ``exclude_judged_candidates`` skips
pages already marked useful or irrelevant). The policy selects some (they join the accumulated set A),
then reads the top-E pages of A by posterior mean among pages not shown as evidence before (images, text
excerpt; earlier evidence is recalled as page numbers, marks and notes in episodic memory, see
``reshow_evidence``) and answers, declares "Not answerable", or refines (new query, note, useful /
irrelevant pages -> belief update). The episode ends on an answer or after T rounds. Grammar:
``ragym.envs.docmemo.actions``.

Page numbers in actions, observations and events are 1-based, as in MMLongBench-Doc. Reset options:
``{"question": str, "doc_id": str}`` (the store is ``<config.store_root>/<doc_key(doc_id)>``); no options
samples a question over the built-in synthetic report. Gold pages are never given to the env.

Events (``info["events"]``, each with ``type`` and ``turn``; reset-time events have ``turn`` -1):

- ``action``: ``kind`` (``select`` | ``refine`` | ``answer`` | ``invalid``), ``well_formed`` (bool).
- ``format_error``: ``reason`` (``no_action``, ``multiple_actions``, ``missing_reason``,
  ``text_outside_blocks``, ``nested_tags``, ``oversized``, ``bad_pages``, ``bad_refine``, ``empty_query``,
  ``empty_answer``, ``not_text``).
- ``protocol_violation``: a well-formed action the state forbids. ``reason`` (``wrong_phase``,
  ``not_candidate``, ``unseen_page``, ``useful_and_irrelevant``), ``pages`` (offending pages).
- ``candidates``: ``round``, ``query``, ``lambda``, ``pages`` (shown order), ``scores`` (s of those pages),
  ``means`` (posterior mean of every page before the draw).
- ``selected``: ``round``, ``pages`` (this turn), ``accumulated`` (A_t).
- ``evidence``: ``round``, ``pages`` shown (belief order), ``means`` (their posterior means), ``new`` (those
  of ``pages`` not shown as evidence in an earlier round, belief order).
- ``feedback``: ``round``, ``useful``, ``irrelevant``, ``query`` (the refined query), ``note``.
- ``beliefs``: ``round``, ``means`` (every page's posterior mean after the update).
- ``answer``: ``text``, ``not_answerable`` (bool), ``forced`` (always false: no answer is forced), ``round``.
- ``truncated``: ``reason`` (``max_rounds`` | ``max_turns``).
- ``observation_cut``: an observation shortened to fit ``max_obs_chars``: ``part`` (``memory``: notes, then
  queries, of episodic memory's ``rounds``; ``tail``: the text's end), ``num_chars`` (characters fewer).
- ``retrieval_error``: the page search got no answer from the retrieval service (``retriever``, ``reason``,
  ``detail``); no candidates are shown, and a ``refine`` retries the search without using up a round (its
  page marks, if any, update the beliefs with ``feedback`` and ``beliefs`` events of the same round).

Retrieval: ``DocMemoEnv(config=None, *, retriever=None, **overrides)``. ``retriever`` (a ``RetrieverSource``)
is asked for ``pages/<doc_key(doc_id)>``, one retriever per document, whose hits are 1-based page numbers:
``make_env`` passes the retrieval service's (``ragym serve --doc-store-root``, with the client's timeouts,
retries and circuit breaker) when a row, the recipe or ``$RAGYM_RETRIEVAL_URL`` names one. None searches in
process with the configured page encoder (``PageRetriever``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ragym.envs import events as ev
from ragym.envs.core import EnvConfig, check_least, env_config
from ragym.envs.docmemo import events as docmemo_ev
from ragym.envs.docmemo import views as views
from ragym.envs.docmemo.actions import STOP_STRINGS, Answer, ParseError, Refine, Select, parse_action
from ragym.envs.docmemo.beliefs import PageBeliefs, lambda_schedule, minmax_normalise, top_k_fresh_first
from ragym.envs.docmemo.pages import PageRetriever, similarity_vector
from ragym.envs.docmemo.store import DocStore, doc_key, load_store
from ragym.envs.docmemo.synthetic import synthetic_questions, synthetic_store
from ragym.envs.image_budget import budget_of
from ragym.envs.retrieval.hits import Retriever, RetrieverSource
from ragym.envs.retrieval.page_encoders import TextPageEncoder, VisualPageEncoder
from ragym.envs.retrieval.service.client import RetrievalUnavailable
from ragym.envs.spaces import FreeText, text_image_space
from ragym.envs.turns import Outcome, TurnEnv

PAGE_MAX_PIXELS = 12_845_056
"""Qwen2.5-VL's own ``max_pixels``: the default page budget, which leaves pages to ``image_max_side``."""
_REMEDY = "raise max_obs_chars or lower evidence_text_chars"
"""What the error of a cut that would drop an evidence image's placeholder asks for."""


@dataclass(frozen=True)
class DocMemoConfig(EnvConfig):
    """Every DocMemo knob; T, the schedule shape and the loop follow the seed, the numbers are ours (it gives none)."""

    store_root: str | None = None
    """Folder of per-document stores (``ragym prep mmlongbench_doc``), one per ``doc_key(doc_id)``; None
    allows only the built-in synthetic report (reset without options)."""

    kappa: float = 2.0
    """Prior strength: alpha = 1 + kappa c, beta = 1 + kappa (1 - c) from first-round similarity c. Small
    enough that one irrelevant mark drops a page below fresh, similar pages (4.0 did not; see the benchmark)."""
    radius: int = 2
    """Propagation radius r: useful feedback reaches pages within r of a useful page."""
    decay: float = 0.5
    """Distance decay gamma in [0, 1]: a neighbour at distance d gains decay ** d in alpha."""
    lambda_0: float = 1.0
    """Round-0 weight in [0, 1] of query similarity against the Thompson draw: the first round relies on
    similarity only (the seed: retrieval "gradually shifts from relying only on visual similarity")."""
    eta: float = 0.5
    """Schedule factor in [0, 1]: lambda_t = lambda_0 * eta ** t, so beliefs weigh more each round."""
    num_candidates: int = 8
    """M: candidate pages shown per round."""
    num_evidence: int = 3
    """E: evidence pages (top of the accumulated set by posterior mean) shown per round."""
    reshow_evidence: bool = False
    """True: evidence is the top-E of A_t by posterior mean (issue 6's literal step 4), so pages marked useful
    come back every round and use up the budget. False: the top-E among pages of A_t not shown as evidence
    before, topped up with the best shown ones only when fewer than E remain; earlier evidence stays in
    episodic memory (page numbers, marks, notes) as in the seed. False: final-round recall 0.691 vs 0.626 in
    ``benchmarks/docmemo_recall.py`` (0.688 vs 0.623 before its oracle refined the query)."""
    exclude_judged_candidates: bool = False
    """Candidates are the top-M among pages not yet marked useful or irrelevant (judged pages only fill up
    when too few remain). Off by default, as issue 6 states C_t: in the oracle benchmark it changes recall
    by +0.001 (standard error 0.007) on held-out seeds."""
    max_rounds: int = 3
    """T: retrieval-reasoning rounds; a refinement in the last round ends the episode (truncated)."""
    max_turns: int = 8
    """Turn budget, format errors included (each round takes two turns: select, then answer/refine)."""
    max_obs_chars: int = 32768
    """Bound of the text observation space. A candidate view over it shortens episodic memory (notes, then
    queries, oldest round first, each ending "… [cut]") and keeps its candidates whole; a text still over it
    loses its end; either is an ``observation_cut`` event. A cut that would drop an image placeholder is an error."""
    max_sections: int = 12
    """Outline entries shown in the schema memory."""
    evidence_text_chars: int = 600
    """Characters of page text shown under each evidence page (0: images only)."""
    show_images: bool = True
    """Attach evidence page images to observations."""
    crop_dense_pages: bool = False
    """Add two half-page crops (twice the resolution) for table and chart pages (the seed's adaptive-granularity
    evidence access; Table 4 removes it)."""
    schema_memory: bool = True
    """Show the schema memory (document outline) with the candidates. False: a Table 4 removal."""
    belief_update: bool = True
    """Write the policy's useful / irrelevant marks into the page beliefs (Beta updates and propagation).
    False: the marks still go to episodic memory, the beliefs stay at their similarity prior (Table 4's
    "w/o Bayesian page belief updating")."""
    belief_memory: bool = True
    """Keep page beliefs across rounds. False: no page-belief memory (part of Table 4's "w/o tri-level
    memory"): every round's beliefs are the prior of the current query's similarity alone, so neither round
    1's similarity nor any mark carries over, and evidence is ranked by the current query; needs
    ``belief_update`` False."""
    episodic_memory: bool = True
    """Show episodic memory: earlier rounds' queries, notes, marks and evidence read, in the candidate and
    evidence views. False removes it from every view (a Table 4 removal); evidence read before is then not
    recalled, and with ``reshow_evidence`` False not shown again either. ``reshow_evidence`` is a separate
    setting: the Table 4 grid keeps it at ``full``'s value so the removal changes this memory alone."""
    image_max_side: int = 1024
    """Longer side of observation images; pages are downscaled to it, keeping the aspect ratio."""
    candidate_max_pixels: int = PAGE_MAX_PIXELS
    """Page budget: most pixels of a shown page image (and of each dense-page crop) after ``image_max_side``,
    fitted once with the processor's rule (docs/scale.md); the recipe's ``ragym.images`` sets it. The
    default, Qwen2.5-VL's own ``max_pixels``, bounds nothing ``image_max_side`` has not already bounded."""
    query_max_pixels: int = PAGE_MAX_PIXELS
    """DocMemo shows no query image; kept so one recipe budget fits every env."""
    encoder: str = "text"
    """Page encoder: ``text`` (all-MiniLM-L6-v2, CPU) or ``visual`` (``visual_model_path`` on ``device``)."""
    visual_model_path: str = ""
    """Local directory of a CLIP-style model; required when ``encoder`` is ``visual``."""
    device: str = "cpu"
    """Device of the page encoder."""

    def __post_init__(self) -> None:
        budget_of(self)  # a budget no page fits is refused here, naming the field
        # Settings that make no episode possible are refused here, naming the field, before any work starts.
        least = {
            "num_candidates": 1,
            "num_evidence": 1,
            "max_rounds": 1,
            "max_turns": 1,
            "radius": 0,
            "max_turn_chars": 1,
            "evidence_text_chars": 0,
            "image_max_side": 1,
        }
        check_least(self, least)
        if not 0 <= self.kappa < float("inf"):
            raise ValueError(f"DocMemoConfig.kappa must be a finite number >= 0, got {self.kappa!r}")
        # lambda_t = lambda_0 eta^t weighs similarity against the belief draw (s = lambda c + (1 - lambda) theta):
        # above 1 the draw's weight turns negative, so pages believed relevant would sink.
        for name in ("decay", "lambda_0", "eta"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(
                    f"DocMemoConfig.{name} must be a number in [0, 1], got {getattr(self, name)!r}"
                )
        if not self.belief_memory and self.belief_update:
            raise ValueError(
                "DocMemoConfig.belief_memory=False keeps no beliefs to update: set belief_update=False"
            )
        if self.encoder not in ("text", "visual"):
            raise ValueError(f"DocMemoConfig.encoder must be 'text' or 'visual', got {self.encoder!r}")
        if self.encoder == "visual" and not self.visual_model_path:
            raise ValueError(
                "DocMemoConfig.visual_model_path must be a local model folder when encoder is 'visual'"
            )


class DocMemoEnv(TurnEnv):
    """DocMemo's retrieval-reasoning-memory loop as a text-in, text-and-images-out environment."""

    metadata = {"render_modes": []}
    stop_strings: tuple[str, ...] = STOP_STRINGS
    system_prompt: str = views.SYSTEM_PROMPT

    def __init__(
        self,
        config: DocMemoConfig | None = None,
        *,
        retriever: RetrieverSource | None = None,
        **overrides: Any,
    ) -> None:
        """``retriever`` serves the page searches (module docstring); ``overrides`` replace config fields."""
        self.config = env_config("DocMemoEnv", DocMemoConfig, config, overrides)
        self.image_budget = budget_of(self.config)
        self.store_root = Path(self.config.store_root) if self.config.store_root else None
        self.retrievers = retriever
        """Where each document's pages are searched: the source passed in, else None (in process)."""
        c = self.config
        # Dense pages may bring two crops each, hence three images per evidence page at most.
        self.observation_space = text_image_space(c.max_obs_chars, 3 * c.num_evidence, c.image_max_side)
        self.action_space = FreeText(c.max_turn_chars)
        self._encoder = None
        self._retrievers: dict[str, Retriever] = {}
        self.turn = 0
        self.events: list[dict[str, Any]] = []
        self.done = True  # until reset()

    def _page_encoder(self):
        if self._encoder is None:
            c = self.config
            if c.encoder == "visual":
                self._encoder = VisualPageEncoder(c.visual_model_path, device=c.device)
            elif c.encoder == "text":
                self._encoder = TextPageEncoder(device=c.device)
            else:
                raise ValueError(f"DocMemo encoder must be 'text' or 'visual', got {c.encoder!r}")
        return self._encoder

    def _page_retriever(self, store: DocStore, key: str) -> Retriever:
        """The page search of document ``key`` (its store's folder): ``pages/<key>`` of the source passed in,
        else in process."""
        if self.retrievers is not None:
            return self.retrievers.retriever(f"pages/{key}")
        return PageRetriever(store, self._page_encoder())

    def _load(self, options: dict[str, Any] | None) -> tuple[str, DocStore]:
        if not options:  # None or {}: a question over the built-in synthetic report
            questions = synthetic_questions()
            question = questions[int(self.np_random.integers(len(questions)))].question
            store = synthetic_store(self._page_encoder())
            key = doc_key(store.doc_id)
        else:
            unknown = set(options) - {"question", "doc_id"}
            if unknown or not all(isinstance(options.get(k), str) for k in ("question", "doc_id")):
                raise ValueError(
                    f"DocMemo reset options need str 'question' and 'doc_id' only, got {sorted(options)}"
                )
            if self.store_root is None:
                raise ValueError(f"DocMemo reset for doc {options['doc_id']!r} needs config.store_root")
            key = doc_key(options["doc_id"])
            question, store = options["question"], load_store(self.store_root / key)
        if store.doc_id not in self._retrievers:
            self._retrievers[store.doc_id] = self._page_retriever(store, key)
        self.retriever = self._retrievers[store.doc_id]
        return question, store

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode: the question's round-0 candidates (see the module docstring)."""
        super().reset(seed=seed)
        self.question, self.store = self._load(options)
        self.query, self.round, self.turn, self.phase = self.question, 0, 0, "select"
        self.beliefs: PageBeliefs | None = None
        self.accumulated: list[int] = []
        self.seen: set[int] = set()  # candidates and evidence: pages feedback may mark
        self.shown: set[int] = set()  # evidence pages of earlier rounds
        self.judged: set[int] = set()  # pages marked useful or irrelevant
        self.episodic: list[dict[str, Any]] = []
        self.events = []
        self.done = False
        return self._bounded(self._start_round(turn=-1), (), turn=-1, remedy=_REMEDY), self._info()

    # ----- the turn loop's hooks (``ragym.envs.turns.TurnEnv.step``) ----------------------------------
    def _episode(self) -> DocMemoEnv:
        return self

    def _parse(self, action: Any) -> Any:
        return parse_action(action, self.config.max_turn_chars)

    def _malformed(self, error: ParseError, turn: int) -> Outcome:
        return self._error(error.reason)

    def _act(self, action: Select | Refine | Answer, turn: int) -> Outcome:
        if isinstance(action, Answer):
            self.events.append(
                docmemo_ev.docmemo_answer(turn, action.text, action.not_answerable, self.round)
            )
            return Outcome("Episode finished.", terminated=True)
        violation = self._violation(action)
        if violation is not None:
            self.events.append(ev.protocol_violation(turn, violation[0], pages=violation[1]))
            return self._error(violation[0])
        if isinstance(action, Select):
            return self._select(action, turn)
        if self.phase == "retry":
            return self._retry(action, turn)
        return self._refine(action, turn)

    def _violation(self, action: Select | Refine) -> tuple[str, list[int]] | None:
        """Why a well-formed action is not allowed now, or None."""
        if self.phase == "retry" and not isinstance(action, Refine):
            return "wrong_phase", []
        if self.phase != "retry" and (self.phase == "select") != isinstance(action, Select):
            return "wrong_phase", []
        if isinstance(action, Select):
            outside = [p for p in action.pages if p not in self.candidates]
            return ("not_candidate", outside) if outside else None
        unseen = [p for p in action.useful + action.irrelevant if p not in self.seen]
        if unseen:
            return "unseen_page", unseen
        both = sorted(set(action.useful) & set(action.irrelevant))
        return ("useful_and_irrelevant", both) if both else None

    def _start_round(self, turn: int) -> str:
        """Score every page for the current query and show the top-M candidates."""
        c = self.config
        n = self.store.num_pages
        try:
            hits = self.retriever.search(self.query, n)
        except RetrievalUnavailable as error:
            name = getattr(self.retriever, "name", "pages")
            self.events.append(ev.retrieval_error(turn, name, error.reason, error.detail))
            self.phase, self.candidates = "retry", []
            return views.retrieval_unavailable_view(c.max_turns - turn - 1)
        sim = minmax_normalise(similarity_vector(hits, n))
        if self.beliefs is None or not c.belief_memory:
            self.beliefs = PageBeliefs(sim, kappa=c.kappa, radius=c.radius, decay=c.decay)
        means = self.beliefs.mean()
        lam = lambda_schedule(self.round, c.lambda_0, c.eta)
        scores = lam * sim + (1.0 - lam) * self.beliefs.sample(self.np_random)  # (N,)
        stale = self.judged if c.exclude_judged_candidates else ()
        self.candidates = top_k_fresh_first(range(1, n + 1), scores, c.num_candidates, stale)
        top = [p - 1 for p in self.candidates]
        self.seen.update(self.candidates)
        scores_shown = [round(float(scores[i]), 4) for i in top]
        self.events.append(
            docmemo_ev.candidates(
                turn, self.round, self.query, lam, self.candidates, scores_shown, _rounded(means)
            )
        )
        self.phase = "select"
        text, rounds, num_chars = views.candidate_view(
            self.question,
            self.store,
            c.max_sections if c.schema_memory else None,
            self.episodic if c.episodic_memory else [],
            self.round,
            c.max_rounds,
            self.query,
            self.candidates,
            self.accumulated,
            c.max_obs_chars,
        )
        if num_chars:
            self.events.append(ev.observation_cut(turn, "memory", num_chars, rounds))
        return text

    def _searched_beliefs(self) -> PageBeliefs:
        """The page beliefs the round's search made (Select and Refine come after a search)."""
        if self.beliefs is None:
            raise RuntimeError("no search has run in this episode")
        return self.beliefs

    def _select(self, action: Select, turn: int) -> Outcome:
        """Grow A_t and show its top-E pages by posterior mean, unshown ones first (``reshow_evidence``)."""
        c = self.config
        self.accumulated += [p for p in action.pages if p not in self.accumulated]
        self.events.append(docmemo_ev.selected(turn, self.round, action.pages, self.accumulated))
        means = self._searched_beliefs().mean()
        pool_means = [means[p - 1] for p in self.accumulated]
        stale = () if c.reshow_evidence else self.shown
        ranked = top_k_fresh_first(self.accumulated, pool_means, c.num_evidence, stale)
        new = [p for p in ranked if p not in self.shown]
        self.evidence = ranked
        self.seen.update(ranked)
        ranked_means = [round(float(means[p - 1]), 4) for p in ranked]
        self.events.append(docmemo_ev.evidence(turn, self.round, ranked, ranked_means, new))
        earlier = views.earlier_evidence(self.episodic, exclude=ranked) if c.episodic_memory else ""
        self.shown.update(ranked)
        self.phase = "reason"
        images, counts = self._page_images(ranked)
        is_last = self.round + 1 >= c.max_rounds
        text = views.evidence_view(self.store, ranked, new, c.evidence_text_chars, counts, is_last, earlier)
        return Outcome(text, images)

    def _refine(self, action: Refine, turn: int) -> Outcome:
        """Write feedback into beliefs and episodic memory, then start the next round (or stop at T)."""
        beliefs = self._searched_beliefs()
        if self.config.belief_update:
            beliefs.update([p - 1 for p in action.useful], [p - 1 for p in action.irrelevant])
        memory = {
            "round": self.round,
            "query": action.query,
            "note": action.note,
            "useful": list(action.useful),
            "irrelevant": list(action.irrelevant),
        }
        self.judged.update(action.useful + action.irrelevant)
        self.episodic.append({**memory, "evidence": list(self.evidence)})
        self.events.append(docmemo_ev.feedback(turn, **memory))
        self.events.append(docmemo_ev.beliefs(turn, self.round, _rounded(beliefs.mean())))
        if self.round + 1 >= self.config.max_rounds:
            self.events.append(ev.truncated(turn, "max_rounds"))
            return Outcome("No rounds left; the episode ends without an answer.", truncated=True)
        self.round += 1
        self.query = action.query
        return Outcome(self._start_round(turn))

    def _retry(self, action: Refine, turn: int) -> Outcome:
        """Search again after a failed search, in the same round; feedback marks still update beliefs, recorded
        as a round's refinement's are."""
        if self.beliefs is not None and (action.useful or action.irrelevant):
            if self.config.belief_update:
                self.beliefs.update([p - 1 for p in action.useful], [p - 1 for p in action.irrelevant])
            self.judged.update(action.useful + action.irrelevant)
            marks = {"useful": list(action.useful), "irrelevant": list(action.irrelevant)}
            self.events.append(docmemo_ev.feedback(turn, self.round, action.query, action.note, **marks))
            self.events.append(docmemo_ev.beliefs(turn, self.round, _rounded(self.beliefs.mean())))
        self.query = action.query
        return Outcome(self._start_round(turn))

    def _page_images(self, pages: list[int]) -> tuple[list[np.ndarray], list[int]]:
        c = self.config
        if not c.show_images:
            return [], [0] * len(pages)
        images, counts = [], []
        for p in pages:
            page = self.store.page_image(p - 1)
            extra = (
                views.dense_crops(page, c.image_max_side, self.image_budget)
                if (c.crop_dense_pages and self.store.page_types[p - 1] in ("table", "chart"))
                else []
            )
            images += [views.fit(page, c.image_max_side, self.image_budget), *extra]
            counts.append(1 + len(extra))
        return images, counts

    def _error(self, reason: str) -> Outcome:
        return Outcome(views.error_view(reason, self.phase, self.config.max_turns - self.turn - 1))

    def _observation(self, outcome: Outcome) -> dict[str, Any]:
        return self._bounded(outcome.text, outcome.images, turn=self.turn - 1, remedy=_REMEDY)

    def _info(self) -> dict[str, Any]:
        return {"events": copy.deepcopy(self.events)}


def _rounded(values: np.ndarray) -> list[float]:
    """Posterior means as short JSON floats."""
    return [round(float(v), 4) for v in values]
