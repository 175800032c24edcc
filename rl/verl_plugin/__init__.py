"""ragym's verl plugin: what verl's own trainer needs from ragym, added through verl's registries (no edit to
verl, no copy of it).

verl loads ``ragym.rl.verl_plugin.plugin`` in every process that imports it (the ``verl.plugins`` entry point of
``setup.py``). It registers, each as its registry's module is imported (``import_hooks``: most of a run's Ray
workers never import the rollout, checkpoint-engine or trainer registries, and ``import verl`` stays 5 s of CPU
instead of 10):
- a CPU platform (``platform``) that verl's auto-detection only picks when no accelerator answers, an ``hf``
  rollout backend (``rollout``) that only a recipe naming it uses, and two adaptations that only act on the
  CPU platform (the process group's backend string, the processor of a model whose stock processor needs
  torchvision): verl's trainer runs on machines without a GPU (settings: ``recipes/platforms/cpu.yaml``);
- ragym's v1 trainer modes (``trainer``; their recipe checks are ``ragym.rl.recipe.modes``): ``ragym``, ``ragym_colocate_async`` and
  ``ragym_separate_async``, verl's sync and async trainers plus ragym's per-step metrics (``reward/<term>``,
  ``episode/*``, ``off_policy/*``), guards and a bounded trace of episodes for ``ragym view``; and a checkpoint
  engine that needs no accelerator (``weight_sync``, ``ragym_object_store``) for ``separate_async`` on CPU;
- a fix for text-only micro-batches in verl 0.9.1's Qwen-VL forward under transformers 5 (all platforms).

Beside the plugin, ``verl_local`` launches verl's trainer on this machine (``ragym train --engine verl``).
"""
