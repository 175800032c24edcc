"""KB-VQA's scripted policies: ``ragym rollout --policy signature|oracle|random`` (through the env's hooks).

Each turns the env's observations into canonical turn texts:
- ``signature``: what the CPU demo policy should learn. Searches each image, reranks the candidate the env's
  visual check names (else the one whose visual signature matches the query's, else the top-1 candidate
  when signatures are hidden), rejects when none matches (without the Reject action, moves on), reads the
  confirmed entities' passages and extracts the answer. Uses no gold data. The toy warm start's expert.
- ``oracle``: reranks the gold entity when it is in the batch, else rejects (reads gold ids: an upper bound).
- ``random``: random actions, malformed text included (exercises every error path).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ragym.envs.kbvqa.actions import Answer, Reject, Rerank, SearchImage, SearchText, format_action
from ragym.envs.kbvqa.prompts import LAST_TURN_NOTICE

_CANDIDATE = re.compile(r"^\[\d+\] <image> (.+?)(?: \(signature: ([^\s)]+)\))?$", re.MULTILINE)
_CHECK = re.compile(
    r"^Visual check: (.+) matches the query image\.$|^Visual check: no candidate", re.MULTILINE
)
_NUMBER = re.compile(r"^\[(\d+)\]$")
_HEADER = re.compile(r"^Candidates for Image (\d+)(?: \(signature: ([^\s)]+)\))?", re.MULTILINE)
_FACTS = {
    "year": re.compile(r"first recorded in (\d{4})"),
    "region": re.compile(r"region of (\w+)"),
    "who": re.compile(r"catalogued by (\w+)"),
}


class SignaturePolicy:
    """Search, verify by visual signature, read passages, answer; never looks at gold data."""

    def __init__(self, env: Any):
        self.env = env
        from ragym.envs.kbvqa.demo import (
            KBVQADemoEnv,  # here: the demo env loads faiss, the hooks this module
        )

        # KBVQA-Demo-v0 with rerank_by_index: Rerank names the candidate by its number in the batch.
        unwrapped = env.unwrapped
        self.by_index = isinstance(unwrapped, KBVQADemoEnv) and unwrapped.aids.rerank_by_index
        self.may_reject = unwrapped.config.allow_reject

    def reset(self, obs: dict[str, Any]) -> None:
        """Start an episode from the task observation."""
        self.num_images = len(obs["images"])
        self.question = obs["text"].rsplit("Question: ", 1)[-1]
        self.image, self.confirmed, self.passages = 1, {}, None

    def verify(self, obs_text: str, hits: list[tuple[str, str | None]], query_sig: str | None) -> str | None:
        """The candidate that matches the query image (its name), or None."""
        check = _CHECK.search(obs_text)
        if check:
            return _named(check.group(1), hits) if check.group(1) else None
        if query_sig is None:
            return hits[0][0] if hits else None
        return next((name for name, sig in hits if sig == query_sig), None)

    def choose(self, hits: list[tuple[str, str | None]], match: str | None) -> str | None:
        """The candidate to rerank given the verified ``match``, or None to reject (a hook for noisy experts)."""
        return match

    def act(self, obs_text: str) -> str:
        """The next turn text given the last observation."""
        if LAST_TURN_NOTICE in obs_text:
            self.passages = self.passages or obs_text
            return format_action(Answer(self._answer()), "no turns left")
        header = _HEADER.search(obs_text)
        if header:
            hits = [(m.group(1), m.group(2)) for m in _CANDIDATE.finditer(obs_text)]
            match = self.verify(obs_text, hits, header.group(2))
            name = self._chosen(hits, match)
            # The reason states what verification found, whatever the (possibly noisy) choice: a policy
            # imitating it reads the observation in its reason and decides right after.
            reason = "a candidate matches the query" if match else "no candidate matches the query"
            if name or self.may_reject:
                return format_action(Rerank(self._argument(name, hits)) if name else Reject(), reason)
            self.image += 1  # no Reject action (Table 5's "w/o Reject"): leave the image unconfirmed
        elif obs_text.startswith(("Confirmed:", "Rejection limit")):
            self.image += 1
        if obs_text.startswith("Results for"):
            self.passages = obs_text
            return format_action(Answer(self._answer()), "read the passages")
        if self.image <= self.num_images:
            return format_action(SearchImage(self.image), f"identify the entity in image {self.image}")
        names = list(self.confirmed.values())
        if names and self.passages is None:
            return format_action(SearchText(tuple(names)), "look up the confirmed entities")
        return format_action(Answer(self._answer()), "answer with what I have")

    def _chosen(self, hits: list[tuple[str, str | None]], match: str | None) -> str | None:
        name = self.choose(hits, match)
        if name:
            self.confirmed[self.image] = name
        return name

    def _argument(self, name: str, hits: list[tuple[str, str | None]]) -> str:
        """How the Rerank names the candidate: its number (``rerank_by_index``) or its name."""
        if self.by_index:
            return str([n for n, _ in hits].index(name) + 1)
        return name

    def _answer(self) -> str:
        facts = {}
        for name in self.confirmed.values():
            passage = re.search(rf"{re.escape(name)}: (.*)", self.passages or "")
            facts[name] = (
                {k: (m.group(1) if (m := p.search(passage.group(1))) else None) for k, p in _FACTS.items()}
                if passage
                else {}
            )
        if "earlier" in self.question:
            years = {n: int(f["year"]) for n, f in facts.items() if f.get("year")}
            return min(years, key=years.__getitem__) if years else "unknown"
        key = "year" if "year" in self.question else "region" if "region" in self.question else "who"
        return next((f[key] for f in facts.values() if f.get(key)), "unknown")


def _named(argument: str, hits: list[tuple[str, str | None]]) -> str | None:
    """The candidate a visual-check argument names: ``[N]`` or a name."""
    number = _NUMBER.match(argument)
    if number:
        index = int(number.group(1)) - 1
        return hits[index][0] if 0 <= index < len(hits) else None
    return next((name for name, _ in hits if argument == name), None)


class OraclePolicy(SignaturePolicy):
    """``SignaturePolicy`` that verifies with the gold entity instead of signatures (an upper bound)."""

    def verify(self, obs_text: str, hits: list[tuple[str, str | None]], query_sig: str | None) -> str | None:
        """The gold entity's name when it is in the batch, else None (reject)."""
        state = self.env.unwrapped.state
        batch = state.active_batch()
        gold = batch.gold_entity if batch else None
        return batch.name_of(gold) if gold in batch.candidates else None


class RandomPolicy:
    """Uniformly random actions, a share of them malformed."""

    def __init__(self, env: Any, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.env = env

    def reset(self, obs: dict[str, Any]) -> None:
        """Remember the image count."""
        self.num_images = len(obs["images"])

    def act(self, obs_text: str) -> str:
        """A random turn."""
        names = _CANDIDATE.findall(obs_text)
        options = [
            format_action(SearchImage(int(self.rng.integers(0, self.num_images + 2)))),
            format_action(SearchText(("first recorded",))),
            format_action(Rerank(names[int(self.rng.integers(len(names)))][0] if names else "Nobody")),
            format_action(Reject()),
            format_action(Answer("1900")),
            "<answer>no reason block</answer>",
            "<reason>nested <rerank>x</reason></rerank>",
        ]
        return options[int(self.rng.integers(len(options)))]


POLICIES = {
    "signature": lambda env, seed: SignaturePolicy(env),
    "oracle": lambda env, seed: OraclePolicy(env),
    "random": RandomPolicy,
}
"""``ragym rollout --policy NAME``: ``NAME`` -> ``factory(env, seed)`` (KB-VQA's ``EnvHooks.policies``)."""
