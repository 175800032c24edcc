"""``ragym budget --recipe RECIPE --rows ROWS.parquet [--limit N] [--tokenizer PATH] [--estimate-text]
[--action-tokens N] [--json OUT] [key=value ...]``, ``ragym budget memory --recipe RECIPE [--gpu-gib G]
[--model-config PATH] [key=value ...]`` (GPU memory per GPU, full fine-tuning vs LoRA), ``ragym budget gpu-check``
(``ragym.rl.budget.gpu_cli``: the update measured on one GPU), and the report ``ragym prep`` prints for the rows it
writes."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from ragym.rl.budget.recipe_args import MODEL_KEY, add_update_arguments, load_config
from ragym.rl.budget.report import ACTION_TOKENS, PREP_SAMPLE, budget_report
from ragym.rl.budget.tokens import TextCounter
from ragym.rl.errors import UsageError


def text_counter(
    config: DictConfig, tokenizer: str | None, estimate: bool
) -> tuple[TextCounter, str, Path | None]:
    """(counter, where its tokenizer is, the model folder for the processor's settings): ``tokenizer``, else the
    recipe's model path when it is a local folder, else the chars / 3.5 estimate when ``estimate`` allows it."""
    model = OmegaConf.select(config, MODEL_KEY, default=None)
    path = Path(tokenizer) if tokenizer else Path(str(model)) if model and Path(str(model)).is_dir() else None
    if path is None:
        if not estimate:
            raise UsageError(
                f"no tokenizer: the recipe's {MODEL_KEY} ({model}) is not a local folder; pass --tokenizer PATH "
                "(a local model or tokenizer folder), or --estimate-text to estimate text as characters / 3.5"
            )
        return TextCounter(None), "", None
    if not path.is_dir():
        raise UsageError(f"--tokenizer {path} is not a folder (a local model or tokenizer folder)")
    from transformers import AutoTokenizer

    try:
        loaded = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as err:
        raise UsageError(f"cannot load a tokenizer from {path}: {str(err).splitlines()[0]}") from err
    if not getattr(loaded, "chat_template", None):  # VL checkpoints may keep it beside the processor instead
        jinja, saved = path / "chat_template.jinja", path / "chat_template.json"
        if jinja.is_file():
            loaded.chat_template = jinja.read_text()
        elif saved.is_file():
            loaded.chat_template = json.loads(saved.read_text()).get("chat_template")
    return TextCounter(loaded), str(path), path


def write_json(path: Path, report: dict[str, Any], extra: dict[str, Any]) -> None:
    """The per-episode numbers, the summary and the assumptions as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {**extra, **{k: report[k] for k in ("summary", "assumptions", "skipped_rows", "episodes")}}
    path.write_text(json.dumps(body, indent=1, default=str) + "\n")


def main(argv: list[str]) -> int:
    """``ragym budget``: print the token distribution of each row's longest episode and the truncated share;
    ``ragym budget memory``: the recipe's GPU memory per GPU."""
    from ragym.rl.data.rows import load_rows

    if argv[:1] == ["memory"]:
        return memory_main(argv[1:])
    if argv[:1] == ["gpu-check"]:
        from ragym.rl.budget.gpu_cli import main as gpu_check_main

        return gpu_check_main(argv[1:])

    parser = argparse.ArgumentParser(
        prog="ragym budget",
        description="tokens (text, visual) of each row's longest episode at a recipe's settings, and the share "
        "the recipe would truncate; `ragym budget memory`: GPU memory per GPU; `ragym budget gpu-check`: one "
        "update step measured on one GPU",
    )
    parser.add_argument("--recipe", required=True, help="recipe name (recipes/NAME.yaml) or path")
    parser.add_argument("--rows", required=True, help="verl parquet rows (ragym prep's)")
    parser.add_argument("--limit", type=int, default=-1, help="only the first N rows")
    parser.add_argument(
        "--tokenizer",
        help="local tokenizer or model folder (default: the recipe's model path when it is a local folder)",
    )
    parser.add_argument(
        "--estimate-text",
        action="store_true",
        help="without a tokenizer, estimate text tokens as characters / 3.5 (labelled estimated)",
    )
    parser.add_argument(
        "--action-tokens",
        type=int,
        default=ACTION_TOKENS,
        help=f"count each generated turn as at least N tokens (default {ACTION_TOKENS}: a real "
        "policy reasons at more length than the scripted turns)",
    )
    parser.add_argument("--json", type=Path, help="also write the per-episode numbers and the summary here")
    parser.add_argument(
        "overrides", nargs="*", help="recipe overrides, e.g. ragym.images.candidate_max_pixels=..."
    )
    args = parser.parse_args(argv)
    if args.action_tokens < 0:
        raise UsageError(f"--action-tokens must be >= 0, got {args.action_tokens}")
    config = load_config(args.recipe, args.overrides)
    text, source, model_dir = text_counter(config, args.tokenizer, args.estimate_text)
    loaded = load_rows(args.rows, args.limit, "skip", check_reset=False)
    header = f"budget: recipe {args.recipe} on {args.rows} ({len(loaded.rows):,} rows)"
    skipped = [bad.describe() for bad in loaded.bad]
    report = budget_report(loaded.rows, config, text, source, args.action_tokens, header, model_dir, skipped)
    print(report["text"])
    if args.json:
        write_json(args.json, report, {"recipe": args.recipe, "rows": args.rows, "overrides": args.overrides})
    return 0


def prep_report(
    files: Sequence[Path], recipe: str, sample: int = PREP_SAMPLE, seed: int = 0
) -> dict[str, Any]:
    """The budget report ``ragym prep`` prints: a seeded sample of ``sample`` rows of ``files`` at ``recipe``, text
    tokens from the recipe's model when it is a local folder, else estimated (labelled)."""
    from ragym.rl.data.rows import load_rows

    config = load_config(recipe, [])
    text, source, model_dir = text_counter(config, None, estimate=True)
    loaded = load_rows([str(f) for f in files], -1, "skip", check_reset=False)
    rows = loaded.rows
    if len(rows) > sample:
        keep = np.sort(np.random.default_rng(seed).choice(len(rows), size=sample, replace=False))
        rows = [rows[i] for i in keep]
    names = ", ".join(str(f) for f in files)
    header = f"budget: recipe {recipe} on a sample of {len(rows):,} rows of {names}"
    skipped = [bad.describe() for bad in loaded.bad]
    report = budget_report(rows, config, text, source, ACTION_TOKENS, header, model_dir, skipped)
    print(report["text"])
    return report


def memory_main(argv: list[str]) -> int:
    """``ragym budget memory``: print one GPU's memory under the recipe, full fine-tuning vs LoRA."""
    from ragym.rl.budget.memory import memory_settings, memory_table
    from ragym.rl.budget.model_size import load_model_config, model_shape
    from ragym.rl.lora import RANK_KEY, read_lora

    parser = argparse.ArgumentParser(
        prog="ragym budget memory",
        description="GPU memory per GPU of a recipe under "
        "verl's FSDP trainer and a colocated vLLM rollout, full fine-tuning vs LoRA",
    )
    parser.add_argument("--recipe", required=True, help="recipe name (recipes/NAME.yaml) or path")
    parser.add_argument("--gpu-gib", type=float, default=80.0, help="memory of one GPU in GiB (default 80)")
    parser.add_argument(
        "--model-config",
        help="the model's config.json or its folder (default: the recipe's "
        "model folder, the Hugging Face cache, or ragym's copy of Qwen2.5-VL-7B-Instruct's)",
    )
    parser.add_argument(
        "--lora-rank",
        type=int,
        default=64,
        help="the LoRA column's rank when the recipe trains every weight (default 64)",
    )
    add_update_arguments(parser)
    parser.add_argument("overrides", nargs="*", help="recipe overrides, e.g. trainer.n_gpus_per_node=4")
    args = parser.parse_args(argv)
    if args.gpu_gib <= 0:
        raise UsageError(f"--gpu-gib must be > 0, got {args.gpu_gib}")
    config = load_config(args.recipe, args.overrides)
    in_recipe = bool(OmegaConf.select(config, RANK_KEY))
    if not in_recipe:
        if args.lora_rank <= 0:
            raise UsageError(f"--lora-rank must be > 0, got {args.lora_rank}")
        config = load_config(args.recipe, [*args.overrides, f"{RANK_KEY}={args.lora_rank}"])
    lora = read_lora(lambda key: OmegaConf.select(config, key))
    assert lora is not None  # the rank is set and > 0 here (read_lora refuses a negative one)
    model = str(OmegaConf.select(config, MODEL_KEY))
    hf_config, source = load_model_config(model, args.model_config)
    shape = model_shape(hf_config, lora)
    settings = memory_settings(config, args.images, args.logprobs)
    table, _ = memory_table(shape, settings, args.gpu_gib, lora.rank)
    where = "the recipe's" if in_recipe else "not in the recipe, --lora-rank"
    print(
        f"memory per GPU: recipe {args.recipe} on {settings.num_gpus} GPU(s) of {args.gpu_gib:g} GiB, "
        f"FSDP over {settings.num_shards}, verl's trainer with a colocated vLLM rollout"
    )
    print(
        f"model {model} (config: {source}): {shape.num_params:,} parameters ({shape.num_vision_params:,} in the "
        f"vision tower), {shape.num_layers} layers, h {shape.hidden_size}, i {shape.intermediate_size}, "
        f"kv {shape.kv_size}, V {shape.vocab_size:,}"
    )
    print(f"LoRA ({where}): rank {lora.rank} on {lora.target_modules}, excluding {lora.exclude_modules}")
    print(
        f"micro-batch: {settings.tokens:,} tokens per GPU ({settings.tokens_source}); one episode at most "
        f"{settings.sequence_tokens:,} tokens"
    )
    images = settings.images
    print(
        f"images: {images.num_images} of {images.tokens_per_image:,} visual tokens per micro-batch "
        f"({images.source}); log-probs: {settings.logprob_path}\n"
    )
    print(table)
    print(
        "\nformulas (per GPU; ragym.rl.budget.memory): weights P*b/S, gradients P_t*b/S, Adam 2*P_t*b/S (b: "
        "model_dtype bytes; the fp32 shards are FSDP's master weights), gathered 2*P_layer*2, activations per "
        "layer T*(6h+2kv+4i)*2 (checkpointed: L*T*h*2 + one layer; without: L layers), vision inputs P*D*4 and "
        "a block P*(12hv+M)*2 (trained and checkpointed: depth*P*hv*2 + a block; ragym.rl.budget.vision), logits "
        "T*V*c (c: 4 verl's log-probs, 14 transformers' labels loss), vLLM its share (bf16 weights, KV 2*L*kv*2 "
        "B/token). Not counted: CUDA contexts, fragmentation: keep a few GiB free"
    )
    return 0
