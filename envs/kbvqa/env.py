"""``KBVQA-v0``: the MMAgent-R² knowledge-based VQA environment (sections 3.1-3.2, Table 1, Appendix A).

The policy sees N query images and a question, and acts with SearchImage(j), SearchText([q..]),
Rerank(e), Reject() and Answer(y) (grammar in ``ragym.envs.kbvqa.actions``; stop strings ``</search_call>``,
``</rerank>``, ``</answer>``). Rules:

- SearchImage(j) serves the next non-overlapping batch of K candidates of image j and makes j active (one
  that serves nothing, j's list used up or the service down, leaves the active image as it was).
  Each image gets at most ``max_rejections + 1`` batches; past that, the boundary prompt is returned.
- Each batch admits one verification decision (Rerank of one of its names, or Reject()). Reject()
  counts as one of the active image's rejections and serves its next batch (the boundary prompt when the
  batch cap is reached or the image's candidate list is used up); when the image's RejCount, its counted Rejects, is already Rej_max it brings the
  boundary prompt instead and is not counted (Algorithm S1, lines 14-20, which checks RejCount alone:
  batches paged by SearchImage do not count; the ``verification`` event says ``at_limit``). A second
  decision on the same batch is a ``protocol_violation`` and changes nothing, so repeating Rerank(e*) earns
  nothing.
- ``allow_reject=False`` (Table 5's "w/o Reject"): the system prompt lists no Reject, the parser reads
  ``Reject()`` as a malformed turn, and the ``task`` event says so for the rewards.
- Malformed turns and forbidden actions never raise: the observation says what was wrong, an event is
  recorded, and the turn is used.
- Truncation rule: when one turn is left the observation asks for the answer; if turn ``max_turns`` is not
  an Answer, the episode is truncated and an ``answer`` event with ``forced=True`` and empty text is
  recorded (the forced answer scores as no answer).

``reset(options=row_env_options)`` takes ``question``, ``query_images`` (paths, relative to the KB
folder or absolute), ``gold_entities`` (one entity id or null per image) and optional ``answers``;
``options`` None or empty samples a row of the KB's ``data/train.parquet``. Gold data never reaches an observation.

Retrieval: ``KBVQAEnv(config=None, *, retriever=None, **overrides)``. ``retriever`` (a ``RetrieverSource``) is
asked for ``candidates`` (``candidate_source="precomputed"``) or ``image`` (``live``) for SearchImage, and for
the text retriever in use (``bm25`` or ``dense``) for SearchText: ``make_env`` passes the retrieval service's
(``ragym serve`` over this KB) when a row, the recipe or ``$RAGYM_RETRIEVAL_URL`` names one. None searches the
KB in process (``KBRetrievers``). A search the service cannot answer is an observation and a
``retrieval_error`` event.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any

import gymnasium
import numpy as np
import pandas as pd

from ragym.envs import events as ev
from ragym.envs.core import EnvConfig, check_least, defuse, env_config
from ragym.envs.image_budget import budget_of
from ragym.envs.image_cache import read_image
from ragym.envs.kbvqa import events as kbvqa_ev
from ragym.envs.kbvqa import prompts as prompts
from ragym.envs.kbvqa.actions import (
    ACTION_KINDS,
    STOP_STRINGS,
    ParseError,
    Reject,
    Rerank,
    SearchImage,
    SearchText,
)
from ragym.envs.kbvqa.actions import parse_action as parse_turn
from ragym.envs.kbvqa.kb import TEXT_RETRIEVERS, KBRetrievers, KnowledgeBase, load_kb
from ragym.envs.kbvqa.state import EpisodeState, copy_events
from ragym.envs.observations import shorten_evenly
from ragym.envs.registry import synthetic_data
from ragym.envs.retrieval.hits import RetrieverSource
from ragym.envs.retrieval.retrievers import IndexSpec, page
from ragym.envs.retrieval.service.client import RetrievalUnavailable
from ragym.envs.retrieval.versions import VERSION_KEY
from ragym.envs.spaces import text_image_space
from ragym.envs.turns import Outcome, TurnEnv


@dataclass(frozen=True)
class KBVQAConfig(EnvConfig):
    """Everything that shapes a KB-VQA episode; defaults are the paper's (K=5, Rej_max=2, T_max=8, top-3)."""

    kb_dir: str | None = None
    """KB folder (``ragym.envs.kbvqa.kb`` format). None builds and caches the small synthetic ``preset`` KB."""
    preset: str = "tiny"
    """Synthetic preset used when ``kb_dir`` is None."""
    candidates_per_batch: int = 5
    """K: candidates per SearchImage batch."""
    max_rejections: int = 2
    """Rej_max: rejections per query image; an image gets at most Rej_max + 1 batches."""
    allow_reject: bool = True
    """Offer the Reject action. False is MMAgent-R² Table 5's "w/o Reject": no Reject in the system prompt,
    ``Reject()`` is a format error, and the verification reward pays none; needs ``max_rejections=0`` (one
    batch per image: without Reject there is no candidate expansion). Not the same as Table 7's Rej_max = 0,
    where Reject is offered and brings the boundary prompt."""
    max_turns: int = 8
    """T_max: policy turns per episode."""
    text_top_k: int = 3
    """Passages returned per SearchText query."""
    max_text_queries: int = 5
    """Most queries one SearchText may carry (more is a protocol violation)."""
    text_retriever: str = "auto"
    """``auto`` (dense when the KB has passage vectors, as the paper's E5 index, else BM25), ``bm25`` or
    ``dense`` (the KB's text encoder over stored passage vectors); the one used is in the ``task`` event."""
    candidate_source: str = "precomputed"
    """``precomputed`` (the KB's stored candidate lists, as in the paper) or ``live`` (faiss search)."""
    index_kind: str = "auto"
    """faiss index for live search: ``auto`` (the KB's built index when kb.json records one, else ``flat``),
    ``built`` (that index, required), or one built at load: ``flat``, ``hnsw`` or ``ivf``."""
    last_turn_notice: bool = True
    """Tell the policy, before its last turn, to answer now."""
    max_obs_chars: int = 200_000
    """Upper bound of the observation-space text length. SearchText passages over it are cut evenly (each ending
    "… [cut]"); a text still over it loses its end; either is an ``observation_cut`` event. A cut that would drop
    an image placeholder is an error."""
    max_images_per_obs: int = 32
    """Upper bound of images in one observation (the space's limit)."""
    max_image_side: int = 4096
    """Upper bound of an image side in the observation space."""

    def __post_init__(self) -> None:
        budget_of(self)  # a budget no image fits is refused here, naming the field
        # Settings that make no episode possible are refused here, naming the field, before any work starts.
        least = {
            "candidates_per_batch": 1,
            "max_rejections": 0,
            "max_turns": 1,
            "text_top_k": 1,
            "max_text_queries": 1,
            "max_turn_chars": 1,
        }
        check_least(self, least)
        if self.candidates_per_batch > self.max_images_per_obs:  # a batch is one observation's images
            raise ValueError(
                f"KBVQAConfig.candidates_per_batch must be at most max_images_per_obs "
                f"({self.max_images_per_obs}), got {self.candidates_per_batch}"
            )
        if not isinstance(self.allow_reject, bool):
            raise ValueError(f"KBVQAConfig.allow_reject must be true or false, got {self.allow_reject!r}")
        if not self.allow_reject and self.max_rejections != 0:
            raise ValueError(
                "KBVQAConfig.allow_reject=False (no Reject action) needs max_rejections=0, "
                f"got {self.max_rejections}"
            )
        if self.text_retriever not in ("auto", *TEXT_RETRIEVERS):
            raise ValueError(
                f"KBVQAConfig.text_retriever must be auto, bm25 or dense, got {self.text_retriever!r}"
            )


class KBVQAEnv(TurnEnv):
    """The KB-VQA agent environment; action = the policy's raw turn text, obs = {"text", "images"}."""

    metadata = {"render_modes": []}
    stop_strings: tuple[str, ...] = STOP_STRINGS
    action_kinds = ACTION_KINDS
    forced_answer = True

    def __init__(
        self, config: KBVQAConfig | None = None, *, retriever: RetrieverSource | None = None, **overrides: Any
    ):
        """``retriever`` serves the searches (module docstring); ``overrides`` are ``KBVQAConfig`` fields."""
        if config is not None and overrides:
            raise TypeError("pass either a KBVQAConfig or keyword overrides, not both")
        self.config = env_config(type(self).__name__, KBVQAConfig, config, overrides)
        cfg = self.config
        self.image_budget = budget_of(cfg)
        self.kb: KnowledgeBase = load_kb(cfg.kb_dir or synthetic_data("kbvqa", cfg.preset))
        self.system_prompt = prompts.system_prompt(cfg.max_turns, allow_reject=cfg.allow_reject)
        self.action_space = gymnasium.spaces.Text(max_length=cfg.max_turn_chars)
        self.observation_space = text_image_space(
            cfg.max_obs_chars, cfg.max_images_per_obs, cfg.max_image_side
        )
        if cfg.candidate_source not in ("live", "precomputed"):
            raise ValueError(
                f"candidate_source must be 'precomputed' or 'live', not {cfg.candidate_source!r}"
            )
        self.retrievers = retriever or KBRetrievers(self.kb, IndexSpec(kind=cfg.index_kind))
        """Where SearchImage and SearchText search: the one passed in, else the KB in process."""
        image_name = "image" if cfg.candidate_source == "live" else "candidates"
        self._image_retriever = self.retrievers.retriever(image_name)
        self.text_retriever_kind = self._text_retriever_kind()
        self._text_retriever = None  # built on first SearchText: BM25/dense loading is not free
        self._rows: pd.DataFrame | None = None
        self.state: EpisodeState | None = None

    # ----- gymnasium API -------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode from ``options`` (a row's env options) or a sampled synthetic row."""
        super().reset(seed=seed)
        options = options or self._sample_options()  # None or {} (what check_env passes) samples a row
        cfg = self.config
        self.state = EpisodeState.start(options, self.kb, cfg.candidate_source)
        self.state.record(
            kbvqa_ev.task(
                self.state.num_images,
                self.state.gold_entities,
                cfg.max_rejections,
                cfg.candidates_per_batch,
                cfg.max_turns,
                text_retriever=self.text_retriever_kind,
                allow_reject=cfg.allow_reject,
            )
        )
        text = self._first_text(self._task_text())
        images = [read_image(p, self.image_budget, "query") for p in self.state.query_paths]
        return self._bounded(text, images, turn=-1), self._info()

    # ----- the turn loop's hooks (``ragym.envs.turns.TurnEnv.step``) ----------------------------------
    def _episode(self) -> EpisodeState:
        return self._running()

    def _parse(self, action: Any) -> Any:
        text = action if isinstance(action, str) else str(action)
        return parse_turn(text, max_chars=self.config.max_turn_chars, allow_reject=self.config.allow_reject)

    def _notices_last_turn(self) -> bool:
        return self.config.last_turn_notice

    def _malformed(self, error: ParseError, turn: int) -> Outcome:
        return Outcome(prompts.error_text(error.message))

    def _act(self, action: Any, turn: int) -> Outcome:
        text, images = self._execute(action)
        return Outcome(text, images, terminated=self._running().terminated)

    # ----- transitions ---------------------------------------------------------------------------
    def _running(self) -> EpisodeState:
        """The episode's state, which reset() made (step() checks that before any transition)."""
        if self.state is None:
            raise RuntimeError("call reset() before step()")
        return self.state

    def _execute(self, parsed: Any) -> tuple[str, list[np.ndarray]]:
        state = self._running()
        if isinstance(parsed, SearchImage):
            return self._search_image(parsed.image)
        if isinstance(parsed, SearchText):
            return self._search_text(parsed.queries), []
        if isinstance(parsed, Rerank):
            return self._rerank(parsed.entity), []
        if isinstance(parsed, Reject):
            return self._reject()
        state.record(ev.answer(state.turn, parsed.text))
        state.terminated = True
        return "", []

    def _violation(self, reason: str, message: str, **where: Any) -> str:
        state = self._running()
        state.record(ev.protocol_violation(state.turn, reason, **where))
        return prompts.error_text(message)

    def _search_image(self, image: int) -> tuple[str, list[np.ndarray]]:
        state, cfg = self._running(), self.config
        if not 1 <= image <= state.num_images:
            message = f"Image {image} does not exist; images are numbered 1 to {state.num_images}."
            return self._violation("image_out_of_range", message, image=image), []
        if state.batches_served(image) > cfg.max_rejections:
            state.active_image = image
            return self._boundary(image)
        hits = self._next_hits(image)
        if not isinstance(hits, list):
            return hits, []
        if not hits:  # nothing executed, so image j does not become the active one either
            message = f"no more candidates exist for Image {image}."
            return self._violation("no_more_candidates", message, image=image), []
        return self._serve_batch(image, hits)

    def _next_hits(self, image: int) -> list[Any] | str:
        """The image's next page of candidates (empty when its list is used up), or the unavailable notice."""
        state = self._running()
        try:
            return page(
                self._image_retriever,
                state.image_query(image),
                state.offsets[image],
                self.config.candidates_per_batch,
            )
        except RetrievalUnavailable as error:
            return self._unavailable("image", error)

    def _serve_batch(self, image: int, hits: list[Any]) -> tuple[str, list[np.ndarray]]:
        """Serve ``hits`` as image ``image``'s next batch and make it the active image."""
        state = self._running()
        offset = state.offsets[image]
        batch = state.new_batch(image, offset, hits)
        state.active_image = image
        version = hits[0].payload.get(VERSION_KEY)  # one search, one version (ragym.envs.retrieval.versions)
        state.record(
            kbvqa_ev.search_image(
                state.turn, image, batch.batch_id, batch.candidates, batch.gold_entity, offset, version
            )
        )
        # image pack, else files; fitted to the candidate budget
        images = [self.kb.entity_image(h.docid, h.payload["image"], self.image_budget) for h in hits]
        return self._batch_text(image, offset, hits), images

    def _decision_batch(self, decision: str, entity: str | None = None):
        """The active batch if it still admits a decision, else the violation message."""
        batch = self._running().active_batch()
        if batch is None:
            msg = "there is no candidate batch to verify; call SearchImage(j) first."
            return None, self._violation("no_active_batch", msg, entity=entity)
        if batch.decided:
            msg = f"a decision was already made on the current batch of Image {batch.image}."
            where = {"image": batch.image, "batch_id": batch.batch_id, "entity": entity}
            return None, self._violation("second_decision_on_batch", msg, decision=decision, **where)
        return batch, ""

    def _rerank(self, name: str) -> str:
        batch, error = self._decision_batch("rerank", name)
        if batch is None:
            return error
        entity = self._resolve(batch, name)
        if entity is None:
            what = self.rerank_argument
            shown = defuse(name)  # the policy's own text, echoed: a literal <image> in it is no image marker
            msg = f"{shown!r} is not a candidate of the current batch of Image {batch.image}; copy {what} exactly."
            return self._violation(
                "unknown_entity", msg, image=batch.image, batch_id=batch.batch_id, entity=name
            )
        self._running().decide(batch, "rerank", entity)
        return prompts.confirmation_text(batch.image, batch.name_of(entity))

    def _reject(self) -> tuple[str, list[np.ndarray]]:
        batch, error = self._decision_batch("reject")
        if batch is None:
            return error, []
        state, image, max_rejections = self._running(), batch.image, self.config.max_rejections
        # Algorithm S1 (lines 14-20) checks RejCount(j) alone: batches paged by SearchImage are not rejections.
        if state.rejections[image] >= max_rejections:
            state.decide(batch, "reject", None, at_limit=True)  # judged, but not a rejection: RejCount stays
            return self._boundary(image)
        state.decide(batch, "reject", None)
        state.rejections[image] += 1
        # A counted rejection; the batch cap (Rej_max + 1 per image, repeated SearchImage calls included) still
        # bounds what is served, so after SearchImage paged to the cap the rejection brings the boundary prompt.
        if state.batches_served(image) > max_rejections:
            return self._boundary(image)
        hits = self._next_hits(image)
        if not isinstance(hits, list):
            return hits, []
        if not hits:  # the decision stands; the image's candidate list is used up before the cap
            return self._boundary(image, exhausted=True)
        return self._serve_batch(image, hits)

    def _boundary(self, image: int, exhausted: bool = False) -> tuple[str, list[np.ndarray]]:
        """The boundary prompt (no batch), stating the image's actual rejections and batches (``exhausted``: its
        candidate list ran out before the rejection limit)."""
        state = self._running()
        state.record(kbvqa_ev.boundary(state.turn, image, state.rejections[image]))
        text = prompts.boundary_text(image, state.rejections[image], state.batches_served(image), exhausted)
        return text, []

    def _search_text(self, queries: tuple[str, ...]) -> str:
        cfg = self.config
        if len(queries) > cfg.max_text_queries:
            msg = f"SearchText got {len(queries)} queries; at most {cfg.max_text_queries} are allowed."
            return self._violation("too_many_queries", msg)
        kind = self.text_retriever_kind
        if self._text_retriever is None:
            self._text_retriever = self.retrievers.retriever(kind)
        try:
            results = self._text_retriever.batch_search(list(queries), cfg.text_top_k)
        except RetrievalUnavailable as error:
            return self._unavailable(kind, error)
        ids = [h.docid for hits in results for h in hits]
        state = self._running()
        state.record(kbvqa_ev.search_text(state.turn, queries, ids))
        # Over max_obs_chars the passages' texts are cut evenly: queries, titles and the last-turn notice stay.
        lengths = [len(h.payload["text"]) for hits in results for h in hits]
        room = cfg.max_obs_chars - len(self._notice_after(state.turn))
        text, num_chars = shorten_evenly(
            lambda cap: prompts.passages_text(queries, results, cap), lengths, room
        )
        if num_chars:
            state.record(ev.observation_cut(state.turn, "passages", num_chars))
        return text

    # ----- what the policy reads (``ragym.envs.kbvqa.demo`` adds the CPU demo's aids here) ----------------
    rerank_argument = "a name"
    """What a Rerank may name, as the unknown-entity notice says it."""

    def _task_text(self) -> str:
        """The first observation's text: the query images and the question."""
        state = self._running()
        return prompts.task_prompt(state.question, state.num_images)

    def _batch_text(self, image: int, offset: int, hits: list[Any]) -> str:
        """A served batch's text: the candidates' images and names."""
        return prompts.batch_text(image, offset, hits)

    def _resolve(self, batch: Any, argument: str) -> str | None:
        """The candidate a Rerank argument names (its shown name), else None."""
        return batch.entity_named(argument)

    # ----- helpers -------------------------------------------------------------------------------
    def _text_retriever_kind(self) -> str:
        """The text retriever this env searches with: the configured one, or the KB's default for ``auto``."""
        kind = self.config.text_retriever
        if kind == "auto":
            return self.kb.default_text_retriever()
        if kind not in self.kb.text_retrievers():
            raise ValueError(
                f"text_retriever={kind!r} but the KB at {self.kb.root} has only "
                f"{list(self.kb.text_retrievers())} (dense needs `ragym prep --text-encoder`)"
            )
        return kind

    def _unavailable(self, retriever: str, error: RetrievalUnavailable) -> str:
        """The service did not answer: the turn is used, nothing is served, and the policy is told."""
        state = self._running()
        state.record(ev.retrieval_error(state.turn, retriever, error.reason, error.detail))
        return prompts.retrieval_unavailable_text()

    def _info(self) -> dict[str, Any]:
        state = self._running()
        return {"events": copy_events(state.events), "turn": state.turn}

    def _sample_options(self) -> dict[str, Any]:
        if self._rows is None:
            path = self.kb.root / "data" / "train.parquet"
            if not path.exists():
                raise FileNotFoundError(f"reset(options=None) samples rows from {path}, which does not exist")
            self._rows = pd.read_parquet(path)
        row = self._rows.iloc[int(self.np_random.integers(len(self._rows)))]
        return json.loads(row["extra_info"]["env_options"])


CONFIG_FIELDS = tuple(f.name for f in fields(KBVQAConfig))
"""Names accepted as ``env_kwargs``."""
