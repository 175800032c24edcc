"""The paper's longest episode of each env, played by a scripted policy on the env the agent loop would build.

- ``KBVQA-v0`` / ``KBVQA-Demo-v0``: every query image searched and paged to its last batch (Rej_max rejections,
  so Rej_max + 1 batches of K candidates), one SearchText with the last batches' top names, then the answer.
- ``R3G-v0``: plan, retrieve (pool of P), judge every pooled image, answer with the k evidence images
  (``ragym.rl.demo.r3g.R3GExpert``).
- ``MEMORA-v0``: MEMORA's fixed pipeline (``ragym.rl.eval.memora_pipeline``) with K_max factors, never stopping
  early: decompose, a subquery and an extraction over the whole pool per factor, expansions while the budgets
  last, the judge, stop.
- ``DocMemo-v0``: every round selects all candidates (E new evidence pages) and refines, the last one answers:
  T rounds, E x T pages.

The env's own T_max, last-turn notice and forced end cut each where it runs out of turns, as do the recipe's
``max_assistant_turns``; each turn is the scripted text, so a real policy's reasoning is longer (``ragym budget
--action-tokens``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np

from ragym.envs.kbvqa.actions import Answer, Reject, SearchImage, SearchText, format_action
from ragym.envs.kbvqa.prompts import LAST_TURN_NOTICE
from ragym.rl.errors import UsageError
from ragym.rl.eval.scripted import run_episode

KBVQA_ENVS = ("KBVQA-v0", "KBVQA-Demo-v0")
SUPPORTED_ENVS = (*KBVQA_ENVS, "R3G-v0", "MEMORA-v0", "DocMemo-v0")
"""Envs whose longest episode ``play_longest`` knows."""

_HEADER = re.compile(r"^Candidates for Image \d+", re.MULTILINE)
_CANDIDATE = re.compile(r"^\[\d+\] <image> (.+?)(?: \(signature: [^\s)]+\))?$", re.MULTILINE)


@dataclass(frozen=True)
class Played:
    """One episode as the agent loop would see it: the generated turns and every observation (the task first)."""

    turns: list[str]
    """The policy's turn texts, in order."""
    observations: list[dict[str, Any]]
    """The task observation, then the observation after each turn (the one after the last is not in context)."""


class TurnCap(gymnasium.Wrapper):
    """Logs every observation and ends the episode after ``max_turns`` turns, as the agent loop's
    ``max_assistant_turns`` does (None: the env's own budget only)."""

    def __init__(self, env: gymnasium.Env, max_turns: int | None) -> None:
        super().__init__(env)
        self.max_turns = max_turns
        self.observations: list[dict[str, Any]] = []
        self.turns: list[str] = []

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        """Reset and start the log with the task observation."""
        obs, info = self.env.reset(**kwargs)
        self.observations, self.turns = [obs], []
        return obs, info

    def step(self, action: Any) -> tuple[Any, ...]:
        """Step, log the turn and its observation, and truncate at the cap."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.turns.append(str(action))
        self.observations.append(obs)
        capped = self.max_turns is not None and len(self.turns) >= self.max_turns
        return obs, reward, terminated, truncated or (capped and not terminated), info


class LongestKBVQA:
    """Pages every query image to its last batch, reads the last batches' top names, answers.

    ``ragym.rl.eval.scripted.SignaturePolicy`` confirms a matching candidate as soon as one is shown; the longest
    episode rejects every batch it may, so this is its own small policy.
    """

    def __init__(self, env: Any) -> None:
        self.env = env

    def reset(self, obs: dict[str, Any]) -> None:
        """Start an episode from the task observation."""
        config = self.env.unwrapped.config
        self.max_rejections, self.max_queries = config.max_rejections, config.max_text_queries
        self.num_images = len(obs["images"])
        self.image, self.rejections, self.names, self.searched_text = 0, 0, [], False

    def act(self, obs_text: str) -> str:
        """Reject until the image's last batch, then the next image; then SearchText; then Answer."""
        if LAST_TURN_NOTICE in obs_text or obs_text.startswith("Results for"):
            return format_action(Answer("unknown"), "answer with what was read")
        if _HEADER.search(obs_text):
            if self.rejections < self.max_rejections:
                self.rejections += 1
                return format_action(Reject(), "no candidate matches the query image")
            self.names += [m.group(1) for m in _CANDIDATE.finditer(obs_text)][:1]
        # The task, an image's last batch, or no batch (boundary, no more candidates, retrieval down): next image.
        self.image, self.rejections = self.image + 1, 0
        if self.image <= self.num_images:
            return format_action(SearchImage(self.image), f"identify the entity in image {self.image}")
        if self.names and not self.searched_text:
            self.searched_text = True
            return format_action(SearchText(tuple(self.names[: self.max_queries])), "read about them")
        return format_action(Answer("unknown"), "answer with what I have")


class LongestDocMemo:
    """Selects every candidate each round and refines, marking the evidence read useful; answers in the last."""

    _CANDIDATE = re.compile(r"^\s*\[p(\d+)\]", re.MULTILINE)
    _EVIDENCE = re.compile(r"^Page (\d+) \(", re.MULTILINE)

    def __init__(self, env: Any) -> None:
        self.env = env

    def reset(self, obs: dict[str, Any]) -> None:
        """Remember the question (each refinement searches it again, worded as a new query)."""
        self.question = obs["text"].split("\n", 1)[0].removeprefix("Question: ")
        self.round = 0

    def act(self, obs_text: str) -> str:
        """Select all candidates, then refine (or answer in the last round)."""
        candidates = self._CANDIDATE.findall(obs_text)
        if candidates and "Select pages to read" in obs_text:
            return f"<reason>read every candidate</reason><select>{','.join(candidates)}</select>"
        if obs_text.startswith("Evidence pages") and "last round" not in obs_text:
            self.round += 1
            useful = ",".join(self._EVIDENCE.findall(obs_text))
            query = f"{self.question} (more evidence, round {self.round + 1})"
            return (
                f"<reason>part of the answer is still missing</reason><refine><query>{query}</query>"
                f"<note>the pages read so far answer part of it</note><useful>{useful}</useful></refine>"
            )
        if obs_text.startswith("Retrieval is unavailable"):
            return f"<reason>search again</reason><refine><query>{self.question}</query></refine>"
        return "<reason>the evidence read answers it</reason><answer>unknown</answer>"


def _policy(env_id: str, env: Any) -> Any:
    """The scripted policy of ``env_id``'s longest episode (``act``-style: reset(obs), act(text))."""
    if env_id in KBVQA_ENVS:
        return LongestKBVQA(env)
    if env_id == "R3G-v0":
        from ragym.rl.demo.r3g import R3GExpert

        return R3GExpert(env, np.random.default_rng(0), noise=0.0)
    if env_id == "DocMemo-v0":
        return LongestDocMemo(env)
    raise UsageError(
        f"ragym budget has no longest-episode policy for {env_id}; it knows {', '.join(SUPPORTED_ENVS)}"
    )


def _play_memora(log: TurnCap, options: dict[str, Any] | None, seed: int) -> None:
    """MEMORA's fixed pipeline with K_max factors whose controller never stops early."""
    from ragym.rl.eval.memora_models import ScriptedModel
    from ragym.rl.eval.memora_pipeline import MemoraPipeline, PipelineConfig

    config = log.unwrapped.config
    pipeline = PipelineConfig(num_factors=config.k_max, stop_threshold=math.inf, expand_below=math.inf,
                              max_expansions=config.max_subqueries)  # fmt: skip
    MemoraPipeline(ScriptedModel(), pipeline).play(log, options, seed)


def play_longest(env_id: str, env: Any, options: dict[str, Any] | None, seed: int,
                 max_turns: int | None) -> Played:  # fmt: skip
    """Play the paper's longest ``env_id`` episode on ``env`` (reset with ``seed`` and the row's ``options``),
    ended after ``max_turns`` turns at most (the recipe's ``max_assistant_turns``)."""
    log = TurnCap(env, max_turns)
    if env_id == "MEMORA-v0":
        _play_memora(log, options, seed)
    else:
        run_episode(log, _policy(env_id, env), seed, options)
    return Played(list(log.turns), list(log.observations))
