"""``ragym budget --recipe RECIPE --rows ROWS.parquet``: prompt and response tokens of each row's longest episode
at the recipe's settings, their distribution, and the share the recipe's lengths would truncate.

Each row's env is built as the agent loop builds it (the row's ``env_kwargs``, the recipe's ``ragym.images``
budget and retrieval service); ``ragym.rl.budget.episodes`` plays the paper's longest episode on it and
``ragym.rl.budget.tokens`` counts it. An episode is truncated when its prompt exceeds ``rollout.prompt_length`` or its
response ``rollout.response_length``, the limits the agent loop applies (``data.max_prompt_length`` /
``max_response_length`` by default). ``ragym prep`` prints the same report for a sample of the rows it writes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from ragym.envs.registry import make_env
from ragym.rl.budget.episodes import Played, longest_episode_of, play_longest
from ragym.rl.budget.tokens import EpisodeTokens, PixelRule, TextCounter, count_episode, pixel_rule
from ragym.rl.data.rows import DataError
from ragym.rl.errors import UsageError

logger = logging.getLogger(__name__)

ACTION_TOKENS = 128
"""Default floor of each generated turn's tokens: a real policy's ``<reason>`` is longer than a scripted one's."""
PREP_SAMPLE = 200
"""Rows ``ragym prep`` reports on (a seeded sample of what it wrote), so prep stays fast."""
MAX_TURNS_KEY = "actor_rollout_ref.rollout.multi_turn.max_assistant_turns"
PARTS = (
    "prompt_text",
    "prompt_visual",
    "prompt",
    "response_actions",
    "response_obs_text",
    "response_obs_visual",
    "response",
    "turns",
    "num_images",
)
"""Per-episode figures whose distribution the report prints."""


class RowEpisodes:
    """Builds each row's env exactly as the agent loop does (cached per env id and kwargs) and plays it."""

    def __init__(self, config: DictConfig) -> None:
        from ragym.rl.recipe.env_settings import recipe_env_settings
        from ragym.rl.recipe.images import apply_recipe_images
        from ragym.rl.recipe.retrieval import recipe_retrieval_url

        self.images = apply_recipe_images(config)  # also sizes this process's image cache, as the loop does
        self.url = recipe_retrieval_url(config)
        self.max_turns = OmegaConf.select(config, MAX_TURNS_KEY, default=None)
        self.settings = recipe_env_settings(config)
        self._envs: dict[str, Any] = {}

    def env(self, spec: Any) -> Any:
        """The row's env, built with the kwargs the agent loop uses (``EpisodeSpec.recipe_env_kwargs``)."""
        longest_episode_of(spec.env_id)  # an env without the hook is refused before it is built
        kwargs = spec.recipe_env_kwargs(self.url, self.images, self.settings)
        key = json.dumps([spec.env_id, kwargs], sort_keys=True, default=str)
        if key not in self._envs:
            self._envs[key] = make_env(spec.env_id, **kwargs)
            # MEMORA: read the domain memory on disk, never write the user's files.
            if kwargs.get("memory_dir"):
                self._envs[key].freeze_memory()
        return self._envs[key]

    def measure(
        self, row: dict[str, Any], text: TextCounter, pixels: PixelRule, action_tokens: int
    ) -> EpisodeTokens:
        """The row's longest episode, counted."""
        from ragym.rl.agent_loop.observations import EpisodeSpec

        spec = EpisodeSpec.from_extra_info(dict(row["extra_info"]))
        env = self.env(spec)
        played = play_longest(spec.env_id, env, spec.env_options, spec.seed, self.max_turns)
        return count_episode(played, env.system_prompt, spec.seed, spec.env_id, text, pixels, action_tokens)

    def measure_prompt(self, row: dict[str, Any], text: TextCounter, pixels: PixelRule) -> EpisodeTokens:
        """The row's prompt alone (its env reset, nothing played), counted: what the agent loop sends first."""
        from ragym.rl.agent_loop.observations import EpisodeSpec

        spec = EpisodeSpec.from_extra_info(dict(row["extra_info"]))
        env = self.env(spec)
        obs, _ = env.reset(seed=spec.seed, options=spec.env_options)
        return count_episode(Played([], [obs]), env.system_prompt, spec.seed, spec.env_id, text, pixels, 0)

    def close(self) -> None:
        """Close the envs built."""
        for env in self._envs.values():
            env.close()
        self._envs.clear()


def measure_rows(
    rows: Sequence[dict[str, Any]],
    config: DictConfig,
    text: TextCounter,
    pixels: PixelRule,
    action_tokens: int,
) -> tuple[list[EpisodeTokens], list[str]]:
    """Every row's episode tokens, and the rows whose episode could not run (described, skipped)."""
    runner, episodes, bad = RowEpisodes(config), [], []
    try:
        for row in rows:
            try:
                episodes.append(runner.measure(row, text, pixels, action_tokens))
            except UsageError:
                raise
            except Exception as err:  # noqa: BLE001 - a row whose episode cannot run is listed, as load_rows does
                index = (row.get("extra_info") or {}).get("index")
                bad.append(f"extra_info.index {index}: {type(err).__name__}: {err}".splitlines()[0])
                logger.warning("budget: skipped the row of %s", bad[-1])
    finally:
        runner.close()
    return episodes, bad


def summarise(episodes: list[EpisodeTokens], max_prompt: int, max_response: int) -> dict[str, Any]:
    """min / p50 / p90 / max of each figure, and the truncated shares."""
    figures = {name: np.array([_figure(e, name) for e in episodes]) for name in PARTS}
    spread = {
        name: {"min": int(v.min()), "p50": _pct(v, 50), "p90": _pct(v, 90), "max": int(v.max())}
        for name, v in figures.items()
    }
    over_prompt = figures["prompt"] > max_prompt
    over_response = figures["response"] > max_response
    num = len(episodes)
    return {
        "episodes": num,
        "envs": dict(Counter(e.env_id for e in episodes)),
        "max_prompt_length": max_prompt,
        "max_response_length": max_response,
        "tokens": spread,
        "truncated_prompt": int(over_prompt.sum()),
        "truncated_response": int(over_response.sum()),
        "truncated": int((over_prompt | over_response).sum()),
        "truncated_share": float((over_prompt | over_response).sum()) / num,
    }


def _figure(episode: EpisodeTokens, name: str) -> int:
    return int(getattr(episode, name))


def _pct(values: np.ndarray, q: int) -> int:
    return int(round(float(np.percentile(values, q))))


def summary_line(summary: dict[str, Any]) -> str:
    """The report's last line."""
    p90, limit = summary["tokens"]["response"]["p90"], summary["max_response_length"]
    return (
        f"budget: {summary['episodes']:,} episodes, response p90 {p90:,} / {limit:,}, "
        f"truncated {100 * summary['truncated_share']:.1f}%"
    )


def render(summary: dict[str, Any], assumptions: list[str], header: str, bad: list[str]) -> str:
    """The printed report: header, assumptions, the distribution table, the truncated shares, the summary."""
    labels = {
        "prompt_text": "prompt text",
        "prompt_visual": "prompt visual",
        "prompt": "prompt",
        "response_actions": "response: actions",
        "response_obs_text": "response: observation text",
        "response_obs_visual": "response: observation visual",
        "response": "response",
        "turns": "turns",
        "num_images": "images after the prompt",
    }
    limits = {"prompt": summary["max_prompt_length"], "response": summary["max_response_length"]}
    lines = [header, *(f"  assumed: {a}" for a in assumptions)]
    lines.append(f"  {'tokens per episode':<30}{'min':>9}{'p50':>9}{'p90':>9}{'max':>9}{'limit':>9}")
    for name in PARTS:
        row = summary["tokens"][name]
        limit = f"{limits[name]:,}" if name in limits else ""
        cells = "".join(f"{row[k]:>9,}" for k in ("min", "p50", "p90", "max"))
        lines.append(f"  {labels[name]:<30}{cells}{limit:>9}")
    num = summary["episodes"]
    lines.append(
        f"  truncated: prompt {summary['truncated_prompt']} of {num} "
        f"({100 * summary['truncated_prompt'] / num:.1f}%), response {summary['truncated_response']} "
        f"of {num} ({100 * summary['truncated_response'] / num:.1f}%)"
    )
    if bad:
        lines.append(f"  skipped {len(bad)} row(s) that could not run (first: {bad[0]})")
    lines.append(summary_line(summary))
    return "\n".join(lines)


def budget_report(
    rows: Sequence[dict[str, Any]],
    config: DictConfig,
    text: TextCounter,
    text_source: str,
    action_tokens: int,
    header: str,
    model_dir: Path | None = None,
    skipped: Sequence[str] = (),
) -> dict[str, Any]:
    """Play and count every row; returns ``{"text": the printed report, "summary", "assumptions", "episodes"}``.
    ``skipped``: rows already left out when the rows were loaded (described)."""
    pixels = pixel_rule(config, model_dir)
    episodes, bad = measure_rows(rows, config, text, pixels, action_tokens)
    bad = [*skipped, *bad]
    if not episodes:
        raise DataError(f"no row's episode could run (first: {bad[0] if bad else 'no rows'})")
    # The limits the agent loop applies: verl's rollout keys, which data.max_* only set by default.
    rollout = config.actor_rollout_ref.rollout
    summary = summarise(episodes, int(rollout.prompt_length), int(rollout.response_length))
    assumptions = [
        text.describe(text_source),
        f"visual tokens: the processor's resize (factor {pixels.factor}, {pixels.min_pixels:,}-"
        f"{pixels.max_pixels:,} pixels, from {pixels.source}) + 2 markers per image",
        f"episodes: the paper's longest per row (ragym.rl.budget.episodes), at most {OmegaConf.select(config, MAX_TURNS_KEY)} "
        f"turns; each generated turn counted as max(its scripted text, {action_tokens}) tokens (--action-tokens)",
    ]
    limits = (summary["max_prompt_length"], summary["max_response_length"])
    records = [
        {
            **dataclasses.asdict(e),
            "prompt": e.prompt,
            "response": e.response,
            "truncated_prompt": e.prompt > limits[0],
            "truncated_response": e.response > limits[1],
        }
        for e in episodes
    ]
    return {
        "text": render(summary, assumptions, header, bad),
        "summary": summary,
        "assumptions": assumptions,
        "skipped_rows": bad,
        "episodes": records,
    }
