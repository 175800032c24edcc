"""Every ``ragym.r3g_demo.*`` setting the ledger listed as a gap reaches the R3G demo's task, tokenizer or warm
start, and the R3G warm start's training path (issue #51 items 1 and 3), read without GRPO.

``r3g.build_inputs`` builds the task and the tiny policy; ``r3g.warm_start`` runs for real at toy sizes with
``imitate`` and ``token_weights`` watched. The warm-start settings are changed together in one run against one run
of the recipe's values: each observation reads one setting only (rows, epochs, the weight of the tokens after each
weighted id, the observation tokens' weight, episodes a step, the moved weights), so a setting that stopped
reaching its use fails its own line. The two settings the R3G warm start has no use for (``quote``,
``copy_weight``) are changed in a third run that must equal the recipe's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from ragym.rl.demo import r3g
from ragym.rl.engine.config import RecipeReader
from ragym.rl.recipe.compose import load_recipe
from ragym.rl.tiny import policy as policy_module
from ragym.rl.tiny import warm_start as warm_start
from tests.rl.demo.recording import record_batches

REAL = {
    "imitate": warm_start.imitate,
    "build_tiny_policy": policy_module.build_tiny_policy,
}
"""The functions the runs below watch, as imported (a second run must not wrap the first's spy)."""
TOY = {
    "ragym.r3g_demo.preset": "tiny",
    "ragym.r3g_demo.corpus_repeats": 1,
    "ragym.r3g_demo.warm_start.num_episodes": 2,
    "ragym.r3g_demo.warm_start.epochs": 1,
}
"""The recipe at toy size: the small task preset, one copy of the texts for the tokenizer, a short warm start."""
SECTION = "ragym.r3g_demo.warm_start"
CHANGES = {
    f"{SECTION}.num_episodes": 3,
    f"{SECTION}.epochs": 2,
    f"{SECTION}.decision_weight": 9.0,
    f"{SECTION}.batch_size": 3,
    f"{SECTION}.lr": 0.0,
    f"{SECTION}.context_weight": 0.5,
    "ragym.r3g_demo.weighted_after": ["]"],
}
"""The changed run (the recipe's: 2 and 1 at toy size, 20, 2, 2e-3, 0, ["]", " a="]), with seed 7 (the recipe's 0)."""
INERT = {f"{SECTION}.quote": True, f"{SECTION}.copy_weight": 5.0}
"""Settings the R3G warm start has no use for: its expert quotes nothing and it gives ``imitate`` no copy spans."""


@pytest.fixture(scope="module")
def composed(tmp_path_factory: pytest.TempPathFactory):
    """The R3G recipe at toy size, the task and tiny policy built by ``r3g.build_inputs`` (once), and the folder."""
    out = tmp_path_factory.mktemp("r3g_settings")
    task = out / "task" / "data"
    config = load_recipe(
        r3g.RECIPE,
        [
            f"data.train_files={task}/train.parquet",
            f"data.val_files={task}/test.parquet",
            *(f"{k}={v}" for k, v in TOY.items()),
        ],
    )
    policy = r3g.build_inputs(out, RecipeReader(config), seed=0)
    return config, policy, out


def r3g_config(composed, **settings: Any) -> tuple[Any, RecipeReader]:
    config = OmegaConf.create(OmegaConf.to_container(composed[0]))
    for key, value in settings.items():
        OmegaConf.update(config, key, value, force_add=True)
    return config, RecipeReader(config)


def run_warm_start(composed, out: Path, seed: int = 0, **settings) -> dict[str, Any]:
    """``r3g.warm_start`` with what ``imitate`` received, the weights it trained with and its batches."""
    seen: dict[str, Any] = {}

    def imitate(model, image_inputs, epochs, cfg, decision_after=None, copy_spans=()):
        seen.update(epochs=epochs, cfg=cfg, decision_after=decision_after, copy_spans=copy_spans)
        return REAL["imitate"](model, image_inputs, epochs, cfg, decision_after, copy_spans)

    policy = composed[1]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(r3g, "imitate", imitate)
        record_batches(seen, patch)
        config, reader = r3g_config(composed, **settings)
        seen["info"] = r3g.warm_start(config, reader, policy, out, seed)
    from safetensors.torch import load_file

    from ragym.rl.models import load_policy

    seen["tokenizer"] = load_policy(policy)[1]
    old, new = load_file(policy / "model.safetensors"), load_file(out / "model.safetensors")
    seen["moved"] = any(not torch.equal(old[k], new[k]) for k in old)
    return seen


@pytest.fixture(scope="module")
def runs(composed, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    out = tmp_path_factory.mktemp("r3g_warm")
    return {
        "base": run_warm_start(composed, out / "base"),
        "changed": run_warm_start(composed, out / "changed", seed=7, **CHANGES),
        "inert": run_warm_start(composed, out / "inert", **INERT),
    }


def weights_after(seen: dict[str, Any], generated: bool = True) -> dict[str, set[float]]:
    """Decoded previous token -> the weights of the generated (or, ``generated`` false, observation) tokens after it."""
    tokenizer, found = seen["tokenizer"], {}
    for sample, weights in seen["weighed"]:
        previous = [*sample.prompt_ids[-1:], *sample.response_ids[:-1]]
        for p, w, m in zip(previous, weights.tolist(), sample.response_mask, strict=True):
            if bool(m) == generated:
                found.setdefault(tokenizer.decode([p]), set()).add(w)
    return found


def _weighted(seen: dict[str, Any]) -> set[str]:
    """The tokens whose next generated token weighs more than the rest."""
    return {p for p, ws in weights_after(seen).items() if ws - {1.0}}


OBSERVED = {
    "num_episodes": lambda s: {len({p[0].uid for p in epoch}) for epoch in s["epochs"]},
    "epochs": lambda s: len(s["epochs"]),
    "decision_weight": lambda s: set().union(*(weights_after(s)[p] for p in _weighted(s))),
    "weighted_after": _weighted,
    # Observation tokens not after a weighted id (after one, token_weights multiplies theirs by decision_weight too).
    "context_weight": lambda s: set().union(
        *(ws for p, ws in weights_after(s, generated=False).items() if p not in ("]", " a="))
    ),
    "batch_size": lambda s: max(s["batches"]),  # episodes per optimiser step
    "lr": lambda s: s["moved"],
    "seed": lambda s: s["cfg"].seed,
}
EXPECTED = {
    "base": {
        "num_episodes": {2},
        "epochs": 1,
        "decision_weight": {20.0},
        "weighted_after": {"]", " a="},
        "context_weight": {0.0},
        "batch_size": 2,
        "lr": True,
        "seed": 0,
    },
    "changed": {
        "num_episodes": {3},
        "epochs": 2,
        "decision_weight": {9.0},
        "weighted_after": {"]"},
        "context_weight": {0.5},
        "batch_size": 3,
        "lr": False,
        "seed": 7,
    },
}


@pytest.mark.parametrize("setting", list(OBSERVED))
def test_each_r3g_warm_start_setting_reaches_what_the_training_step_receives(setting: str, runs) -> None:
    for name in ("base", "changed"):
        assert OBSERVED[setting](runs[name]) == EXPECTED[name][setting], name


def test_quote_and_copy_weight_change_nothing_the_r3g_warm_start_trains_on(runs) -> None:
    """The reason ``tests/rl/recipe/test_settings_ledger.py`` gives for both: the same episodes, the same weights."""
    base, inert = runs["base"], runs["inert"]
    assert inert["cfg"].quote and inert["cfg"].copy_weight == 5.0 and inert["copy_spans"] == ()
    assert len(base["weighed"]) == len(inert["weighed"])
    for (sample, weights), (other, other_weights) in zip(base["weighed"], inert["weighed"], strict=True):
        assert sample.response_ids == other.response_ids and torch.equal(weights, other_weights)


def test_the_r3g_warm_start_imitates_every_noise_branch_at_its_probability(runs) -> None:
    """The R3G training path on the recipe's warm start (noise 0.65, reject_noise 0): every row reaches ``imitate``
    as its generous and its strict branch weighted 0.65 and 0.35, the decision and rationale tokens weighing
    decision_weight (20) before that."""
    seen = runs["base"]
    (samples,) = seen["epochs"]
    tokenizer = seen["tokenizer"]
    shares: dict[str, dict[str, float]] = {}
    for sample, weight, share in samples:
        text = tokenizer.decode(
            [t for t, m in zip(sample.response_ids, sample.response_mask, strict=True) if m]
        )
        generous = "hidden a=1" in text.replace("  ", " ")
        shares.setdefault(sample.uid, {})["generous" if generous else "strict"] = share
        assert weight == 20.0
    assert len(shares) == 2 and all(
        s == pytest.approx({"generous": 0.65, "strict": 0.35}) for s in shares.values()
    )


# ----- ragym.r3g_demo.preset and corpus_repeats: the task and the tokenizer's corpus -------------------------------
def test_the_preset_and_corpus_repeats_reach_the_task_and_the_tokenizer(composed, tmp_path: Path) -> None:
    from ragym.data_prep.r3g_synthetic import PRESETS
    from ragym.rl.tiny.corpus import builtin_corpus

    corpora: dict[int, list[str]] = {}

    def build(arch, out_dir, corpus=None, seed=0, config=None):
        corpora[len(corpora)] = list(corpus)
        return Path(out_dir)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(policy_module, "build_tiny_policy", build)
        for repeats, preset in ((1, "tiny"), (3, "demo")):
            config, reader = r3g_config(
                composed, **{"ragym.r3g_demo.corpus_repeats": repeats, "ragym.r3g_demo.preset": preset}
            )
            r3g.build_inputs(tmp_path / preset, reader, seed=0)
    for preset in ("tiny", "demo"):
        data = tmp_path / preset / "task" / "data"
        questions = sum(len(pd.read_parquet(data / f"{split}.parquet")) for split in ("train", "test"))
        assert questions == PRESETS[preset].num_classes * PRESETS[preset].queries_per_class
    builtin = len(list(builtin_corpus()))
    tiny_texts, demo_texts = len(corpora[0]) - builtin, len(corpora[1]) - builtin
    assert tiny_texts > 0 and demo_texts % 3 == 0  # the demo preset's texts, three times
    from ragym.rl.engine.trainer import read_rows

    once = list(r3g._corpus(read_rows(str(tmp_path / "demo" / "task" / "data" / "train.parquet"), 64), 1))
    assert demo_texts == 3 * len(once)
