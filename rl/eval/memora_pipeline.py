"""MEMORA's fixed pipeline with its fixed linear controller, played on ``MEMORA-v0`` as a scripted policy.

The order of calls is the paper's (sections 3.1, 3.5-3.7, 3.10-3.11): decompose the query with the memory
summary into N factors, one subquery per factor, one evidence extraction per factor over the top K_c
candidates, then the controller. ragym's reading of the lost section 3.10: the controller computes the
linear value ``z = w_margin * margin + w_support * support + bias`` from the env's two signals (the score
gap at the top-K boundary and the mean factor coverage of the top K); ``z >= stop_threshold`` stops;
otherwise, while expansion rounds remain and support is below ``expand_below``, it expands (one more
subquery and extraction, factors in turn); otherwise it calls the judge and stops.

Each decision becomes one turn of the env's grammar, so the baseline runs through exactly the parser,
budgets, events and rewards a trained policy gets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import gymnasium

from rl.eval.memora_models import CommitteeModel, content_words


@dataclass(frozen=True)
class PipelineConfig:
    """The fixed pipeline's knobs and its linear controller."""

    num_factors: int = 3
    """N: factors per decomposition (the paper's default)."""
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


def _clean(text: str) -> str:
    """Text safe inside a grammar tag: no angle brackets, one line."""
    return re.sub(r"\s+", " ", text.replace("<", " ").replace(">", " ")).strip() or "none"


def decompose_turn(factors: list[tuple[str, float]]) -> str:
    """The decompose action text."""
    body = "".join(f"<factor p={p:.3f}>{_clean(t)}</factor>" for t, p in factors)
    return f"<reason>decompose the query into intent factors</reason><decompose>{body}</decompose>"


def subquery_turn(factor: int, text: str) -> str:
    """The subquery action text."""
    return (
        f"<reason>expand the pool for factor {factor}</reason><subquery f={factor}>{_clean(text)}</subquery>"
    )


def extract_turn(factor: int, evidence: list[tuple[int, float, str]], scale: float) -> str:
    """The extract action text (one entry per candidate number; scores clipped to the scale)."""
    seen: dict[int, tuple[float, str]] = {}
    for number, score, snippet in evidence:
        seen.setdefault(number, (min(max(score, 0.0), scale), snippet))
    body = "".join(f"<e d={n} s={s:.3f}>{_clean(snip)}</e>" for n, (s, snip) in seen.items())
    return f"<reason>evidence for factor {factor}</reason><extract f={factor}>{body}</extract>"


def judge_turn(order: list[int]) -> str:
    """The judge action text."""
    return (
        f"<reason>listwise verdict</reason><judge>{' > '.join(str(n) for n in dict.fromkeys(order))}</judge>"
    )


STOP_TURN = "<reason>the ranking is final</reason><stop></stop>"


class MemoraPipeline:
    """The paper's pipeline as a policy: ``play`` runs one episode and returns the final info."""

    def __init__(self, model: CommitteeModel, config: PipelineConfig = PipelineConfig()) -> None:
        self.model = model
        self.config = config

    def play(
        self, env: gymnasium.Env, options: dict[str, Any] | None = None, seed: int | None = None
    ) -> dict:
        """Run one episode to its end; returns the last ``info`` plus ``info["turns"]``, the turn texts sent."""
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
        return {**info, "turns": sent}

    def _turns(self, view: dict[str, Any]):
        """A generator of turns; each ``send`` gives it the view after the last turn."""
        c, query = self.config, view["query"]
        if view.get("image_description"):
            query = f"{query} {view['image_description']}"
        factors = self.model.decompose(query, view["memories"], c.num_factors)
        view = yield decompose_turn(factors)
        for k, (text, _) in enumerate(factors, 1):
            view = yield subquery_turn(k, " ".join(dict.fromkeys(content_words(query) + content_words(text))))
        for k, (text, _) in enumerate(factors, 1):
            view = yield extract_turn(
                k, self.model.extract(query, text, view["candidates"]), c.evidence_scale
            )
        for round_ in range(c.max_expansions + 1):
            signals, left = view["signals"], view["calls_left"]
            if c.w_margin * signals["margin"] + c.w_support * signals["support"] + c.bias >= c.stop_threshold:
                return
            expand = signals["support"] < c.expand_below and left["subquery"] > 0 and left["extract"] > 0
            if round_ < c.max_expansions and expand:
                k = round_ % len(factors) + 1
                view = yield subquery_turn(k, factors[k - 1][0] + " " + query)
                view = yield extract_turn(
                    k, self.model.extract(query, factors[k - 1][0], view["candidates"]), c.evidence_scale
                )
                continue
            if left["judge"] > 0:
                order = self.model.judge(query, view["factors"], view["candidates"][: c.judge_depth])
                yield judge_turn(order)
            return
