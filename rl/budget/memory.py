"""GPU memory per GPU of a recipe under verl's FSDP trainer with a colocated vLLM rollout, full fine-tuning vs LoRA:
the arithmetic ``ragym budget memory`` prints.

Per GPU, with P the model's parameters, P_t the trainable ones (P, or the adapters' under LoRA), S the FSDP shards
(``fsdp_size``, every GPU by default), b the bytes of verl's ``model_dtype`` (fp32: 4), T the tokens of one
micro-batch on one GPU, L layers of width h, MLP width i, key/value width kv, vocabulary V:

- weights: P x b / S. verl keeps the sharded weights in ``model_dtype`` (fp32) and computes in bf16 (FSDP mixed
  precision), so the fp32 shards are the master weights: there is no second copy. LoRA keeps the frozen base too.
- gradients: P_t x b / S; Adam moments (exp_avg, exp_avg_sq): 2 x P_t x b / S.
- gathered FSDP units: 2 x P_layer x 2 (the decoder layer being computed and the one prefetched, in bf16).
- activations of one layer: T x (6h + 2kv + 4i) x 2 bytes (bf16 tensors autograd keeps: the layer input, the two
  norms' inputs and outputs, q, k, v and the attention output with flash attention's O(T) memory, the MLP's gate,
  up, SiLU(gate) and their product). Without gradient checkpointing L of them; with it (verl's default) the L layer
  inputs, L x T x h x 2, plus one layer's recomputed in the backward pass. LoRA keeps the same tensors (the
  adapters read the inputs the frozen layers would have saved) plus T x r per adapted layer (under 1%, left out).
- the vision tower: the micro-batch's images at the recipe's image budget, their pixel values and the tower's
  activations, trained (full fine-tuning) or frozen (LoRA with the tower excluded): ``ragym.rl.budget.vision``.
- logits: T x V x c bytes, c by the log-prob path (``LOGPROB_BYTES``): verl's (and ragym's) in-place path keeps the
  bf16 logits and one bf16 buffer of their size, the log-softmax's gradient (4); transformers' ``labels`` loss
  keeps the bf16 logits, their fp32 copy, the fp32 log-softmax and its fp32 gradient (14).
- rollout: vLLM takes ``gpu_memory_utilization`` x the GPU: its bf16 weights (P x 2 / TP, plus the adapter under
  LoRA) and a KV cache of what is left (at most: vLLM's own activations come out of it too), 2 x L x kv x 2 / TP
  bytes per token.

verl runs the two phases one after the other on the same GPUs: the rollout phase holds the FSDP weights and Adam
moments (unless ``param_offload`` / ``optimizer_offload`` move them to CPU) plus vLLM's share; the training phase
holds the FSDP state, gradients and activations while vLLM sleeps (``free_cache_engine``: no KV cache, its
weights off the GPU). A recipe fits when the larger phase fits the GPU. CUDA contexts and allocator fragmentation
(a few GiB) are not counted: keep that much headroom.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ragym.rl.budget.model_size import ModelShape
from ragym.rl.budget.vision import MicroBatchImages, micro_batch_images, vision_memory
from ragym.rl.errors import UsageError
from ragym.rl.recipe.counts import count_problem, count_problems

GIB = 2**30
ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}
"""Bytes per weight of verl's ``fsdp_config.model_dtype`` values."""
COUNTS = (
    "trainer.nnodes",
    "trainer.n_gpus_per_node",
    f"{ROLLOUT}.prompt_length",
    f"{ROLLOUT}.response_length",
    f"{ROLLOUT}.tensor_model_parallel_size",
)
"""Keys ``memory_settings`` reads as counts, whatever the micro-batch (``ragym.rl.recipe.counts``)."""
LOGPROB_BYTES = {"verl": 4, "labels": 14}
"""Bytes per logit the update keeps, by log-prob path: verl's actor (ragym's local engine too) takes log-probs of
the bf16 logits with an in-place backward (logits + their gradient, 2 + 2); transformers' ``labels`` loss upcasts
them (bf16 logits 2, fp32 copy 4, fp32 log-softmax 4, its fp32 gradient 4). Measured on an H200: 22.4 GiB more
for 16,384 x 152,064 logits through ``labels``, against 23.2 GiB by these figures (docs/training.md)."""


@dataclass(frozen=True)
class MemorySettings:
    """A recipe's knobs that size the memory of one GPU."""

    num_gpus: int
    """``trainer.nnodes`` x ``trainer.n_gpus_per_node``."""
    num_shards: int
    """FSDP shards of the weights, gradients and Adam moments (``fsdp_size``; -1: every GPU)."""
    weight_bytes: int
    """Bytes per sharded weight, gradient and moment (``fsdp_config.model_dtype``; fp32: 4)."""
    tokens: int
    """Tokens of one micro-batch on one GPU: ``ppo_max_token_len_per_gpu`` with ``use_dynamic_bsz``, else
    ``ppo_micro_batch_size_per_gpu`` x (prompt + response length) / Ulysses size."""
    tokens_source: str
    """Which knobs ``tokens`` comes from, for the report."""
    checkpointing: bool
    """``actor_rollout_ref.model.enable_gradient_checkpointing``."""
    param_offload: bool
    """``fsdp_config.param_offload``: the weights leave the GPU while vLLM generates."""
    optimizer_offload: bool
    """``fsdp_config.optimizer_offload``: the Adam moments leave the GPU while vLLM generates."""
    rollout_share: float
    """``rollout.gpu_memory_utilization``: vLLM's share of each GPU."""
    rollout_tp: int
    """``rollout.tensor_model_parallel_size``: vLLM shards its weights and KV cache over this many GPUs."""
    sequence_tokens: int
    """``rollout.prompt_length`` + ``rollout.response_length`` (``data.max_*`` by default): one episode at most, as
    verl's agent loop pads and cuts it."""
    images: MicroBatchImages
    """The micro-batch's images at the recipe's image budget (``ragym.rl.budget.vision``)."""
    freeze_vision_tower: bool
    """``actor_rollout_ref.model.freeze_vision_tower``: the tower stays frozen under full fine-tuning too."""
    logprob_path: str
    """How the update takes log-probs (a ``LOGPROB_BYTES`` key): verl's actor's path unless told otherwise."""


def memory_settings(
    config: DictConfig, num_images: int | None = None, logprob_path: str = "verl"
) -> MemorySettings:
    """The memory knobs of a composed recipe; ``num_images`` images per micro-batch (None: as many as fit) and the
    log-prob path (``LOGPROB_BYTES``)."""

    def get(key: str) -> Any:  # a config scalar (int, float, bool, str) or None
        return OmegaConf.select(config, key)

    micro_key = (
        f"{ACTOR}.ppo_max_token_len_per_gpu"
        if get(f"{ACTOR}.use_dynamic_bsz")
        else f"{ACTOR}.ppo_micro_batch_size_per_gpu"
    )
    problems = count_problems(config, [*COUNTS, micro_key], [f"{ACTOR}.ulysses_sequence_parallel_size"])
    shards_key = f"{ACTOR}.fsdp_config.fsdp_size"
    shards_problem = None if get(shards_key) == -1 else count_problem(shards_key, get(shards_key))
    if shards_problem is not None:
        problems.append(f"{shards_problem} (or -1: every GPU)")
    if problems:  # a zero divided the memory by it, a word or an unset micro-batch was a traceback
        raise UsageError("\n".join(problems))
    num_gpus = int(get("trainer.nnodes")) * int(get("trainer.n_gpus_per_node"))
    fsdp_size = int(get(f"{ACTOR}.fsdp_config.fsdp_size"))
    ulysses = int(get(f"{ACTOR}.ulysses_sequence_parallel_size") or 1)
    # The lengths the agent loop cuts and pads at (verl's rollout keys; data.max_* only set them by default).
    sequence = int(get(f"{ROLLOUT}.prompt_length")) + int(get(f"{ROLLOUT}.response_length"))
    if get(f"{ACTOR}.use_dynamic_bsz"):
        tokens, source = (
            int(get(f"{ACTOR}.ppo_max_token_len_per_gpu")),
            "ppo_max_token_len_per_gpu, use_dynamic_bsz",
        )
    else:
        micro = int(get(f"{ACTOR}.ppo_micro_batch_size_per_gpu"))
        tokens = micro * sequence // ulysses
        source = f"ppo_micro_batch_size_per_gpu {micro} x {sequence:,} prompt + response tokens / Ulysses {ulysses}"
    dtype = str(get(f"{ACTOR}.fsdp_config.model_dtype"))
    if dtype not in DTYPE_BYTES:
        raise UsageError(f"{ACTOR}.fsdp_config.model_dtype={dtype!r}: give one of {', '.join(DTYPE_BYTES)}")
    if logprob_path not in LOGPROB_BYTES:
        raise UsageError(f"log-prob path {logprob_path!r}: give one of {', '.join(LOGPROB_BYTES)}")
    return MemorySettings(
        num_gpus=num_gpus,
        num_shards=num_gpus if fsdp_size < 0 else fsdp_size,
        weight_bytes=DTYPE_BYTES[dtype],
        tokens=tokens,
        tokens_source=source,
        checkpointing=bool(get("actor_rollout_ref.model.enable_gradient_checkpointing")),
        param_offload=bool(get(f"{ACTOR}.fsdp_config.param_offload")),
        optimizer_offload=bool(get(f"{ACTOR}.fsdp_config.optimizer_offload")),
        rollout_share=float(get(f"{ROLLOUT}.gpu_memory_utilization")),
        rollout_tp=int(get(f"{ROLLOUT}.tensor_model_parallel_size")),
        sequence_tokens=sequence,
        images=micro_batch_images(config, tokens, num_images),
        freeze_vision_tower=bool(get("actor_rollout_ref.model.freeze_vision_tower")),
        logprob_path=logprob_path,
    )


@dataclass(frozen=True)
class GpuMemory:
    """One GPU's memory in bytes, by what holds it, for one way of training (full or LoRA)."""

    weights: float
    """The FSDP shard of every weight, in ``model_dtype``: P x b / S."""
    gradients: float
    """The shard of the trainable weights' gradients: P_t x b / S."""
    adam: float
    """AdamW's exp_avg and exp_avg_sq of the trainable weights: 2 x P_t x b / S."""
    gathered: float
    """Two decoder layers gathered in bf16 for compute: 2 x P_layer x 2."""
    activations: float
    """What autograd keeps over one micro-batch, as the recipe runs (checkpointed or not)."""
    activations_unchecked: float
    """What the activations would be without gradient checkpointing (reported, not in the phase totals when
    checkpointing is on)."""
    vision_inputs: float
    """The micro-batch's pixel values (``ragym.rl.budget.vision``)."""
    vision: float
    """The vision tower's activations, trained or frozen (``ragym.rl.budget.vision``)."""
    logits: float
    """What the log-prob path keeps of the micro-batch's logits: T x V x ``LOGPROB_BYTES``."""
    rollout: float
    """vLLM's share of the GPU: gpu_memory_utilization x the GPU."""
    rollout_weights: float
    """vLLM's bf16 weights (and adapters under LoRA) on this GPU."""
    kv_cache: float
    """What is left of vLLM's share for its KV cache, at most."""
    kv_tokens: int
    """KV-cache tokens vLLM can hold on this GPU (its share of the rollout's), at most."""

    @property
    def training(self) -> float:
        """The update: FSDP state, gradients, gathered units, activations, the vision tower's, and the logits (vLLM
        asleep)."""
        return (
            self.weights
            + self.gradients
            + self.adam
            + self.gathered
            + self.activations
            + self.vision_inputs
            + self.vision
            + self.logits
        )

    def rollout_phase(self, settings: MemorySettings) -> float:
        """Generation: vLLM's share and the FSDP state left on the GPU."""
        kept = (0.0 if settings.param_offload else self.weights) + (
            0.0 if settings.optimizer_offload else self.adam
        )
        return kept + self.rollout

    def peak(self, settings: MemorySettings) -> float:
        """The larger phase."""
        return max(self.training, self.rollout_phase(settings))


def layer_activation_bytes(shape: ModelShape, tokens: int) -> int:
    """Bytes autograd keeps for one decoder layer over ``tokens`` tokens: T x (6h + 2kv + 4i) x 2 (bf16)."""
    return tokens * (6 * shape.hidden_size + 2 * shape.kv_size + 4 * shape.intermediate_size) * 2


def gpu_memory(shape: ModelShape, settings: MemorySettings, gpu_bytes: float, lora: bool) -> GpuMemory:
    """One GPU's memory for full fine-tuning (``lora`` False) or the recipe's LoRA (the formulas above)."""
    trainable = shape.num_lora_params if lora else shape.num_params
    shards, b, tokens = settings.num_shards, settings.weight_bytes, settings.tokens
    layer = layer_activation_bytes(shape, tokens)
    unchecked = shape.num_layers * layer
    checked = shape.num_layers * tokens * shape.hidden_size * 2 + layer
    rollout = settings.rollout_share * gpu_bytes
    served = shape.num_params + (shape.num_lora_params if lora else 0)
    rollout_weights = served * 2 / settings.rollout_tp
    kv_cache = max(rollout - rollout_weights, 0.0)
    kv_per_token = 2 * shape.num_layers * shape.kv_size * 2 / settings.rollout_tp
    tower_trains = (shape.vision_lora if lora else True) and not settings.freeze_vision_tower
    vision = vision_memory(shape, settings.images, tower_trains, settings.checkpointing)
    return GpuMemory(
        weights=shape.num_params * b / shards,
        gradients=trainable * b / shards,
        adam=2 * trainable * b / shards,
        gathered=2 * shape.num_layer_params * 2,
        activations=checked if settings.checkpointing else unchecked,
        activations_unchecked=unchecked,
        vision_inputs=vision.inputs,
        vision=vision.activations,
        logits=tokens * shape.vocab_size * LOGPROB_BYTES[settings.logprob_path],
        rollout=rollout,
        rollout_weights=rollout_weights,
        kv_cache=kv_cache,
        kv_tokens=int(kv_cache // kv_per_token),
    )


def _gib(value: float) -> str:
    return f"{value / GIB:.2f}"


def memory_table(shape: ModelShape, settings: MemorySettings, gpu_gib: float, rank: int) -> tuple[str, dict]:
    """The per-GPU table, full fine-tuning vs LoRA of rank ``rank``, and its numbers (GiB) by row and column."""
    gpu = gpu_gib * GIB
    full, lora = (gpu_memory(shape, settings, gpu, adapters) for adapters in (False, True))
    shard = f"{settings.weight_bytes * 8}-bit, 1/{settings.num_shards} shard"
    tokens, keep = settings.tokens, [] if settings.param_offload else ["weights"]
    keep += [] if settings.optimizer_offload else ["Adam moments"]
    share = shape.num_lora_params / shape.num_params

    def kv(m: GpuMemory) -> str:
        return (
            f"{_gib(m.kv_cache)} ({m.kv_tokens:,} tokens, {m.kv_tokens // settings.sequence_tokens} episodes)"
        )

    def peak(m: GpuMemory) -> str:
        value = m.peak(settings)
        verdict = (
            f"fits ({_gib(gpu - value)} free)" if value <= gpu else f"does not fit ({_gib(value - gpu)} over)"
        )
        return f"{_gib(value)} {verdict}"

    checked = "checkpointed" if settings.checkpointing else "no checkpointing"
    images = settings.images
    patches = images.visual_tokens * shape.patches_per_token

    def tower(m: GpuMemory, trains: bool) -> str:
        return f"{_gib(m.vision)} ({checked if trains else 'frozen: one block at a time'})"

    full_trains = not settings.freeze_vision_tower
    lora_trains = shape.vision_lora and full_trains
    per_logit = LOGPROB_BYTES[settings.logprob_path]
    rows = [
        ("trainable parameters", f"{shape.num_params:,}", f"{shape.num_lora_params:,} ({share:.2%})"),
        (f"weights ({shard})", _gib(full.weights), _gib(lora.weights)),
        (f"gradients ({shard})", _gib(full.gradients), _gib(lora.gradients)),
        (f"Adam moments (2 x {shard})", _gib(full.adam), _gib(lora.adam)),
        ("gathered FSDP units (2 decoder layers, bf16)", _gib(full.gathered), _gib(lora.gathered)),
        (f"activations ({checked}, {tokens:,} tokens)", _gib(full.activations), _gib(lora.activations)),
        (
            "activations without checkpointing (not added)" if settings.checkpointing else "",
            _gib(full.activations_unchecked),
            _gib(lora.activations_unchecked),
        ),
        (
            f"vision inputs ({images.num_images} x {images.tokens_per_image:,}-token images: {patches:,} patches x "
            f"{shape.patch_values:,} x 4 B)",
            _gib(full.vision_inputs),
            _gib(lora.vision_inputs),
        ),
        ("vision tower activations", tower(full, full_trains), tower(lora, lora_trains)),
        (
            f"logits ({tokens:,} x {shape.vocab_size:,} x {per_logit} B, {settings.logprob_path} log-probs)",
            _gib(full.logits),
            _gib(lora.logits),
        ),
        ("**training phase**", _gib(full.training), _gib(lora.training)),
        (f"vLLM ({settings.rollout_share:.2f} x {gpu_gib:g} GiB)", _gib(full.rollout), _gib(lora.rollout)),
        (
            f"- its weights (bf16, TP {settings.rollout_tp}; LoRA: + adapters)",
            _gib(full.rollout_weights),
            _gib(lora.rollout_weights),
        ),
        ("- KV cache, at most", kv(full), kv(lora)),
        (
            f"**rollout phase** (vLLM + {' + '.join(keep) or 'nothing: both offloaded'})",
            _gib(full.rollout_phase(settings)),
            _gib(lora.rollout_phase(settings)),
        ),
        (f"**peak** of {gpu_gib:g} GiB", peak(full), peak(lora)),
    ]
    lines = [f"| GiB per GPU | full fine-tuning | LoRA rank {rank} |", "|---|---|---|"]
    lines += [f"| {name} | {a} | {b} |" for name, a, b in rows if name]
    numbers = {
        column: {
            "weights": m.weights / GIB,
            "gradients": m.gradients / GIB,
            "adam": m.adam / GIB,
            "gathered": m.gathered / GIB,
            "activations": m.activations / GIB,
            "logits": m.logits / GIB,
            "vision_inputs": m.vision_inputs / GIB,
            "vision": m.vision / GIB,
            "training": m.training / GIB,
            "rollout": m.rollout_phase(settings) / GIB,
            "peak": m.peak(settings) / GIB,
            "kv_tokens": m.kv_tokens,
            "fits": m.peak(settings) <= gpu,
        }
        for column, m in (("full", full), ("lora", lora))
    }
    return "\n".join(lines), numbers
