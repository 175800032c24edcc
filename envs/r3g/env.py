"""``R3G-v0``: plan before evidence, coarse image retrieval, judge reranking, answer (seed 003, issue 15).

An episode (grammar in ``ragym.envs.r3g.actions``; stop strings ``</plan>``, ``</retrieve>``, ``</judge>``,
``</answer>``):

1. The policy sees the query image, the question and its options, and writes a plan of the visual cues it
   needs (Reasoning-Before-Evidence). A retrieval before the plan is a ``protocol_violation``
   (``retrieve_before_plan``) and serves no evidence.
2. ``<retrieve>``: the query image's feature (the injected encoder's, or the stored one) ranks the image
   corpus by cosine similarity; the top P form the pool, Stage-1 = softmax(similarity / temperature) over it.
3. ``<judge>``: r, t, a in [0, 1] and a rationale per pooled candidate. Stage-2 = w_r r + w_t t + w_a a,
   final = Stage-1 + Stage-2 (or one stage alone, per ``rerank``); the top k are shown as evidence. A
   candidate with missing or invalid scores is a ``judge_error`` event and ranks with Stage-2 = 0.
   With ``rerank="stage1"`` (the no-module ablation) or ``"none"`` (MRAG) there is no judge turn: the evidence
   follows the retrieval. ``judge_guidelines=False`` (the paper's reranking-without-guidelines ablation) asks
   for the three scores without saying what each measures.
4. ``<answer>`` ends the episode. Turn budget and forced answer as in KB-VQA.

``reset(options=row_env_options)`` takes ``question``, ``options`` (letter -> text, or null),
``query_image`` (path relative to the task folder), ``gold_images`` (corpus ids), ``scenario`` and, for
``pool_source="benchmark"`` (MRAG), ``retrieved_images`` (the benchmark's own list, corpus ids); no options
samples a row of ``data/train.parquet``. Gold data never reaches an observation. Events: ``ragym.envs.r3g.events``.

Retrieval: ``R3GEnv(config=None, *, retriever=None, **overrides)``. ``retriever`` (a ``RetrieverSource``) is asked
for ``image``, the coarse search: its queries are unit query-image features (stored, else encoded by
``config.encoder``), its hits' ``docid`` corpus image ids. None searches the task's corpus embeddings in
process (``CoarseRetriever``). A benchmark pool (``pool_source="benchmark"``) is given, not searched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

import gymnasium
import numpy as np
import pandas as pd

from ragym.envs import events as ev
from ragym.envs.core import EnvConfig, check_least, env_config
from ragym.envs.image_budget import budget_of
from ragym.envs.image_cache import read_image
from ragym.envs.r3g import events as r3g_ev
from ragym.envs.r3g import prompts as prompts
from ragym.envs.r3g.actions import (
    ACTION_KINDS,
    STOP_STRINGS,
    Answer,
    Judge,
    ParseError,
    Plan,
    Retrieve,
    parse_action,
)
from ragym.envs.r3g.corpus import (
    JUDGED_MODES,
    POOL_SOURCES,
    RERANK_MODES,
    CoarseRetriever,
    ImageCorpus,
    JudgeWeights,
    final_scores,
    stage1_scores,
    top_k,
)
from ragym.envs.registry import synthetic_data
from ragym.envs.retrieval.encoders import ImageEncoder
from ragym.envs.retrieval.hits import NamedRetrievers, RetrieverSource
from ragym.envs.spaces import text_image_space
from ragym.envs.turns import Outcome, TurnEnv

REQUIRED_OPTIONS = ("question", "query_image", "gold_images")


@dataclass(frozen=True)
class R3GConfig(EnvConfig):
    """Every R3G knob; defaults are the paper's (P=5, k=1, fused, plan first, weights 0.20/0.35/0.45)."""

    task_dir: str | None = None
    """R3G task folder (``ragym.envs.r3g.corpus`` layout). None builds and caches the synthetic ``preset`` task."""
    preset: str = "tiny"
    """Synthetic preset (``ragym.data_prep.r3g_synthetic.PRESETS``) used when ``task_dir`` is None."""
    pool_size: int = 5
    """P: Stage-1 candidates pooled by cosine similarity (a benchmark pool is the row's list, whatever P)."""
    top_k: int = 1
    """k: evidence images kept after reranking."""
    temperature: float = 0.1
    """Stage-1 softmax temperature over the pool's cosine similarities (the paper gives no value)."""
    weights: JudgeWeights = field(default_factory=JudgeWeights)
    """Stage-2 weights of r, t, a (a dict in env_kwargs)."""
    rerank: str = "fused"
    """``fused`` (R3G), ``stage1`` (no-module ablation: no judge turn), ``stage2`` (judge scores alone) or
    ``none`` (MRAG: no judge turn, the pool in retrieval order)."""
    pool_source: str = "corpus"
    """``corpus`` (R3G's Stage-1: the top P of the corpus by cosine) or ``benchmark`` (the row's
    ``retrieved_images``, in the benchmark's order: MRAG-Bench's own retrieval, the MRAG baseline's)."""
    judge_guidelines: bool = True
    """Say what r, t and a measure in the judge step (R3G); False is the paper's reranking-without-guidelines
    ablation (the same three scores, asked for without their definitions)."""
    use_plan: bool = True
    """Plan before retrieval (R3G); False is the no-plan ablation and MRAG (a plan is then a violation)."""
    encoder: ImageEncoder | None = None
    """Encoder of query images that have no stored feature (an object, so never in a row's env_kwargs); None:
    the one the corpus manifest names."""
    show_captions: bool = False
    """CPU-demo aid layer: show each image's corpus caption beside it (MRAG-Bench images have none)."""
    max_turns: int = 6
    """Policy turns per episode."""
    last_turn_notice: bool = True
    """Tell the policy, before its last turn, to answer now."""
    max_obs_chars: int = 100_000
    """Upper bound of the observation-space text length: a text over it loses its end (marked "… [cut]", an
    ``observation_cut`` event); a cut that would drop an image placeholder is an error."""
    max_images_per_obs: int = 32
    """Upper bound of images in one observation."""
    max_image_side: int = 4096
    """Upper bound of an image side in the observation space."""

    def __post_init__(self) -> None:
        budget_of(self)  # a budget no image fits is refused here, naming the field
        check_least(
            self, {"max_turns": 2, "max_turn_chars": 1, "max_obs_chars": 1, "pool_size": 1, "top_k": 1}
        )
        if isinstance(self.weights, dict):  # env_kwargs arrive as JSON
            object.__setattr__(self, "weights", JudgeWeights(**self.weights))
        if self.rerank not in RERANK_MODES:
            raise ValueError(f"rerank must be one of {RERANK_MODES}, got {self.rerank!r}")
        if self.pool_source not in POOL_SOURCES:
            raise ValueError(f"pool_source must be one of {POOL_SOURCES}, got {self.pool_source!r}")
        if self.pool_size > self.max_images_per_obs:  # the pool is one observation's images
            raise ValueError(
                f"R3GConfig.pool_size must be at most max_images_per_obs ({self.max_images_per_obs}), "
                f"got {self.pool_size}"
            )
        if not 1 <= self.top_k <= self.pool_size:
            raise ValueError(f"need 1 <= top_k <= pool_size, got k={self.top_k}, P={self.pool_size}")
        if self.temperature <= 0:
            raise ValueError(f"R3GConfig.temperature must be positive, got {self.temperature!r}")


@dataclass
class _State:
    """What changes during an episode."""

    options: dict[str, Any]
    gold: list[str]
    turn: int = 0
    done: bool = False
    terminated: bool = False
    given_pool: list[int] | None = None
    """Corpus rows of the row's ``retrieved_images`` (``pool_source="benchmark"``)."""
    plan: str | None = None
    pool: list[int] | None = None
    stage1: list[float] = field(default_factory=list)
    evidence: list[int] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)


class R3GEnv(TurnEnv):
    """The R3G pipeline as a text-in, text-and-images-out environment."""

    metadata = {"render_modes": []}
    stop_strings: tuple[str, ...] = STOP_STRINGS
    action_kinds = ACTION_KINDS
    forced_answer = True

    def __init__(
        self, config: R3GConfig | None = None, *, retriever: RetrieverSource | None = None, **overrides: Any
    ):
        """``retriever`` serves the coarse search (module docstring); ``overrides`` are ``R3GConfig`` fields."""
        if config is not None and overrides:
            raise TypeError("pass either an R3GConfig or keyword overrides, not both")
        self.config = cfg = env_config("R3GEnv", R3GConfig, config, overrides)
        self.image_budget = budget_of(cfg)
        self.corpus = ImageCorpus.load(cfg.task_dir or synthetic_data("r3g", cfg.preset))
        if cfg.pool_source == "corpus" and cfg.pool_size > len(self.corpus):
            raise ValueError(f"pool_size {cfg.pool_size} exceeds the corpus ({len(self.corpus)} images)")
        self.retrievers = retriever or NamedRetrievers({"image": CoarseRetriever(self.corpus)})
        """Where the coarse search runs: the source passed in, else the corpus in process."""
        self.judges = cfg.rerank in JUDGED_MODES
        """Whether this configuration has a judge turn."""
        self.system_prompt = prompts.system_prompt(
            cfg.use_plan,
            self.judges,
            cfg.pool_size,
            cfg.top_k,
            cfg.max_turns,
            benchmark_pool=cfg.pool_source == "benchmark",
            guidelines=cfg.judge_guidelines,
        )
        self.action_space = gymnasium.spaces.Text(max_length=cfg.max_turn_chars)
        self.observation_space = text_image_space(
            cfg.max_obs_chars, cfg.max_images_per_obs, cfg.max_image_side
        )
        self._rows: pd.DataFrame | None = None
        self.state: _State | None = None

    # ----- gymnasium API -------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Start an episode from ``options`` (a row's env options) or a sampled training row."""
        super().reset(seed=seed)
        options = options or self._sample_options()
        missing = [k for k in REQUIRED_OPTIONS if k not in options]
        if missing:
            raise ValueError(f"R3G env options lack {missing}; got keys {sorted(options)}")
        cfg = self.config
        self.state = _State(dict(options), [str(g) for g in options["gold_images"]])
        self.state.given_pool = self._given_pool(options) if cfg.pool_source == "benchmark" else None
        pool_size = len(self.state.given_pool) if self.state.given_pool is not None else cfg.pool_size
        self.state.events.append(
            r3g_ev.r3g_task(
                self.state.gold,
                str(options.get("scenario", "")),
                pool_size,
                cfg.top_k,
                cfg.rerank,
                cfg.use_plan,
                cfg.pool_source,
                cfg.judge_guidelines,
            )
        )
        text = prompts.task_text(options["question"], options.get("options"))
        query = read_image(self.corpus.root / options["query_image"], self.image_budget, "query")
        return self._bounded(text, [query], turn=-1), self._info()

    # ----- the turn loop's hooks (``ragym.envs.turns.TurnEnv.step``) ----------------------------------
    def _episode(self) -> _State:
        return self._running()

    def _parse(self, action: Any) -> Any:
        text = action if isinstance(action, str) else str(action)
        return parse_action(text, max_chars=self.config.max_turn_chars)

    def _notices_last_turn(self) -> bool:
        return self.config.last_turn_notice

    def _malformed(self, error: ParseError, turn: int) -> Outcome:
        return Outcome(prompts.error_text(error.message))

    def _act(self, action: Any, turn: int) -> Outcome:
        text, images = self._execute(action)
        return Outcome(text, images, terminated=self._running().terminated)

    # ----- transitions ---------------------------------------------------------------------------
    def _running(self) -> _State:
        """The episode's state, which reset() made (step() checks that before any transition)."""
        if self.state is None:
            raise RuntimeError("call reset() before step()")
        return self.state

    def _execute(self, parsed: Any) -> tuple[str, list[np.ndarray]]:
        state = self._running()
        if isinstance(parsed, Plan):
            return self._plan(parsed.text), []
        if isinstance(parsed, Retrieve):
            return self._retrieve()
        if isinstance(parsed, Judge):
            return self._judge(parsed)
        assert isinstance(parsed, Answer)
        state.events.append(ev.answer(state.turn, parsed.text))
        state.terminated = True
        return "", []

    def _violation(self, reason: str, message: str) -> str:
        state = self._running()
        state.events.append(ev.protocol_violation(state.turn, reason))
        return prompts.error_text(message)

    def _plan(self, text: str) -> str:
        state = self._running()
        if not self.config.use_plan:
            return self._violation(
                "plan_disabled", "this episode has no plan step; use <retrieve></retrieve>."
            )
        if state.plan is not None:
            return self._violation("second_plan", "the plan is already written.")
        if state.pool is not None:
            return self._violation("plan_after_retrieval", "the plan must come before any evidence.")
        state.plan = text
        state.events.append(r3g_ev.plan(state.turn, text))
        return prompts.PLAN_RECORDED

    def _retrieve(self) -> tuple[str, list[np.ndarray]]:
        state, cfg = self._running(), self.config
        if cfg.use_plan and state.plan is None:
            return self._violation("retrieve_before_plan", "write your plan with <plan>...</plan> first."), []
        if state.pool is not None:
            return self._violation("second_retrieval", "the candidate pool was already retrieved."), []
        query = self.corpus.query_vector(state.options["query_image"], cfg.encoder)
        if state.given_pool is not None:  # the benchmark's list, in its order: similarities are recorded only
            state.pool, sims = list(state.given_pool), self.corpus.similarities(query, state.given_pool)
        else:
            hits = self.retrievers.retriever("image").search(query, cfg.pool_size)
            state.pool, sims = self.corpus.rows_of([h.docid for h in hits]), [h.score for h in hits]
        state.stage1 = stage1_scores(sims, cfg.temperature)
        state.events.append(
            r3g_ev.coarse_retrieval(state.turn, self._ids(state.pool), sims, state.stage1, state.gold)
        )
        if not self.judges:
            return self._select(state.pool, [None] * len(state.pool), [])
        captions = [self.corpus.captions[i] for i in state.pool]
        return prompts.pool_text(captions, cfg.show_captions), self._images(state.pool)

    def _judge(self, judge: Judge) -> tuple[str, list[np.ndarray]]:
        state, cfg = self._running(), self.config
        if state.pool is None:
            return self._violation("judge_before_retrieval", "retrieve the candidate pool first."), []
        if not self.judges:
            ranked_by = "Stage-1 only" if cfg.rerank == "stage1" else "retrieval order"
            return self._violation("judge_disabled", f"this episode ranks by {ranked_by}; answer now."), []
        if state.evidence is not None:
            return self._violation("second_judge", "the pool was already judged."), []
        size = len(state.pool)
        errors = [(e.candidate, e.reason) for e in judge.errors]
        stage2: list[float | None] = [None] * size
        for score in judge.scores:
            if not 1 <= score.candidate <= size:
                errors.append((score.candidate, "unknown_candidate"))
            else:
                stage2[score.candidate - 1] = cfg.weights.stage2(score.r, score.t, score.a)
        reported = {c for c, _ in errors}
        errors += [
            (i, "not_judged") for i in range(1, size + 1) if stage2[i - 1] is None and i not in reported
        ]
        for candidate in reported:  # a repeated candidate, or a bad line and a good one: no usable score
            if candidate is not None and 1 <= candidate <= size:
                stage2[candidate - 1] = None
        return self._select(state.pool, stage2, errors)

    def _select(
        self, pool: list[int], stage2: list[float | None], errors: list[tuple[int | None, str]]
    ) -> tuple[str, list[np.ndarray]]:
        """Rank the pool (``state.pool``), keep the top k as evidence, and show it."""
        state, cfg = self._running(), self.config
        state.events += [r3g_ev.judge_error(state.turn, c, r) for c, r in errors]
        final = final_scores(state.stage1, [s or 0.0 for s in stage2], cfg.rerank)
        chosen = top_k(final, cfg.top_k)
        state.evidence = [pool[i] for i in chosen]
        state.events.append(
            r3g_ev.evidence_selected(
                state.turn, self._ids(pool), state.stage1, stage2, final, chosen, state.gold, cfg.rerank
            )
        )
        captions = [self.corpus.captions[i] for i in state.evidence]
        text = prompts.evidence_text(captions, cfg.show_captions, state.plan, cfg.rerank)
        if errors:
            ignored = sum(c is None or not 1 <= c <= len(pool) for c, _ in errors)
            text = f"{text}\n{prompts.judge_notice(stage2.count(None), ignored)}"
        return text, self._images(state.evidence)

    def _images(self, rows: list[int]) -> list[np.ndarray]:
        """Corpus images ``rows`` fitted to the candidate budget (decoded once per process, while cached)."""
        budget, corpus = self.image_budget, self.corpus
        return [np.array(read_image(corpus.root / corpus.paths[i], budget, "candidate")) for i in rows]

    # ----- helpers -------------------------------------------------------------------------------
    def _given_pool(self, options: dict[str, Any]) -> list[int]:
        """Corpus rows of the row's ``retrieved_images``; a row without them is an error naming it."""
        given = options.get("retrieved_images")
        if not given:
            raise ValueError(
                f"pool_source='benchmark' needs a non-empty retrieved_images env option (MRAG-Bench rows from "
                f"ragym prep mragbench carry it); question {options.get('question_id', '?')!r} has {given!r}"
            )
        return self.corpus.rows_of([str(i) for i in given])

    def _ids(self, rows: list[int]) -> list[str]:
        return [self.corpus.image_ids[i] for i in rows]

    def _info(self) -> dict[str, Any]:
        state = self._running()
        return {"events": json.loads(json.dumps(state.events)), "turn": state.turn}

    def _sample_options(self) -> dict[str, Any]:
        if self._rows is None:
            path = self.corpus.root / "data" / "train.parquet"
            if not path.exists():
                raise FileNotFoundError(f"reset(options=None) samples rows from {path}, which does not exist")
            self._rows = pd.read_parquet(path)
        row = self._rows.iloc[int(self.np_random.integers(len(self._rows)))]
        return json.loads(row["extra_info"]["env_options"])


CONFIG_FIELDS = tuple(f.name for f in fields(R3GConfig))
"""Names accepted as ``env_kwargs``."""
