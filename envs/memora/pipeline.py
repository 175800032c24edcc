"""MEMORA's fixed pipeline with its fixed linear controller, played on ``MEMORA-v0`` as a scripted policy.

The order of calls is the paper's (sections 3.1, 3.5-3.7, 3.10-3.11): decompose the query with the memory
summary into N factors (N = 1 allowed), one subquery per factor written by the model, evidence extraction per
factor over the whole candidate pool (one call per ``extract_batch`` candidates, one extract turn per factor),
then the controller; the judge receives the top candidates, the factor evidence graph and the memory summary.
ragym's reading of the lost section 3.10: the controller computes the linear value
``z = w_margin * margin + w_support * support + bias`` from the env's two signals (the score gap at the
top-K boundary and the mean factor coverage of the top K); ``z >= stop_threshold`` stops; otherwise, while
expansion rounds remain and support is below ``expand_below``, it expands (one more subquery and extraction,
factors in turn); otherwise it calls the judge and stops.

Each model method call is one LLM call; ``play`` counts them (``info["llm_calls"]``), the cost axis of the
paper's Fig. 3: 1 + N + N * ceil(|pool| / extract_batch) + expansions + judge. Extraction covers the pool the
subqueries grew, so the count grows faster than N, as Fig. 3 describes; the figure's exact counts (4 at
N = 1, 25 at N = 5) depend on the paper's unstated batch and pool sizes.

Each decision becomes one turn of the env's grammar, so the baseline runs through exactly the parser,
budgets, events and rewards a trained policy gets.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import gymnasium

from ragym.envs.memora.actions import Decompose, Extract, Judge, Stop, Subquery, format_action
from ragym.envs.memora.models import CommitteeModel


@dataclass(frozen=True)
class PipelineConfig:
    """The fixed pipeline's knobs and its linear controller."""

    num_factors: int = 3
    """N: factors per decomposition (the paper's default; Fig. 3 runs 1 to 5)."""
    extract_batch: int = 30
    """Candidates per extraction call; extraction covers the whole pool (ragym's choice: K_c = 30)."""
    snippet_chars: int = 40
    """Characters of each evidence snippet kept in the extract turn (a whole pool fits the env's turn size)."""
    judge_depth: int = 20
    """Candidates the judge orders."""
    w_margin: float = 5.0
    """Controller weight of the top-K margin."""
    w_support: float = 1.0
    """Controller weight of the top-K evidence support."""
    bias: float = 0.0
    """Controller bias."""
    stop_threshold: float = 1.2
    """Stop without the judge when z reaches this."""
    expand_below: float = 0.5
    """Expand again while support is below this and rounds remain."""
    max_expansions: int = 1
    """Extra subquery + extraction rounds the controller may take."""
    evidence_scale: float = 10.0
    """Scores are clipped to [0, evidence_scale] (the env's scale)."""

    def __post_init__(self) -> None:
        if self.num_factors < 1 or self.extract_batch < 1:
            raise ValueError(f"PipelineConfig: need num_factors >= 1 and extract_batch >= 1, got {self}")


def _clean(text: str) -> str:
    """Text safe inside a grammar tag: no angle brackets, one line."""
    return re.sub(r"\s+", " ", text.replace("<", " ").replace(">", " ")).strip() or "none"


def decompose_turn(factors: list[tuple[str, float]]) -> str:
    """The decompose action text."""
    action = Decompose(tuple((_clean(t), round(p, 3)) for t, p in factors))
    return format_action(action, "decompose the query into intent factors")


def subquery_turn(factor: int, text: str) -> str:
    """The subquery action text."""
    return format_action(Subquery(factor, _clean(text)), f"expand the pool for factor {factor}")


def extract_turn(
    factor: int, evidence: list[tuple[int, float, str]], scale: float, snippet_chars: int
) -> str:
    """The extract action text: one entry per candidate number, scores clipped to the scale, snippets cut to
    ``snippet_chars`` (so a whole pool of 100 fits the env's 8,192-character turn)."""
    seen: dict[int, tuple[float, str]] = {}
    for number, score, snippet in evidence:
        seen.setdefault(number, (min(max(score, 0.0), scale), snippet))
    items = tuple((n, round(s, 3), _clean(snip[:snippet_chars])) for n, (s, snip) in seen.items())
    return format_action(Extract(factor, items), f"evidence for factor {factor}")


def judge_turn(order: list[int]) -> str:
    """The judge action text."""
    return format_action(Judge(tuple(dict.fromkeys(order))), "listwise verdict")


CALL_KINDS = ("decompose", "subquery", "extract", "judge")
"""The model calls ``play`` counts (each is one LLM request)."""

STOP_TURN = format_action(Stop(), "the ranking is final")


class MemoraPipeline:
    """The paper's pipeline as a policy: ``play`` runs one episode and returns the final info."""

    def __init__(self, model: CommitteeModel, config: PipelineConfig = PipelineConfig()) -> None:
        self.model = model
        self.config = config
        self.calls: Counter = Counter()
        self.unknown: Counter = Counter()
        """Answer entries per call kind that named a candidate the call was not shown (dropped)."""

    def play(
        self, env: gymnasium.Env, options: dict[str, Any] | None = None, seed: int | None = None
    ) -> dict:
        """Run one episode to its end; returns the last ``info`` plus ``info["turns"]``, the turn texts sent,
        ``info["llm_calls"]``, the model calls by kind and their ``total``, and ``info["unknown_candidates"]``, the
        answer entries by kind that named a candidate the call was not shown (left out of the turn: one would
        make the env refuse the whole extraction or verdict)."""
        self.calls, self.unknown = Counter(), Counter()
        _, info = env.reset(seed=seed, options=options)
        turns, sent = self._turns(info["view"]), []
        done = False
        try:
            turn = next(turns)
            while not done:
                sent.append(turn)
                _, _, terminated, truncated, info = env.step(turn)
                done = terminated or truncated
                if not done:
                    turn = turns.send(info["view"])
        except StopIteration:
            if not done:
                sent.append(STOP_TURN)
                _, _, _, _, info = env.step(STOP_TURN)
        calls = {kind: self.calls[kind] for kind in CALL_KINDS}
        unknown = {kind: self.unknown[kind] for kind in ("extract", "judge")}
        return {
            **info,
            "turns": sent,
            "llm_calls": {**calls, "total": sum(calls.values())},
            "unknown_candidates": unknown,
        }

    def _turns(self, view: dict[str, Any]):
        """A generator of turns; each ``send`` gives it the view after the last turn."""
        c, m, query = self.config, self.model, view["query"]
        if view.get("image_description"):
            query = f"{query} {view['image_description']}"
        self.calls["decompose"] += 1
        factors = m.decompose(query, view["memories"], c.num_factors)[: c.num_factors]
        view = yield decompose_turn(factors)
        issued: list[list[str]] = [[] for _ in factors]
        for k, (text, _) in enumerate(factors, 1):
            view = yield subquery_turn(k, self._subquery(query, text, issued[k - 1]))
        for k, (text, _) in enumerate(factors, 1):
            if (turn := self._extract_turn(k, query, text, view["pool"])) is not None:
                view = yield turn
        for round_ in range(c.max_expansions + 1):
            signals, left = view["signals"], view["calls_left"]
            if c.w_margin * signals["margin"] + c.w_support * signals["support"] + c.bias >= c.stop_threshold:
                return
            expand = signals["support"] < c.expand_below and left["subquery"] > 0 and left["extract"] > 0
            if round_ < c.max_expansions and expand:
                k = round_ % len(factors) + 1
                view = yield subquery_turn(k, self._subquery(query, factors[k - 1][0], issued[k - 1]))
                if (turn := self._extract_turn(k, query, factors[k - 1][0], view["pool"])) is not None:
                    view = yield turn
                continue
            if left["judge"] > 0:
                candidates = view["candidates"][: c.judge_depth]
                shown = {cand["number"] for cand in candidates}
                evidence = [e for e in view["evidence"] if e["number"] in shown]
                self.calls["judge"] += 1
                order = m.judge(query, view["factors"], candidates, evidence, view["memories"])
                kept = [n for n in order if n in shown]
                self.unknown["judge"] += len(order) - len(kept)
                if kept:  # a verdict of none is no turn
                    yield judge_turn(kept)
            return

    def _subquery(self, query: str, factor: str, issued: list[str]) -> str:
        """One model-written subquery for ``factor``, remembered so a repeat asks for a different one."""
        self.calls["subquery"] += 1
        text = self.model.subquery(query, factor, list(issued))
        issued.append(text)
        return text

    def _extract_turn(self, k: int, query: str, factor: str, pool: list[dict[str, Any]]) -> str | None:
        """Evidence for factor ``k`` over the whole pool, one model call per batch, as one extract turn (None when
        the model found none: the grammar has no empty extraction)."""
        c, evidence = self.config, []
        for start in range(0, len(pool), c.extract_batch):
            self.calls["extract"] += 1
            batch = pool[start : start + c.extract_batch]
            answer = self.model.extract(query, factor, batch)
            kept = [e for e in answer if e[0] in {cand["number"] for cand in batch}]
            self.unknown["extract"] += len(answer) - len(kept)
            evidence += kept
        return extract_turn(k, evidence, c.evidence_scale, c.snippet_chars) if evidence else None
