"""The CPU demo's tasks (``ragym demo --task NAME``): each is the recipe overrides that make the demo that task.

``verify`` (the default, what ``make demo`` runs) is the demo as it was built: the policy learns from reward
to confirm the candidate the visual check names, but not to answer (its outcome stays near 0: the tiny policy
does not copy a fact from a passage, ``docs/results.md``). ``answer`` is a task whose answer it learns: every
question asks the region of the entity in the image, which the confirmed entity's passage states as its last
word (``synthetic_kb`` preset ``demo_slots``); the new policy is first pretrained to copy (induction on random
repeated spans, ``ragym.rl.tiny.copy_pretrain``), and its warm start imitates an expert that confirms the match
most of the time (``reject_noise`` 0.2 instead of 0.8), quotes what it copies in its reason (``quote``) and
weighs the copied tokens 5x (``copy_weight``). The user's overrides come after a task's, so they win.
"""

from __future__ import annotations

DEMO_TASKS: dict[str, tuple[str, ...]] = {
    "verify": (),
    "answer": (
        "ragym.demo.kb_preset=demo_slots",
        # Induction pretraining: spans of 4-10 tokens repeated after a lead and a gap of 0-8 random tokens; at
        # 64 sequences a step the loss falls from chance to ~0.1 within 800 steps (~2.5 min on one core).
        "ragym.demo.copy_pretrain.steps=800",
        "++ragym.demo.copy_pretrain.batch_size=64",
        "++ragym.demo.copy_pretrain.lr=1e-3",
        "++ragym.demo.copy_pretrain.min_span=4",
        "++ragym.demo.copy_pretrain.max_span=10",
        "++ragym.demo.copy_pretrain.max_gap=8",
        # An expert that mostly confirms: the greedy warm-started policy then confirms, searches the confirmed
        # name and answers, so the held-out split by identification has answers to score.
        "ragym.demo.warm_start.reject_noise=0.2",
        "ragym.demo.warm_start.copy_weight=5",
        "ragym.demo.warm_start.quote=true",
        "ragym.demo.warm_start.num_episodes=240",
        "ragym.demo.warm_start.epochs=3",
    ),
}
"""Task name -> recipe overrides (on ``recipes/kbvqa_tiny_cpu.yaml``)."""
DEFAULT_TASK = "verify"
"""The task ``ragym demo`` and ``make demo`` run without ``--task``."""


def task_overrides(task: str) -> list[str]:
    """The recipe overrides of demo task ``task``; a one-line error naming the tasks for an unknown one.

    >>> task_overrides("verify")
    []
    """
    if task not in DEMO_TASKS:
        raise ValueError(f"unknown demo task {task!r}; the tasks are {', '.join(DEMO_TASKS)}")
    return list(DEMO_TASKS[task])
