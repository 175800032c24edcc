"""The local GRPO engine: rollouts with the ragym agent loop, verl's GRPO update, evaluation, checkpoints.

One process, one model: the policy both serves generation (``HFServer``) and trains. Checkpoints are
Hugging Face model directories (safetensors, tokenizer, processor), or under LoRA peft adapter folders, plus
``optimizer.pt`` and ``engine_state.pt`` (step, data cursor, every RNG), so a resumed run continues with the same
data order.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import shutil
import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm
from verl.utils.config import omega_conf_to_dataclass

from ragym.envs.retrieval.search_settings import use_torch_threads
from ragym.rl.agent_loop.loop import make_agent_loop
from ragym.rl.core.checkpoints import load_state
from ragym.rl.core.dynamic_sampling import (
    SampledBatch,
    reward_weights,
    sample_groups,
    shaped_metric_warning,
)
from ragym.rl.core.grpo import assemble, compute_advantages, update_policy
from ragym.rl.core.hf_server import HFServer
from ragym.rl.core.metrics import (
    IMAGE_PAD,
    MetricsSink,
    advantage_stats,
    drop_metrics_after,
    image_metrics,
    response_length_stats,
    summarize,
)
from ragym.rl.core.rollout import EpisodeResult, RolloutTimes, run_episodes
from ragym.rl.core.vision import ImageInputs
from ragym.rl.cotrain.controller import from_recipe as cotrain_from_recipe
from ragym.rl.credit import TURN_CREDIT
from ragym.rl.credit.inputs import local_turn_credit, recipe_rubric, step_weight
from ragym.rl.data.rows import load_rows
from ragym.rl.engine.async_rollouts import RolloutAhead, tag_versions
from ragym.rl.engine.config import EngineConfig
from ragym.rl.engine.resume import LATEST, check_same_run, latest_checkpoint, resume_point, run_contents
from ragym.rl.errors import UsageError
from ragym.rl.guards import GuardMonitor, GuardStop
from ragym.rl.lora import add_adapters, save_adapter, trainable_parameters
from ragym.rl.models import load_policy, position_problem
from ragym.rl.recipe.images import check_processor_factor, recipe_images, recipe_processor_kwargs
from ragym.rl.view.trace import TraceConfig, TraceWriter

logger = logging.getLogger(__name__)

__all__ = ["LATEST", "LocalTrainer", "RowOrder", "latest_checkpoint", "read_rows"]


def read_rows(path: str, limit: int = -1) -> list[dict[str, Any]]:
    """The valid rows of a verl parquet file (the first ``limit`` when ``limit`` >= 0); bad ones are logged."""
    return load_rows(path, limit).rows


class RowOrder:
    """Epoch-wise row order that is a pure function of (seed, epoch): resumable from a cursor."""

    def __init__(self, num_rows: int, batch_size: int, seed: int, shuffle: bool) -> None:
        if num_rows < batch_size:
            raise UsageError(
                f"data.train_batch_size={batch_size} exceeds the {num_rows} valid training rows; lower it"
            )
        self.num_rows, self.batch_size, self.seed, self.shuffle = num_rows, batch_size, seed, shuffle
        self.epoch, self.position = 0, 0

    def _order(self) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.num_rows)
        return np.random.default_rng([self.seed, self.epoch]).permutation(self.num_rows)

    def next_batch(self) -> list[int]:
        """Row indices of the next step (incomplete tail batches are dropped, as verl's sampler does)."""
        return self.next_rows(self.batch_size)

    def next_rows(self, count: int) -> list[int]:
        """The next ``count`` row indices (a step's batch, or a dynamic-sampling refill); a tail shorter than
        ``count`` is skipped for the next epoch."""
        if self.position + count > self.num_rows:
            self.epoch, self.position = self.epoch + 1, 0
        rows = self._order()[self.position : self.position + count]
        self.position += count
        return [int(i) for i in rows]

    def state(self) -> dict[str, int]:
        """The cursor."""
        return {"epoch": self.epoch, "position": self.position}

    def load(self, state: dict[str, int]) -> None:
        """Restore the cursor."""
        self.epoch, self.position = state["epoch"], state["position"]


class LocalTrainer:
    """GRPO on one machine with the same recipe, agent loop, rewards and loss as the cluster path."""

    def __init__(self, config: DictConfig, cfg: EngineConfig, bad_rows: str = "skip") -> None:
        self.config, self.cfg = config, cfg
        use_torch_threads(cfg.num_threads)
        torch.manual_seed(cfg.seed)
        # Rows and the resume point are checked before the model loads: a bad setting costs seconds.
        self.train_set = load_rows(cfg.train_files, on_bad=bad_rows)
        self.train_rows = self.train_set.rows
        self.val_rows = load_rows(cfg.val_files, cfg.val_max_samples, bad_rows).rows if cfg.val_files else []
        resume = resume_point(cfg.output_dir, cfg.resume_mode, cfg.resume_from_path)
        # What the model folder and reward recipe hold as the run starts (its rewards are built from them now),
        # read once: every checkpoint records it.
        self.contents = run_contents(config)
        state: dict[str, Any] | None = None
        if resume is not None:
            # The dict save() wrote (torch.load's type is Any).
            state = cast(dict[str, Any], load_state(resume / "engine_state.pt"))
            check_same_run(
                state.get("config"),
                config,
                state.get("data"),
                self.train_set.fingerprint(),
                resume,
                state.get("contents"),
                self.contents,
            )
        # The Hugging Face policy would run positions it never had (vLLM refuses such a length itself).
        problem = position_problem(cfg.model_path, cfg.prompt_length, cfg.response_length)
        if problem is not None:
            raise UsageError(problem)
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)  # verl's agent loop binds to the current loop at construction
        # Under LoRA the base always comes from the recipe's model, the adapters from the checkpoint.
        self.model, self.tokenizer, self.processor = load_policy(
            cfg.model_path if cfg.lora else (resume or cfg.model_path)
        )
        # The peft wrapper (LoRA only): it saves the adapters; its layers run inside ``self.model``'s forward.
        self.peft = cfg.lora and add_adapters(self.model, cfg.lora, Path(cfg.model_path).resolve(), resume)
        self.model.eval()
        check_processor_factor(recipe_images(config), self.processor)
        self.image_pad_id = cast(int, self.tokenizer.convert_tokens_to_ids(IMAGE_PAD))  # one token, one id
        # The recipe's pixel range, as verl's processor renders the agent loop's placeholders with it.
        self.image_inputs = ImageInputs(self.processor.image_processor, recipe_processor_kwargs(config))
        # Async rollouts: the server generates with a copy of the policy, synced between rollouts.
        self.ahead = (
            RolloutAhead(self.model, state["step"] if state else 0, cfg.staleness_bound, self.loop)
            if cfg.async_rollouts
            else None
        )
        self.server = HFServer(
            self.ahead.rollout_policy if self.ahead else self.model,
            self.tokenizer,
            self.image_inputs,
            default_max_tokens=cfg.response_length,
            batch_wait_s=cfg.batch_wait_s,
            seed=cfg.seed,
        )
        self.agent_loop = make_agent_loop(config, self.server, self.tokenizer, self.processor)
        self.actor_config = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
        self.algo_config = omega_conf_to_dataclass(config.algorithm)
        # Turn-level credit scores each turn with the recipe's own rubric (ragym.rl.credit).
        self.turn_credit = (
            (recipe_rubric(cfg.reward_kwargs), step_weight(config))
            if cfg.update.adv_estimator == TURN_CREDIT
            else None
        )
        self.optimizer = torch.optim.AdamW(
            trainable_parameters(self.model), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay
        )
        warmup = max(1, cfg.warmup_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warmup)
        )
        self.update_generator = torch.Generator().manual_seed(cfg.seed + 1)
        self.order = RowOrder(len(self.train_rows), cfg.train_batch_size, cfg.seed, cfg.shuffle)
        self.step = 0
        if resume is not None:
            assert state is not None  # loaded with resume, above
            self._load_state(resume, state)
            logger.info("resumed from %s at step %d (epoch %d)", resume, self.step, self.order.epoch)
        drop_metrics_after(cfg.output_dir, self.step if resume else -1)
        plain = cast(dict[str, Any], OmegaConf.to_container(config, resolve=True))  # a DictConfig's is a dict
        self.sink = MetricsSink(cfg.output_dir, cfg.loggers, cfg.project_name, cfg.experiment_name, plain)
        self.last_times: dict[str, float] = {}
        self.traces = TraceWriter(
            Path(cfg.output_dir) / "traces",
            self.tokenizer,
            TraceConfig(cfg.trace_groups_per_step),
            self.step if resume else -1,
        )
        self.guards = GuardMonitor(cfg.guards, cfg.output_dir)
        # Retriever co-training (ragym.cotrain): the in-process KB's query encoder, harvested and swapped by step.
        self.cotrain = cotrain_from_recipe(
            config, self.train_rows, self.val_rows, self.step if resume else None, "local"
        )
        if cfg.filter_groups.enable:
            warning = shaped_metric_warning(
                cfg.filter_groups.metric, cfg.outcome_metric, reward_weights(cfg.reward_kwargs)
            )
            if warning:
                logger.warning("%s", warning)

    # ----- one step ---------------------------------------------------------------------------
    def train_step(self, prefetch: bool | None = None) -> dict[str, float]:
        """Roll out one batch of groups (async rollouts: take the one rolled out ahead), compute GRPO advantages,
        update the policy; returns step metrics. ``prefetch`` (async rollouts): roll out the next step's batch
        during this update (None: unless this is the run's last step)."""
        cfg, step, off_policy = self.cfg, self.step + 1, {}
        version = None  # the weights' version of a batch rolled out ahead
        if self.ahead:
            ahead, off_policy = self.ahead.take(step, self._sample_batch, cfg.train_batch_size)
            sampled, times, version = ahead.sampled, ahead.times, ahead.version
        else:
            sampled, times = self._sample_batch()
        indices = [index for index, _ in sampled.rows]
        rows = [row for _, row in sampled.rows]
        results = [episode for group in sampled.groups for episode in group]
        if version is not None:
            tag_versions(results, step, version)
        update_start = time.perf_counter()
        batch = assemble([r.sample() for r in results])
        credit = self.turn_credit and local_turn_credit(rows, results, cfg.rollout_n, *self.turn_credit)
        compute_advantages(batch, self.algo_config, cfg.update, credit)
        # A bounded sample of the step's episodes for ``ragym view``, before a rollout ahead shares the tokenizer.
        trace_start = time.perf_counter()
        self.traces.record(step, "train", rows, results, batch.advantages)
        trace_s = time.perf_counter() - trace_start
        if self.ahead and (step < cfg.total_steps if prefetch is None else prefetch):
            self.ahead.start(step + 1, self._sample_batch, cfg.train_batch_size, self._rollout_state())
        metrics = update_policy(
            self.model,
            self.optimizer,
            self.image_inputs,
            batch,
            self.actor_config,
            cfg.update,
            self.update_generator,
        )
        self.scheduler.step()
        self.step += 1
        update_s = time.perf_counter() - update_start - trace_s
        metrics.update(off_policy)
        metrics.update(self._episode_metrics(results))
        metrics.update(advantage_stats(batch.advantages, batch.response_mask))
        metrics.update(
            response_length_stats([len(r.output.response_ids) for r in results], cfg.response_length)
        )
        metrics.update(sampled.metrics())
        metrics.update(
            image_metrics(
                [len(s.images) for s in batch.samples],
                [s.prompt_ids + s.response_ids for s in batch.samples],
                self.image_pad_id,
            )
        )
        metrics["actor/lr"] = float(self.scheduler.get_last_lr()[0])  # LambdaLR's lr is a float
        if self.cotrain:
            episodes = [
                (e.output.extra_fields["events"], row["extra_info"])
                for row, group in zip(rows, sampled.groups, strict=True)
                for e in group
            ]
            metrics.update(self.cotrain.on_step(self.step, episodes))
        self.last_times = {
            "generate": times.generate,
            "env": times.env,
            "reward": times.reward,
            "rollout": times.total,
            "update": update_s,
            "trace": trace_s,
        }
        metrics.update({f"timing_s/{k}": v for k, v in self.last_times.items()})
        stop = self.guards.check(self.step, metrics)
        self.sink.log(self.step, metrics, extra={"rows": indices})
        if stop is not None:
            self.save()
            raise GuardStop(stop.line())
        return metrics

    def _sample_batch(
        self, step: int | None = None, num_groups: int | None = None
    ) -> tuple[SampledBatch, RolloutTimes]:
        """Step ``step``'s groups (default: the next step's): one rollout of ``num_groups`` rows (default: the batch),
        plus refills under dynamic sampling. Async rollouts call it from their worker, while ``self.step`` moves."""
        cfg, total = self.cfg, RolloutTimes()
        at = self.step + 1 if step is None else step  # a name of its own: the closure sees it as an int
        num_groups = cfg.train_batch_size if num_groups is None else num_groups

        def rollout(num_rows: int, round_: int) -> tuple[list[Any], list[EpisodeResult]]:
            indices = self.order.next_rows(num_rows)
            rows = [self.train_rows[i] for i in indices]
            # A refill may draw a row again (a new epoch): its group id names the round too.
            prefix = f"s{at - 1}" if round_ == 0 else f"s{at - 1}r{round_}"
            results, times = run_episodes(
                self.loop,
                self.agent_loop,
                self.server,
                rows,
                cfg.rollout_n,
                self._sampling(cfg.sampling),
                cfg.reward_kwargs,
                group_prefix=prefix,
            )
            for name in ("total", "generate", "env", "reward"):
                setattr(total, name, getattr(total, name) + getattr(times, name))
            return list(zip(indices, rows, strict=True)), results

        return sample_groups(rollout, num_groups, cfg.filter_groups), total

    def evaluate(self, rows: list[dict[str, Any]] | None = None) -> dict[str, float]:
        """Greedy (``val_kwargs``) episodes on held-out rows; returns ``val/``-free summary metrics."""
        rows = self.val_rows if rows is None else rows
        if self.ahead:  # the server's policy takes the trained weights once the rollout in flight has ended
            self.ahead.wait()
            self.ahead.sync(self.step)
        results, _ = run_episodes(
            self.loop,
            self.agent_loop,
            self.server,
            rows,
            1,
            self._sampling(self.cfg.val_sampling),
            self.cfg.reward_kwargs,
            group_prefix="val",
        )
        self.traces.record(self.step, "val", rows, results)
        return self._episode_metrics(results)

    def _sampling(self, params: dict[str, Any]) -> dict[str, Any]:
        return {**params, "logprobs": True, "repetition_penalty": 1.0}

    @staticmethod
    def _episode_metrics(results: list[EpisodeResult]) -> dict[str, float]:
        breakdowns = [{k: v for k, v in r.score.items() if k.startswith("reward/")} for r in results]
        return summarize(
            [r.reward for r in results], breakdowns, [r.stats for r in results], [r.uid for r in results]
        )

    # ----- the loop -----------------------------------------------------------------------------
    def fit(self, max_steps: int | None = None) -> list[dict[str, float]]:
        """Train to ``total_steps`` (or ``max_steps`` more steps), evaluating and checkpointing on schedule."""
        cfg, history = self.cfg, []
        end = cfg.total_steps if max_steps is None else min(cfg.total_steps, self.step + max_steps)
        if cfg.val_before_train and self.step == 0 and self.val_rows:
            # The untrained baseline: logged, not guarded (verl's trainer does not guard it either).
            self.sink.log(0, {f"val/{k}": v for k, v in self.evaluate().items()})
        progress = tqdm(total=end, initial=self.step, desc="grpo", unit="step", dynamic_ncols=True)
        while self.step < end:
            metrics = self.train_step(prefetch=self.step + 1 < end)
            history.append(metrics)
            progress.update(1)
            progress.set_postfix(reward=f"{metrics['reward/total']:.3f}")
            last = self.step == end
            if cfg.test_freq > 0 and (self.step % cfg.test_freq == 0 or last) and self.val_rows:
                self.validate()
            if (cfg.save_freq > 0 and self.step % cfg.save_freq == 0) or last:
                self.save()
        progress.close()
        return history

    def validate(self) -> dict[str, float]:
        """Evaluate on the held-out rows and log ``val/*`` at this step; guards on ``val/`` metrics read them, and
        a ``stop`` ends the run here (the step is checkpointed first)."""
        metrics = {f"val/{k}": v for k, v in self.evaluate().items()}
        stop = self.guards.check(self.step, metrics)
        self.sink.log(self.step, metrics)
        if stop is not None:
            self.save()
            raise GuardStop(stop.line())
        return metrics

    # ----- checkpoints --------------------------------------------------------------------------
    def save(self) -> Path:
        """Write ``global_step_<step>/`` (HF model + optimizer + engine state), then mark it latest."""
        out = Path(self.cfg.output_dir) / f"global_step_{self.step}"
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self.save_model(tmp)
        torch.save(
            {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()},
            tmp / "optimizer.pt",
        )
        torch.save(self._engine_state(), tmp / "engine_state.pt")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)  # a killed save never leaves a half-written checkpoint behind the marker
        (Path(self.cfg.output_dir) / LATEST).write_text(str(self.step))
        logger.info("checkpoint %s", out)
        return out

    def save_model(self, out: str | Path) -> None:
        """The policy as a Hugging Face model directory (safetensors, tokenizer, processor); under LoRA the
        adapters as a peft folder naming the base policy."""
        if self.peft:
            save_adapter(self.peft, out)
            return
        self.model.save_pretrained(out, safe_serialization=True)
        self.processor.save_pretrained(out)

    def _engine_state(self) -> dict[str, Any]:
        # With a rollout in flight (async rollouts), the cursor and random states from before it drew its rows.
        rollout = (self.ahead and self.ahead.state_before) or self._rollout_state()
        return {
            "step": self.step,
            **rollout,
            "update_rng": self.update_generator.get_state(),
            "config": json.dumps(OmegaConf.to_container(self.config, resolve=True)),
            "data": self.train_set.fingerprint(),
            "contents": self.contents,
        }

    def _rollout_state(self) -> dict[str, Any]:
        """The part of the engine state that rolling out a batch advances: the data cursor and random states."""
        return {
            "order": self.order.state(),
            "torch_rng": torch.get_rng_state(),
            "numpy_rng": np.random.get_state(),
            "python_rng": random.getstate(),
            "server_rng": self.server.generator.get_state(),
        }

    def _load_state(self, path: Path, state: dict[str, Any]) -> None:
        optim = load_state(path / "optimizer.pt")
        self.optimizer.load_state_dict(optim["optimizer"])
        self.scheduler.load_state_dict(optim["scheduler"])
        self.step = state["step"]
        self.order.load(state["order"])
        torch.set_rng_state(state["torch_rng"])
        np.random.set_state(state["numpy_rng"])
        random.setstate(state["python_rng"])
        self.server.generator.set_state(state["server_rng"])
        self.update_generator.set_state(state["update_rng"])

    def close(self) -> None:
        """Close the metrics sinks, the rollout worker (async rollouts) and the event loop."""
        if self.ahead:
            self.ahead.close()
        if self.cotrain:
            self.cotrain.close()
        self.sink.close()
        self.loop.close()
