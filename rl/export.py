"""``ragym export CHECKPOINT --out DIR``: a training checkpoint as a Hugging Face model directory.

Two sources, one output (safetensors, tokenizer, processor, generation config, ``README.md`` card and
``ragym_export.json``):

- a verl FSDP checkpoint (``global_step_N/actor``: per-rank ``model_world_size_W_rank_R.pt`` shards plus
  ``huggingface/``), merged by verl's own model merger. On the cluster ``RecipeSnapshot`` (set as
  ``trainer.checkpoint_callback_class``) leaves the resolved recipe beside each checkpoint for the card.
- a local-engine checkpoint (``global_step_N/`` already holds the HF files, plus ``engine_state.pt`` with
  the step and the resolved recipe); engine state and optimizer stay behind.
- a local-engine LoRA checkpoint (a peft adapter folder plus the same state), or a verl FSDP one trained with
  LoRA: exported as the adapter folder (peft's files, naming its base policy), or with ``--merge`` as the merged
  Hugging Face model.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from omegaconf import OmegaConf
from transformers import AutoConfig, GenerationConfig
from verl.model_merger.output_validation import validate_hf_model_output
from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

from ragym.rl.core.checkpoints import (
    PROCESSOR_FILES,
    TEXT_AND_IMAGE_FILES,
    latest_step,
    load_state,
    missing_model_files,
)
from ragym.rl.errors import UsageError, one_line
from ragym.rl.export_args import parse_export_args
from ragym.rl.lora import ADAPTER_CONFIG, adapter_base, is_adapter_dir, read_lora

logger = logging.getLogger(__name__)

RECIPE_SNAPSHOT = "ragym_recipe.json"
"""Resolved recipe written beside a verl checkpoint by ``RecipeSnapshot``."""
LOCAL_ENGINE_ONLY = ("engine_state.pt", "optimizer.pt")
"""Local-engine files that are training state, not model."""
VERL_ADAPTER_DIR = "lora_adapter"
"""Where verl's model merger writes a LoRA checkpoint's adapters (beside the base weights)."""


class RecipeSnapshot(CheckpointCallback):
    """verl checkpoint callback: write the resolved recipe to ``global_step_N/ragym_recipe.json``."""

    def on_save(
        self, trainer: Any, global_step: int, checkpoint_dir: str, async_save: bool = False, **kwargs: Any
    ) -> None:
        """Record which recipe (all keys resolved) produced this checkpoint (``async_save``, Megatron's
        asynchronous checkpointing, changes nothing here: the recipe is written at once)."""
        from omegaconf import OmegaConf

        recipe = OmegaConf.to_container(self.config, resolve=True)
        Path(checkpoint_dir, RECIPE_SNAPSHOT).write_text(json.dumps(recipe, indent=1, default=str))


@dataclass(frozen=True)
class Checkpoint:
    """What ``ragym export`` found at the given path."""

    kind: str
    """``verl_fsdp``, ``local`` or ``local_lora`` (a peft adapter folder)."""
    model_dir: Path
    """verl: the actor folder with the shards; local: the HF model folder."""
    step: int | None
    """Training step (from ``global_step_N``), None when the folder name does not say."""
    recipe: dict[str, Any] | None
    """The resolved recipe that produced it, when recorded."""


def _resolve_step_dir(path: Path) -> Path:
    """A run folder (with the latest marker) -> its newest ``global_step_N``; anything else unchanged."""
    step = latest_step(path)
    return path if step is None else path / f"global_step_{step}"


def inspect_checkpoint(path: str | Path) -> Checkpoint:
    """Classify ``path`` (a run folder, a ``global_step_N`` folder or its ``actor`` folder)."""
    path = _resolve_step_dir(Path(path))
    actor = path / "actor" if (path / "actor" / "fsdp_config.json").is_file() else path
    match = re.search(r"global_step_(\d+)", str(path))
    step = int(match.group(1)) if match else None
    if (actor / "fsdp_config.json").is_file():
        snapshot = next(
            (p for p in (actor / RECIPE_SNAPSHOT, actor.parent / RECIPE_SNAPSHOT) if p.is_file()), None
        )
        return Checkpoint("verl_fsdp", actor, step, _read_snapshot(snapshot) if snapshot else None)
    if (path / "engine_state.pt").is_file() and (is_adapter_dir(path) or (path / "config.json").is_file()):
        missing = missing_model_files(path, is_adapter_dir(path))
        if missing:  # before anything is written: the export would be a model that cannot be loaded
            raise UsageError(
                f"{path} is incomplete, it has no {', '.join(missing)}: restore the files, or export "
                "an earlier complete global_step_N"
            )
        state = load_state(path / "engine_state.pt")
        kind = "local_lora" if is_adapter_dir(path) else "local"
        return Checkpoint(kind, path, state["step"], json.loads(state["config"]))
    found = sorted(p.name for p in path.iterdir()) if path.is_dir() else "nothing (not a folder)"
    raise UsageError(
        f"{path}: not a verl FSDP checkpoint (no fsdp_config.json here or in actor/) nor a local-engine one "
        f"(no engine_state.pt + config.json or {ADAPTER_CONFIG}); found {found}"
    )


def _missing_verl_files(actor: Path) -> list[str]:
    """The files verl's merger and ``ragym export`` read that a verl FSDP checkpoint's actor folder lacks (absent, or
    a rank's shard whose zip is cut short): each rank's model shard and ``huggingface/``'s config, tokenizer and
    processor. verl would fail on them inside torch.load or transformers, with a traceback."""
    try:
        world_size = json.loads((actor / "fsdp_config.json").read_text())["world_size"]
        shards = [f"model_world_size_{world_size}_rank_{rank}.pt" for rank in range(world_size)]
    except (ValueError, KeyError, TypeError):
        return ["fsdp_config.json that names the world size"]
    missing = []
    for name in shards:
        if not (actor / name).is_file():
            missing.append(name)
        elif not zipfile.is_zipfile(actor / name):  # torch.save's zip: its central directory is written last
            missing.append(f"whole {name} (cut short)")
    needed = [("config.json",), *TEXT_AND_IMAGE_FILES]
    hf = actor / "huggingface"
    missing += [
        " or ".join(f"huggingface/{name}" for name in names)
        for names in needed
        if not any((hf / name).is_file() for name in names)
    ]
    return missing


def _read_snapshot(path: Path) -> dict[str, Any] | None:
    """The recipe ``RecipeSnapshot`` wrote; one that is not JSON (a save cut short) counts as none recorded, with a
    warning naming it (``--recipe`` gives the card one; a LoRA checkpoint needs it)."""
    try:
        return json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        logger.warning("%s is not JSON (%s): no recipe is recorded for this checkpoint", path, err)
        return None


def _merge_verl(actor_dir: Path, out: Path) -> None:
    """verl's FSDP model merger: shards -> one bf16 model in ``out`` (+ tokenizer, and processor if it can)."""
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    config = ModelMergerConfig(
        operation="merge",
        backend="fsdp",
        local_dir=str(actor_dir),
        target_dir=str(out),
        hf_model_config_path=str(actor_dir / "huggingface"),
    )
    out.mkdir(parents=True, exist_ok=True)
    FSDPModelMerger(config).merge_and_save()
    if not any((out / name).is_file() for name in PROCESSOR_FILES):
        # verl's hf_processor needs the video processor (torchvision); ragym's loader builds an image-only one.
        from ragym.rl.models import load_processor

        load_processor(actor_dir / "huggingface").save_pretrained(out)


def _copy_local(model_dir: Path, out: Path) -> None:
    """Copy the HF files of a local-engine checkpoint, leaving its training state behind."""
    out.mkdir(parents=True, exist_ok=True)
    for item in sorted(model_dir.iterdir()):
        if item.is_file() and item.name not in LOCAL_ENGINE_ONLY:
            shutil.copy2(item, out / item.name)


def _merge_adapter(adapter_dir: Path, out: Path, base: Path | None = None) -> None:
    """The adapter folder's base policy (or ``base``) with its adapters folded into the weights, as a Hugging Face
    folder."""
    from peft import PeftModel

    from ragym.rl.models import load_policy

    model, _, processor = load_policy(base or adapter_base(adapter_dir))
    model = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)


def _export_verl(checkpoint: Checkpoint, out: Path, merge: bool) -> bool:
    """A verl FSDP checkpoint into ``out``; returns whether it was a LoRA one. verl's merger writes a LoRA
    checkpoint as the base weights with the adapters in ``lora_adapter/`` beside them (a peft config of leaf names
    only, no vision-tower exclusion): they become a peft folder configured from the recipe snapshot (naming the
    recipe's model as the base), or with ``merge`` are folded into the base weights."""
    staging = out.with_name(out.name + ".verl_merge")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        _merge_verl(checkpoint.model_dir, staging)
        adapter = staging / VERL_ADAPTER_DIR
        if not adapter.is_dir():
            if merge:
                raise UsageError(
                    f"--merge: {checkpoint.model_dir} holds full weights, no adapters; drop --merge"
                )
            shutil.copytree(staging, out, dirs_exist_ok=True)
            return False
        config = OmegaConf.create(checkpoint.recipe or {})
        settings = read_lora(lambda key: OmegaConf.select(config, key, default=None))
        if settings is None:
            raise UsageError(
                f"{checkpoint.model_dir} holds LoRA adapters but no recipe records their settings; "
                "pass --recipe RECIPE (the one it was trained with)"
            )
        settings.peft_config(OmegaConf.select(config, "actor_rollout_ref.model.path")).save_pretrained(
            adapter
        )
        if merge:  # onto the recipe's base where it resolves: the merger's copy of it is rounded to bf16
            try:
                base = adapter_base(adapter)
            except UsageError:
                base = staging
            _merge_adapter(adapter, out, base=base)
        else:
            _check_verl_base(adapter, checkpoint.model_dir)
            _copy_local(adapter, out)
        return True
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _check_verl_base(adapter: Path, actor_dir: Path) -> None:
    """The base the recipe names for a verl checkpoint's adapters resolves (offline): without it the adapter folder
    would not load."""
    try:
        adapter_base(adapter)
    except UsageError:
        base = json.loads((adapter / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
        raise UsageError(
            f"{actor_dir}: its recipe's base model {base!r} is neither a folder with config.json nor in the Hugging "
            "Face cache, so its adapter folder would not load; pass --recipe RECIPE naming the base, or export with "
            "--merge (onto the checkpoint's bf16 copy of the base)"
        ) from None


def _ensure_generation_config(out: Path) -> None:
    if not (out / "generation_config.json").is_file():
        GenerationConfig.from_model_config(AutoConfig.from_pretrained(out)).save_pretrained(out)


def _card(checkpoint: Checkpoint, source: Path, recipe_name: str | None) -> str:
    """The model card: where the weights came from and the recipe knobs that matter most."""
    recipe = checkpoint.recipe or {}
    pick = {
        "base model": ("actor_rollout_ref", "model", "path"),
        "experiment": ("trainer", "experiment_name"),
        "advantage estimator": ("algorithm", "adv_estimator"),
        "group size (rollout.n)": ("actor_rollout_ref", "rollout", "n"),
        "learning rate": ("actor_rollout_ref", "actor", "optim", "lr"),
        "prompts per step": ("data", "train_batch_size"),
        "reward": ("reward", "custom_reward_function", "reward_kwargs"),
    }
    rows = []
    for label, keys in pick.items():
        value: Any = recipe
        for key in keys:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            rows.append(f"| {label} | `{json.dumps(value) if isinstance(value, dict) else value}` |")
    lines = [
        "# ragym policy",
        "",
        f"Exported by `ragym export` from a {checkpoint.kind} checkpoint.",
        "",
        "| field | value |",
        "|---|---|",
        f"| source | `{source}` |",
        f"| step | {checkpoint.step if checkpoint.step is not None else 'unknown'} |",
        f"| recipe | `{recipe_name or 'not recorded'}` |",
        *rows,
        "",
        "The full resolved recipe is in `ragym_export.json`." if recipe else "No recipe was recorded.",
    ]
    return "\n".join(lines) + "\n"


def export_checkpoint(
    checkpoint: str | Path, out: str | Path, recipe: str | None = None, merge: bool = False
) -> Path:
    """Write the HF model directory for ``checkpoint`` to ``out`` (absent or empty) and return it; a LoRA
    checkpoint gives its adapter folder, or with ``merge`` the merged model."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"--out {out} exists and is not empty; give a new or empty folder")
    found = inspect_checkpoint(checkpoint)
    missing = _missing_verl_files(found.model_dir) if found.kind == "verl_fsdp" else []
    if missing:  # before anything is written (the local engine's files are checked by inspect_checkpoint)
        raise UsageError(
            f"{found.model_dir} is incomplete, it has no {', '.join(missing)}: restore the files, or export an "
            "earlier complete global_step_N"
        )
    if merge and found.kind == "local":
        raise UsageError(
            f"--merge: {checkpoint} holds full weights ({found.kind}), no adapters; drop --merge"
        )
    if recipe is not None:
        from ragym.rl.recipe.compose import load_recipe

        found = Checkpoint(
            found.kind,
            found.model_dir,
            found.step,
            cast(dict[str, Any], OmegaConf.to_container(load_recipe(recipe), resolve=True)),
        )
    logger.info("exporting %s checkpoint %s (step %s) -> %s", found.kind, found.model_dir, found.step, out)
    # Written beside ``out`` and renamed when whole: a write that fails midway (a full disk) or a killed export
    # leaves no folder at ``out`` that loads as if it were the model.
    staging = out.with_name(f".{out.name}.{uuid.uuid4().hex[:8]}.partial")  # not mkdtemp's owner-only mode
    staging.mkdir(parents=True)
    try:
        _write_export(found, Path(checkpoint).resolve(), staging, recipe, merge)
        staging.rename(out)  # replaces an empty ``out``; one filled meanwhile is refused (ENOTEMPTY)
    except OSError as err:
        raise UsageError(f"export to {out} failed, nothing was written there: {one_line(err)}") from err
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def _write_export(found: Checkpoint, source: Path, out: Path, recipe: str | None, merge: bool) -> None:
    """The model folder (weights or adapters, tokenizer, processor, card, export record) of ``found`` in ``out``."""
    adapters = found.kind == "local_lora"
    if adapters:
        # The base its adapter_config.json names resolves (offline), or it would not load (nor merge).
        adapter_base(found.model_dir)
    if found.kind == "verl_fsdp":
        adapters = _export_verl(found, out, merge)
    elif adapters and merge:
        _merge_adapter(found.model_dir, out)
    else:
        _copy_local(found.model_dir, out)
    if not adapters or merge:
        _ensure_generation_config(out)
        validate_hf_model_output(out)
    recipe_name = recipe or (found.recipe or {}).get("trainer", {}).get("experiment_name")
    (out / "README.md").write_text(_card(found, source, recipe_name))
    record_export(out, source, found.kind, found.step, recipe_name, found.recipe)


def record_export(
    out: Path,
    source: Path,
    kind: str,
    step: int | None,
    recipe_name: str | None,
    recipe: dict[str, Any] | None,
) -> None:
    """Write ``ragym_export.json``: where the model came from and its resolved recipe (``ragym eval`` reads it)."""
    meta = {"source": str(source), "kind": kind, "step": step, "recipe_name": recipe_name, "recipe": recipe}
    (out / "ragym_export.json").write_text(json.dumps(meta, indent=1, default=str))


def main(argv: list[str]) -> int:
    """``ragym export CHECKPOINT --out DIR [--recipe RECIPE] [--merge]``."""
    args = parse_export_args(argv)
    out = export_checkpoint(args.checkpoint, args.out, args.recipe, args.merge)
    print(f"exported {args.checkpoint} -> {out}")
    return 0
