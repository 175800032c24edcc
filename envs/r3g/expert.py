"""R3G's scripted expert: plan, retrieve, judge each pooled image by its caption cue (with optional noise), answer.

The hooks' expert (noise 0) and the CPU demo's warm start (``ragym.rl.demo.r3g``, noisy branches) play it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from ragym.envs.registry import make_env

DECISION_TOKEN = " a="
"""Added to the tiny tokenizer as one token, space included, so the rationale word is the token right before
it: the decision (the token after it) can read the word through the previous-token attention a copying
model already has (with a separate " " token the word was two back, and no warm start conditioned on it)."""
_OPTION = re.compile(r"^([A-D])\. (.+)$", re.MULTILINE)
_CAPTION = re.compile(r"^\[(\d+)\] <image> ?(.*)$", re.MULTILINE)


class R3GExpert:
    """Plan, retrieve, judge by the caption cue (a look-alike gets a=1 with probability ``noise``, the gold
    image a=0 with probability ``reject_noise``), answer."""

    def __init__(self, env: Any, rng: np.random.Generator, noise: float, reject_noise: float = 0.0) -> None:
        self.env, self.rng, self.noise, self.reject_noise = env, rng, noise, reject_noise

    @classmethod
    def for_row(
        cls, row: dict[str, Any], rng: np.random.Generator, noise: float, reject_noise: float = 0.0
    ) -> R3GExpert:
        """An expert on a fresh env built as the dataset row says."""
        info = row["extra_info"]
        return cls(make_env(info["env_id"], **json.loads(info["env_kwargs"])), rng, noise, reject_noise)

    def reset(self, obs: dict[str, Any]) -> None:
        """Remember the options of the task observation."""
        self.options = dict(_OPTION.findall(obs["text"]))
        self.planned = False

    def act(self, text: str) -> str:
        """The next turn for the last observation."""
        if text.startswith("Candidate pool"):
            return (
                "<judge>\n"
                + "\n".join(self._line(int(i), c) for i, c in _CAPTION.findall(text))
                + "\n</judge>"
            )
        if text.startswith("Evidence") or "last turn" in text:
            colour = text.split("visible: ", 1)[1].split()[0] if "visible: " in text else None
            letter = next((k for k, v in self.options.items() if v == colour), "A")
            return f"<answer>{letter}</answer>"
        if not self.planned:
            self.planned = True
            return "<plan>the part named in the question</plan>"
        return "<retrieve></retrieve>"

    def _line(self, number: int, caption: str) -> str:
        shows = "visible" in caption
        score = int(self.rng.random() >= self.reject_noise) if shows else int(self.rng.random() < self.noise)
        # The decision right after the word it follows from, not after r= and t=: at eight tokens'
        # distance the tiny policy learned a=1 unconditionally (P(a=1 | visible) 0.76, seed 0). r and t repeat
        # it: with r=1 t=1 on every line "1 after =" leaked into the decision (a coin expert imitated as
        # P(a=1) 0.69, seed 0).
        return f"[{number}] {'visible' if shows else 'hidden'}{DECISION_TOKEN}{score} r=1 t=1"
