"""``ragym budget gpu-check (--recipe R | --all) [--images N] [--logprobs verl|labels] [--write-plans FILE]
[key=value ...]``: each shipped GPU recipe's update step measured on one GPU beside ``ragym budget memory``'s
prediction (``ragym.rl.budget.gpu_check``), or the plans written for a machine without verl
(``benchmarks/gpu_check_all.sh``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from omegaconf import OmegaConf

from ragym.rl.budget.gpu_check import Device, check_all, cuda_device, plans_json
from ragym.rl.budget.plan import CheckPlan
from ragym.rl.budget.recipe_args import MODEL_KEY, add_update_arguments, load_config
from ragym.rl.budget.vision import MARKERS
from ragym.rl.errors import UsageError

ONE_GPU = ["trainer.nnodes=1", "trainer.n_gpus_per_node=1"]
"""Overrides that size a recipe's budget for the one GPU the check runs on (FSDP over one shard)."""
PLANS_FILE = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check_plans.json"
"""The committed plans of every shipped GPU recipe (``--write-plans``; a test keeps it equal to the recipes)."""


def shipped_gpu_recipes() -> list[str]:
    """The shipped recipes that train a model ragym keeps the config of, with vLLM: the GPU recipes."""
    from ragym.rl.budget.model_size import KNOWN_CONFIGS
    from ragym.rl.recipe.check import check_recipe
    from ragym.rl.recipe.compose import RECIPES_DIR

    names = []
    for path in sorted(RECIPES_DIR.glob("*.yaml")):
        config = check_recipe(path, validate=False)
        gpu = OmegaConf.select(config, "actor_rollout_ref.rollout.name") == "vllm"
        if gpu and Path(str(OmegaConf.select(config, MODEL_KEY))).name in KNOWN_CONFIGS:
            names.append(path.stem)
    return names


def recipe_plan(
    recipe: str, overrides: Sequence[str], images: int | None, logprobs: str, model_config: str | None = None
) -> CheckPlan:
    """The step ``recipe`` runs on one GPU and the budget's prediction of its memory."""
    from ragym.rl.budget.memory import gpu_memory, memory_settings
    from ragym.rl.budget.model_size import KNOWN_CONFIGS, load_model_config, model_shape
    from ragym.rl.lora import read_lora

    config = load_config(recipe, list(overrides))
    lora = read_lora(lambda key: OmegaConf.select(config, key))
    model = str(OmegaConf.select(config, MODEL_KEY))
    hf_config, source = load_model_config(model, model_config)
    shape = model_shape(hf_config, lora)
    one_gpu = load_config(recipe, [*overrides, *ONE_GPU])
    one = memory_settings(one_gpu, images, logprobs)
    sequences = -(-one.tokens // one.sequence_tokens)  # episodes in the micro-batch, rounded up
    if images is None:  # as many as the micro-batch's episodes hold, each whole images
        per_image = one.images.tokens_per_image + MARKERS
        images = sequences * (one.tokens // sequences // per_image) if per_image > MARKERS else 0
        one = memory_settings(one_gpu, images, logprobs)
    own = memory_settings(config, images, logprobs)
    predicted = gpu_memory(shape, one, 0.0, lora is not None).training
    per_gpu = gpu_memory(shape, own, 0.0, lora is not None).training
    known = (
        Path(model).name if Path(model).name in KNOWN_CONFIGS and source.startswith("ragym's copy") else ""
    )
    attention = OmegaConf.select(config, "actor_rollout_ref.model.override_config.attn_implementation")
    return CheckPlan(
        recipe=Path(recipe).stem,
        model=known,
        config=None if known else hf_config.to_diff_dict(),
        sequences=sequences,
        sequence_tokens=one.tokens // sequences,
        num_images=one.images.num_images,
        tokens_per_image=one.images.tokens_per_image,
        lora=None
        if lora is None
        else {
            "rank": lora.rank,
            "alpha": lora.alpha,
            "target_modules": lora.target_modules,
            "exclude_modules": lora.exclude_modules,
        },
        checkpointing=one.checkpointing,
        freeze_vision_tower=one.freeze_vision_tower,
        logprob_path=logprobs,
        attention=str(attention or "flash_attention_2"),
        predicted_gib=predicted / 2**30,
        scale_note=f"the recipe's {own.num_gpus} GPU(s), FSDP over {own.num_shards}: {per_gpu / 2**30:.2f} GiB each",
    )


def main(argv: list[str], device: Device | None = None) -> int:
    """Check the recipes on this machine's GPU (``device``: a test's stand-in), or write their plans."""
    parser = argparse.ArgumentParser(
        prog="ragym budget gpu-check", description=(__doc__ or "").partition("\n")[0]
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--recipe", help="recipe name (recipes/NAME.yaml) or path")
    which.add_argument("--all", action="store_true", help="every shipped GPU recipe")
    parser.add_argument("--model-config", help="the model's config.json or its folder (as budget memory)")
    parser.add_argument(
        "--peak-tflops", type=float, help="the GPU's dense bf16 peak, where ragym's table lacks it"
    )
    parser.add_argument(
        "--write-plans",
        type=Path,
        help="write the plans (JSON) for `python -m "
        "ragym.rl.budget.gpu_check --plans FILE` and stop (no GPU needed)",
    )
    add_update_arguments(parser)
    parser.add_argument("overrides", nargs="*", help="recipe overrides (--recipe only)")
    args = parser.parse_args(argv)
    if args.all and args.overrides:
        raise UsageError("gpu-check --all checks the recipes as shipped: overrides go with --recipe")
    if args.write_plans is None and device is None:
        device = cuda_device(
            args.peak_tflops and args.peak_tflops * 1e12
        )  # refuses without a GPU, before any work
    recipes = shipped_gpu_recipes() if args.all else [args.recipe]
    plans = [recipe_plan(r, args.overrides, args.images, args.logprobs, args.model_config) for r in recipes]
    if args.write_plans is not None:
        args.write_plans.write_text(plans_json(plans))
        print(f"gpu-check: {len(plans)} plan(s) written to {args.write_plans}")
        return 0
    assert device is not None
    return check_all(plans, device)
