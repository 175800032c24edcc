"""One KB-VQA ablation run: the CPU demo's warm start and GRPO for one (variant, seed), then its held-out metrics.

A variant's env kwargs go into its own copy of the demo rows (``DIR/rows/VARIANT/``, every row's
``env_kwargs`` updated) and its reward parameters into its own reward recipe (``DIR/rewards/VARIANT.yaml``);
both are then plain recipe overrides of ``ragym demo``, which ``demo_command`` prints.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import time
from pathlib import Path
from typing import Any, cast

import pandas as pd
import yaml

from ragym.envs.files import atomic_write
from ragym.rl.ablate.grids import BASE_REWARD, KBVQA_METRICS, Variant, run_dir, slug
from ragym.rl.ablate.speed import held_out_evaluations, sampling_summary
from ragym.rl.core.metrics import read_metrics
from ragym.rl.demo.run import DEMO_RECIPE, prepare

logger = logging.getLogger(__name__)


def shared_kb(grid_dir: Path, preset: str = "demo") -> Path:
    """The KB every variant's rows point at, built once: ``DIR/kb`` for the demo preset (as ``ragym demo``
    builds it), ``DIR/kb-PRESET`` for another (``Grid.kb_preset``)."""
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb

    kb = grid_dir / ("kb" if preset == "demo" else f"kb-{preset}")
    if not (kb / "kb.json").exists():
        build_kb(kb, PRESETS[preset], seed=0, name=f"synthetic-{preset}")
    return kb


def write_rows(grid_dir: Path, variant: Variant) -> Path:
    """``DIR/rows/VARIANT/{train,test}.parquet``: the demo rows with the variant's env kwargs; same row count."""
    kb, out = shared_kb(grid_dir, variant.kb_preset), grid_dir / "rows" / slug(variant)
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        frame = pd.read_parquet(kb / "data" / f"{split}.parquet")
        infos = []
        for info in frame["extra_info"]:
            kwargs = {**json.loads(info["env_kwargs"]), **variant.env}
            infos.append({**info, "env_kwargs": json.dumps(kwargs)})
        written = frame.assign(extra_info=infos)
        if len(written) != len(frame):  # rows in = rows out: nothing is filtered here
            raise RuntimeError(f"{split}: {len(frame)} rows in, {len(written)} out")
        # Written whole: another process of the same grid may be reading the rows.
        atomic_write(out / f"{split}.parquet", written.to_parquet)
        every = int(variant.options.get("guard_every", 0))
        # The guard's validation split of training rows (their labels are never harvested).
        if split == "train" and every:
            atomic_write(out / "guard.parquet", written.iloc[every - 1 :: every].to_parquet)
    return out


def write_reward_recipe(grid_dir: Path, variant: Variant) -> Path | None:
    """The demo's reward recipe with the variant's term params merged in; None when it has none."""
    if not variant.reward:
        return None
    recipe = yaml.safe_load(BASE_REWARD.read_text())
    for term, params in variant.reward.items():
        if term not in recipe["terms"]:
            raise ValueError(f"variant {variant.name}: reward term {term!r} is not in {BASE_REWARD.name}")
        recipe["terms"][term].setdefault("params", {}).update(params)
    path = grid_dir / "rewards" / f"{slug(variant)}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def variant_overrides(
    grid_dir: Path, variant: Variant, extra: list[str], seed: int | None = None
) -> list[str]:
    """Recipe overrides that make the demo recipe this variant (rows, reward recipe, the variant's own keys, the
    warm start it continues from: ``variant.init_from``'s of ``seed``), then ``extra``."""
    rows = write_rows(grid_dir, variant)
    overrides = [f"data.train_files={rows / 'train.parquet'}", f"data.val_files={rows / 'test.parquet'}"]
    if variant.options.get("guard_every"):
        overrides.append(f"+ragym.cotrain.guard_rows={rows / 'guard.parquet'}")
    reward = write_reward_recipe(grid_dir, variant)
    if reward is not None:
        overrides.append(f"reward.custom_reward_function.reward_kwargs.recipe_path={reward}")
    if variant.init_from:
        if seed is None:
            raise ValueError(
                f"{variant.name} continues {variant.init_from}'s warm start of a seed: name the seed"
            )
        overrides.append(f"ragym.demo.warm_start.init_from={init_dir(grid_dir, variant, seed)}")
    return overrides + list(variant.overrides) + list(extra)


def init_dir(grid_dir: Path, variant: Variant, seed: int) -> Path:
    """The warm start ``variant``'s own continues from (``variant.init_from``'s of ``seed``)."""
    return run_dir(grid_dir, Variant(variant.init_from), seed) / "warm_start"


def demo_command(out: Path, seed: int, steps: int | None, overrides: list[str]) -> str:
    """The ``ragym demo`` command that runs one (variant, seed) alone (same warm start, GRPO and data)."""
    parts = ["ragym", "demo", "--out", str(out), "--seed", str(seed)]
    parts += ["--steps", str(steps)] if steps is not None else []
    return shlex.join(parts + overrides)


def train_overrides(
    grid_dir: Path, variant: Variant, seed: int, steps: int | None, extra: list[str]
) -> list[str]:
    """Overrides of the demo recipe for GRPO from another variant's warm start (``variant.warm_start_from``)."""
    warm = run_dir(grid_dir, Variant(variant.warm_start_from), seed) / "warm_start"
    out = run_dir(grid_dir, variant, seed)
    overrides = [
        f"data.seed={seed}",
        f"trainer.default_local_dir={out / 'grpo'}",
        f"actor_rollout_ref.model.path={warm}",
    ]
    overrides += [f"trainer.total_training_steps={steps}"] if steps is not None else []
    return overrides + variant_overrides(grid_dir, variant, extra, seed)


def command(grid_dir: Path, variant: Variant, seed: int, steps: int | None, extra: list[str]) -> str:
    """How to run one (variant, seed) alone: ``ragym demo`` (own warm start) or ``ragym train`` (shared one)."""
    if not variant.warm_start_from:
        return demo_command(
            run_dir(grid_dir, variant, seed), seed, steps, variant_overrides(grid_dir, variant, extra, seed)
        )
    overrides = train_overrides(grid_dir, variant, seed, steps, extra)
    return shlex.join(["ragym", "train", "--recipe", DEMO_RECIPE, *overrides])


def _trainer(grid_dir: Path, variant: Variant, seed: int, steps: int | None, extra: list[str]) -> Any:
    """The local engine for one (variant, seed): after ``ragym demo``'s preparation, or from a shared warm start."""
    from ragym.rl.engine.config import RecipeReader, read_engine_config
    from ragym.rl.engine.trainer import LocalTrainer
    from ragym.rl.recipe.compose import load_recipe

    if not variant.warm_start_from:
        policy_from = run_dir(grid_dir, Variant(variant.policy_from), seed) if variant.policy_from else None
        if variant.init_from and not (init_dir(grid_dir, variant, seed) / "warm_start.json").is_file():
            raise FileNotFoundError(
                f"{variant.name}'s warm start continues {variant.init_from}'s, not at "
                f"{init_dir(grid_dir, variant, seed)}: run {variant.init_from} for seed {seed} first"
            )
        config, reader, _ = prepare(
            run_dir(grid_dir, variant, seed),
            seed,
            steps,
            DEMO_RECIPE,
            variant_overrides(grid_dir, variant, extra, seed),
            policy_from,
        )
        return LocalTrainer(config, read_engine_config(reader))
    warm = run_dir(grid_dir, Variant(variant.warm_start_from), seed) / "warm_start" / "warm_start.json"
    if not warm.is_file():
        raise FileNotFoundError(
            f"{variant.name} starts from {variant.warm_start_from}'s warm start, not at {warm}: "
            f"run {variant.warm_start_from} for seed {seed} first"
        )
    config = load_recipe(DEMO_RECIPE, train_overrides(grid_dir, variant, seed, steps, extra))
    return LocalTrainer(config, read_engine_config(RecipeReader(config)))


def run_kbvqa(
    grid_dir: Path, variant: Variant, seed: int, steps: int | None, extra: list[str]
) -> dict[str, Any]:
    """GRPO (after a warm start) for one (variant, seed) in ``DIR/runs/VARIANT/seed_S``: its held-out metrics
    before and after, the held-out curve when the run evaluates during GRPO (``trainer.test_freq``), and the
    dynamic-sampling shares of its steps."""
    os.environ.setdefault("WANDB_MODE", "disabled")
    logger.info("%s seed %d: %s", variant.name, seed, command(grid_dir, variant, seed, steps, extra))
    start = time.perf_counter()
    trainer = _trainer(grid_dir, variant, seed, steps, extra)
    before_path = run_dir(grid_dir, variant, seed) / "before.json"
    if not before_path.exists():  # a resumed run keeps the evaluation of the policy GRPO started from
        before_path.write_text(json.dumps(trainer.evaluate()))
    trainer.fit()
    records = read_metrics(Path(trainer.cfg.output_dir) / "metrics.jsonl")
    # The engine's own held-out evaluations (every trainer.test_freq steps and the last). Greedy evaluation is
    # deterministic: the last step's logged one is what evaluating again would give.
    evaluations = held_out_evaluations(records)
    last = bool(evaluations) and evaluations[-1][0] == trainer.step
    after = evaluations[-1][1] if last else trainer.evaluate()
    trainer.close()
    what = f"{variant.name} seed {seed}"
    metrics = _metrics(after, what)
    before = _metrics(json.loads(before_path.read_text()), f"{what} (before GRPO)")
    result: dict[str, Any] = {"metrics": metrics, "before_grpo": before}
    if evaluations:  # the held-out curve, step 0 being the policy GRPO started from
        result["held_out_curve"] = [{"step": 0, **before}] + [
            {"step": step, **_metrics(evaluation, f"{what} (step {step})")}
            for step, evaluation in evaluations
        ]
    result["train_sampling"] = sampling_summary(records, trainer.cfg.filter_groups.enable)
    curve = retriever_curve(records)
    if (
        curve
    ):  # a run that serves a versioned retriever (ragym.cotrain): its held-out recall by step, and the last
        result["retriever_curve"] = curve
        metrics.update({f"retriever_{k}": v for k, v in curve[-1].items() if k != "step"})
    return {**result, "wall_time_s": time.perf_counter() - start}


def retriever_curve(records: list[dict[str, Any]]) -> list[dict[str, float]]:
    """The held-out retriever recall a run logged (``retriever/recall@k``, ``ragym.rl.cotrain``), by step."""
    by_step = {
        r["step"]: {k.removeprefix("retriever/"): v for k, v in r.items() if k.startswith("retriever/")}
        for r in records
        if any(k.startswith("retriever/") for k in r)
    }
    return [{"step": step, **values} for step, values in sorted(by_step.items())]


def _metrics(evaluation: dict[str, Any], what: str) -> dict[str, float]:
    """The grid's metrics out of a held-out evaluation; one missing is an error naming it."""
    metrics = {name: evaluation.get(key) for name, key in KBVQA_METRICS.items()}
    missing = [name for name, value in metrics.items() if value is None]
    if missing:
        raise RuntimeError(f"{what}: the evaluation has no {', '.join(missing)}")
    return cast(dict[str, float], metrics)  # none is None (checked above)
