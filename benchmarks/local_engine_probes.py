"""Probes for ``benchmarks/local_engine.py``: a per-thread CPU clock with nested buckets, and a shadow generator.

``CpuClock`` charges thread CPU time (``time.thread_time``) to named buckets. Regions nest per thread: time a
region spends in a nested region is charged to the nested one only, so "agent loop" excludes the env and
server code it calls. Coroutines are charged per step (between awaits), so time an episode spends suspended
(waiting for the server's batch, for an executor thread) is charged to nothing.

``ShadowGenerator`` makes a randomly initialised, larger policy redo, teacher-forced, every batch the server
generates: same distinct prompts and images prefilled, one decode forward per generated token with the
tokens the real policy sampled. Its time is what that policy would spend generating these exact turns.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Coroutine, Generator
from typing import Any

import torch

from ragym.rl.core.hf_server import HFServer, sample_tokens


class CpuClock:
    """Thread CPU time per bucket, with nested regions charged exclusively (see the module doc)."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        self._totals: defaultdict[str, float] = defaultdict(float)

    def reset(self) -> None:
        """Zero every bucket."""
        with self._lock:
            self._totals.clear()

    def totals(self) -> defaultdict[str, float]:
        """Seconds per bucket so far."""
        with self._lock:
            return defaultdict(float, self._totals)

    def _enter(self) -> float:
        self._local.__dict__.setdefault("stack", []).append(0.0)
        return time.thread_time()

    def _exit(self, bucket: str, start: float) -> None:
        inclusive = time.thread_time() - start
        stack = self._local.stack
        nested = stack.pop()
        if stack:
            stack[-1] += inclusive
        with self._lock:
            self._totals[bucket] += inclusive - nested

    def call(self, bucket: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, its CPU time charged to ``bucket``."""
        start = self._enter()
        try:
            return fn(*args, **kwargs)
        finally:
            self._exit(bucket, start)

    def wrap(self, bucket: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` charged to ``bucket`` whenever (and on whichever thread) it runs."""
        return functools.partial(self.call, bucket, fn)

    async def coroutine(self, bucket: str, coro: Coroutine) -> Any:
        """Await ``coro``, charging each of its steps to ``bucket``."""
        return await _Stepped(self, bucket, coro)


class _Stepped:
    """Drives a coroutine step by step, timing each ``send``/``throw`` (an awaitable, like ``asyncio.Task`` does)."""

    def __init__(self, clock: CpuClock, bucket: str, coro: Coroutine) -> None:
        self.clock, self.bucket, self.coro = clock, bucket, coro

    def __await__(self) -> Generator[Any, Any, Any]:
        value, error = None, None
        while True:
            start = self.clock._enter()
            try:
                yielded = self.coro.send(value) if error is None else self.coro.throw(error)
            except StopIteration as stop:
                return stop.value
            finally:
                self.clock._exit(self.bucket, start)
            try:
                value, error = (yield yielded), None
            except BaseException as raised:  # cancellation and friends go to the driven coroutine
                value, error = None, raised


class ShadowGenerator:
    """Times a larger random-weight policy redoing each server batch, teacher-forced (see the module doc)."""

    def __init__(self, server: HFServer, shadow: HFServer) -> None:
        self.server, self.shadow = server, shadow
        self.seconds = 0.0
        self.num_params = sum(p.numel() for p in shadow.model.parameters())

    @classmethod
    def attach(cls, server: HFServer, size: str) -> ShadowGenerator:
        """Build a ``HIDDENxLAYERS`` policy with the server's token ids and hook it behind ``server._decode``."""
        hidden, layers = (int(part) for part in size.lower().split("x"))
        shadow = HFServer(
            _shadow_model(server.model, server.tokenizer, hidden, layers),
            server.tokenizer,
            server.image_inputs,
            default_max_tokens=server.default_max_tokens,
            batch_wait_s=0.0,
            seed=0,
        )
        probe = cls(server, shadow)
        decode = server._decode

        def decode_and_shadow(requests, sampling):
            outputs = decode(requests, sampling)
            start = time.perf_counter()
            probe.replay(requests, sampling, [o.token_ids for o in outputs])
            elapsed = time.perf_counter() - start
            probe.seconds += elapsed
            server.stats.generate_s -= elapsed  # the server's counter brackets this call: keep it honest
            return outputs

        server._decode = decode_and_shadow
        return probe

    def describe(self) -> str:
        """Size of the shadow policy in words."""
        config = self.shadow.model.config.text_config
        return f"hidden {config.hidden_size} x {config.num_hidden_layers} layers ({self.num_params / 1e6:.1f}M params)"

    @torch.inference_mode()
    def replay(self, requests: list[Any], sampling: Any, generated: list[list[int]]) -> None:
        """Prefill the distinct prompts, then one forward per generated token (what the server's loop does)."""
        logits, cache, attention, next_pos = self.shadow.prefill_shared(requests)  # as the server does
        num_rows, pad = len(generated), self.shadow.pad_id
        for step in range(max(map(len, generated)) - 1):
            sample_tokens(logits, sampling, self.shadow.generator)  # [B] the server samples every step
            token = torch.tensor([ids[step] if step < len(ids) else pad for ids in generated])  # [B]
            attention = torch.cat([attention, torch.ones((num_rows, 1), dtype=attention.dtype)], dim=1)
            positions = (next_pos + step).view(1, num_rows, 1).expand(3, -1, -1)  # [3, B, 1]
            logits = (
                self.shadow.model(
                    input_ids=token.view(num_rows, 1),
                    attention_mask=attention,
                    position_ids=positions,
                    past_key_values=cache,
                    use_cache=True,
                )
                .logits[:, -1]
                .float()
            )


def _shadow_model(model: torch.nn.Module, tokenizer: Any, hidden: int, layers: int) -> torch.nn.Module:
    """A random-weight policy of the same architecture and token ids, with a wider and deeper language model."""
    # The tiny-policy config builder keeps every special-token id and the vision tower's input format.
    from ragym.rl.tiny.policy import TinyPolicyConfig, model_config

    heads = max(1, hidden // 64)
    config = TinyPolicyConfig(
        hidden_size=hidden,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=max(1, heads // 2),
        intermediate_size=4 * hidden,
    )
    root = model_config(model.config.model_type, config, tokenizer)
    torch.manual_seed(0)
    return type(model)(root).to(torch.float32).eval()
