"""Every grid variant's run receives its own settings (issue #51 item 3), without training.

KB-VQA grids: ``kbvqa._trainer``, the runner's own path to its engine, runs for every variant of every grid on the
grids' default task with the expensive steps replaced at their seams (building the tiny policy, the warm start,
its probe, the trainer itself), on small copies of the grids' KBs. The demo recipe is composed by Hydra once;
each run's overrides are parsed by Hydra's own override parser and set on a copy (``compose_once``), which is
what composing gives for plain keys (no config group is overridden) at a twentieth of the time. What each run received is read back: the env
kwargs of every row the trainer reads, the reward recipe it scores with, the warm start's settings (or the
shared warm start it starts GRPO from), the tiny policy it copies, its GRPO steps.

DocMemo grid: ``docmemo.run_docmemo`` runs every variant (``full`` included) over a small document with a retriever
that ranks pages by their overlap with the query (``test_docmemo_oracle``'s); each env must hold exactly the
variant's settings, and each round's search must use the query the oracle refined.
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from omegaconf import DictConfig, OmegaConf

from ragym.data_prep import synthetic_kb
from ragym.rl.ablate import docmemo, kbvqa
from ragym.rl.ablate.grids import BASE_REWARD, GRIDS, Variant, default_task, grid_for_task, run_dir
from ragym.rl.demo import run
from ragym.rl.demo.tasks import task_overrides
from ragym.rl.engine import trainer as trainer_module
from ragym.rl.recipe import compose
from ragym.rl.recipe.compose import load_recipe, resolve_recipe_path, resolve_reward_recipe

KBVQA_GRIDS = [name for name, grid in GRIDS.items() if grid.kind == "kbvqa"]
SEED = 1


@functools.lru_cache(maxsize=1)
def _demo_recipe() -> DictConfig:
    return load_recipe(run.DEMO_RECIPE, [])


def compose_once(recipe: str, overrides: list[str] | None = None) -> DictConfig:
    """``load_recipe`` of the demo recipe: its composition with ``overrides`` set as Hydra parses them."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    assert recipe == run.DEMO_RECIPE
    config = copy.deepcopy(_demo_recipe())
    for override in OverridesParser.create().parse_overrides(list(overrides or [])):
        key = override.key_or_group
        if not (override.is_add() or override.is_force_add()):  # a plain override names an existing key
            assert OmegaConf.select(config, key, default=_ABSENT) is not _ABSENT, key
        OmegaConf.update(config, key, override.value(), force_add=True)
    resolve_reward_recipe(config, resolve_recipe_path(recipe))
    return config


_ABSENT = object()


class Received:
    """A stand-in for ``LocalTrainer`` that keeps what it was built with."""

    built: list[tuple[Any, Any]] = []

    def __init__(self, config: Any, cfg: Any) -> None:
        Received.built.append((config, cfg))


@pytest.fixture
def seams(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """The expensive steps of a run replaced by recorders; the grids' KBs at a tenth of their size."""
    seen: dict[str, list[Any]] = {"inputs": [], "warm_start": [], "probe": [], "training_probe": []}

    def build_inputs(out, reader, seed, policy_from=None):
        seen["inputs"].append((out, seed, policy_from, reader.get("ragym.demo.kb_preset")))
        (out / "tiny_policy").mkdir()
        (out / "tiny_policy" / "config.json").write_text("{}")  # whole: another variant may copy it
        return out / "kb", out / "tiny_policy"

    def warm_start(config, reader, policy_dir, out_dir, seed):
        seen["warm_start"].append((out_dir, reader.get("ragym.demo.warm_start")))
        out_dir.mkdir(parents=True)
        (out_dir / "warm_start.json").write_text("{}")

    def training_probe(policy_dir, config, rows, values, quote):
        """A restarted warm start's check on the training questions: met at once."""
        seen["training_probe"].append(policy_dir)
        return {
            group: {"mean": None, "greedy_share": None}
            for group in ("confirm_match", "reject_no_match", "copy", "other")
        }

    monkeypatch.setattr(run, "_build_inputs", build_inputs)
    monkeypatch.setattr(
        run, "training_questions", lambda reader, _: (run.read_rows(reader.get("data.train_files"), 4), None)
    )
    monkeypatch.setattr(run, "training_probe", training_probe)
    monkeypatch.setattr(run, "_warm_start", warm_start)
    monkeypatch.setattr(
        run, "check_warm_start", lambda config, reader, warm_dir, seed: seen["probe"].append(warm_dir)
    )
    monkeypatch.setattr(trainer_module, "LocalTrainer", Received)
    monkeypatch.setattr(run, "load_recipe", compose_once)
    monkeypatch.setattr(compose, "load_recipe", compose_once)
    monkeypatch.setattr(Received, "built", [])
    for name, preset in synthetic_kb.PRESETS.items():
        monkeypatch.setitem(synthetic_kb.PRESETS, name, replace(preset, num_entities=60, num_rows=60))
    return seen


def _override(overrides: list[str] | tuple[str, ...], key: str) -> str | None:
    """The value the last override of ``key`` sets, as written (None: not set)."""
    values = [o.split("=", 1)[1] for o in overrides if o.lstrip("+").split("=", 1)[0] == key]
    return values[-1] if values else None


@pytest.mark.parametrize("name", KBVQA_GRIDS)
def test_each_kbvqa_variant_run_receives_its_rows_reward_warm_start_and_steps(name, seams, tmp_path) -> None:
    task = default_task(GRIDS[name])
    grid = grid_for_task(GRIDS[name], task)
    first = grid.variants[0]
    for variant in sorted(
        grid.variants, key=lambda v: bool(v.init_from)
    ):  # a continued warm start's source first
        if variant.warm_start_from:  # the first variant's run wrote its warm start
            assert run_dir(tmp_path, first, SEED).joinpath("warm_start", "warm_start.json").is_file()
        kbvqa._trainer(tmp_path, variant, SEED, grid.steps, [])
        config, cfg = Received.built[-1]
        what = f"{name}/{variant.name}"
        # Rows: the grid KB's (the variant's preset), every one with the variant's env kwargs over its own.
        kb = kbvqa.shared_kb(tmp_path, variant.kb_preset) / "data"
        for split, path in (("train", cfg.train_files), ("test", cfg.val_files)):
            theirs = pd.read_parquet(kb / f"{split}.parquet")["extra_info"]
            ours = pd.read_parquet(path)["extra_info"]
            assert len(ours) == len(theirs), what
            for mine, base in zip(ours, theirs, strict=True):
                assert json.loads(mine["env_kwargs"]) == {**json.loads(base["env_kwargs"]), **variant.env}, (
                    what
                )
        # Reward: the demo's recipe with the variant's term params.
        recipe = cfg.reward_kwargs.get("recipe_path", BASE_REWARD)
        terms = yaml.safe_load(Path(recipe).read_text())["terms"]
        base_terms = yaml.safe_load(BASE_REWARD.read_text())["terms"]
        for term, params in base_terms.items():
            assert terms[term].get("params", {}) == {
                **params.get("params", {}),
                **variant.reward.get(term, {}),
            }, what
        # GRPO: the grid's steps, the variant's estimator and filter (the credit grids), the grid's test_freq.
        expected_steps = grid.steps if grid.steps is not None else config.trainer.total_training_steps
        assert cfg.total_steps == expected_steps, what
        overrides = list(variant.overrides)
        if (estimator := _override(overrides, "algorithm.adv_estimator")) is not None:
            assert cfg.update.adv_estimator == estimator, what
        if (dynamic := _override(overrides, "algorithm.filter_groups.enable")) is not None:
            assert cfg.filter_groups.enable is (dynamic == "true"), what
        assert cfg.test_freq == (grid.eval_every or -1), what
        # Warm start: the variant's own (the grid's and the task's settings) or the first variant's.
        out = run_dir(tmp_path, variant, SEED)
        if variant.warm_start_from:
            assert cfg.model_path == str(run_dir(tmp_path, first, SEED) / "warm_start"), what
            assert all(w[0] != out / "warm_start" for w in seams["warm_start"]), what
            continue
        assert cfg.model_path == str(out / "warm_start"), what
        warm_dir, settings = seams["warm_start"][-1]
        # The K=1 grids check each warm start on the training questions first, restarting it where it misses (built
        # aside as attempt 0, renamed into place); the others build one, straight into place.
        attempt = out / "warm_start.attempt0"
        restarted = GRIDS[name].task_restarts
        assert warm_dir == (attempt if restarted else out / "warm_start"), what
        assert (attempt in seams["training_probe"]) is restarted, what
        assert (
            seams["probe"][-1] == out / "warm_start" and (out / "warm_start" / "warm_start.json").is_file()
        ), what
        wanted = [*task_overrides(task, GRIDS[name].kb_preset), *grid.warm_start]
        for key in ("reject_noise", "copy_weight", "quote", "num_episodes"):
            value = _override(wanted, f"ragym.demo.warm_start.{key}")
            if value is not None:
                assert str(settings[key]).lower() == value.lower() or settings[key] == float(value), (
                    what,
                    key,
                )
        out_dir, seed, policy_from, kb_preset = seams["inputs"][-1]
        assert (out_dir, seed, kb_preset) == (out, SEED, variant.kb_preset), what
        # An own_warm_start variant copies the tiny policy of the variant it continues, else the first's; the
        # first builds its own.
        assert policy_from == (
            run_dir(tmp_path, Variant(variant.policy_from), SEED) / "tiny_policy"
            if variant.policy_from
            else None
        ), what
        sources = {first.name} | {v.init_from for v in grid.variants}
        assert variant.policy_from == (
            variant.init_from or ("" if variant.name in sources else first.name)
        ), what
    assert len(Received.built) == len(grid.variants)


# ----- the docmemo grid ------------------------------------------------------------------------------------------
def test_each_docmemo_variant_runs_with_its_settings_and_the_oracles_queries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import numpy as np

    from ragym.envs.docmemo.env import DocMemoConfig, DocMemoEnv
    from ragym.envs.docmemo.store import DocStore, save_store
    from ragym.envs.events import events_of
    from tests.envs.fakes import EveryName
    from tests.rl.ablate.test_docmemo_oracle import GOLD, QUESTION, TEXTS, OverlapRetriever

    n = len(TEXTS)
    save_store(
        DocStore("fund.pdf", TEXTS, TEXTS, ("text",) * n, np.eye(n, dtype=np.float32), "fake"),
        tmp_path / "fund",
        dpi=72,
    )
    row_kwargs = {"num_candidates": 3, "num_evidence": 2}
    monkeypatch.setattr(
        docmemo,
        "load_rows",
        lambda grid_dir: [
            {"options": {"question": QUESTION, "doc_id": "fund.pdf"}, "gold": set(GOLD), "kwargs": row_kwargs}
        ],
    )
    envs: list[tuple[dict[str, Any], Any]] = []

    def make_env(env_id: str, **kwargs: Any):
        assert env_id == "DocMemo-v0"
        env = DocMemoEnv(retriever=EveryName(OverlapRetriever()), store_root=str(tmp_path), **kwargs)
        envs.append((kwargs, env))
        return env

    refined: list[str] = []
    real_refined = docmemo.refined_query

    def refine(question, useful, read):
        refined.append(real_refined(question, useful, read))
        return refined[-1]

    monkeypatch.setattr("ragym.envs.registry.make_env", make_env)
    monkeypatch.setattr(docmemo, "refined_query", refine)
    defaults = {f.name: f.default for f in fields(DocMemoConfig)}
    grid = GRIDS["docmemo"]
    assert grid.variants[0].name == "full"
    for variant in grid.variants:
        envs.clear()
        refined.clear()
        result = docmemo.run_docmemo(tmp_path, variant, 0, None, [])
        ((kwargs, env),) = envs
        # The env holds the variant's settings over the row's and the grid's, and nothing else changed.
        expected = {
            **defaults,
            **row_kwargs,
            "show_images": False,
            "max_rounds": docmemo.NUM_ROUNDS,
            **variant.env,
        }
        held = {f.name: getattr(env.config, f.name) for f in fields(DocMemoConfig) if f.name != "store_root"}
        assert held == {k: v for k, v in expected.items() if k != "store_root"}, variant.name
        # Each round after the first searched with the query the oracle refined after the one before.
        queries = [e["query"] for e in events_of(env.events, "candidates")]
        assert queries[0] == QUESTION and queries[1:] == refined[: len(queries) - 1], variant.name
        # The run's recall is what the env's evidence showed.
        shown = set()
        for t, pages in enumerate(e["pages"] for e in events_of(env.events, "evidence")):
            shown |= set(pages)
            assert result["metrics"][f"recall@r{t + 1}"] == len(shown & GOLD) / len(GOLD), variant.name
    with pytest.raises(ValueError, match="no recipe overrides"):
        docmemo.run_docmemo(tmp_path, grid.variants[0], 0, None, ["x=1"])
