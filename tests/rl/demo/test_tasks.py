"""The demo's tasks (``ragym demo --task``): each composes with the demo recipe into the settings the demo reads,
and the ``answer`` task's expert answers every question whose entity it confirmed from that entity's passage."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from ragym.data_prep.synthetic_kb import PRESETS, build_kb
from ragym.envs.scripted import run_episode
from ragym.rl.demo.run import DEMO_RECIPE
from ragym.rl.demo.tasks import DEFAULT_TASK, DEMO_TASKS, task_overrides
from ragym.rl.engine.config import RecipeReader
from ragym.rl.engine.trainer import read_rows
from ragym.rl.recipe.compose import load_recipe
from ragym.rl.tiny.copy_pretrain import CopyPretrainConfig
from ragym.rl.tiny.policy import TinyPolicyConfig
from ragym.rl.tiny.warm_start import NoisyExpert, WarmStartConfig, WarmStartTarget


def _demo_settings(overrides: list[str]) -> dict:
    return RecipeReader(load_recipe(DEMO_RECIPE, overrides)).get("ragym.demo")


@pytest.mark.parametrize("task", list(DEMO_TASKS))
def test_every_task_composes_into_the_settings_the_demo_reads(task: str) -> None:
    demo = _demo_settings(task_overrides(task))
    assert demo["kb_preset"] in PRESETS
    WarmStartConfig(**demo["warm_start"], seed=0)  # every key a field: the demo would fail on a stray one
    CopyPretrainConfig(**demo["copy_pretrain"], seed=0)
    TinyPolicyConfig(**demo["policy"])


def test_the_default_task_is_the_recipe_itself_and_answer_differs_where_it_says() -> None:
    assert task_overrides(DEFAULT_TASK) == []
    verify, answer = _demo_settings([]), _demo_settings(task_overrides("answer"))
    assert answer["kb_preset"] == "demo_slots" and verify["kb_preset"] == "demo"
    assert answer["copy_pretrain"]["steps"] > 0 == verify["copy_pretrain"]["steps"]
    # An expert that confirms most matches, so the greedy warm start confirms and its answers can be scored.
    assert answer["warm_start"]["reject_noise"] < 0.5 < verify["warm_start"]["reject_noise"]
    assert answer["warm_start"]["quote"] and not verify["warm_start"]["quote"]
    assert answer["policy"] == verify["policy"] and answer["arch"] == verify["arch"]
    # A warm start that misses its target on the training questions is imitated again (the copy is a draw: 3 of 20
    # Intel runs stopped with one attempt); its settings stay those its figures were measured with.
    warm = answer["warm_start"]
    assert (warm["swap_values"], warm["lr_decay"], warm["soft_decisions"]) == (0.0, False, False)
    assert answer["warm_start_target"]["restarts"] == 4 and verify["warm_start_target"]["restarts"] == 0
    # Its warm start is held to the copy it measures (a miss stops the run) and to a floor on confirming a match
    # instead of the verify task's gap from the expert's rate.
    target = WarmStartTarget(**answer["warm_start_target"])
    assert target.action == "stop" and target.min_copy_accuracy and target.min_confirm
    assert target.max_confirm_gap is None and verify["warm_start_target"]["min_copy_accuracy"] is None


def test_a_users_overrides_win_over_the_tasks() -> None:
    extra = ["ragym.demo.warm_start.reject_noise=0.5", "ragym.demo.copy_pretrain.batch_size=8"]
    demo = _demo_settings(task_overrides("answer") + extra)
    assert demo["warm_start"]["reject_noise"] == 0.5 and demo["copy_pretrain"]["batch_size"] == 8


def test_an_unknown_task_is_one_line_naming_the_tasks() -> None:
    with pytest.raises(ValueError, match="unknown demo task 'answers'; the tasks are verify, answer"):
        task_overrides("answers")


def test_the_answer_tasks_expert_answers_from_the_confirmed_entitys_passage(tmp_path) -> None:
    """What the warm start imitates: after confirming the gold entity, the expert searches its name and answers
    the passage's last word, which its reason quotes right before (the copy the policy learns)."""
    demo = _demo_settings(task_overrides("answer"))
    cfg = WarmStartConfig(**demo["warm_start"], seed=0)
    kb = build_kb(tmp_path / "kb", replace(PRESETS[demo["kb_preset"]], num_entities=60, num_rows=40), seed=0)
    rows = read_rows(str(kb / "data" / "train.parquet"))
    rng = np.random.default_rng(0)
    num_confirmed = 0
    for row in rows:
        expert = NoisyExpert.for_row(row, rng, cfg.noise, cfg.reject_noise, cfg.quote)
        info = row["extra_info"]
        options = json.loads(info["env_options"])
        episode = run_episode(expert.env, expert, int(info["index"]), options)
        confirmed = [
            e for e in episode["events"] if e["type"] == "verification" and e["decision"] == "rerank"
        ]
        (gold,) = options["gold_entities"]
        if not confirmed or confirmed[-1]["entity"] != gold:
            continue
        num_confirmed += 1
        (answer,) = options["answers"]
        assert episode["turns"][-1] == f"<reason>the region of {answer}</reason><answer> {answer}</answer>"
    assert num_confirmed >= len(rows) // 2  # reject_noise 0.2: most questions get their entity confirmed
