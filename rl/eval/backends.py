"""Generation backends for ``ragym eval``: vLLM when installed, the local engine's in-process HF server otherwise.

A backend is an object with verl's server-manager method ``generate(request_id=, prompt_ids=,
sampling_params=, image_data=) -> TokenOutput`` plus the episode accounting ``run_episodes`` calls
(``track_episodes``, ``episode_done``, ``stats.generate_s``), and the tokenizer and processor the agent
loop needs. ``ragym.rl.eval.evaluate`` takes any such backend, so tests can inject a scripted one.
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ragym.rl.core.hf_server import HFServer, ServerStats
from ragym.rl.core.vision import ImageInputs
from ragym.rl.errors import UsageError
from ragym.rl.eval.args import BACKENDS
from ragym.rl.lora import is_adapter_dir
from ragym.rl.models import load_policy, load_processor


@dataclass
class Backend:
    """A generation server with the tokenizer and processor of the model it serves."""

    server: Any
    """verl-style ``generate`` plus ``track_episodes``/``episode_done``/``stats``."""
    tokenizer: Any
    """The model's tokenizer (the agent loop tokenizes observations with it)."""
    processor: Any
    """The model's processor (image placeholders, M-RoPE positions)."""
    name: str
    """``vllm``, ``hf`` or a test double's name."""


def choose_backend(requested: str) -> str:
    """Resolve ``auto``: vLLM needs both the package and a CUDA device."""
    if requested not in BACKENDS:
        raise ValueError(f"unknown backend {requested!r}; expected one of {BACKENDS}")
    if requested != "auto":
        return requested
    import torch

    return "vllm" if importlib.util.find_spec("vllm") is not None and torch.cuda.is_available() else "hf"


def hf_backend(
    model_dir: str | Path,
    response_length: int,
    batch_wait_s: float,
    seed: int,
    mm_processor_kwargs: dict[str, Any] | None = None,
) -> Backend:
    """The policy in this process (CPU or one GPU) behind the local engine's batching HF server; images are
    preprocessed with the recipe's ``mm_processor_kwargs`` (the pixel range the agent loop renders with)."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model, tokenizer, processor = load_policy(model_dir, dtype=dtype, device=device)
    model.eval()
    server = HFServer(
        model,
        tokenizer,
        ImageInputs(processor.image_processor, mm_processor_kwargs),
        default_max_tokens=response_length,
        batch_wait_s=batch_wait_s,
        seed=seed,
    )
    return Backend(server, tokenizer, processor, "hf")


class VLLMServer:
    """vLLM's async engine behind verl's ``generate`` signature, the way verl's own vLLM server calls it."""

    def __init__(
        self,
        model_dir: str,
        processor: Any,
        max_model_len: int,
        gpu_memory_utilization: float,
        mm_processor_kwargs: dict[str, Any] | None = None,
    ) -> None:
        from vllm import AsyncEngineArgs, AsyncLLMEngine

        self.processor = processor
        self.max_model_len = max_model_len
        args = AsyncEngineArgs(
            model=model_dir,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            limit_mm_per_prompt={"image": 64},
            mm_processor_kwargs=mm_processor_kwargs or None,
        )
        self.engine = AsyncLLMEngine.from_engine_args(args)
        self.stats = ServerStats()

    def track_episodes(self, num_episodes: int) -> None:
        """vLLM batches continuously: nothing to announce."""

    def episode_done(self) -> None:
        """vLLM batches continuously: nothing to release."""

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: list[Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """One turn: token ids in, token ids out (images re-expanded by vLLM from deduplicated placeholders)."""
        from verl.workers.rollout.replica import TokenOutput
        from verl.workers.rollout.utils import qwen2_5_vl_dedup_image_tokens
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = dict(sampling_params)
        budget = self.max_model_len - len(prompt_ids)
        max_tokens = max(1, min(int(params.pop("max_tokens", budget)), budget))
        params["logprobs"] = 0 if params.pop("logprobs", False) else None
        ids = qwen2_5_vl_dedup_image_tokens(list(prompt_ids), self.processor)
        # vLLM imports NotRequired from typing (Python 3.11+): checked for 3.10, every key reads as required.
        prompt = TokensPrompt(  # pyright: ignore[reportCallIssue]
            prompt_token_ids=ids, multi_modal_data={"image": image_data} if image_data else {}
        )
        start, final = time.perf_counter(), None
        async for output in self.engine.generate(
            prompt, SamplingParams(max_tokens=max_tokens, **params), request_id
        ):
            final = output
        self.stats.generate_s += time.perf_counter() - start
        assert final is not None  # vLLM yields at least the finished output
        completion = final.outputs[0]
        log_probs = None
        if params["logprobs"] is not None:
            assert completion.logprobs is not None  # requested above
            log_probs = []
            for t, lp in zip(completion.token_ids, completion.logprobs, strict=True):
                # Every sampled position has its logprobs (only a prompt's first position has none).
                assert lp is not None
                log_probs.append(lp[t].logprob)
        return TokenOutput(token_ids=list(completion.token_ids), log_probs=log_probs, stop_reason="completed")


def vllm_backend(
    model_dir: str | Path,
    max_model_len: int,
    gpu_memory_utilization: float,
    mm_processor_kwargs: dict[str, Any] | None = None,
) -> Backend:
    """The policy served by vLLM on the local GPU(s), preprocessing images with ``mm_processor_kwargs``."""
    if is_adapter_dir(model_dir):
        raise UsageError(
            f"--backend vllm serves full models; {model_dir} is a LoRA adapter folder: export the "
            "checkpoint with `ragym export --merge`, or evaluate it with --backend hf"
        )
    processor = load_processor(model_dir)
    server = VLLMServer(str(model_dir), processor, max_model_len, gpu_memory_utilization, mm_processor_kwargs)
    return Backend(server, processor.tokenizer, processor, "vllm")
