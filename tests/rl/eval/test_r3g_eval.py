"""``ragym eval`` on R3G-v0 rows through the agent loop: accuracy and Recall@1/3/5 per scenario in the report."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ragym.data_prep.r3g_synthetic import Preset, build_task
from ragym.envs.events import events_of
from ragym.envs.r3g.corpus import read_rgb
from ragym.envs.r3g.env import R3GEnv
from ragym.rl.engine.trainer import read_rows
from ragym.rl.eval.args import EvalConfig
from ragym.rl.eval.backends import Backend
from ragym.rl.eval.evaluate import run_eval, summarize
from ragym.rl.eval.r3g_baselines import ScriptedModel
from ragym.rl.eval.report import markdown
from ragym.rl.models import load_processor
from ragym.rl.recipe.compose import load_recipe
from tests.rl.eval.test_evaluate import RowScriptedServer


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    task = build_task(
        tmp_path_factory.mktemp("r3g") / "task", Preset(num_classes=8, test_fraction=1.0), seed=4
    )
    return read_rows(str(task / "data" / "test.parquet"))


def script(row: dict[str, Any], judge_by_caption: bool) -> list[str]:
    """The fixed pipeline's turns on this row, played on a private env (the pool order is deterministic)."""
    env = R3GEnv(**json.loads(row["extra_info"]["env_kwargs"]))
    model = ScriptedModel()
    task, _ = env.reset(options=json.loads(row["extra_info"]["env_options"]))
    turns = ["<plan>the part</plan>", "<retrieve></retrieve>"]
    env.step(turns[0])
    pool, *_ = env.step(turns[1])
    lines = (
        model.judge(task, pool)
        if judge_by_caption
        else "\n".join(f"[{i}] r=1 t=1 a=1 all fine" for i in range(1, 6))
    )
    turns.append(f"<judge>\n{lines}\n</judge>")
    evidence, *_ = env.step(turns[-1])
    return [*turns, f"<answer>{model.answer(task, evidence)}</answer>"]


def key(row: dict[str, Any]) -> bytes:
    kwargs, options = (json.loads(row["extra_info"][k]) for k in ("env_kwargs", "env_options"))
    return read_rgb(Path(kwargs["task_dir"]) / options["query_image"]).tobytes()


@pytest.mark.parametrize("judge_by_caption", [True, False])
def test_eval_reports_recall_and_accuracy_per_scenario(
    rows: list[dict[str, Any]], tiny_policy_dir: Callable[[str], Path], judge_by_caption: bool
) -> None:
    policy = tiny_policy_dir("qwen2_5_vl")
    processor = load_processor(policy)
    scripts = {key(row): script(row, judge_by_caption) for row in rows}
    backend = Backend(
        RowScriptedServer(processor.tokenizer, scripts), processor.tokenizer, processor, "scripted"
    )
    config = load_recipe(
        "r3g_tiny_cpu", [f"actor_rollout_ref.model.path={policy}", "data.max_response_length=4096"]
    )
    records = run_eval(rows, backend, config, EvalConfig(batch_size=4))
    metrics = summarize(records)
    r3g = metrics["by_source"]["synthetic_r3g"]["r3g"]
    assert r3g["all"]["num_episodes"] == len(rows) and sum(
        s["num_episodes"] for s in r3g["by_scenario"].values()
    ) == len(rows)
    assert r3g["all"]["recall@5"] == 1.0  # P=5 = a whole class: the gold image is always in the pool
    if judge_by_caption:
        assert r3g["all"]["recall@1"] == 1.0 and r3g["all"]["accuracy"] == 1.0 == metrics["all"]["accuracy"]
    else:  # an all-equal judge leaves Stage-1's order: the gold image first only by chance (1 in 5)
        episodes = [json.loads(r.episode) for r in records]
        first = [events_of(e["events"], "coarse_retrieval")[0]["pool"][0] for e in episodes]
        stage1_first = np.mean(
            [f in e["ground_truth"]["gold_images"] for f, e in zip(first, episodes, strict=True)]
        )
        assert r3g["all"]["recall@1"] == pytest.approx(stage1_first) and r3g["all"]["recall@1"] < 0.6
    assert "## synthetic_r3g" in markdown(
        {"model": "m", "backend": "scripted", **metrics}
    ) and "recall@3" in markdown({"model": "m", "backend": "scripted", **metrics})


def test_env_summaries_count_each_env_s_episodes_an_unstarted_one_included() -> None:
    """An episode whose env could not start has no task event: its ``env_id`` says whose summary counts it."""
    from ragym.envs import events as ev
    from ragym.rl.eval.evaluate import env_summaries

    unstarted = [ev.episode_error(-1, "reset", "boom")]
    r3g = {"env_id": "R3G-v0", "events": unstarted}
    kbvqa = {"env_id": "KBVQA-v0", "events": unstarted}
    summaries = env_summaries([(r3g, 0.0), (kbvqa, 0.0)])
    assert summaries["r3g"]["all"]["num_episodes"] == 1 and summaries["r3g"]["all"]["num_not_started"] == 1
    assert env_summaries([(kbvqa, 0.0)])["r3g"] is None
