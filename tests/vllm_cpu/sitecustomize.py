"""Lets PyPI's torchvision (a CUDA build) import beside CPU torch, in the processes of a ``--rollout vllm`` run only.

``make vllm-cpu`` installs torchvision into a folder of its own with this file; ragym puts that folder on
``PYTHONPATH`` for a CPU run of verl's vLLM rollout (``ragym.rl.verl_plugin.vllm_cpu``), so vLLM's Qwen-VL
models (which import transformers' torchvision image processor) load, while the rest of ragym and its tests run
without torchvision as before. torchvision's compiled ops need CUDA libraries and do not load; its Python
transforms work, but its import first registers fake kernels for ``torchvision::nms`` and ``qnms`` without
checking that the ops exist. Defining the two schemas (no kernels: nothing here calls them) before the import
lets it through. Python imports this module at start-up (``site``); it only installs an import hook.
"""

import importlib.abc
import sys

_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_LIBRARIES = []  # the op library lives as long as the process


class _TorchvisionOpsFirst(importlib.abc.MetaPathFinder):
    """Defines torchvision's unguarded op schemas just before torchvision is first imported."""

    def find_spec(self, name, path=None, target=None):
        if name != "torchvision":
            return None
        sys.meta_path.remove(self)
        import torch

        library = torch.library.Library("torchvision", "FRAGMENT")
        for schema in _SCHEMAS:
            library.define(schema)
        _LIBRARIES.append(library)
        return None  # the regular finders load torchvision itself


sys.meta_path.insert(0, _TorchvisionOpsFirst())
