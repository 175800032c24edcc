"""R3G's baselines and ablations on ``R3G-v0`` itself: MRAG, the paper's module ablations, the fixed pipeline.

``ragym r3g-baselines --data PARQUET --out DIR [--limit N] [--baselines a,b] [--model scripted|chat] ...``

The paper reports MRAG (MRAG-Bench's retrieval fed to the model, no reranking) apart from its own
no-module ablation (no plan, Stage-1 only, top-1 of R3G's pool); ``BASELINES`` keeps each under its name.
``mrag`` needs rows that carry the benchmark's ``retrieved_images`` (``ragym prep mragbench``); on other rows
it is skipped, and the skip and its reason are written to ``metrics.json``.

A fixed model plays every learned step through the env's own grammar, so baselines and trained policies
share the pool, the fusion, the events and the metrics (``ragym.envs.r3g.report``):

- ``ChatModel``: a frozen MLLM behind an OpenAI-compatible endpoint (``ragym.data_prep.chat``) writes the plan,
  the judge lines and the answer.
- ``ScriptedModel``: offline; judges by a cue word in the candidates' captions (the synthetic task's, shown
  with ``show_captions``) and answers with the option named in the evidence caption. It has no signal on
  MRAG-Bench, whose images have no captions, and none from the judge guidelines (it reads no prompt): it
  exists for tests and the synthetic task.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from ragym.data_prep.chat import ChatClient, ChatConfig, image_content
from ragym.envs.core import IMAGE_PLACEHOLDER
from ragym.envs.r3g.env import R3GEnv
from ragym.envs.r3g.report import EpisodeScore, markdown, summarize
from ragym.rewards import Rubric
from ragym.rewards.episode import Episode

MRAG_K = 5
"""Images MRAG feeds the model: MRAG-Bench's retrieved top-5."""
BASELINES: dict[str, dict[str, Any]] = {
    # MRAG: the benchmark's own retrieved images, in its order, all fed; no plan, no reranking.
    "mrag": {"use_plan": False, "pool_source": "benchmark", "rerank": "none", "top_k": MRAG_K},
    # MRAG's recipe on ragym's retriever: plain top-5 of the corpus by cosine, all fed, no reranking.
    "mrag_topk": {"use_plan": False, "rerank": "none", "pool_size": MRAG_K, "top_k": MRAG_K},
    # The paper's ablation rows (P and k from the row; the paper's P=5, k=1).
    "no_modules": {"use_plan": False, "rerank": "stage1", "top_k": 1},
    "rerank_no_guidelines": {"use_plan": False, "rerank": "fused", "judge_guidelines": False},
    "rerank": {"use_plan": False, "rerank": "fused"},
    "plan_only": {"use_plan": True, "rerank": "stage1", "top_k": 1},
    "stage2_only": {"use_plan": True, "rerank": "stage2"},
    "r3g_fixed": {"use_plan": True, "rerank": "fused"},
}
"""Baseline name -> env switches (over the row's own env_kwargs)."""
_TAGS = re.compile(r"</?(plan|retrieve|judge|answer)>")
_OPTION = re.compile(r"^([A-D])\. (.+)$", re.MULTILINE)


class FixedModel(Protocol):
    """The frozen model of the fixed pipeline: one call per learned step, plain text out."""

    def plan(self, task: dict[str, Any]) -> str:
        """The plan from the task observation alone."""
        ...

    def judge(self, task: dict[str, Any], pool: dict[str, Any]) -> str:
        """Judge lines ``[i] r=.. t=.. a=.. rationale`` for the pool observation."""
        ...

    def answer(self, task: dict[str, Any], evidence: dict[str, Any]) -> str:
        """The answer from the task and the evidence observation."""
        ...


@dataclass
class ScriptedModel:
    """Offline model for tests and the synthetic task: judges and answers from caption text only."""

    cue: str = "visible"
    """Caption word meaning the image shows what the question needs."""

    def plan(self, task: dict[str, Any]) -> str:
        """The question restated as the cue to look for."""
        return "find an image that shows: " + task["text"].split("Question: ", 1)[-1].splitlines()[0]

    def judge(self, task: dict[str, Any], pool: dict[str, Any]) -> str:
        """a = 1 where the caption holds the cue, else 0; r and t 0.5 (the captions say nothing of them)."""
        lines = [line for line in pool["text"].splitlines() if line.startswith("[")]
        return "\n".join(
            f"[{i}] r=0.5 t=0.5 a={int(self.cue in line)} caption {'shows' if self.cue in line else 'lacks'} the cue"
            for i, line in enumerate(lines, 1)
        )

    def answer(self, task: dict[str, Any], evidence: dict[str, Any]) -> str:
        """The option whose text the evidence caption names, else A."""
        options = dict(_OPTION.findall(task["text"]))
        said = evidence["text"].lower()
        return next((letter for letter, text in options.items() if f": {text.lower()}" in said), "A")


MAX_REPLY_TOKENS = 512
"""Reply length limit of the frozen MLLM (a plan, five judged lines, or a letter)."""


def user_content(text: str, images: list[np.ndarray]) -> list[dict[str, Any]]:
    """An observation as OpenAI content parts: text pieces with each image where its placeholder stands."""
    pieces = text.split(IMAGE_PLACEHOLDER)
    if len(pieces) - 1 != len(images):
        raise ValueError(f"{len(pieces) - 1} image placeholders for {len(images)} images")
    parts: list[dict[str, Any]] = []
    for i, piece in enumerate(pieces):
        if piece:
            parts.append({"type": "text", "text": piece})
        if i < len(images):
            parts.append(image_content(images[i]))
    return parts


class ChatModel:
    """The fixed pipeline's frozen MLLM over an OpenAI-compatible endpoint (the shared client: cached, retried)."""

    def __init__(self, config: ChatConfig, system_prompt: str) -> None:
        self.client = ChatClient(config)
        self.system_prompt = system_prompt

    def _ask(self, *observations: dict[str, Any], instruction: str) -> str:
        content = [part for obs in observations for part in user_content(obs["text"], list(obs["images"]))]
        messages = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": [*content, {"type": "text", "text": instruction}]},
        ]
        return self.client.complete(messages, max_tokens=MAX_REPLY_TOKENS, parse=str)

    def plan(self, task: dict[str, Any]) -> str:
        """Reasoning before evidence: the visual cues needed."""
        return self._ask(
            task, instruction="Write a short ordered plan of the visual cues you need. Plan only."
        )

    def judge(self, task: dict[str, Any], pool: dict[str, Any]) -> str:
        """Three sub-scores and a rationale per pooled candidate."""
        return self._ask(
            task, pool, instruction="Judge every candidate, one line each: [i] r=.. t=.. a=.. rationale"
        )

    def answer(self, task: dict[str, Any], evidence: dict[str, Any]) -> str:
        """The option letter."""
        return self._ask(task, evidence, instruction="Answer with the option letter only.")


def _clean(text: str) -> str:
    """Model text with the env's tags removed, so a reply cannot close or open another action."""
    return _TAGS.sub("", text).strip()


def run_fixed(env: R3GEnv, options: dict[str, Any], model: FixedModel) -> list[dict[str, Any]]:
    """One episode of the fixed pipeline under the env's switches; returns its events."""
    task, _ = env.reset(options=options)
    if env.config.use_plan:
        env.step(f"<plan>{_clean(model.plan(task)) or 'none'}</plan>")
    obs, *_ = env.step("<retrieve></retrieve>")
    if env.judges:
        obs, *_ = env.step(f"<judge>\n{_clean(model.judge(task, obs))}\n</judge>")
    *_, info = env.step(f"<answer>{_clean(model.answer(task, obs)) or 'none'}</answer>")
    return info["events"]


def evaluate_baseline(rows: pd.DataFrame, name: str, model: FixedModel, rubric: Rubric) -> list[EpisodeScore]:
    """Every row through one baseline; each episode scored by the rubric's ``outcome`` term."""
    scores, envs_by_kwargs = [], {}
    row: Any  # a row of the parquet schema, by column (pandas types each value as any column's could be)
    for _, row in rows.iterrows():
        extra = row["extra_info"]
        kwargs = {**json.loads(extra["env_kwargs"]), **BASELINES[name]}
        key = json.dumps(kwargs, sort_keys=True)
        env = envs_by_kwargs.setdefault(key, R3GEnv(**kwargs))
        events = run_fixed(env, json.loads(extra["env_options"]), model)
        episode = Episode(row["data_source"], [], events, json.loads(row["reward_model"]["ground_truth"]))
        correct = rubric.score(episode).breakdown["outcome"]
        scores.append(EpisodeScore(events, float(correct or 0.0), str(extra.get("scenario", ""))))
    return scores


def skip_reason(rows: pd.DataFrame, name: str) -> str | None:
    """Why baseline ``name`` cannot run on ``rows`` (None: it can)."""
    if BASELINES[name].get("pool_source") != "benchmark":
        return None
    lacking = sum("retrieved_images" not in json.loads(e["env_options"]) for e in rows["extra_info"])
    if lacking:
        return f"{lacking} of {len(rows)} rows carry no retrieved_images (only ragym prep mragbench rows do)"
    return None


def _names(value: str | None) -> list[str]:
    names = list(BASELINES) if value is None else [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in BASELINES]
    if unknown or not names:
        raise SystemExit(f"ragym r3g-baselines: unknown baselines {unknown}; known: {', '.join(BASELINES)}")
    return names


def main(argv: list[str]) -> int:
    """Run the chosen baselines on the rows and write ``metrics.json`` and ``metrics.md`` into ``--out``."""
    parser = argparse.ArgumentParser(
        prog="ragym r3g-baselines", description=(__doc__ or "").partition("\n")[0]
    )
    parser.add_argument("--data", required=True, help="R3G-v0 parquet rows")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--baselines", help=f"comma-separated names (default all: {','.join(BASELINES)})")
    parser.add_argument("--model", choices=("scripted", "chat"), default="scripted")
    parser.add_argument("--base-url", default=ChatConfig.base_url)
    parser.add_argument("--model-name", default=ChatConfig.model)
    parser.add_argument("--cache", help="JSON-lines reply cache (default OUT/chat_cache.jsonl)")
    parser.add_argument("--max-retries", type=int, default=ChatConfig.max_retries)
    args = parser.parse_args(argv)
    rows = pd.read_parquet(args.data)
    rows = rows.head(args.limit) if args.limit else rows
    rubric = Rubric.from_recipe({"terms": {"outcome": {"weight": 1.0}}})
    results, skipped = {}, {}
    for name in _names(args.baselines):
        if reason := skip_reason(rows, name):
            skipped[name] = reason
            print(f"skipped {name}: {reason}")
            continue
        if args.model == "chat":
            env_kwargs = {**json.loads(rows.iloc[0]["extra_info"]["env_kwargs"]), **BASELINES[name]}
            config = ChatConfig(
                base_url=args.base_url,
                model=args.model_name,
                max_retries=args.max_retries,
                cache_path=args.cache or str(args.out / "chat_cache.jsonl"),
                timeout_s=120.0,
            )
            model: FixedModel = ChatModel(config, R3GEnv(**env_kwargs).system_prompt)
        else:
            model = ScriptedModel()
        results[name] = summarize(evaluate_baseline(rows, name, model, rubric))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "metrics.json").write_text(json.dumps({**results, "skipped": skipped}, indent=1))
    table = markdown(results) + "".join(f"\nSkipped {name}: {reason}.\n" for name, reason in skipped.items())
    (args.out / "metrics.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
