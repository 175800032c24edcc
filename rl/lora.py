"""LoRA on a Qwen-VL policy: verl's recipe keys, adapters on the language model, PEFT adapter folders.

A recipe switches LoRA on with verl's own FSDP keys (``actor_rollout_ref.model.lora_rank`` > 0, with
``lora_alpha``, ``target_modules``, ``exclude_modules``, ``lora_adapter_path``), which both engines read the
same way: verl hands them to peft's ``LoraConfig`` unchanged, and so does ragym. The one default ragym adds is
``exclude_modules``: left null, it is the vision tower (``VISION_TOWER``), so ``target_modules: all-linear``
adapts the language model's linear layers only and the vision tower stays frozen, as vLLM needs (it serves no
LoRA on a vision tower). verl's FSDP config has no dropout key; peft's default, 0, applies in both engines.

An adapter folder is peft's (``adapter_config.json`` + ``adapter_model.safetensors``) whose
``base_model_name_or_path`` names the base policy; ``adapter_base`` resolves it offline, and
``ragym.rl.models.load_policy`` loads such a folder as the base with the adapters attached.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragym.rl.errors import UsageError

if TYPE_CHECKING:  # annotations only: `ragym submit` reads LoRA settings without loading torch
    import torch

PEFT_CONFIG_KEY = "__ragym_peft_config__"
"""The name under which a LoRA sync's first item carries its peft config (a dict, not a tensor): ragym's
checkpoint engine sends it (``ragym.rl.verl_plugin.weight_sync``), the hf rollout's adapter reads it."""

logger = logging.getLogger(__name__)

MODEL_SECTION = "actor_rollout_ref.model"
"""Where verl's FSDP LoRA keys live in a recipe."""
RANK_KEY = f"{MODEL_SECTION}.lora_rank"
"""verl's switch: LoRA is on when it is > 0 (verl's default 0)."""
LORA_KEYS = ("lora_alpha", "target_modules", "exclude_modules", "lora_adapter_path")
"""The other keys of verl's FSDP LoRA, under ``MODEL_SECTION`` (defaults 16, all-linear, null, null)."""
VISION_TOWER = "(.*[.])?visual([.].*)?"
"""peft ``exclude_modules`` regex (matched against whole module names) of the Qwen-VL vision tower and its
merger (``model.visual.*``): ragym's default when a LoRA recipe leaves ``exclude_modules`` null."""
ADAPTER_CONFIG = "adapter_config.json"
"""The file that marks a peft adapter folder."""


@dataclass(frozen=True)
class LoraSettings:
    """A recipe's LoRA, as verl's FSDP engine reads it (``verl.workers.config.HFModelConfig``)."""

    rank: int
    """``lora_rank``: the adapters' rank r (> 0)."""
    alpha: float
    """``lora_alpha``: the update is scaled by alpha / r."""
    target_modules: str | list[str]
    """``target_modules``: peft's ``all-linear``, a list of module-name suffixes, or a regex of whole names."""
    exclude_modules: str | list[str]
    """``exclude_modules``: modules never adapted; the vision tower (``VISION_TOWER``) when the recipe has null."""
    adapter_path: str | None
    """``lora_adapter_path``: a peft adapter folder to continue training from (None: new adapters)."""

    def peft_config(self, base_model: str | Path | None = None) -> Any:
        """peft's ``LoraConfig`` for these settings, as verl's FSDP engine builds it (no bias, no dropout)."""
        from peft import LoraConfig

        # peft annotates lora_alpha as int, but scales by alpha / r: a float alpha (verl's recipes allow one) works.
        return LoraConfig(
            r=self.rank,
            lora_alpha=self.alpha,  # pyright: ignore[reportArgumentType]
            target_modules=self.target_modules,
            exclude_modules=self.exclude_modules,
            bias="none",
            base_model_name_or_path=None if base_model is None else str(base_model),
        )


def read_lora(get: Any) -> LoraSettings | None:
    """The recipe's LoRA through ``get(dotted_key)`` (e.g. ``RecipeReader.get``), None when ``lora_rank`` is 0;
    a bad value is an error naming the key."""
    rank = get(RANK_KEY)
    if not isinstance(rank, int) or rank < 0:
        raise UsageError(f"{RANK_KEY}={rank!r}: give a whole number, 0 (off) or the adapters' rank")
    if rank == 0:
        return None
    alpha, targets, exclude, adapter = (get(f"{MODEL_SECTION}.{key}") for key in LORA_KEYS)
    if not isinstance(alpha, int | float) or alpha <= 0:
        raise UsageError(f"{MODEL_SECTION}.lora_alpha={alpha!r}: give a positive number (verl's default 16)")
    for key, value in (("target_modules", targets), ("exclude_modules", exclude)):
        if value is not None and not (isinstance(value, str) or all(isinstance(v, str) for v in value)):
            raise UsageError(f"{MODEL_SECTION}.{key}={value!r}: give a string or a list of strings")
    if not targets:
        raise UsageError(f"{MODEL_SECTION}.target_modules is empty: give all-linear or module names")
    return LoraSettings(
        rank=rank,
        alpha=alpha,
        target_modules=_plain(targets),
        exclude_modules=VISION_TOWER if exclude is None else _plain(exclude),
        adapter_path=adapter,
    )


def _plain(value: str | Any) -> str | list[str]:
    return value if isinstance(value, str) else [str(v) for v in value]


def add_adapters(
    model: torch.nn.Module,
    settings: LoraSettings,
    base_model: str | Path,
    adapter_dir: str | Path | None = None,
) -> Any:
    """Wrap ``model`` in a trainable peft model: new adapters, or those of ``adapter_dir`` (a checkpoint being
    resumed) or ``settings.adapter_path``. Every base weight is frozen. The LoRA layers are injected into
    ``model`` itself, so ``model``'s own forward (generation, the update) runs them."""
    from peft import PeftModel, get_peft_model

    source = adapter_dir or settings.adapter_path
    if source is not None:
        if not (Path(source) / ADAPTER_CONFIG).is_file():
            raise UsageError(f"{source}: not a peft adapter folder (no {ADAPTER_CONFIG})")
        peft = PeftModel.from_pretrained(model, str(source), is_trainable=True)
    else:
        try:
            peft = get_peft_model(model, settings.peft_config(base_model))
        except ValueError as err:  # peft: no module matched target_modules (after exclude_modules)
            raise UsageError(f"{MODEL_SECTION}.target_modules / exclude_modules: {err}") from None
    peft.peft_config["default"].base_model_name_or_path = str(base_model)
    return peft


def trainable_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters an optimizer should update (the adapters under LoRA; every weight otherwise)."""
    return [p for p in model.parameters() if p.requires_grad]


def is_adapter_dir(path: str | Path) -> bool:
    """Whether ``path`` is a peft adapter folder (not a full model)."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def adapter_base(adapter_dir: str | Path) -> Path:
    """The base policy folder an adapter folder names (``base_model_name_or_path``), resolved offline: a local
    folder (absolute, or relative to the adapter folder), else a hub id already in the Hugging Face cache."""
    adapter_dir = Path(adapter_dir)
    base = json.loads((adapter_dir / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    if not base:
        raise UsageError(f"{adapter_dir / ADAPTER_CONFIG} names no base model; set base_model_name_or_path")
    for candidate in (Path(base), adapter_dir / base):
        if (candidate / "config.json").is_file():
            return candidate.resolve()
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(base, local_files_only=True))
    except Exception as err:  # not a hub id, or not in the cache: no download is tried
        raise UsageError(
            f"{adapter_dir}: its base model {base!r} is neither a folder with config.json nor in the Hugging Face "
            f"cache ({type(err).__name__}); set base_model_name_or_path in {ADAPTER_CONFIG} to the base policy"
        ) from None


def save_adapter(peft: Any, out: str | Path) -> None:
    """Write ``peft``'s adapters as a peft folder (``adapter_config.json``, ``adapter_model.safetensors``)."""
    peft.save_pretrained(str(out), safe_serialization=True)


def verl_lora_overrides(config: Any) -> list[str]:
    """Hydra overrides that give verl's trainer ragym's LoRA default: with ``lora_rank`` > 0 and
    ``exclude_modules`` null, the vision tower is excluded (verl would adapt every linear layer of it)."""
    from omegaconf import OmegaConf

    model = OmegaConf.select(config, MODEL_SECTION)
    if not model.lora_rank or model.exclude_modules is not None:
        return []
    return [f"{MODEL_SECTION}.exclude_modules='{VISION_TOWER}'"]


def plain_weight_name(name: str) -> str:
    """A weight's name with peft's wrapping taken off (``base_model.model.`` prefix, ``.base_layer``, the
    adapter name ``default``): the one name a tensor has whichever side of a LoRA weight sync wrote it.

    >>> plain_weight_name("base_model.model.model.layers.0.q_proj.lora_A.default.weight")
    'model.layers.0.q_proj.lora_A.weight'
    >>> plain_weight_name("model.layers.0.q_proj.base_layer.weight")
    'model.layers.0.q_proj.weight'
    """
    name = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
    return name.replace(".lora_A.default.", ".lora_A.").replace(".lora_B.default.", ".lora_B.")


def attach_adapters(model: torch.nn.Module, peft_config: dict[str, Any]) -> Any:
    """Inject LoRA layers described by a peft config dict (``LoraConfig.to_dict()``, what verl's weight sync
    sends) into ``model``, for inference; returns the peft wrapper."""
    from dataclasses import fields

    from peft import LoraConfig, get_peft_model

    names = {f.name for f in fields(LoraConfig) if f.init}
    config = LoraConfig(**{k: v for k, v in peft_config.items() if k in names and k != "task_type"})
    config.inference_mode = True
    return get_peft_model(model, config)


def load_synced(own: dict[str, torch.Tensor], incoming: dict[str, torch.Tensor]) -> None:
    """Copy a weight sync's tensors (full weights, base weights or adapters) into a model's own ``state_dict``
    tensors, both keyed by ``plain_weight_name``; the receiver has checked the names."""
    import torch

    with torch.no_grad():
        for name, tensor in incoming.items():
            own[name].copy_(tensor.to(own[name].dtype))
