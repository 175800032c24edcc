"""The local engine's view of a verl recipe: typed knobs read from the composed config, unused keys listed.

The engine reads the same YAML as the cluster path. Every key it reads goes through ``RecipeReader.get``;
afterwards ``unused_keys`` lists the keys whose value differs from verl's defaults (or that verl does not
define) and that the engine never read, so a knob that would change a cluster run but not a local one is
always visible in the log.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from ragym.rl.core.dynamic_sampling import FILTER_SECTION, OUTCOME_KEY, FilterConfig
from ragym.rl.core.grpo import UpdateConfig
from ragym.rl.errors import UsageError
from ragym.rl.guards import GUARDS_SECTION, read_guards
from ragym.rl.lora import LoraSettings, read_lora
from ragym.rl.off_policy import (
    CORRECTION_KEY,
    IS_THRESHOLD_KEY,
    STALENESS_KEY,
    VERL_LEVEL_KEY,
    correction_level,
    correction_problems,
    staleness_problem,
)
from ragym.rl.recipe.counts import (
    LOCAL_ENGINE_COUNTS,
    LOCAL_ENGINE_OPTIONAL_COUNTS,
    LOCAL_ENGINE_STEPS,
    count_problems,
    group_size_problems,
    switch_problem,
)
from ragym.rl.recipe.retrieval import URL_KEY as RETRIEVAL_URL_KEY
from ragym.rl.recipe.retrieval import recipe_retrieval_url

logger = logging.getLogger(__name__)

ENGINE_SECTION = "ragym.engine"
"""Recipe section of knobs only the local engine has (verl ignores unknown top-level sections)."""


class RecipeReader:
    """Reads dotted keys from a composed recipe and remembers which ones were read."""

    def __init__(self, config: DictConfig) -> None:
        self.config = config
        self.read: set[str] = set()

    def get(self, key: str) -> Any:
        """The value at ``key``; a missing key is an error naming it."""
        value = OmegaConf.select(self.config, key, throw_on_missing=True, default=_MISSING)
        if value is _MISSING:
            raise UsageError(f"recipe has no key {key!r}; add it (verl's default may be missing)")
        self.read.add(key)
        return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig) else value

    def switch(self, key: str) -> bool:
        """The yes/no switch at ``key``; anything but true or false (``no`` from the command line is the string
        "no", a true value) is an error naming it."""
        value = self.get(key)
        problem = switch_problem(key, value)
        if problem is not None:
            raise UsageError(problem)
        return value

    def unused_keys(self, set_keys: Iterable[str]) -> list[str]:
        """Keys of ``set_keys`` (what the recipe and overrides set) that differ from verl's defaults and were
        never read."""
        defaults = verl_defaults()
        unused = []
        for key in sorted(set_keys):
            if any(key == r or key.startswith(r + ".") or r.startswith(key + ".") for r in self.read):
                continue
            default = OmegaConf.select(defaults, key, default=_MISSING)
            if default is _MISSING or default != OmegaConf.select(self.config, key, default=_MISSING):
                unused.append(key)
        return unused


_MISSING = object()


def verl_defaults() -> DictConfig:
    """verl's ``ppo_trainer`` config as composed with no recipe."""
    import verl

    GlobalHydra.instance().clear()
    with initialize_config_dir(
        config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None
    ):
        config = compose(config_name="ppo_trainer")
    OmegaConf.resolve(config)
    return config


@dataclass(frozen=True)
class EngineConfig:
    """Everything the local engine takes from a recipe."""

    model_path: str
    """Policy directory (``actor_rollout_ref.model.path``)."""
    train_files: str
    """Training parquet (``data.train_files``)."""
    val_files: str
    """Held-out parquet for evaluation (``data.val_files``)."""
    train_batch_size: int
    """Dataset rows per step; each yields ``rollout_n`` episodes."""
    val_max_samples: int
    """Held-out rows evaluated (-1: all)."""
    shuffle: bool
    """Shuffle rows each epoch (the order is a function of ``seed`` and the epoch)."""
    seed: int
    """Data order, sampling and initialisation seed (``data.seed``)."""
    rollout_n: int
    """G: episodes per row (the GRPO group)."""
    sampling: dict[str, Any]
    """Training sampling params (temperature, top_p, top_k, logprobs)."""
    val_sampling: dict[str, Any]
    """Evaluation sampling params (``rollout.val_kwargs``; greedy when ``do_sample`` is false)."""
    prompt_length: int
    """Token budget of one episode's prompt (``rollout.prompt_length``)."""
    response_length: int
    """Token budget of one episode's response side (``rollout.response_length``)."""
    update: UpdateConfig
    """Actor/algorithm knobs of one GRPO update."""
    lr: float
    """AdamW learning rate."""
    betas: tuple[float, float]
    """AdamW betas."""
    weight_decay: float
    """AdamW weight decay."""
    warmup_steps: int
    """Linear warm-up steps of the learning rate (``optim.lr_warmup_steps``, or the ratio x total)."""
    total_steps: int
    """Training steps (``trainer.total_training_steps``, else epochs x steps per epoch)."""
    total_epochs: int
    """Epochs over the training rows when ``total_steps`` is not set."""
    save_freq: int
    """Checkpoint every N steps (and at the end); -1: only at the end."""
    test_freq: int
    """Evaluate every N steps; -1: never during training."""
    val_before_train: bool
    """Evaluate before the first step."""
    output_dir: str
    """Checkpoints, metrics and logs (``trainer.default_local_dir``)."""
    project_name: str
    """wandb project."""
    experiment_name: str
    """wandb run name."""
    loggers: tuple[str, ...]
    """``console`` and/or ``wandb`` (the metrics jsonl is always written)."""
    resume_mode: str
    """verl's ``auto`` (the last checkpoint in ``output_dir``, if any), ``disable`` or ``resume_path``."""
    resume_from_path: str | None
    """The ``global_step_N`` folder ``resume_path`` continues from."""
    reward_kwargs: dict[str, Any]
    """``reward.custom_reward_function.reward_kwargs`` (the reward recipe), passed to ``ragym.rewards.verl``."""
    batch_wait_s: float
    """Longest wait of the generation server for all live episodes to ask (``ragym.engine``)."""
    num_threads: int
    """torch intra-op threads (0: ``$OMP_NUM_THREADS``, else one; ``search_settings.plan_torch_threads``)."""
    trace_groups_per_step: int
    """GRPO groups per step (and per evaluation) recorded for ``ragym view`` under ``output_dir/traces``."""
    filter_groups: FilterConfig
    """Dynamic sampling (verl's ``algorithm.filter_groups``): drop and refill groups whose rewards are flat."""
    guards: dict[str, Any]
    """Collapse guards by name (``ragym.guards``, ``ragym.rl.guards``); a guard the recipe leaves out is off."""
    outcome_metric: str | None
    """The reward term that is the task's outcome (``ragym.outcome_metric``); None: not stated."""
    lora: LoraSettings | None
    """LoRA from verl's keys (``actor_rollout_ref.model.lora_rank`` > 0, ``ragym.rl.lora``); None: every weight
    trains."""
    async_rollouts: bool
    """Roll out the next step's episodes on a copy of the policy while the current update runs
    (``ragym.rl.engine.async_rollouts``)."""
    staleness_bound: int
    """With ``async_rollouts``: verl's ``trainer.v1.sampler.max_off_policy_threshold``, the most weight versions a
    trained-on trajectory may span (older groups are dropped and counted); 0 when synchronous."""


AGENT_LOOP_KEYS = (
    "actor_rollout_ref.rollout.prompt_length",
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns",
    "actor_rollout_ref.rollout.full_determinism",
    "data.apply_chat_template_kwargs",
    "data.mm_processor_kwargs",
    # rollout.prompt_length / response_length default to these through interpolation.
    "data.max_prompt_length",
    "data.max_response_length",
)
"""Keys the ragym agent loop (and verl's ``AgentLoopBase`` under it) reads from the same config."""


def read_engine_config(reader: RecipeReader) -> EngineConfig:
    """Build the typed config; knobs the engine cannot honour (KL, critic) are an error naming the key."""
    g = reader.get
    for key in AGENT_LOOP_KEYS:
        g(key)
    reader.switch("actor_rollout_ref.rollout.full_determinism")  # the agent loop takes its truth value
    if "url" in (OmegaConf.select(reader.config, "ragym.retrieval", default=None) or {}):
        g(RETRIEVAL_URL_KEY)  # the agent loop passes it to every env that searches
        recipe_retrieval_url(reader.config)  # a bad address fails here, naming the key
    for key in ("actor_rollout_ref.actor.use_kl_loss", "algorithm.use_kl_in_reward"):
        if reader.switch(key):
            raise UsageError(f"{key}=true needs a reference model, which the local engine does not load")
    reward_fn = (g("reward.custom_reward_function.path"), g("reward.custom_reward_function.name"))
    if reward_fn != ("pkg://ragym.rewards.verl", "compute_score"):
        raise UsageError(
            f"reward.custom_reward_function must be pkg://ragym.rewards.verl / compute_score, got {reward_fn}"
        )
    counts = count_problems(
        reader.config, LOCAL_ENGINE_COUNTS, LOCAL_ENGINE_OPTIONAL_COUNTS, LOCAL_ENGINE_STEPS
    )
    counts += group_size_problems(reader.config)  # one episode a group: its raw reward was its advantage
    if counts:  # a negative batch failed mid-step; zero steps trained nothing and exited 0
        raise UsageError("\n".join(counts))
    rollout, actor = "actor_rollout_ref.rollout", "actor_rollout_ref.actor"
    n, batch = g(f"{rollout}.n"), g("data.train_batch_size")
    micro = g(f"{actor}.ppo_micro_batch_size_per_gpu")
    if isinstance(micro, bool) or not isinstance(micro, int) or micro < 1:
        # the cluster recipes leave it unset: verl packs micro-batches by tokens there (use_dynamic_bsz)
        raise UsageError(
            f"{actor}.ppo_micro_batch_size_per_gpu must be a positive integer for the local engine, which splits "
            f"updates by episode count, got {micro!r} (e.g. {actor}.ppo_micro_batch_size_per_gpu=1)"
        )
    temperature = g(f"{rollout}.temperature")
    update = UpdateConfig(
        mini_batch_size=g(f"{actor}.ppo_mini_batch_size") * n,
        micro_batch_size=g(f"{actor}.ppo_micro_batch_size_per_gpu"),
        # verl accepts it unset; the old-log-prob pass then uses the update's micro-batch size.
        log_prob_micro_batch_size=g(f"{rollout}.log_prob_micro_batch_size_per_gpu")
        or g(f"{actor}.ppo_micro_batch_size_per_gpu"),
        ppo_epochs=g(f"{actor}.ppo_epochs"),
        shuffle=reader.switch(f"{actor}.shuffle"),
        temperature=temperature,
        grad_clip=g(f"{actor}.grad_clip"),
        entropy_coeff=g(f"{actor}.entropy_coeff"),
        adv_estimator=g("algorithm.adv_estimator"),
        norm_adv_by_std=reader.switch("algorithm.norm_adv_by_std_in_grpo"),
    )
    for key in (
        "clip_ratio",
        "clip_ratio_low",
        "clip_ratio_high",
        "clip_ratio_c",
        "loss_agg_mode",
        "loss_scale_factor",
        "policy_loss.loss_mode",
    ):
        g(f"{actor}.{key}")  # read by verl's policy loss through the actor dataclass
    total_steps = g("trainer.total_training_steps")
    epochs = g("trainer.total_epochs")
    if total_steps is None:
        total_rows = pq.ParquetFile(g("data.train_files")).metadata.num_rows
        total_steps = epochs * (total_rows // batch)
    warmup = g(f"{actor}.optim.lr_warmup_steps")
    if warmup is None or warmup < 0:
        warmup = int(g(f"{actor}.optim.lr_warmup_steps_ratio") * total_steps)
    val = g(f"{rollout}.val_kwargs")
    val_sampling = {"temperature": val["temperature"], "top_p": val["top_p"], "top_k": val["top_k"]}
    if not reader.switch(f"{rollout}.val_kwargs.do_sample"):
        val_sampling = {"temperature": 0.0, "top_p": 1.0, "top_k": -1}
    seed = g("data.seed")
    async_settings = _async_settings(reader)
    update = _with_correction(reader, update, async_settings["async_rollouts"])
    return EngineConfig(
        model_path=g("actor_rollout_ref.model.path"),
        train_files=g("data.train_files"),
        val_files=g("data.val_files"),
        train_batch_size=batch,
        val_max_samples=g("data.val_max_samples"),
        shuffle=reader.switch("data.shuffle"),
        seed=0 if seed is None else seed,
        rollout_n=n,
        sampling={"temperature": temperature, "top_p": g(f"{rollout}.top_p"), "top_k": g(f"{rollout}.top_k")},
        val_sampling=val_sampling,
        prompt_length=g(f"{rollout}.prompt_length"),
        response_length=g(f"{rollout}.response_length"),
        update=update,
        lr=g(f"{actor}.optim.lr"),
        betas=tuple(g(f"{actor}.optim.betas")),
        weight_decay=g(f"{actor}.optim.weight_decay"),
        warmup_steps=warmup,
        total_steps=total_steps,
        total_epochs=epochs,
        save_freq=g("trainer.save_freq"),
        test_freq=g("trainer.test_freq"),
        val_before_train=reader.switch("trainer.val_before_train"),
        output_dir=g("trainer.default_local_dir"),
        project_name=g("trainer.project_name"),
        experiment_name=g("trainer.experiment_name"),
        loggers=tuple(g("trainer.logger")),
        resume_mode=g("trainer.resume_mode"),
        resume_from_path=g("trainer.resume_from_path"),
        reward_kwargs=g("reward.custom_reward_function.reward_kwargs"),
        batch_wait_s=g(f"{ENGINE_SECTION}.batch_wait_s"),
        num_threads=g(f"{ENGINE_SECTION}.num_threads"),
        trace_groups_per_step=g(f"{ENGINE_SECTION}.trace_groups_per_step"),
        filter_groups=FilterConfig(
            enable=reader.switch(f"{FILTER_SECTION}.enable"),
            metric=g(f"{FILTER_SECTION}.metric"),
            max_num_gen_batches=g(f"{FILTER_SECTION}.max_num_gen_batches"),
        ),
        guards=read_guards(_optional(reader, GUARDS_SECTION)),
        outcome_metric=_optional(reader, OUTCOME_KEY),
        lora=read_lora(g),
        **async_settings,
    )


def _with_correction(reader: RecipeReader, update: UpdateConfig, asynchronous: bool) -> UpdateConfig:
    """``update`` with the off-policy correction the recipe asks for (``ragym.off_policy_correction``: ``auto`` is on
    with async rollouts; the local engine's rollout is its own Hugging Face model)."""
    problems = correction_problems(reader.config)
    if problems:
        raise UsageError("\n".join(problems))
    for key in (VERL_LEVEL_KEY, IS_THRESHOLD_KEY):
        reader.get(key)
    setting = _optional(reader, CORRECTION_KEY) or "auto"
    level = correction_level(setting, asynchronous=asynchronous, rollout="hf")
    return dataclasses.replace(update, correction=level, is_threshold=float(reader.get(IS_THRESHOLD_KEY)))


def _async_settings(reader: RecipeReader) -> dict[str, Any]:
    """``async_rollouts`` and its staleness bound, read by verl's async modes' key (refused when not positive)."""
    if not reader.switch(f"{ENGINE_SECTION}.async_rollouts"):
        return {"async_rollouts": False, "staleness_bound": 0}
    bound = reader.get(STALENESS_KEY)
    problem = staleness_problem(bound)
    if problem is not None:
        raise UsageError(f"{ENGINE_SECTION}.async_rollouts=true needs a staleness bound: {problem}")
    return {"async_rollouts": True, "staleness_bound": bound}


def _optional(reader: RecipeReader, key: str) -> Any:
    """A ragym key a recipe may leave out (None then); read through ``reader`` when it is there."""
    return reader.get(key) if OmegaConf.select(reader.config, key, default=None) is not None else None
