"""Registers ragym's CPU platform and ``hf`` rollout with verl; imported by verl itself (entry point)."""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

logger = logging.getLogger(__name__)

_installed = False


def install() -> None:
    """Register the CPU platform and the hf rollout, and adapt verl's two CPU-hostile calls (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    import verl.utils as verl_utils
    import verl.utils.distributed as verl_distributed
    from verl.plugin.platform.platform_manager import PlatformRegistry
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from ragym.rl.verl_plugin.platform import PlatformCPU
    from ragym.rl.verl_plugin.rollout import ROLLOUT_NAME

    # Registered after verl's own platforms: auto-detection tries those first and reaches this one only
    # when none of them finds its accelerator.
    PlatformRegistry.register(platform="cpu")(PlatformCPU)
    RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_replica)
    # verl resolves a rollout's trainer-side class from this table (no public registration call in 0.9.1).
    rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = "ragym.rl.verl_plugin.rollout.HFServerAdapter"
    verl_distributed.initialize_global_process_group_ray = _plain_gloo(
        verl_distributed.initialize_global_process_group_ray
    )
    import verl.workers.config.model as verl_model_config

    # Both names: ``verl.utils`` for later importers, the model config's own binding for HFModelConfig.
    verl_utils.hf_processor = _with_ragym_processor(verl_utils.hf_processor)
    # The model config's module imported the name from verl.utils (hence "not exported"): rebinding it is the point.
    verl_model_config.hf_processor = verl_utils.hf_processor  # pyright: ignore[reportPrivateImportUsage]
    _text_only_batches_fix()
    import ragym.rl.verl_plugin.trainer  # noqa: F401  (registers ragym's v1 trainer modes)
    import ragym.rl.verl_plugin.weight_sync  # noqa: F401  (registers the ragym_object_store checkpoint engine)

    if on_cpu():
        # verl registers its FSDP engines for CUDA and NPU only; the same engine runs on CPU tensors (FSDP2 on
        # gloo), and this is verl's own switch for the device an engine is looked up under.
        os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")


def _text_only_batches_fix() -> None:
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
