"""Issue #27 item 4: ``ragym ablate credit`` / ``credit_delta05`` compare episode-level GRPO, turn-level credit and
each with dynamic sampling; their statistic is the step at which held-out Ident. first reaches the demo's."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from ragym.rl.ablate.cli import main, run_grid
from ragym.rl.ablate.grids import (
    DEMO_IDENT,
    GRIDS,
    RAGYM_ROW,
    Grid,
    Target,
    Variant,
    register_grid,
    row_label,
)
from ragym.rl.ablate.kbvqa import variant_overrides
from ragym.rl.ablate.speed import (
    DROPPED,
    FLAT,
    ROUNDS,
    TOPPED_UP,
    dropped_share,
    held_out_evaluations,
    sampling_summary,
    steps_to_target,
)
from ragym.rl.errors import UsageError


# ----- steps to the target on made-up curves -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("curve", "expected"),
    [
        ([(0, 0.0), (10, 0.4), (20, 0.8), (30, 0.8)], 20),  # first evaluation at or above the target
        (
            [(0, 0.0), (10, 38 / 48), (20, 0.5)],
            10,
        ),  # 38/48 = 0.7917 reaches 0.79; a later drop does not undo it
        ([(0, 0.0), (10, 37 / 48), (20, 0.7899)], None),  # 37/48 = 0.771 and 0.7899 stay below: not reached
        ([(0, 0.8), (10, 0.0)], 0),  # the policy GRPO started from was there already
        ([(20, 0.9), (0, 0.0), (10, 0.1)], 20),  # in step order, whatever order the points come in
        ([(0, 0.0)], None),
    ],
)
def test_steps_to_target_is_the_first_evaluated_step_at_or_above_it(
    curve: list, expected: int | None
) -> None:
    assert steps_to_target(curve, 0.79) == expected


def curve(*points: tuple[int, float]) -> list[dict[str, float]]:
    return [{"step": s, "ident_acc": v, "rejections": 1.0} for s, v in points]


def sampled(dynamic: bool, dropped: float = 0.0) -> dict:
    return {
        "dynamic_sampling": dynamic,
        "steps": 3,
        "flat_group_share": 0.5,
        "dropped_group_share": dropped,
        "gen_batches": 2.0 if dynamic else 1.0,
    }


FAKE = Grid(
    "fake_credit",
    "kbvqa",
    (Variant("grpo"), Variant("fast"), Variant("never"), Variant("mixed_ds")),
    ("ident_acc", "rejections"),
    target=Target(0.79, "a made-up target"),
    eval_every=10,
)
# variant -> seed -> (held-out curve, dynamic sampling summary); step 0 is before GRPO.
CURVES = {
    "grpo": {0: curve((0, 0.0), (10, 0.5), (20, 0.8)), 1: curve((0, 0.0), (10, 0.8), (20, 0.8))},
    "fast": {0: curve((0, 0.0), (10, 0.8), (20, 0.8)), 1: curve((0, 0.0), (10, 0.8), (20, 0.6))},
    "never": {0: curve((0, 0.0), (10, 0.6), (20, 0.7)), 1: curve((0, 0.0), (10, 0.1), (20, 0.0))},
    "mixed_ds": {0: curve((0, 0.0), (10, 0.9), (20, 0.9)), 1: curve((0, 0.0), (10, 0.1), (20, 0.2))},
}


def fake_run(out: Path, variant: Variant, seed: int, steps: int | None, extra: list[str]) -> dict:
    points = CURVES[variant.name][seed]
    dynamic = variant.name.endswith("_ds")
    return {
        "metrics": {k: points[-1][k] for k in ("ident_acc", "rejections")},
        "before_grpo": {k: points[0][k] for k in ("ident_acc", "rejections")},
        "held_out_curve": points,
        "train_sampling": sampled(dynamic, 0.25 + 0.25 * seed if dynamic else 0.0),
        "wall_time_s": 1.0,
    }


def test_steps_to_target_per_seed_vs_the_baseline_and_the_report(tmp_path: Path) -> None:
    results = run_grid(FAKE, tmp_path, [0, 1], None, [], runner=fake_run)
    reach = results["steps_to_target"]
    assert reach["target_ident_acc"] == 0.79
    per_seed = {name: v["per_seed"] for name, v in reach["variants"].items()}
    assert per_seed == {"grpo": [20, 10], "fast": [10, 10], "never": [None, None], "mixed_ds": [10, None]}
    vs = {name: v.get("vs_grpo") for name, v in reach["variants"].items()}
    # fast: earlier on seed 0, same on seed 1 -> no direction; never: later on both (not reached counts as later);
    # mixed_ds: earlier on seed 0, later on seed 1.
    assert vs == {"grpo": None, "fast": "seeds disagree", "never": "up", "mixed_ds": "seeds disagree"}
    assert (
        reach["variants"]["never"]["reached_seeds"] == 0
        and reach["variants"]["never"]["mean_over_reached"] is None
    )
    assert reach["variants"]["grpo"]["mean_over_reached"] == 15.0
    assert reach["variants"]["never"]["peak_ident_acc"]["per_seed"] == [0.7, 0.1]
    groups = results["group_sampling"]
    assert groups["grpo"]["dropped_group_share"] is None  # off: nothing dropped, the flat share only counted
    assert groups["mixed_ds"]["dropped_group_share"]["per_seed"] == [0.25, 0.5]
    assert groups["mixed_ds"]["gen_batches"]["mean"] == 2.0
    report = (tmp_path / "report.md").read_text()
    assert "## Steps to the target: held-out ident_acc >= 0.79" in report and "a made-up target" in report
    assert "| never | not reached / not reached | 0 of 2 seeds | up | 0.700 / 0.100 |" in report
    assert "| mixed_ds | 10 / not reached | 1 of 2 seeds | seeds disagree |" in report
    assert "| 0.375 ± 0.177 | 2.00 |" in report  # dropped share mean ± sample std of 0.25, 0.5
    assert "| grpo | 20 / 10 | 2 of 2 seeds | (baseline) | 0.800 / 0.800 | 0.500 (counted) | off |" in report
    assert "steps 0, 10, 20" in report and (tmp_path / "curve.png").stat().st_size > 0
    assert json.loads((tmp_path / "results.json").read_text())["steps_to_target"]["variants"]["never"][
        "per_seed"
    ] == [None, None]
    assert "How far GRPO moved" in report  # the other KB-VQA grids' statistics are still there


def test_a_run_without_a_held_out_curve_is_an_error_naming_it(tmp_path: Path) -> None:
    def no_curve(out: Path, variant: Variant, seed: int, steps: int | None, extra: list[str]) -> dict:
        result = fake_run(out, variant, seed, steps, extra)
        del result["held_out_curve"]
        return result

    with pytest.raises(RuntimeError, match="grpo/seed_0/result.json has no held-out curve"):
        run_grid(FAKE, tmp_path, [0], None, [], runner=no_curve)


# ----- what dynamic sampling dropped, and the logged evaluations ---------------------------------------------
def test_dropped_share_is_the_dropped_groups_over_those_generated() -> None:
    # 2 rounds: 4 groups, 2 flat (dropped), refill 2, 1 flat -> bound: 1 flat topped up; 6 generated, 3 flat.
    record = {FLAT: 3 / 6, DROPPED: 2.0, TOPPED_UP: 1.0, ROUNDS: 2.0}
    assert dropped_share(record) == pytest.approx(2 / 6)
    assert dropped_share({FLAT: 0.0, DROPPED: 0.0, TOPPED_UP: 0.0}) == 0.0
    other = {FLAT: 1.0, DROPPED: 4.0, TOPPED_UP: 0.0, ROUNDS: 1.0}
    summary = sampling_summary(
        [{"step": 1, **record}, {"step": 1, "val/episode/ident_acc": 0.5}, {"step": 2, **other}], enabled=True
    )
    assert summary["steps"] == 2 and summary["dropped_group_share"] == pytest.approx((2 / 6 + 1.0) / 2)
    assert summary["flat_group_share"] == pytest.approx(0.75) and summary["gen_batches"] == 1.5
    # Off, the engine counts flat groups but trains on them: none dropped (even a log claiming some).
    off = sampling_summary([{"step": 1, **other}], enabled=False)
    assert off["dropped_group_share"] == 0.0 and off["flat_group_share"] == 1.0


def test_held_out_evaluations_are_the_val_records_by_step_the_last_logged_winning() -> None:
    records = [
        {"step": 1, "reward/total": 1.0, FLAT: 0.5},
        {"step": 10, "val/episode/ident_acc": 0.2, "val/reward/total": 1.0},
        {"step": 10, "val/episode/ident_acc": 0.3, "val/reward/total": 1.5},  # logged again after a resume
        {"step": 5, "val/episode/ident_acc": 0.1},
    ]
    assert held_out_evaluations(records) == [
        (5, {"episode/ident_acc": 0.1}),
        (10, {"episode/ident_acc": 0.3, "reward/total": 1.5}),
    ]


# ----- the grids and what each variant composes to -----------------------------------------------------------
def test_credit_grids_have_the_four_variants_labelled_as_ragyms() -> None:
    for name in ("credit", "credit_delta05"):
        grid = GRIDS[name]
        assert [v.name for v in grid.variants] == [
            "grpo",
            "turn_credit",
            "grpo_dyn_sampling",
            "turn_credit_dyn_sampling",
        ]
        assert {row_label(v) for v in grid.variants} == {RAGYM_ROW} and grid.claims == ()
        assert grid.target == DEMO_IDENT and DEMO_IDENT.ident_acc == 0.79 and grid.eval_every == 5
        assert {"ident_acc", "rejections", "needless_rejections"} <= set(grid.metrics)
        assert all(v.warm_start_from == "grpo" for v in grid.variants[1:])  # they differ in RL only
    assert GRIDS["credit"].steps is None and GRIDS["credit_delta05"].steps == GRIDS["delta"].steps
    with pytest.raises(ValueError, match="a target needs"):
        register_grid(Grid("no_curve", "kbvqa", (Variant("a"),), ("ident_acc",), target=DEMO_IDENT))
    assert "no_curve" not in GRIDS


def composed(grid_dir: Path, variant: Variant, extra: list[str] | None = None):
    """The demo recipe as the variant's run composes it (rows, reward recipe, overrides), read by the engine."""
    from ragym.rl.demo.run import DEMO_RECIPE
    from ragym.rl.engine.config import RecipeReader, read_engine_config
    from ragym.rl.recipe.compose import load_recipe

    config = load_recipe(DEMO_RECIPE, variant_overrides(grid_dir, variant, extra or []))
    cfg = read_engine_config(RecipeReader(config))
    reward = config.reward.custom_reward_function.reward_kwargs.recipe_path
    delta = yaml.safe_load(Path(reward).read_text())["terms"]["verification"]["params"]["delta"]
    rows = pd.read_parquet(cfg.val_files)
    env = json.loads(rows["extra_info"].iloc[0]["env_kwargs"])
    return config, cfg, delta, env


@pytest.mark.parametrize("name", ["credit", "credit_delta05"])
def test_each_variant_composes_to_its_estimator_filter_and_setting(name: str, tmp_path: Path) -> None:
    expected = {
        "grpo": ("grpo", False),
        "turn_credit": ("turn_credit", False),
        "grpo_dyn_sampling": ("grpo", True),
        "turn_credit_dyn_sampling": ("turn_credit", True),
    }
    setting = {"credit": (0.2, 1.0, 0.7), "credit_delta05": (0.5, 0.8, 0.5)}[
        name
    ]  # delta, check, reject_noise
    for variant in GRIDS[name].variants:
        config, cfg, delta, env = composed(tmp_path, variant)
        assert (cfg.update.adv_estimator, cfg.filter_groups.enable) == expected[variant.name], variant.name
        assert cfg.filter_groups.metric == "reward" and cfg.filter_groups.max_num_gen_batches == 4
        assert cfg.test_freq == 5 and cfg.rollout_n == 8
        assert delta == setting[0] and env.get("visual_check_accuracy", 1.0) == setting[1]
        if not variant.warm_start_from:  # the one warm start of a seed
            assert config.ragym.demo.warm_start.reject_noise == setting[2]
    # --eval-every appends its own test_freq after the variant's, and it wins.
    assert composed(tmp_path, GRIDS[name].variants[1], ["trainer.test_freq=2"])[1].test_freq == 2


def test_credit_delta05_baseline_is_the_delta_grids_delta_05_run(tmp_path: Path) -> None:
    base = GRIDS["credit_delta05"].variants[0]
    delta05 = next(v for v in GRIDS["delta"].variants if v.name == "delta=0.5")
    first = GRIDS["delta"].variants[0]  # delta=0.5 starts GRPO from delta=0.2's warm start
    assert (base.env, base.reward, base.kb_preset) == (delta05.env, delta05.reward, delta05.kb_preset)
    assert set(first.overrides) <= set(base.overrides)  # the same warm start
    mine, theirs = composed(tmp_path, base)[1], composed(tmp_path, delta05)[1]
    assert (mine.update, mine.filter_groups) == (theirs.update, theirs.filter_groups)


def test_list_shows_the_variants_and_eval_every_is_refused_where_no_curve_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["credit", "--out", str(tmp_path), "--list", "--eval-every", "2"]) == 0
    out = capsys.readouterr().out
    assert "every 2 GRPO steps" in out and "ident_acc >= 0.79" in out
    for name in ("grpo", "turn_credit", "grpo_dyn_sampling", "turn_credit_dyn_sampling"):
        assert f"- {name} [{RAGYM_ROW}]" in out
    assert out.count("algorithm.adv_estimator=turn_credit") == 4  # two variants: settings line and command
    assert out.count("trainer.test_freq=5 trainer.test_freq=2") == 4  # the later one wins
    with pytest.raises(UsageError, match="keeps no held-out curve"):
        main(["delta", "--out", str(tmp_path / "d"), "--list", "--eval-every", "5"])
    with pytest.raises(UsageError, match="--eval-every must be >= 1"):
        main(["credit", "--out", str(tmp_path), "--list", "--eval-every", "0"])
