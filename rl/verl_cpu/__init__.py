"""verl's own trainer on a machine without an accelerator, as a verl plugin (no edit to verl, no copy of it).

verl loads ``rl.verl_cpu.plugin`` in every process that imports it (the ``verl.plugins`` entry point of
``setup.py``). What it adds is inert on GPU machines: a CPU platform that verl's auto-detection only picks when
no accelerator answers, an ``hf`` rollout backend that only a recipe naming it uses, and two adaptations that
only act on the CPU platform (the process group's backend string, the processor of a model whose stock
processor needs torchvision). The recipe settings a CPU run needs are in ``recipes/platforms/cpu.yaml``.
"""
