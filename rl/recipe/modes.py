"""ragym's verl trainer modes (``trainer.v1.trainer_mode``) and the recipe settings each one needs.

Each ragym mode is one of verl 0.9.1's v1 trainer modes with ragym's additions (``ragym.rl.verl_plugin.trainer``):
reward terms, ``episode/*`` metrics, guards, traces, dynamic sampling's bound and turn-level credit. verl's own
async mode names run verl's trainer without any of them, so a recipe that names one is refused here. Nothing in
this module imports verl: ``ragym.rl.recipe.check`` runs it before a job starts, the local engine's config reads it.
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from ragym.rl.off_policy import CORRECTION_KEY, STALENESS_KEY, correction_level, staleness_problem

MODES = {
    "ragym": "sync",
    "ragym_colocate_async": "colocate_async",
    "ragym_separate_async": "separate_async",
}
"""ragym's mode -> the verl mode it extends (and whose settings, ``trainer.v1.<verl mode>``, it reads)."""
SYNC_MODE = "sync"
"""verl's synchronous mode: rollout and training alternate, every trajectory comes from the latest weights."""
MODE_KEY = "trainer.v1.trainer_mode"
LOG_PROBS_KEY = "actor_rollout_ref.rollout.calculate_log_probs"
"""Whether the rollout records each sampled token's log-prob (verl's default: true): what the correction weighs by."""


def verl_mode(mode: str) -> str:
    """The verl mode a ragym mode extends.

    >>> verl_mode("ragym_colocate_async")
    'colocate_async'
    """
    if mode not in MODES:
        raise ValueError(f"{MODE_KEY}={mode} is not a ragym trainer mode; choose one of {', '.join(MODES)}")
    return MODES[mode]


def mode_problems(config: Any) -> list[str]:
    """What in a composed recipe stops its trainer mode from running with ragym's additions (empty: nothing).

    Checked: the mode is not one of verl's async modes (ragym's additions would be missing); an async mode has
    a staleness bound (unbounded, a trajectory could be trained on however many updates old it is, and nothing
    would say so); ``separate_async`` has a rollout pool and a batch that splits into its parameter-sync
    mini-batches (verl asserts both, less clearly)."""
    if not OmegaConf.select(config, LEGACY_KEY, default=True):
        return legacy_problems(config)  # the legacy trainer has no modes
    mode = str(OmegaConf.select(config, MODE_KEY))
    ours = {verl: ragym for ragym, verl in MODES.items() if verl != SYNC_MODE}
    if mode in ours:
        return [
            f"{MODE_KEY}={mode} is verl's own trainer, without ragym's reward/ and episode/ metrics, guards, "
            f"traces and dynamic-sampling bound: use {MODE_KEY}={ours[mode]}"
        ]
    if mode not in MODES:
        return []  # verl's default (sync: recipes of the local engine only) or a mode registered by someone else
    problems = (rollout_problems(config, mode) or lora_problems(config, mode)) + partial_rollout_problems(
        config
    )
    problems += _log_prob_problems(config, mode)
    verl = MODES[mode]
    if verl == SYNC_MODE:
        return problems
    stale = staleness_problem(OmegaConf.select(config, STALENESS_KEY))
    if stale is not None:
        problems.append(f"{MODE_KEY}={mode} needs a staleness bound: {stale}")
    if verl == "separate_async":
        problems += _separate_problems(config, mode)
    return problems


LEGACY_KEY = "trainer.use_v1"
"""false: verl's legacy trainer (``RayPPOTrainer``), which has none of ragym's trainer modes' additions."""
TURN_CREDIT_ESTIMATOR = "turn_credit"
"""``algorithm.adv_estimator`` of turn-level credit (``ragym.rl.credit.turn_credit.TURN_CREDIT``, repeated so this
module does not import torch): its inputs come from ragym's trainer modes."""
COTRAIN_ENABLE_KEY = "ragym.cotrain.enable"
"""Retriever co-training's switch (``ragym.rl.cotrain.config``): a step of ragym's trainer modes."""


def legacy_problems(config: Any) -> list[str]:
    """What a recipe asks of ``trainer.use_v1=false`` that verl's legacy trainer would skip without a word: the
    off-policy correction ragym hands verl's trainer, turn-level credit's inputs and retriever co-training are
    ragym's trainer modes' (``ragym.rl.verl_plugin.trainer``)."""
    problems = []
    level = run_correction_level(config)
    if level is not None:
        problems.append(
            f"{CORRECTION_KEY} resolves to {level} here, which only ragym's trainer modes hand to verl; with "
            f"{LEGACY_KEY}=false set {CORRECTION_KEY}: off in the recipe"
        )
    if OmegaConf.select(config, "algorithm.adv_estimator", default=None) == TURN_CREDIT_ESTIMATOR:
        problems.append(
            f"algorithm.adv_estimator={TURN_CREDIT_ESTIMATOR} takes the turns from ragym's trainer modes, not "
            f"verl's legacy trainer"
        )
    if OmegaConf.select(config, COTRAIN_ENABLE_KEY, default=False):
        problems.append(f"{COTRAIN_ENABLE_KEY}: retriever co-training runs in ragym's trainer modes only")
    return [f"{LEGACY_KEY}=false (verl's legacy trainer): {p}; or drop {LEGACY_KEY}=false" for p in problems]


def legacy_notice(config: Any) -> str | None:
    """One line for a run on verl's legacy trainer: what of ragym's it runs without (None on ragym's modes)."""
    if OmegaConf.select(config, LEGACY_KEY, default=True):
        return None
    return (
        f"{LEGACY_KEY}=false: verl's legacy trainer runs without ragym's guards (ragym.guards), reward/ and "
        "episode/ metrics, metrics.jsonl, `ragym view` traces and the recipe snapshot in checkpoints; "
        f"{MODE_KEY}=ragym (use_v1 true) has them"
    )


def _log_prob_problems(config: Any, mode: str) -> list[str]:
    """The correction is on for the run but the rollout records no log-probs: verl's trainer then skips it without a
    word (it weighs the loss only when the batch has ``rollout_log_probs``)."""
    level = run_correction_level(config)
    if level is None or OmegaConf.select(config, LOG_PROBS_KEY, default=True):
        return []
    return [
        f"{CORRECTION_KEY} resolves to {level} for {MODE_KEY}={mode}, but {LOG_PROBS_KEY} is false: the rollout would "
        f"record no log-probs and verl would skip the correction silently; set {LOG_PROBS_KEY}=true, or "
        f"{CORRECTION_KEY}: off in the recipe"
    ]


def _separate_problems(config: Any, mode: str) -> list[str]:
    problems = []
    sync_step = int(OmegaConf.select(config, "trainer.v1.separate_async.parameter_sync_step"))
    batch = int(OmegaConf.select(config, "data.train_batch_size"))
    mini = int(OmegaConf.select(config, "actor_rollout_ref.actor.ppo_mini_batch_size"))
    if batch != sync_step * mini:
        problems.append(
            f"{MODE_KEY}={mode}: data.train_batch_size ({batch}) must equal trainer.v1.separate_async."
            f"parameter_sync_step ({sync_step}) x actor_rollout_ref.actor.ppo_mini_batch_size ({mini}); "
            f"set parameter_sync_step to {batch // mini if batch % mini == 0 else 'a divisor'}"
        )
    for key in ("actor_rollout_ref.rollout.nnodes", "actor_rollout_ref.rollout.n_gpus_per_node"):
        if int(OmegaConf.select(config, key, default=0) or 0) <= 0:
            problems.append(
                f"{MODE_KEY}={mode} rolls out on its own GPUs: set {key} (the rollout pool) above 0"
            )
    return problems


LORA_RANK_KEY = "actor_rollout_ref.model.lora_rank"
"""verl's FSDP LoRA switch (> 0: on); ``ragym.rl.lora.RANK_KEY``, repeated so this module does not import torch."""
MERGE_KEY = "actor_rollout_ref.model.lora.merge"
"""verl's LoRA weight sync: the adapters (false) or merged full weights (true)."""
CPU_VLLM_EXTENSION = "ragym.rl.verl_plugin.vllm_worker.CPUWorkerExtension"
"""``rollout.engine_kwargs.vllm.worker_extension_cls`` of ragym's CPU vLLM rollout (``recipes/platforms/vllm_cpu.yaml``)."""
LORA_ROLLOUTS: dict[str, frozenset[str]] = {
    "ragym": frozenset({"hf", "vllm", "vllm_cpu", "sglang", "trtllm"}),
    "ragym_colocate_async": frozenset({"hf"}),
    "ragym_separate_async": frozenset({"hf"}),
}
"""Rollouts whose LoRA weight sync (adapters, ``lora.merge: false``) each ragym mode runs: those with an agreement
test (``docs/training.md``, "Trainer modes x LoRA x rollouts"), and in sync verl's own GPU path. Every other
combination is refused before a worker starts: under verl 0.9.1's async modes nothing checked that the adapters
reach the rollout (volcengine/verl#7495: they never did under separate_async)."""


def rollout_kind(config: Any) -> str:
    """The recipe's rollout as the LoRA table names it: ``hf``, ``vllm_cpu`` (ragym's CPU vLLM), ``vllm`` (GPU), or
    verl's other names."""
    name = str(OmegaConf.select(config, "actor_rollout_ref.rollout.name"))
    extension = OmegaConf.select(
        config, "actor_rollout_ref.rollout.engine_kwargs.vllm.worker_extension_cls", default=None
    )
    return "vllm_cpu" if name == "vllm" and extension == CPU_VLLM_EXTENSION else name


def rollout_problems(config: Any, mode: str) -> list[str]:
    """ragym's CPU vLLM rollout under an async mode: no test runs it there (its abort, resume and weight sync are
    verl's GPU path's, untested on CPU), so it is refused; the hf rollout is the CPU rollout of the async modes."""
    if MODES[mode] != SYNC_MODE and rollout_kind(config) == "vllm_cpu":
        return [
            f"{MODE_KEY}={mode} with ragym's CPU vLLM rollout: untested there; use the hf rollout "
            "(ragym train --rollout hf) or trainer_mode=ragym"
        ]
    return []


def lora_problems(config: Any, mode: str) -> list[str]:
    """Why the recipe's LoRA cannot run under ``mode`` with its rollout (empty: it can, or LoRA is off): a
    combination without a test that the rollout serves the trained adapters is refused in one line."""
    if not int(OmegaConf.select(config, LORA_RANK_KEY, default=0) or 0) > 0:
        return []
    rollout = rollout_kind(config)
    merged = bool(OmegaConf.select(config, MERGE_KEY, default=False))
    if merged and MODES[mode] != SYNC_MODE:
        return [
            f"{LORA_RANK_KEY} > 0 with {MERGE_KEY}=true under {MODE_KEY}={mode}: merged-weight syncs are "
            "untested in ragym's async modes; set it false (adapter syncs)"
        ]
    if rollout not in LORA_ROLLOUTS[mode]:
        tested = ", ".join(sorted(LORA_ROLLOUTS[mode])) or "none yet"
        return [
            f"{LORA_RANK_KEY} > 0 under {MODE_KEY}={mode} with the {rollout} rollout: no test shows the rollout "
            f"serving the trained adapters (verl 0.9.1 never delivered them under separate_async, "
            f"volcengine/verl#7495); LoRA rollouts tested in this mode: {tested}; or use {MODE_KEY}=ragym"
        ]
    return []


PARTIAL_ROLLOUT_KEY = "actor_rollout_ref.rollout.custom.partial_rollout"
"""Recipe key: what the hf rollout does with turns in flight at a weight update (verl's ``abort_all_requests``)."""
PARTIAL_ROLLOUTS = ("resume", "finish")
"""``resume`` (the default, verl's partial rollout as its vLLM server does it): abort each turn in flight and resume
it on the new weights; ``finish``: let it finish on the weights it began with. Either way each turn's (first, last)
weight versions are tagged."""


def partial_rollout_problems(config: Any) -> list[str]:
    """A ``partial_rollout`` setting that is not one of ``PARTIAL_ROLLOUTS``, or ``finish`` on a rollout other than
    hf (verl's vLLM server always aborts and resumes)."""
    value = OmegaConf.select(config, PARTIAL_ROLLOUT_KEY, default=None)
    if value is None:
        return []
    if value not in PARTIAL_ROLLOUTS:
        return [f"{PARTIAL_ROLLOUT_KEY}={value!r}: choose one of {', '.join(PARTIAL_ROLLOUTS)}"]
    if value == "finish" and rollout_kind(config) != "hf":
        return [
            f"{PARTIAL_ROLLOUT_KEY}=finish: only the hf rollout finishes turns on their weights; "
            f"the {rollout_kind(config)} rollout aborts and resumes them (resume)"
        ]
    return []


def run_correction_level(config: Any) -> str | None:
    """The correction level verl's trainer runs a composed recipe with: ``CORRECTION_KEY`` resolved for its trainer
    mode (``trainer.v1.trainer_mode``: ragym's async modes are asynchronous) and rollout engine."""
    mode = str(OmegaConf.select(config, MODE_KEY, default="sync"))
    return correction_level(
        str(OmegaConf.select(config, CORRECTION_KEY, default="auto")),
        asynchronous=MODES.get(mode, mode) in ("colocate_async", "separate_async"),
        rollout=str(OmegaConf.select(config, "actor_rollout_ref.rollout.name")),
    )
