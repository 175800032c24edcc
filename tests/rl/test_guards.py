"""Collapse guards on made-up metric streams: each fires on its collapse, none fires on a healthy run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from ragym.rl.cluster.submit import build_submission
from ragym.rl.errors import UsageError
from ragym.rl.guards import GUARDS_FILE, RUN_CHECKS, GuardMonitor, read_firings, read_guards

KBVQA_GUARDS = {
    "no_search": {"action": "warn", "metric": "episode/searches", "steps": 3},
    "reject_all": {"action": "warn", "min_share": 1.0, "steps": 4},
    "accept_all": {
        "action": "warn",
        "metric": "episode/actions/rerank",
        "other_metric": "episode/actions/reject",
        "min_share": 1.0,
        "steps": 4,
    },
    "format_only": {"action": "warn", "window": 6, "min_rise": 0.2, "max_outcome_rise": 0.02},
    "entropy_floor": {"action": "warn", "threshold": 0.05, "steps": 2},
    "length_limit": {
        "action": "stop",
        "metric": "response_length/clip_ratio",
        "threshold": 0.5,
        "above": True,
        "steps": 2,
    },
}


def healthy(step: int) -> dict[str, float]:
    """A run that learns, shaped like the CPU demo's: it starts by rejecting every batch and learns to confirm
    the match within a few steps, format stays at 1, the outcome rises, entropy falls slowly."""
    reject = max(3.0 - 0.5 * step, 0.9)
    rerank = min(0.2 * step, 1.0)
    return {
        "episode/searches": 2.0,
        "episode/actions/reject": reject,
        "episode/actions/rerank": rerank,
        "reward/format": 1.0,
        "reward/outcome": min(0.05 * step, 0.8),
        "actor/entropy": 0.6 - 0.01 * step,
        "response_length/clip_ratio": 0.0,
    }


def run(stream: list[dict[str, float]], guards: dict | None = None, out=None) -> list:
    monitor = GuardMonitor(read_guards(guards or KBVQA_GUARDS), out)
    return [f for step, metrics in enumerate(stream, 1) for f in monitor.update(step, metrics)]


def test_no_guard_fires_on_a_healthy_run():
    assert run([healthy(s) for s in range(30)]) == []


def with_(step: int, **changes: float) -> dict[str, float]:
    return {**healthy(step), **{k.replace("__", "/"): v for k, v in changes.items()}}


@pytest.mark.parametrize(
    ("name", "stream", "fired_at"),
    [
        # Tool use abandoned from the start.
        ("no_search", [with_(s, episode__searches=0.0) for s in range(10)], 3),
        # Every decision a rejection for 4 steps, after a healthy start (the delta >= 0.5 collapse).
        (
            "reject_all",
            [healthy(6)] * 2 + [with_(s, **{"episode__actions/rerank": 0.0}) for s in range(6)],
            6,
        ),
        # Every decision a confirmation.
        ("accept_all", [with_(s, **{"episode__actions/reject": 0.0}) for s in range(5, 12)], 4),
        # Format climbs 0.5 -> 1.0 while the outcome stays at 0.
        ("format_only", [with_(s, reward__format=0.5 + 0.1 * s, reward__outcome=0.0) for s in range(6)], 6),
        ("entropy_floor", [healthy(1)] + [with_(s, actor__entropy=0.01) for s in range(4)], 3),
        ("length_limit", [with_(s, **{"response_length/clip_ratio": 0.9}) for s in range(4)], 2),
    ],
)
def test_each_guard_fires_on_its_collapse(name, stream, fired_at):
    firings = run(stream)
    assert [(f.guard, f.step) for f in firings] == [(name, fired_at)]


def _just_below(value: float) -> float:
    """The largest float below ``value``: the other side of a threshold, as close as a float gets."""
    return math.nextafter(value, -math.inf)


ENTROPY = {"action": "warn", "threshold": 0.05, "steps": 1}
CLIP = {"action": "warn", "metric": "response_length/clip_ratio", "threshold": 0.5, "above": True, "steps": 1}
IDENT = {"action": "warn", "threshold": 0.05, "steps": 1}
SHARE = {"action": "warn", "min_share": 0.5, "steps": 1}
FORMAT = {"action": "warn", "window": 2, "min_rise": 0.5, "max_outcome_rise": 0.25}
SEARCH = {"action": "warn", "steps": 1}


def _format(late_format: float, late_outcome: float) -> list[dict[str, float]]:
    """Two steps: format 0.25 -> ``late_format``, outcome 0 -> ``late_outcome`` (dyadic: the rises are exact)."""
    return [
        {"reward/format": 0.25, "reward/outcome": 0.0},
        {"reward/format": late_format, "reward/outcome": late_outcome},
    ]


@pytest.mark.parametrize(
    ("name", "config", "stream", "fires"),
    [
        # A floor fires below its threshold (docs: entropy < threshold), not at it.
        ("entropy_floor", ENTROPY, [{"actor/entropy": 0.05}], False),
        ("entropy_floor", ENTROPY, [{"actor/entropy": _just_below(0.05)}], True),
        ("val_ident_floor", IDENT, [{"val/episode/ident_acc": 0.05}], False),
        ("val_ident_floor", IDENT, [{"val/episode/ident_acc": _just_below(0.05)}], True),
        # A ceiling (above: true) fires at its threshold (clip_ratio >= threshold), not just below it.
        ("length_limit", CLIP, [{"response_length/clip_ratio": 0.5}], True),
        ("length_limit", CLIP, [{"response_length/clip_ratio": _just_below(0.5)}], False),
        # A decision share fires at min_share (share >= min_share): 1 of 1 + 1 is exactly 0.5.
        ("reject_all", SHARE, [{"episode/actions/reject": 1.0, "episode/actions/rerank": 1.0}], True),
        (
            "reject_all",
            SHARE,
            [{"episode/actions/reject": _just_below(1.0), "episode/actions/rerank": 1.0}],
            False,
        ),
        (
            "accept_all",
            {**SHARE, "metric": "episode/actions/rerank", "other_metric": "episode/actions/reject"},
            [{"episode/actions/rerank": 1.0, "episode/actions/reject": 1.0}],
            True,
        ),
        # Format rising by min_rise counts (>=), by less does not; an outcome rising by max_outcome_rise is not
        # flat (< max_outcome_rise), by less it is.
        ("format_only", FORMAT, _format(0.75, 0.0), True),
        ("format_only", FORMAT, _format(_just_below(0.75), 0.0), False),
        ("format_only", FORMAT, _format(0.75, 0.25), False),
        ("format_only", FORMAT, _format(0.75, _just_below(0.25)), True),
        # No search means 0 searches; the smallest positive mean is a search.
        ("no_search", SEARCH, [{"episode/searches": 0.0}], True),
        ("no_search", SEARCH, [{"episode/searches": math.nextafter(0.0, 1.0)}], False),
    ],
)
def test_each_guard_at_exactly_its_threshold(name, config, stream, fires):
    assert bool(run(stream, {name: config})) is fires


def test_no_search_does_not_fire_once_any_step_searched():
    stream = [with_(s, episode__searches=0.0) for s in range(10)]
    stream[1]["episode/searches"] = 0.25
    assert run(stream) == []


def test_a_streak_fires_once_and_again_after_it_breaks():
    low = {**healthy(1), "actor/entropy": 0.0}
    stream = [low] * 5 + [healthy(1)] + [low] * 2
    assert [f.step for f in run(stream)] == [2, 8]


def test_stop_is_one_line_naming_guard_step_and_numbers(tmp_path):
    monitor = GuardMonitor(read_guards(KBVQA_GUARDS), tmp_path)
    metrics = {**healthy(3), "response_length/clip_ratio": 0.75}
    assert monitor.check(1, dict(metrics)) is None
    step_two = dict(metrics)
    stop = monitor.check(2, step_two)
    line = stop.line()
    assert "\n" not in line
    assert line == (
        "guard length_limit fired at step 2: response_length/clip_ratio >= 0.5 for 2 steps "
        "(0.750, 0.750) (action: stop)"
    )
    assert step_two["guard/length_limit"] == 1.0 and step_two["guard/entropy_floor"] == 0.0
    recorded = read_firings(tmp_path)
    assert [(r["guard"], r["step"], r["message"]) for r in recorded] == [("length_limit", 2, line)]
    assert json.loads((tmp_path / GUARDS_FILE).read_text())["action"] == "stop"


def test_a_missing_metric_is_reported_not_guessed(caplog):
    firings = run([{"actor/entropy": 0.5}] * 4, {"no_search": {"action": "stop", "steps": 2}})
    assert firings == []
    assert "this run logs no 'episode/searches'" in caplog.text


def test_collapse_guards_are_off_unless_the_recipe_turns_them_on_and_run_checks_stop():
    guards = GuardMonitor(read_guards(None)).guards
    assert set(guards) == set(RUN_CHECKS) and {g.action for g in guards.values()} == {"stop"}


@pytest.mark.parametrize(
    ("section", "error"),
    [
        ({"entropy": {"action": "warn"}}, "unknown guards"),
        ({"entropy_floor": {"floor": 0.1}}, "unknown keys"),
        ({"entropy_floor": {"action": "halt"}}, "must be one of"),
    ],
)
def test_bad_guard_config_is_an_error(section, error):
    with pytest.raises(UsageError, match=error):
        read_guards(section)


def test_ragym_submit_checks_the_guards_before_the_job_goes():
    # verl's trainer read them only at fit(), after its workers had loaded the model.
    with pytest.raises(UsageError, match=r"ragym.guards.entropy_floor.action must be one of .*got 'halt'"):
        build_submission("kbvqa_qwen2_5_vl_7b", ["ragym.guards.entropy_floor.action=halt"])


def test_a_guard_reads_held_out_metrics_or_training_ones_not_both():
    with pytest.raises(UsageError, match="mix held-out"):
        read_guards({"format_only": {"action": "warn", "format_metric": "val/reward/format"}})


def test_a_held_out_guard_waits_for_evaluations_and_a_training_guard_for_training_steps():
    """verl logs both kinds in one dict on evaluation steps, the local engine in two records: each guard is
    checked when its kind is there, so neither kind's streak advances on the other's records."""
    guards = {
        "val_ident_floor": {"action": "warn", "threshold": 0.5, "steps": 2},
        "entropy_floor": {"action": "warn", "threshold": 0.05, "steps": 2},
    }
    monitor = GuardMonitor(read_guards(guards))
    stream = [
        {"actor/entropy": 0.01},  # entropy 1 of 2
        {"val/episode/ident_acc": 0.1},  # Ident. 1 of 2 (the local engine's evaluation record)
        {"actor/entropy": 0.5},  # entropy streak broken
        {"actor/entropy": 0.01, "val/episode/ident_acc": 0.2},  # verl's evaluation step: Ident. 2 of 2
    ]
    fired = [(step, f.guard) for step, m in enumerate(stream, 1) for f in monitor.update(step, m)]
    assert fired == [(4, "val_ident_floor")]
    assert set(monitor.checked) - set(RUN_CHECKS) == {"val_ident_floor", "entropy_floor"}


DEMO_METRICS = Path(__file__).parent / "fixtures" / "demo_seed0_guard_metrics.jsonl"
"""The metrics every guard of the demo recipe reads, from a ``ragym demo`` run (seed 0, 30 GRPO steps), and its
held-out evaluation after training under their ``val/`` names."""


def test_the_demo_recipes_guards_fire_on_none_of_the_demos_metrics():
    from omegaconf import OmegaConf

    from ragym.rl.recipe.compose import load_recipe

    config = load_recipe("kbvqa_tiny_cpu")  # its guards come from its bases (recipes/base/)
    guards = read_guards(OmegaConf.to_container(config.ragym.guards))
    assert {"val_ident_floor", "val_reject_all", "reject_all"} <= {
        n for n, g in guards.items() if g.action != "off"
    }
    monitor = GuardMonitor(guards)
    records = [json.loads(line) for line in DEMO_METRICS.read_text().splitlines()]
    checked = set()
    for record in records:
        step = record.pop("step")
        assert monitor.update(step, record) == [], f"step {step}"
        checked |= set(monitor.checked)
    assert checked == {n for n, g in guards.items() if g.action != "off"}  # every shipped guard was checked


def test_ragym_view_shows_the_runs_firings(tmp_path):
    from ragym.rl.view import data

    monitor = GuardMonitor(read_guards(KBVQA_GUARDS), tmp_path)
    stream = [with_(s, episode__searches=0.0) for s in range(3)]
    lines = [f.line() for step, m in enumerate(stream, 1) for f in monitor.update(step, m)]
    episode = {"data_source": "fake", "turns": ["<answer>x</answer>"], "events": [], "ground_truth": ["x"]}
    (tmp_path / "rollouts.jsonl").write_text(json.dumps(episode) + "\n")
    assert lines and data.index(data.load(tmp_path))["guards"] == lines
    assert data.index(data.load(tmp_path / "rollouts.jsonl"))["guards"] == lines


@pytest.mark.parametrize(
    ("earlier", "during", "stops"),
    [
        ([], [("entropy_floor", "stop")], True),
        ([], [("length_at_limit", "warn")], False),
        ([("entropy_floor", "stop")], [], False),  # a firing of an earlier run in the same folder
        ([("length_at_limit", "warn")], [("length_at_limit", "warn"), ("no_search", "stop")], True),
    ],
)
def test_a_stop_guard_under_verls_trainer_ends_ragym_train_in_error(
    tmp_path, monkeypatch, earlier, during, stops
):
    """verl's loop ends cleanly after a ``stop`` guard's step; ``ragym train --engine verl`` then says which
    guard in one line and exits 2, as the local engine does (a firing recorded before this run does not count)."""
    import json
    import subprocess

    from omegaconf import OmegaConf

    from ragym.rl.guards import GUARDS_FILE, Firing, GuardStop
    from ragym.rl.verl_plugin import verl_local

    firings = tmp_path / GUARDS_FILE

    def record(items):
        with firings.open("a") as f:
            for step, (guard, action) in enumerate(items, start=1):
                firing = Firing(guard, step, action, "numbers")
                f.write(json.dumps({**firing.__dict__, "message": firing.line()}) + "\n")

    record(earlier)
    config = OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path)}})
    monkeypatch.setattr(
        verl_local, "verl_command", lambda *a: (["python", "-m", "verl.trainer.main_ppo"], config)
    )
    monkeypatch.delenv("RAY_ADDRESS", raising=False)

    def trainer(command, env, check):
        record(during)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(verl_local.subprocess, "run", trainer)
    if stops:
        with pytest.raises(GuardStop, match=r"guard \w+ fired at step \d+: numbers \(action: stop\)"):
            verl_local.run_verl("kbvqa_tiny_cpu", [], network="host")
    else:
        assert verl_local.run_verl("kbvqa_tiny_cpu", [], network="host") == 0


def _guarded_recipes() -> dict[str, str]:
    from omegaconf import OmegaConf

    from ragym.envs.hooks import env_named
    from ragym.rl.recipe.compose import PACKAGE_ROOT, recipe_settings

    return {
        path.stem: env_named(path.stem.split("_")[0])
        for path in sorted((PACKAGE_ROOT / "recipes").glob("*.yaml"))
        if OmegaConf.select(OmegaConf.create(recipe_settings(path)), "ragym.guards") is not None
    }


GUARDED_RECIPES = _guarded_recipes()
"""Shipped recipes with a guards section, and the env whose metrics they watch (the env whose hooks are named by
the recipe's first word, as ``--toy`` finds it)."""
STEP_METRICS = {"actor/entropy", "response_length/clip_ratio"}
"""Metrics both engines log for every env."""


@pytest.mark.parametrize(("recipe", "env_id"), sorted(GUARDED_RECIPES.items()))
def test_every_guard_a_recipe_turns_on_watches_a_metric_its_env_logs(recipe, env_id):
    """A guard on a metric the run never logs would never fire: each active guard names the env's action
    kinds, its episode metrics, its reward recipe's terms, or a trainer metric, and the outcome term is the
    recipe's ``ragym.outcome_metric``."""
    from dataclasses import fields

    from omegaconf import OmegaConf

    from ragym.envs.metrics import _REGISTRY
    from ragym.rl.recipe.compose import PACKAGE_ROOT, compose_recipe

    config = compose_recipe(recipe)  # with its bases (recipes/base/)
    section = OmegaConf.to_container(config.ragym.guards, resolve=False)
    reward = OmegaConf.load(PACKAGE_ROOT / config.reward.custom_reward_function.reward_kwargs.recipe_path)
    known = {f"reward/{term}" for term in reward.terms} | STEP_METRICS
    known |= {f"episode/actions/{kind}" for kind in _REGISTRY[env_id].action_kinds}
    known |= {f"episode/{name}" for name in episode_metrics_keys(env_id)}
    # The run checks watch the trainer's own metrics (tests/rl/test_run_checks.py), on in every recipe.
    active = {
        name: g for name, g in read_guards(section).items() if g.action != "off" and name not in RUN_CHECKS
    }
    assert active, f"{recipe} turns no guard on"
    # Held-out evaluations log the same episode metrics and reward terms under val/ (both engines).
    known |= {f"val/{key}" for key in known if key.startswith(("episode/", "reward/"))}
    for name, guard in active.items():
        for field in fields(guard):
            if field.name.endswith("metric"):
                assert getattr(guard, field.name) in known, f"{recipe}: {name}.{field.name}"
    if "format_only" in active:
        assert active["format_only"].outcome_metric == config.ragym.outcome_metric


def episode_metrics_keys(env_id: str) -> set[str]:
    """The episode metrics ``env_id`` logs, read from one episode of the scripted expert its hooks register."""
    from ragym.envs.hooks import env_hooks
    from ragym.envs.metrics import episode_metrics
    from ragym.envs.registry import make_env
    from ragym.envs.scripted import run_episode

    env = make_env(env_id)
    episode = run_episode(env, env_hooks(env_id).expert(env, 0), 0)
    env.close()
    return set(episode_metrics(env_id, episode["events"]))
