"""Test fixture: synthetic KB-VQA episodes with the event stream ``KBVQA-v0`` records (tests and benchmarks).

A seeded scripted policy searches each query image, reranks or rejects batches (sometimes wrongly), may
emit a malformed turn, and answers; the turn limit truncates the episode with an empty forced answer, as
the env does. The real env is exercised in ``tests/rewards/test_env_integration.py``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ragym.envs import events as ev
from ragym.envs.kbvqa import events as kbvqa_ev
from ragym.envs.kbvqa.actions import Answer, Reject, Rerank, SearchImage, format_action
from ragym.rewards.episode import Episode


@dataclass(frozen=True)
class SyntheticConfig:
    """Knobs of the scripted policy and env behind ``synthetic_episode``."""

    batch_size: int = 5
    """K: candidates per batch."""
    max_rejections: int = 2
    """Rejections allowed per image before the boundary prompt."""
    max_turns: int = 8
    """T_max: the episode is truncated (with a forced answer) after this many turns."""
    p_recognise: float = 0.7
    """Chance the policy reranks the gold entity when it is in the batch (else it rejects)."""
    p_false_rerank: float = 0.3
    """Chance the policy reranks a wrong entity when the gold entity is not in the batch."""
    p_malformed: float = 0.1
    """Chance of one malformed turn per image."""
    p_correct_answer: float = 0.6
    """Chance the final answer is correct."""


def _gold_rank(rng: random.Random, cfg: SyntheticConfig) -> int:
    """Rank of the gold entity in the image's full ranking (sometimes beyond every reachable batch)."""
    return rng.randrange(0, (cfg.max_rejections + 2) * cfg.batch_size)


def synthetic_episode(seed: int, num_images: int = 1, cfg: SyntheticConfig | None = None) -> Episode:
    """One deterministic synthetic episode (``data_source="synthetic_kbvqa"``, gold answer ``"answer <seed>"``).

    >>> ep = synthetic_episode(3)
    >>> [e["type"] for e in ep.events[:2]], ep.ground_truth
    (['task', 'action'], ['answer 3', 'ans 3'])
    """
    cfg = cfg or SyntheticConfig()
    rng = random.Random(seed)
    turns: list[str] = []
    golds = [f"entity_{seed}_{image}" for image in range(1, num_images + 1)]
    events: list[dict] = [kbvqa_ev.task(num_images, golds, cfg.max_rejections, cfg.batch_size, cfg.max_turns)]
    batch_id = 0

    def act(action, kind: str) -> int:
        turn = len(turns)
        turns.append(format_action(action, reason="looking at the candidates"))
        events.append(ev.action(turn, kind, True))
        return turn

    for image in range(1, num_images + 1):  # 1-based, as SearchImage(j) and every KB-VQA event
        gold, rank = f"entity_{seed}_{image}", _gold_rank(rng, cfg)
        if rng.random() < cfg.p_malformed:
            turns.append("I think it is the tower <rerank>")
            events.append(ev.action(len(turns) - 1, "invalid", False))
            events.append(ev.format_error(len(turns) - 1, "unbalanced_tags"))
        turn = act(SearchImage(image), "search_image")
        for rejections in range(cfg.max_rejections + 1):
            offset = (rejections) * cfg.batch_size
            candidates = [f"entity_{seed}_{image}_{offset + i}" for i in range(cfg.batch_size)]
            in_batch = offset <= rank < offset + cfg.batch_size
            if in_batch:
                candidates[rank - offset] = gold
            events.append(kbvqa_ev.search_image(turn, image, batch_id, candidates, gold, offset))
            rerank = (
                in_batch
                and rng.random() < cfg.p_recognise
                or not in_batch
                and rng.random() < cfg.p_false_rerank
            )
            choice = (gold if in_batch else rng.choice(candidates)) if rerank else None
            turn = act(Rerank(choice), "rerank") if rerank else act(Reject(), "reject")
            decision = "rerank" if rerank else "reject"
            # Algorithm S1: a Reject of the last allowed batch brings the boundary prompt and is not counted.
            at_limit = not rerank and rejections == cfg.max_rejections
            events.append(
                kbvqa_ev.verification(turn, decision, choice, image, batch_id, candidates, gold, at_limit)
            )
            batch_id += 1
            if rerank:
                break
            if at_limit:
                events.append(kbvqa_ev.boundary(turn, image, rejections))
    text = f"answer {seed}" if rng.random() < cfg.p_correct_answer else f"wrong {seed}"
    truncated = len(turns) >= cfg.max_turns
    if truncated:
        del turns[cfg.max_turns :]
        events = [e for e in events if e["turn"] < cfg.max_turns]
        events.append(ev.truncated(cfg.max_turns - 1, "max_turns"))
        # KBVQA-v0's forced answer is the empty string.
        events.append(ev.answer(cfg.max_turns - 1, "", forced=True))
    else:
        turn = act(Answer(text), "answer")
        events.append(ev.answer(turn, text))
    gt = [f"answer {seed}", f"ans {seed}"]
    return Episode("synthetic_kbvqa", turns, events, gt, truncated=truncated, env_id="KBVQA-v0")
