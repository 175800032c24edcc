"""Registers ragym's CPU platform and ``hf`` rollout with verl; imported by verl itself (entry point)."""

from __future__ import annotations

import functools
import logging
import os
from types import ModuleType
from typing import Any

logger = logging.getLogger(__name__)

_installed = False

ROLLOUT_NAME = "hf"
"""``actor_rollout_ref.rollout.name`` that selects ragym's hf rollout (``ragym.rl.verl_plugin.rollout``)."""


def install() -> None:
    """Register the CPU platform and the hf rollout, and adapt verl's two CPU-hostile calls (idempotent).

    Each registration waits for its registry's module (``when_imported``): a process that never imports verl's
    rollout, checkpoint engines or v1 trainers (most of a run's Ray workers) does not pay for them."""
    global _installed
    if _installed:
        return
    _installed = True
    import verl.utils as verl_utils
    from verl.plugin.platform.platform_manager import PlatformRegistry

    from ragym.rl.verl_plugin.import_hooks import when_imported
    from ragym.rl.verl_plugin.platform import PlatformCPU

    # Registered after verl's own platforms: auto-detection tries those first and reaches this one only
    # when none of them finds its accelerator.
    PlatformRegistry.register(platform="cpu")(PlatformCPU)
    when_imported("verl.workers.rollout.replica", _register_replica)
    when_imported("verl.workers.rollout.base", _register_rollout)
    when_imported("verl.utils.distributed", _patch_process_group)
    # Both names: ``verl.utils`` for later importers, the model config's own binding for HFModelConfig.
    verl_utils.hf_processor = _with_ragym_processor(verl_utils.hf_processor)
    when_imported("verl.workers.config.model", _patch_model_config)
    when_imported("transformers.modeling_outputs", _text_only_batches_fix)
    when_imported("verl.trainer.ppo.v1", _register_trainer_modes)
    when_imported("verl.checkpoint_engine", _register_checkpoint_engine)
    when_imported("verl.workers.engine.fsdp.transformer_impl", _unpinned_offload)

    if on_cpu():
        # verl registers its FSDP engines for CUDA and NPU only; the same engine runs on CPU tensors (FSDP2 on
        # gloo), and this is verl's own switch for the device an engine is looked up under.
        os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")


def _register_replica(replica: ModuleType) -> None:
    replica.RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_replica)


def _register_rollout(rollout_base: ModuleType) -> None:
    # verl resolves a rollout's trainer-side class from this table (no public registration call in 0.9.1).
    rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = "ragym.rl.verl_plugin.rollout.HFServerAdapter"


def _patch_process_group(_: ModuleType) -> None:
    import verl.utils.distributed as verl_distributed

    verl_distributed.initialize_global_process_group_ray = _plain_gloo(
        verl_distributed.initialize_global_process_group_ray
    )


def _patch_model_config(_: ModuleType) -> None:
    import verl.utils as verl_utils
    import verl.workers.config.model as verl_model_config

    # The model config's module imported the name from verl.utils (hence "not exported"): rebinding it is the point.
    verl_model_config.hf_processor = verl_utils.hf_processor  # pyright: ignore[reportPrivateImportUsage]


def _register_trainer_modes(_: ModuleType) -> None:
    import ragym.rl.verl_plugin.trainer  # noqa: F401  (registers ragym's v1 trainer modes)


def _register_checkpoint_engine(_: ModuleType) -> None:
    import ragym.rl.verl_plugin.weight_sync  # noqa: F401  (registers the ragym_object_store checkpoint engine)


def _text_only_batches_fix(_: ModuleType) -> None:
    """verl 0.9.1's Qwen-VL forward feeds a dummy image through the vision tower when a micro-batch has no image
    (``models/transformers/qwen2_vl.py``, "handle mixed text-image data") and calls ``.mean()`` on the tower's
    output, which transformers 5 returns as a ``BaseModelOutputWithPooling``: every text-only micro-batch
    (MEMORA's text task, DocMemo before a page is shown) raises ``AttributeError``, on GPUs too. The output's
    ``mean`` is its hidden states' mean, which is what verl meant (the term only keeps the tower in the graph)."""
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    if not hasattr(BaseModelOutputWithPooling, "mean"):

        def mean(self: Any, *args: Any, **kwargs: Any) -> Any:
            return self.last_hidden_state.mean(*args, **kwargs)

        # A method transformers' class lacks, added (pyright knows only the declared attributes).
        BaseModelOutputWithPooling.mean = mean  # pyright: ignore[reportAttributeAccessIssue]


def _unpinned_offload(transformer_impl: ModuleType) -> None:
    """verl's FSDP2 engine always offloads a forward-only model (the reference policy that ``use_kl_loss`` or
    ``use_kl_in_reward`` asks for) with ``CPUOffloadPolicy(pin_memory=True)``, and torch cannot pin memory without
    an accelerator: on CPU every such run failed at the reference's load ("Cannot access accelerator device"). The
    parameters are in host memory already, so on CPU the policy is the same one unpinned."""
    if not on_cpu():
        return
    policy = transformer_impl.CPUOffloadPolicy

    def unpinned(**kwargs: Any) -> Any:
        return policy(**{**kwargs, "pin_memory": False})

    # The engine module's own binding, rebound (pyright sees a plain ModuleType).
    transformer_impl.CPUOffloadPolicy = unpinned  # pyright: ignore[reportAttributeAccessIssue]


def _load_replica() -> type:
    from ragym.rl.verl_plugin.rollout import HFRolloutReplica

    return HFRolloutReplica


def on_cpu() -> bool:
    """Whether verl resolved the CPU platform in this process."""
    from verl.utils.device import get_device_name

    return get_device_name() == "cpu"


def _plain_gloo(initialize: Any) -> Any:
    """verl asks for ``cpu:gloo,<device>:<backend>``; on CPU that names the CPU twice, which torch refuses."""

    @functools.wraps(initialize)
    def initialize_on_cpu(timeout_second: Any = None, backend: str | None = None) -> Any:
        if on_cpu() and (backend is None or backend == "cpu:gloo,cpu:gloo"):
            backend = "gloo"
        return initialize(timeout_second=timeout_second, backend=backend)

    return initialize_on_cpu


def _with_ragym_processor(hf_processor: Any) -> Any:
    """verl's ``hf_processor`` returns None when ``AutoProcessor`` cannot build a Qwen-VL processor (its video
    processor needs torchvision, absent from CPU installs); ragym's image-only processor stands in."""

    @functools.wraps(hf_processor)
    def processor_or_ragym(name_or_path: str, **kwargs: Any) -> Any:
        processor = hf_processor(name_or_path, **kwargs)
        if processor is not None:
            return processor
        from ragym.rl.models import load_processor

        try:
            return load_processor(name_or_path)
        except (ValueError, OSError) as err:  # not a Qwen-VL model: verl's answer (text-only) stands
            logger.debug("no ragym processor for %s: %s", name_or_path, err)
            return None

    return processor_or_ragym


install()
