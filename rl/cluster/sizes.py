"""Cluster sizes, checked before a job leaves: what verl 0.9.1 (and the vLLM server it starts) would reject at run
time for a recipe on ``trainer.nnodes`` x ``trainer.n_gpus_per_node`` GPUs, found without GPUs, every problem at once.

verl checks a part of this in the job's driver (``validate_config``, one problem at a time); the rest are
assertions in its workers and servers that fire once the model is loaded, or at the first update. Each rule below
names the check it mirrors (paths inside the installed ``verl`` and ``vllm`` packages); docs/cluster.md has the
table. The actor rules are FSDP's (every ragym recipe's strategy); Megatron's are left to verl's own
``validate_config``, which ``ragym submit`` runs after these. The prompt side of a sequence is taken at its cap,
``rollout.prompt_length``, which verl's agent loop enforces; the response side at ``rollout.response_length``,
which a policy can always fill with its own text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from ragym.envs.image_budget import visual_tokens
from ragym.rl.budget.prompts import LongestPrompt
from ragym.rl.errors import UsageError
from ragym.rl.recipe.counts import count_problems

ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
REF = "actor_rollout_ref.ref"
FSDP_STRATEGIES = ("fsdp", "fsdp2")
COUNTS = (
    "trainer.nnodes",
    "trainer.n_gpus_per_node",
    "trainer.total_epochs",
    "data.train_batch_size",
    f"{ROLLOUT}.n",
    f"{ACTOR}.ppo_mini_batch_size",
    f"{ROLLOUT}.prompt_length",
    f"{ROLLOUT}.response_length",
    f"{ROLLOUT}.tensor_model_parallel_size",
    f"{ROLLOUT}.data_parallel_size",
    f"{ROLLOUT}.pipeline_model_parallel_size",
    f"{ROLLOUT}.max_num_batched_tokens",
    f"{ROLLOUT}.max_num_seqs",
    f"{ACTOR}.ppo_max_token_len_per_gpu",
    f"{ROLLOUT}.log_prob_max_token_len_per_gpu",
    f"{REF}.log_prob_max_token_len_per_gpu",
)
"""Sizes the rules below read (and the run's epochs): each a whole number of at least 1, checked before any rule
divides by one."""
OPTIONAL_COUNTS = (
    "trainer.total_training_steps",
    f"{ACTOR}.ulysses_sequence_parallel_size",
    f"{ACTOR}.fsdp_config.ulysses_sequence_parallel_size",
    f"{ACTOR}.ppo_micro_batch_size",
    f"{ACTOR}.ppo_micro_batch_size_per_gpu",
    f"{ROLLOUT}.log_prob_micro_batch_size",
    f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu",
    f"{REF}.log_prob_micro_batch_size",
    f"{REF}.log_prob_micro_batch_size_per_gpu",
    f"{ROLLOUT}.max_model_len",
)
"""Sizes that may also be null (not set: verl derives them or goes without), and the run's steps (null: epochs)."""


@dataclass(frozen=True)
class Layout:
    """The GPUs a job gets, and how verl's FSDP engine splits them."""

    nnodes: int
    gpus_per_node: int
    ulysses: int
    """The actor's Ulysses sequence-parallel size: GPUs that share one sequence."""

    @property
    def num_gpus(self) -> int:
        """Every GPU of the job (verl's actor, rollout and reference share them)."""
        return self.nnodes * self.gpus_per_node

    @property
    def data_parallel(self) -> int:
        """Data-parallel ranks of the actor (``get_data_parallel_size``: GPUs / Ulysses size)."""
        return self.num_gpus // self.ulysses

    def describe(self) -> str:
        """``4 x 8 = 32 GPUs``."""
        return f"{self.nnodes} x {self.gpus_per_node} = {self.num_gpus} GPUs"


def layout(config: DictConfig) -> Layout:
    """The recipe's cluster size and the actor's Ulysses size (the actor's own, copied to its engine's when above 1
    by ``FSDPActorConfig.__post_init__``; otherwise the engine's)."""
    actor = OmegaConf.select(config, ACTOR)
    ulysses = int(actor.get("ulysses_sequence_parallel_size") or 1)
    if ulysses <= 1:
        ulysses = int(OmegaConf.select(actor, "fsdp_config.ulysses_sequence_parallel_size", default=1) or 1)
    return Layout(int(config.trainer.nnodes), int(config.trainer.n_gpus_per_node), ulysses)


def _padded_trajectories(config: DictConfig, at: Layout) -> int:
    """Trajectories in a step's batch after verl pads it to a multiple of the data-parallel size and of each
    update's trajectories (``_get_required_batch_multiple``, verl/trainer/ppo/v1/trainer_base.py)."""
    from verl.trainer.ppo.utils import need_critic

    n = int(config.actor_rollout_ref.rollout.n)
    multiple = math.lcm(at.data_parallel, int(config.actor_rollout_ref.actor.ppo_mini_batch_size) * n)
    if need_critic(config):
        multiple = math.lcm(multiple, int(config.critic.ppo_mini_batch_size) * n)
    return -(-int(config.data.train_batch_size) * n // multiple) * multiple


def _micro(
    section: str, name: str, config: DictConfig, share: int, what: str, *, per_gpu_only: bool
) -> list[str]:
    """A micro-batch size pair (``name`` deprecated, ``name_per_gpu``) under fixed-size batches: set once
    (``check_mutually_exclusive``, verl/utils/config.py and workers/config/actor.py), as the per-GPU key where
    ``per_gpu_only`` (verl's engine workers read no other: ``ActorRolloutRefWorker.init_model``,
    verl/workers/engine_workers.py), and dividing each GPU's ``share`` (``prepare_micro_batches``,
    verl/workers/engine/utils.py)."""
    node = OmegaConf.select(config, section)
    deprecated, per_gpu = node.get(name), node.get(f"{name}_per_gpu")
    key = f"{section}.{name}_per_gpu"
    if deprecated is not None and per_gpu is not None:
        return [
            f"{section}.{name} and {key} are both set: verl refuses that; remove {section}.{name} (deprecated)"
        ]
    if per_gpu is None and (deprecated is None or per_gpu_only):
        found = (
            f"only the deprecated {section}.{name} is set, which verl 0.9.1's workers never read"
            if (deprecated is not None)
            else f"{key} is not set"
        )
        return [
            f"{found}, and use_dynamic_bsz is false: verl's workers need it; set {key} to a divisor of {share}"
        ]
    if per_gpu is not None and share % int(per_gpu):
        return [
            f"{key} {per_gpu} does not divide the {share} {what}: verl's micro-batch split asserts it; "
            f"use a divisor of {share}"
        ]
    return []


def batch_problems(config: DictConfig, at: Layout) -> list[str]:
    """Batch sizes against the data-parallel size, and micro-batches (fixed-size) or token budgets (dynamic)."""
    from verl.trainer.ppo.utils import need_reference_policy

    actor, rollout = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    if actor.strategy not in FSDP_STRATEGIES:
        return []
    n, prompts, mini = int(rollout.n), int(config.data.train_batch_size), int(actor.ppo_mini_batch_size)
    gpus, sp, dp = at.num_gpus, at.ulysses, at.data_parallel
    if gpus % sp:  # verl/workers/engine/fsdp/transformer_impl.py, _init_device_mesh: a (dp, sp) mesh
        return [
            f"{ACTOR}.ulysses_sequence_parallel_size {sp} does not divide the {at.describe()}: verl's FSDP "
            f"engine cannot build its (data, sequence) device mesh; use a size that divides {gpus}"
        ]
    problems = []
    if mini * n % dp:  # verl/workers/engine_workers.py, train_mini_batch
        problems.append(
            f"{ACTOR}.ppo_mini_batch_size x rollout.n = {mini} x {n} = {mini * n} trajectories per "
            f"update is not a multiple of the data-parallel size {dp} ({gpus} GPUs / Ulysses {sp}): "
            "verl's train_mini_batch asserts it; choose a ppo_mini_batch_size that makes it one"
        )
    use_ref = need_reference_policy(config)
    if bool(actor.use_dynamic_bsz) != bool(rollout.log_prob_use_dynamic_bsz):  # engine_workers.py, init_model
        problems.append(
            f"{ACTOR}.use_dynamic_bsz is {actor.use_dynamic_bsz} but {ROLLOUT}.log_prob_use_dynamic_bsz "
            "is not: verl's workers assert they agree; set both the same"
        )
    if actor.use_dynamic_bsz:
        return problems + _token_budgets(config, at, use_ref)
    if prompts * n % gpus:  # verl/utils/config.py, validate_config (minimal_bsz = n_gpus under FSDP)
        problems.append(
            f"data.train_batch_size x rollout.n = {prompts} x {n} = {prompts * n} trajectories per step "
            f"is not a multiple of the {gpus} GPUs, and use_dynamic_bsz is false: verl's validate_config "
            "refuses it; choose a train_batch_size that makes it one"
        )
    if prompts < mini:  # verl/workers/config/actor.py, ActorConfig.validate
        problems.append(
            f"data.train_batch_size {prompts} is below {ACTOR}.ppo_mini_batch_size {mini}: verl's "
            "actor config refuses it; lower ppo_mini_batch_size"
        )
    if mini * n % dp == 0:
        problems += _micro(
            ACTOR,
            "ppo_micro_batch_size",
            config,
            mini * n // dp,
            "trajectories of each GPU's share of an update",
            per_gpu_only=True,
        )
    share = _padded_trajectories(config, at) // dp
    problems += _micro(
        ROLLOUT,
        "log_prob_micro_batch_size",
        config,
        share,
        "trajectories each GPU scores per step",
        per_gpu_only=True,
    )
    if use_ref:
        problems += _micro(
            REF,
            "log_prob_micro_batch_size",
            config,
            share,
            "trajectories each GPU scores per step",
            per_gpu_only=False,
        )
    return problems


def _token_budgets(config: DictConfig, at: Layout, use_ref: bool) -> list[str]:
    """Dynamic batches: one micro-batch must hold the longest sequence (``rearrange_micro_batches``,
    verl/utils/seqlen_balancing.py), up to ``prompt_length + response_length`` tokens."""
    rollout = config.actor_rollout_ref.rollout
    longest = int(rollout.prompt_length) + int(rollout.response_length)
    keys = [f"{ACTOR}.ppo_max_token_len_per_gpu", f"{ROLLOUT}.log_prob_max_token_len_per_gpu"]
    keys += [f"{REF}.log_prob_max_token_len_per_gpu"] if use_ref else []
    problems = []
    for key in keys:
        budget = int(OmegaConf.select(config, key))
        if budget * at.ulysses < longest:
            problems.append(
                f"{key} {budget} x Ulysses {at.ulysses} is below the longest sequence, prompt_length + "
                f"response_length = {longest} tokens: verl's dynamic micro-batching asserts one "
                f"sequence fits; raise it to at least {-(-longest // at.ulysses)}"
            )
    return problems


def rollout_problems(config: DictConfig, at: Layout) -> list[str]:
    """The rollout's GPUs per replica (tensor x data x pipeline parallel) against the nodes' GPUs."""
    rollout = config.actor_rollout_ref.rollout
    sizes = {
        "tensor_model_parallel_size": int(rollout.tensor_model_parallel_size),
        "data_parallel_size": int(rollout.data_parallel_size),
        "pipeline_model_parallel_size": int(rollout.pipeline_model_parallel_size),
    }
    world = math.prod(sizes.values())
    named = " x ".join(f"{ROLLOUT}.{k} {v}" for k, v in sizes.items() if v > 1 or k.startswith("tensor"))
    replica = f"a rollout replica of {world} GPUs ({named})"
    node = at.gpus_per_node
    if rollout.name == "hf" and world != 1:  # ragym.rl.verl_plugin.rollout.HFRolloutReplica.launch_servers
        return [f"{replica}: ragym's hf rollout serves one model per GPU; set the parallel sizes to 1"]
    problems = []
    if at.num_gpus % world:  # verl/workers/engine_workers.py, init_model: the rollout device mesh
        problems.append(
            f"{replica} does not divide the {at.describe()}: verl's rollout workers assert it; use a "
            f"tensor_model_parallel_size that divides {at.num_gpus}"
        )
    elif world <= node and node % world:  # verl/workers/rollout/replica.py: placed by GPU index, on one node
        problems.append(
            f"{replica} does not divide the {node} GPUs of a node: a replica would straddle two nodes, "
            f"which verl starts as a one-node server; use a tensor_model_parallel_size that divides {node}"
        )
    if world > node and world % node:  # verl/workers/rollout/replica.py, RolloutReplica.__init__
        problems.append(
            f"{replica} spans nodes but is not a multiple of the {node} GPUs of a node: verl's rollout "
            "replica asserts it; use a multiple of the GPUs per node"
        )
    return problems


def _largest_image_tokens(config: DictConfig) -> int | None:
    """Visual tokens of the largest image vLLM's processor makes (``max_pixels``), or None without an image range."""
    from ragym.rl.budget.tokens import pixel_rule

    pixels = pixel_rule(config, None)
    side = math.isqrt(pixels.max_pixels) // pixels.factor * pixels.factor
    return visual_tokens(side, side, pixels.factor) if side else None


def length_problems(config: DictConfig, prompt: LongestPrompt | None) -> list[str]:
    """The longest prompt against ``prompt_length``; vLLM's context and batch token budget against what it gets."""
    rollout = config.actor_rollout_ref.rollout
    prompt_length, response_length = int(rollout.prompt_length), int(rollout.response_length)
    problems = []
    if prompt is not None and prompt.tokens > prompt_length:
        # ragym.rl.agent_loop.loop: an error episode (verl's own helper raises for a multimodal prompt, cuts a text one)
        problems.append(
            f"the longest prompt ragym budget counts is {prompt.tokens} tokens ({prompt.describe()}), "
            f"over {ROLLOUT}.prompt_length {prompt_length} (data.max_prompt_length): the agent loop "
            "records every episode of a row over it as an error episode, which trains nothing; raise "
            "data.max_prompt_length (and max_model_len with it) or lower the image budget (ragym.images)"
        )
    if rollout.name != "vllm":
        return problems
    # A DictConfig's container is a dict (to_container's type also covers lists and scalars).
    vllm = cast(dict[str, Any], OmegaConf.to_container(rollout.engine_kwargs.vllm, resolve=True) or {})
    context, batched, seqs = (
        rollout.max_model_len,
        int(rollout.max_num_batched_tokens),
        int(rollout.max_num_seqs),
    )
    if context is not None and int(context) < prompt_length + response_length:
        # verl/workers/rollout/vllm_rollout/vllm_async_server.py, generate: "leaves no room to generate"
        problems.append(
            f"{ROLLOUT}.max_model_len {context} is below prompt_length + response_length = "
            f"{prompt_length} + {response_length} = {prompt_length + response_length}, the longest context "
            "the agent loop sends vLLM: verl's vLLM server fails a request with no room left to "
            f"generate; set max_model_len to at least {prompt_length + response_length}"
        )
    if batched < seqs:  # vllm/config/scheduler.py, SchedulerConfig.verify_max_model_len
        problems.append(
            f"{ROLLOUT}.max_num_batched_tokens {batched} is below max_num_seqs {seqs}: vLLM refuses to "
            f"start; raise max_num_batched_tokens to at least {seqs}"
        )
    largest = _largest_image_tokens(config) if vllm.get("disable_chunked_mm_input") else None
    if (
        largest is not None and batched < largest
    ):  # vllm/v1/core/encoder_cache_manager.py, compute_mm_encoder_budget
        problems.append(
            f"{ROLLOUT}.max_num_batched_tokens {batched} is below the {largest} tokens of the largest "
            "image, and engine_kwargs.vllm.disable_chunked_mm_input is set: vLLM refuses to start; raise "
            f"max_num_batched_tokens to at least {largest}"
        )
    return problems


def size_problems(config: DictConfig, prompt: LongestPrompt | None = None) -> list[str]:
    """Every size the recipe gets wrong for its cluster, one line each (what is wrong; what to do); a size that is
    not a count (``COUNTS``) is the only problem said, as the rules would divide by it."""
    counts = count_problems(config, COUNTS, OPTIONAL_COUNTS)
    if counts:
        return counts
    at = layout(config)
    return [*batch_problems(config, at), *rollout_problems(config, at), *length_problems(config, prompt)]


def check_sizes(config: DictConfig, prompt: LongestPrompt | None = None) -> Layout:
    """Raise a ``UsageError`` listing every size problem (one line each); the layout when there is none."""
    problems = size_problems(config, prompt)
    if problems:
        raise UsageError("\n".join(problems))
    return layout(config)
