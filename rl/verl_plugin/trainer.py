"""ragym's v1 trainer modes (``trainer.v1.trainer_mode: ragym``, ``ragym_colocate_async``,
``ragym_separate_async``): verl's sync, colocated-async and separate-async trainers, each plus ragym's per-step
metrics and a bounded trace of episodes for ``ragym view``.

verl 0.9.1 keeps each trajectory's agent-loop ``extra_fields`` (events, turns, episode metrics, and the reward
function's ``reward_extra_info``: ``score`` and ``reward/<term>``) in TransferQueue, but logs none of it for
training steps. ``RagymTrainerMixin`` extends the one method that turns a step's batch into metrics
(``_compute_metrics``): it reads those fields for the step's trajectories and adds ``reward/total``,
``reward/<term>``, ``episode/<metric>`` and ``grpo/zero_adv_group_share`` (the local engine's names,
``ragym.rl.agent_loop.verl_metrics``), the step's off-policy share and stale drops (``off_policy/*``), then
records up to ``ragym.verl.trace_groups_per_step`` GRPO groups to ``<trainer.default_local_dir>/traces``
(``ragym view`` opens it; TransferQueue keeps no raw images, so the trace has the episodes' tokens, masks,
advantages, turns, events, rewards and staleness, without pictures), and writes the whole step, verl's metrics and
ragym's, to ``<trainer.default_local_dir>/metrics.jsonl`` (the local engine's file; verl's console line of a step can
arrive split when Ray forwards it).
Its evaluations add ``val/<metric>`` (the local engine's held-out names) to verl's ``val-core``/``val-aux``
ones, so collapse guards on ``val/`` metrics read them at the steps that evaluate. Its replay buffer
(``ragym.rl.verl_plugin.sampler``) is verl's buffer for the mode with DAPO's ``max_num_gen_batches`` bound.

One mixin, one class per verl mode made from it (``_ragym_mode``): verl branches on ``self.trainer_mode`` and
reads ``trainer.v1.<mode>`` by it, so ``trainer_mode`` answers verl's mode name (``ragym.rl.recipe.modes``)
while verl's registry knows the class by ragym's. Nothing else of verl's loop changes.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
import torch
import transfer_queue as tq
from omegaconf import OmegaConf, open_dict
from verl.trainer.ppo.v1 import register_trainer
from verl.trainer.ppo.v1 import trainer_base as verl_trainer
from verl.trainer.ppo.v1.replay_buffer import DAPO_FILTERED_REWARD_COUNTS_KEY
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

from ragym.envs.core import IMAGE_PLACEHOLDER
from ragym.rl.agent_loop.loop import TURN_VERSIONS
from ragym.rl.agent_loop.verl_metrics import step_metrics, tq_column
from ragym.rl.core.dynamic_sampling import (
    FILTER_SECTION,
    OUTCOME_KEY,
    reward_weights,
    shaped_metric_warning,
)
from ragym.rl.core.metrics import IMAGE_PAD, METRICS_FILE, append_metrics, drop_metrics_after, image_metrics
from ragym.rl.correction import correction_metrics
from ragym.rl.errors import UsageError
from ragym.rl.guards import GUARDS_SECTION, VAL_PREFIX, GuardMonitor, read_guards
from ragym.rl.off_policy import (
    CORRECTION_KEY,
    IS_THRESHOLD_KEY,
    VERL_LEVEL_KEY,
    correction_problems,
    trajectory_staleness,
    turn_version_metrics,
)
from ragym.rl.off_policy import off_policy_metrics as shared_off_policy_metrics
from ragym.rl.recipe.modes import mode_problems, run_correction_level, verl_mode
from ragym.rl.verl_plugin import adapter_sync
from ragym.rl.verl_plugin.sampler import (
    TOPPED_UP_KEY,
    RagymReplayBuffer,
    RagymReplayBufferAsync,
    ragym_buffer_like,
)
from ragym.rl.verl_plugin.turn_credit import TurnCreditMixin

logger = logging.getLogger(__name__)

TRAINER_MODE = "ragym"
"""``trainer.v1.trainer_mode`` of ragym's synchronous trainer (every shipped recipe's)."""
IGNORED_BOUND_WARNING = "algorithm.filter_groups.max_num_gen_batches=%s is ignored"
"""The start of verl's warning that its buffer ignores the bound, which ragym's buffer honours."""
TRACE_GROUPS_KEY = "ragym.verl.trace_groups_per_step"
"""Recipe key: GRPO groups recorded per step for ``ragym view`` (0: none)."""
DEFAULT_TRACE_GROUPS = 4
IMAGE_MARK = IMAGE_PLACEHOLDER
"""Where an observation's text shows an image; traces of verl runs show ``[image]`` there instead."""
FIELDS = [
    "uid",
    "extra_fields",
    "prompts",
    "responses",
    "response_mask",
    "advantages",
    "data_source",
    "reward_model",
    "extra_info",
]
"""What a step reads back from TransferQueue (all of it already there: verl stores the whole output)."""


@dataclass
class _Output:
    """The parts of an agent-loop output a trace line reads."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    extra_fields: dict[str, Any]
    multi_modal_data: dict[str, Any] | None = None


@dataclass
class _Episode:
    """A trajectory as ``ragym.rl.view.trace.TraceWriter.record`` takes it."""

    output: _Output
    uid: str
    row_index: int
    reward: float
    score: dict[str, float]


class RagymTrainerMixin(TurnCreditMixin):
    """ragym's metrics, traces and guards added to each step of a verl v1 trainer, its replay buffer, and the
    inputs of the turn-level credit estimator (``algorithm.adv_estimator: turn_credit``) fetched for it. Placed
    before verl's trainer class in the bases; ``_ragym_mode`` makes one class per verl mode."""

    ragym_mode: ClassVar[str] = TRAINER_MODE
    """The ``trainer.v1.trainer_mode`` this class is registered under (``ragym.rl.recipe.modes.MODES``)."""
    replay_buffer: RagymReplayBuffer | RagymReplayBufferAsync
    """verl's buffer in ragym's form (``_build_replay_buffer``)."""

    @property
    def trainer_mode(self) -> str:
        """verl's mode name: verl branches on it (replay buffer, refill granularity, TransferQueue checkpoints,
        prompt persistence) and reads ``trainer.v1.<mode>`` (``parameter_sync_step``, warm-up batches) by it."""
        return verl_mode(self.ragym_mode)

    @trainer_mode.setter
    def trainer_mode(self, name: str) -> None:
        # verl's __init__ assigns the registry name it was started under; the mode is this class's.
        return None

    def _build_replay_buffer(self) -> RagymReplayBuffer | RagymReplayBufferAsync:
        """verl's replay buffer for the mode, with verl's settings, in ragym's form (the DAPO bound, held-out
        episodes); called from verl's ``__init__``, after the checks of the mode's settings."""
        problems = mode_problems(self.config) + correction_problems(self.config)
        if problems:
            raise UsageError("\n".join(problems))
        self._ragym_correction = _set_correction(self.config)
        self._ragym_sync_records = _adapter_sync_records(self.config)
        if OmegaConf.select(self.config, "trainer.v1.sampler.custom_sampler.path"):
            raise UsageError(
                f"trainer.v1.trainer_mode={self.ragym_mode} brings its own replay buffer "
                "(ragym.rl.verl_plugin.sampler); unset trainer.v1.sampler.custom_sampler"
            )
        if OmegaConf.select(self.config, "trainer.v1.sampler.sync_refill_failed_groups", default=False):
            raise UsageError(
                f"trainer.v1.sampler.sync_refill_failed_groups is not supported by trainer_mode={self.ragym_mode} "
                "(its refill bound counts only the refills of flat groups)"
            )
        bound = int(OmegaConf.select(self.config, f"{FILTER_SECTION}.max_num_gen_batches", default=0) or 0)
        quiet = _DropMessage(IGNORED_BOUND_WARNING)
        verl_trainer.logger.addFilter(quiet)
        try:
            buffer = super()._build_replay_buffer()
        finally:
            verl_trainer.logger.removeFilter(quiet)
        return ragym_buffer_like(buffer, bound)

    def _validate(self) -> dict[str, float]:
        """verl's evaluation metrics plus ``val/<metric>``: the local engine's names for the same episodes."""
        metrics = super()._validate()
        episodes = self.replay_buffer.take_val_episodes()
        if episodes:
            uids, extra_fields = [uid for uid, _ in episodes], [fields for _, fields in episodes]
            metrics.update({f"{VAL_PREFIX}{k}": v for k, v in step_metrics(extra_fields, uids).items()})
        if getattr(self, "_ragym_initial_val", False):
            # verl logs the evaluation before the first step on its own; later ones join their step's metrics.
            self._ragym_initial_val = False
            append_metrics(self._ragym_metrics_path(), self.global_steps, metrics)
        return metrics

    def _compute_metrics(
        self, batch: Any, metrics: dict, timing_raw: dict, global_steps: int, epoch: int
    ) -> None:
        """verl's step metrics, ragym's, then the whole step as verl logs it next, to ``metrics.jsonl``."""
        super()._compute_metrics(batch, metrics, timing_raw, global_steps=global_steps, epoch=epoch)
        self._add_ragym_metrics(batch, metrics, global_steps)
        # verl takes the filtered groups' reward counts out of the step's metrics for a table of its own.
        logged = {k: v for k, v in metrics.items() if k != DAPO_FILTERED_REWARD_COUNTS_KEY}
        append_metrics(self._ragym_metrics_path(), global_steps, logged)

    def _ragym_metrics_path(self) -> Path:
        """The run's ``metrics.jsonl``, beside its checkpoints (the local engine's file and format). verl's console
        line holds the same numbers, but a console line that Ray forwards can arrive split in two."""
        return Path(self.config.trainer.default_local_dir) / METRICS_FILE

    def _add_ragym_metrics(self, batch: Any, metrics: dict, global_steps: int) -> None:
        """ragym's additions to the step's metrics (the module's docstring), the guards' signal and the trace."""
        keys = [
            key for key, tag in zip(batch.keys, batch.tags, strict=True) if not tag.get("is_padding", False)
        ]
        if not keys:
            return
        data = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=FIELDS)
        columns = {
            key: tq_column(data, key)
            for key in ("uid", "extra_fields", "data_source", "reward_model", "extra_info")
        }
        extra_fields = [dict(fields) for fields in columns["extra_fields"]]
        uids = [str(uid) for uid in columns["uid"]]
        metrics.update(step_metrics(extra_fields, uids))
        tags = [tag for tag in batch.tags if not tag.get("is_padding", False)]
        versions = [(int(tag["min_global_steps"]), int(tag["max_global_steps"])) for tag in tags]
        metrics.update(off_policy_metrics(global_steps, versions, metrics))
        metrics.update(turn_version_metrics(global_steps, [f.get(TURN_VERSIONS, []) for f in extra_fields]))
        metrics.update(self._correction_metrics(batch, data, extra_fields))
        metrics.update(self._cotrain_step(global_steps, columns["extra_info"], extra_fields))
        metrics.update(self._adapter_sync_metrics())
        self._signal(global_steps, metrics, len(set(uids)))
        self._trace(global_steps, data, columns, extra_fields, uids, versions)

    def fit(self, agent_loop_manager: Any) -> Any:
        """verl's training loop, its ``metrics.jsonl`` continued from the loaded checkpoint; when it ends or fails, a
        co-training round still running is stopped (its version is never swapped in), instead of a spawned round
        outliving the trainer on the node's CPUs."""
        # verl loaded the checkpoint when it built its workers: rows after it are a killed run's, logged again now;
        # a run from scratch starts the file anew.
        out = Path(self.config.trainer.default_local_dir)
        out.mkdir(parents=True, exist_ok=True)
        drop_metrics_after(out, self.global_steps if self.global_steps > 0 else -1)
        self._ragym_initial_val = bool(
            OmegaConf.select(self.config, "trainer.val_before_train", default=True)
        )
        try:
            return super().fit(agent_loop_manager)  # pyright: ignore[reportAttributeAccessIssue]
        finally:
            cotrain = getattr(self, "_ragym_cotrain", None)
            if cotrain is not None:
                cotrain.close()

    def _cotrain_step(self, step: int, extra_info: list[Any], extra_fields: list[dict]) -> dict[str, float]:
        """Retriever co-training (``ragym.cotrain``, ``ragym.rl.cotrain``): the local engine's harvest, rounds and
        swaps, the swap at the recipe's retrieval service (made at the first step: a resume starts there)."""
        if not hasattr(self, "_ragym_cotrain"):
            from ragym.rl.cotrain.controller import from_recipe
            from ragym.rl.data.rows import load_rows

            data = self.config.data
            train = load_rows(data.train_files, check_reset=False).rows
            val = load_rows(data.val_files, check_reset=False).rows if data.get("val_files") else []
            self._ragym_cotrain = from_recipe(self.config, train, val, step - 1, "verl")
        if self._ragym_cotrain is None:
            return {}
        episodes = [
            (fields["events"], dict(info)) for fields, info in zip(extra_fields, extra_info, strict=True)
        ]
        return self._ragym_cotrain.on_step(step, episodes)

    def _adapter_sync_metrics(self) -> dict[str, float]:
        """The ``adapter_sync`` run check's metrics of the LoRA adapter syncs since the last step (verl syncs before
        this step's metrics, so the step reports the sync after its update), as the hf rollout's servers recorded
        them and the CPU vLLM rollout's workers left them (``ragym.rl.verl_plugin.adapter_sync``); none without
        unmerged LoRA or a rollout that records its syncs."""
        if self._ragym_sync_records is None:
            return {}
        from ragym.rl.verl_plugin.rollout import take_adapter_syncs

        records = take_adapter_syncs() + adapter_sync.take_left_records(self._ragym_sync_records)
        return adapter_sync.step_metrics(records)

    def _correction_metrics(self, batch: Any, data: Any, extra_fields: list[dict]) -> dict[str, float]:
        """The off-policy correction's metrics (``ragym.rl.correction``, as the local engine logs them) from the
        trainer's and the rollout's log-probs, and the images the episodes carried beside their image tokens."""
        prompts, responses = data["prompts"].unbind(), data["responses"].unbind()
        pad_id = self.tokenizer.convert_tokens_to_ids(IMAGE_PAD)
        metrics = image_metrics(
            [len(f.get("image_refs", [])) for f in extra_fields],
            [p.tolist() + r.tolist() for p, r in zip(prompts, responses, strict=True)],
            pad_id,
        )
        if not OmegaConf.select(self.config, "actor_rollout_ref.rollout.calculate_log_probs", default=False):
            return metrics  # the rollout recorded no log-probs: nothing to compare
        keys = [
            key for key, tag in zip(batch.keys, batch.tags, strict=True) if not tag.get("is_padding", False)
        ]
        logps = tq.kv_batch_get(
            keys=keys, partition_id=batch.partition_id, select_fields=["old_log_probs", "rollout_log_probs"]
        )
        rows = [
            logps["old_log_probs"].unbind(),
            logps["rollout_log_probs"].unbind(),
            data["response_mask"].unbind(),
        ]
        width = max(len(row) for column in rows for row in column)
        old, rollout, mask = (_padded(column, width) for column in rows)
        threshold = float(OmegaConf.select(self.config, IS_THRESHOLD_KEY))
        metrics.update(correction_metrics(old, rollout, mask, self._ragym_correction or "token", threshold))
        return metrics

    def _signal(self, step: int, metrics: dict, num_groups: int) -> None:
        """Dynamic sampling's flat share and the collapse guards (``ragym.rl.guards``); a ``stop`` ends the run after
        this step (its metrics are still logged)."""
        if getattr(self, "_ragym_guards", None) is None:
            self._ragym_guards = _start_signal(self.config)
        evicted = float(metrics.get("training/filter_groups/evicted_samples", 0))
        surplus = float(metrics.get("training/filter_groups/discarded_surplus_samples", 0))
        topped_up = float(metrics.get(TOPPED_UP_KEY, 0))
        # Flat among the groups this step finished: those dropped and those trained on at the bound.
        metrics["dynamic_sampling/flat_group_share"] = (evicted + topped_up) / max(
            evicted + surplus + num_groups, 1
        )
        metrics["dynamic_sampling/dropped_groups"] = evicted
        metrics["dynamic_sampling/topped_up_groups"] = topped_up
        stop = self._ragym_guards.check(step, metrics)
        if stop is not None:
            logger.error("ragym: %s; stopping after this step", stop.line())
            self.total_training_steps = step  # verl's loop ends once this step is logged

    def _trace(
        self,
        step: int,
        data: Any,
        columns: dict[str, list],
        extra_fields: list[dict],
        uids: list[str],
        versions: list[tuple[int, int]],
    ) -> None:
        """Record a bounded sample of the step's groups under ``<default_local_dir>/traces``, each episode with the
        weight versions that generated it and its staleness (``trajectory_staleness``)."""
        groups = int(OmegaConf.select(self.config, TRACE_GROUPS_KEY, default=DEFAULT_TRACE_GROUPS))
        if groups <= 0:
            return
        writer = self._trace_writer(groups)
        prompts, responses = data["prompts"].unbind(), data["responses"].unbind()
        masks, advantages = data["response_mask"].unbind(), data["advantages"].unbind()
        rows, episodes = [], []
        for i, fields in enumerate(extra_fields):
            scored = fields.get("reward_extra_info") or {}
            info = dict(columns["extra_info"][i] or {})
            rows.append(
                {
                    "data_source": columns["data_source"][i],
                    "reward_model": dict(columns["reward_model"][i]),
                    "extra_info": info,
                }
            )
            # TransferQueue keeps no raw images: the trace's observations show none.
            observations = [
                {**o, "num_images": 0, "text": o["text"].replace(IMAGE_MARK, "[image]")}
                for o in fields.get("observations", [])
            ]
            shown = {
                **fields,
                "observations": observations,
                "weight_versions": list(versions[i]),
                "staleness": trajectory_staleness(step, versions[i]),
            }
            output = _Output(prompts[i].tolist(), responses[i].tolist(), masks[i].tolist(), shown)
            score = {k: float(v) for k, v in scored.items() if k.startswith("reward/")}
            episodes.append(
                _Episode(output, uids[i], int(info.get("index", i)), float(scored.get("score", 0.0)), score)
            )
        width = max(len(r) for r in responses)
        padded = np.zeros((len(episodes), width), dtype=np.float32)  # [N, R]
        for i, adv in enumerate(advantages):
            padded[i, : len(adv)] = adv.float().numpy()
        # One row per episode (``record`` maps episode i to row i // per_row; with per_row 1 that is row i).
        writer.record(step, "train", rows, episodes, padded)

    def _trace_writer(self, groups: int) -> Any:
        """The run's trace writer (created at the first step; a resumed run keeps earlier steps' records)."""
        if getattr(self, "_ragym_traces", None) is None:
            from ragym.rl.view.trace import TraceConfig, TraceWriter

            root = Path(self.config.trainer.default_local_dir) / "traces"
            self._ragym_traces = TraceWriter(root, self.tokenizer, TraceConfig(groups), self.global_steps - 1)
            logger.info("ragym traces: %d groups per step -> %s", groups, root)
        return self._ragym_traces


def off_policy_metrics(step: int, versions: list[tuple[int, int]], metrics: dict) -> dict[str, float]:
    """ragym's off-policy metrics of a step (``ragym.rl.off_policy``), logged in every mode (0 in sync); the dropped
    groups are verl's async buffer's ``training/off_policy/evicted_samples``, which verl logs only when there were
    some."""
    return shared_off_policy_metrics(
        step, versions, int(metrics.get("training/off_policy/evicted_samples", 0))
    )


def _padded(rows: Any, width: int) -> torch.Tensor:
    """Right-padded [N, width] tensor of ``rows`` (a TransferQueue response field, one 1-D tensor per trajectory)."""
    out = torch.zeros((len(rows), width), dtype=torch.float64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row.to(torch.float64)
    return out


def _set_correction(config: Any) -> str | None:
    """Resolve ``ragym.off_policy_correction`` for this run and hand it to verl's trainer
    (``algorithm.rollout_correction.rollout_is``, which verl reads at each step); the level, None when off."""
    level = run_correction_level(config)
    with open_dict(config):
        OmegaConf.update(config, VERL_LEVEL_KEY, level, merge=False)
    logger.info("ragym: off-policy correction %s (%s)", level or "off", CORRECTION_KEY)
    return level


def _adapter_sync_records(config: Any) -> Path | None:
    """Where the rollout's vLLM workers leave their adapter-sync records for this run (``adapter_sync.RECORDS_VAR``,
    which the rollout servers launched after this inherit): a fresh folder beside its checkpoints under unmerged
    LoRA; None without adapter syncs to judge (no LoRA, or merged weights)."""
    model = config.actor_rollout_ref.model
    if not model.get("lora_rank") or OmegaConf.select(model, "lora.merge", default=False):
        return None
    folder = Path(config.trainer.default_local_dir) / "adapter_syncs"
    shutil.rmtree(folder, ignore_errors=True)  # a resumed run's old records judge no sync of this one
    os.environ[adapter_sync.RECORDS_VAR] = str(folder)
    return folder


def _start_signal(config: Any) -> GuardMonitor:
    """The run's guard monitor; warns once when dynamic sampling keys on a shaped reward, not the outcome."""
    if OmegaConf.select(config, f"{FILTER_SECTION}.enable", default=False):
        # Mappings in a recipe that check_recipe passed (the reward recipe, then guards read as dataclass fields),
        # so their containers are dicts (to_container's type also covers lists and scalars).
        kwargs = cast(
            dict[str, Any],
            OmegaConf.to_container(config.reward.custom_reward_function.reward_kwargs, resolve=True),
        )
        warning = shaped_metric_warning(
            str(OmegaConf.select(config, f"{FILTER_SECTION}.metric")),
            OmegaConf.select(config, OUTCOME_KEY, default=None),
            reward_weights(kwargs),
        )
        if warning:
            logger.warning("%s", warning)
    section = OmegaConf.select(config, GUARDS_SECTION, default=None)
    guards = read_guards(
        cast(dict[str, Any], OmegaConf.to_container(section, resolve=True)) if section is not None else None
    )
    return GuardMonitor(guards, config.trainer.default_local_dir)


class _DropMessage(logging.Filter):
    """Drops log records whose message template starts with ``prefix``."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


VERL_CLASSES = {
    "sync": PPOTrainerSync,
    "colocate_async": PPOTrainerColocateAsync,
    "separate_async": PPOTrainerSeparateAsync,
}
"""verl's trainer class of each verl mode ragym extends."""


def _ragym_mode(class_name: str, mode: str) -> type:
    """``RagymTrainerMixin`` over the verl trainer that ``mode`` extends, registered with verl as ``mode``."""
    verl_cls = VERL_CLASSES[verl_mode(mode)]
    doc = f"verl's {verl_cls.__name__} with ragym's additions (``trainer.v1.trainer_mode: {mode}``)."
    namespace = {"ragym_mode": mode, "__module__": __name__, "__qualname__": class_name, "__doc__": doc}
    return register_trainer(mode)(type(class_name, (RagymTrainerMixin, verl_cls), namespace))


RagymTrainer = _ragym_mode("RagymTrainer", TRAINER_MODE)
RagymColocateAsyncTrainer = _ragym_mode("RagymColocateAsyncTrainer", "ragym_colocate_async")
RagymSeparateAsyncTrainer = _ragym_mode("RagymSeparateAsyncTrainer", "ragym_separate_async")
TRAINERS = {
    cls.ragym_mode: cls for cls in (RagymTrainer, RagymColocateAsyncTrainer, RagymSeparateAsyncTrainer)
}
"""ragym's trainer class of each ragym mode (every one of ``ragym.rl.recipe.modes.MODES``)."""
