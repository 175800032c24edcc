"""An in-process Hugging Face generation server with verl's server-manager ``generate`` signature.

The agent loop awaits ``generate(request_id, prompt_ids=..., sampling_params=..., image_data=...)`` once
per turn, from many episodes at once. Requests that arrive together are decoded as one batch: identical
prompts (the G episodes of a GRPO group on their first turn) are prefilled once and their KV cache is
expanded to G rows, which is what makes a step cheap on CPU. Each episode the caller announces with
``track_episodes`` is awaited before a batch starts, so a batch holds every live episode's turn.

A server made ``abortable`` (verl's rollout server, ``ragym.rl.verl_plugin.rollout``) decodes in a worker thread, so
that ``abort`` can stop the turns in flight between two tokens: each returns what it generated so far with
``stop_reason="aborted"``, the way vLLM's server does for verl's partial rollouts.

Sampling draws from the server's seeded generator, in an order fixed by the batch's content; a request whose
``sampling_params`` carry a ``seed`` (vLLM's per-request seed) draws from its own generator instead, so its
tokens do not depend on which other requests share its batch.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, cast

import torch
from transformers import DynamicCache, PreTrainedModel
from verl.workers.rollout.replica import TokenOutput

from ragym.rl.core.vision import ImageInputs, image_key, rope_positions

logger = logging.getLogger(__name__)

_KNOWN_PARAMS = {
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "max_new_tokens",
    "stop",
    "stop_token_ids",
    "include_stop_str_in_output",
    "logprobs",
    "repetition_penalty",
    "seed",
}


@dataclass(frozen=True)
class Sampling:
    """One request's sampling parameters (vLLM names), validated once at the edge."""

    temperature: float
    """Softmax temperature; 0 means greedy."""
    top_p: float
    """Nucleus mass kept (1.0 keeps everything)."""
    top_k: int
    """Most likely tokens kept (-1 or 0 keeps everything)."""
    max_tokens: int
    """Generated-token budget of this request."""
    stop: tuple[str, ...]
    """Strings that end generation; the token completing one is kept in the output (token ids always
    include it, as vLLM's do; ``include_stop_str_in_output`` only changes vLLM's text, which is not returned)."""
    stop_token_ids: tuple[int, ...]
    """Token ids that end generation (in addition to the model's EOS ids); kept in the output."""

    @classmethod
    def from_params(cls, params: dict[str, Any], default_max_tokens: int) -> Sampling:
        """Parse verl/vLLM ``sampling_params``; unsupported values are an error naming the key."""
        unknown = set(params) - _KNOWN_PARAMS
        if unknown:
            logger.warning("hf_server ignores sampling params %s", sorted(unknown))
        if float(params.get("repetition_penalty", 1.0)) != 1.0:
            raise ValueError("hf_server does not implement repetition_penalty != 1.0")
        stop = params.get("stop") or ()
        max_tokens = params.get("max_tokens", params.get("max_new_tokens")) or default_max_tokens
        return cls(
            temperature=float(params.get("temperature", 1.0)),
            top_p=float(params.get("top_p", 1.0)),
            top_k=int(params.get("top_k", -1)),
            max_tokens=int(max_tokens),
            stop=(stop,) if isinstance(stop, str) else tuple(stop),
            stop_token_ids=tuple(params.get("stop_token_ids") or ()),
        )


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: Sampling
    images: list[Any]
    future: asyncio.Future
    request_id: str
    generator: torch.Generator | None
    """The request's own generator (its ``seed``), or None: the server's."""


@dataclass
class ServerStats:
    """Counters the trainer and the benchmark read (reset with ``reset``)."""

    generate_s: float = 0.0
    """Wall time spent inside batched prefill + decode."""
    num_batches: int = 0
    num_requests: int = 0
    num_prefill_rows: int = 0
    """Distinct prompts prefilled (identical prompts share one row)."""
    num_generated_tokens: int = 0

    def reset(self) -> None:
        """Zero every counter."""
        self.__init__()


class HFServer:
    """Batched sampling from an in-process HF vision-language model; returns verl ``TokenOutput``s."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: Any,
        image_inputs: ImageInputs,
        *,
        default_max_tokens: int,
        batch_wait_s: float,
        seed: int,
        abortable: bool = False,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.image_inputs = image_inputs
        self.default_max_tokens = default_max_tokens
        self.batch_wait_s = batch_wait_s
        self.generator = torch.Generator().manual_seed(seed)
        eos = model.generation_config.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos])
        self.banned_ids = torch.tensor(vision_placeholder_ids(model.config))  # [P]
        self.pad_id = tokenizer.pad_token_id
        self.stats = ServerStats()
        self._pending: list[_Request] = []
        self._live = 0
        self._arrived: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self.abortable = abortable
        self.aborting = threading.Event()
        """Set by ``abort``: the batch in flight stops at its next token, and queued requests return unstarted."""
        self.decoding = threading.Lock()
        """Held while a batch decodes: whoever changes the weights takes it first (no turn sees two versions)."""
        self.weight_version: int | None = None
        """The weights' version (verl's ``global_steps``), tagged on every output of an abortable server's batch."""

    # --- episode accounting: a batch starts once every live episode has asked or finished ---
    def track_episodes(self, num_episodes: int) -> None:
        """Announce ``num_episodes`` episodes that will call ``generate`` until ``episode_done``."""
        self._live += num_episodes

    def episode_done(self) -> None:
        """One tracked episode finished; it will not ask again."""
        self._live -= 1
        if self._arrived is not None:
            self._arrived.set()

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: list[Any] | None = None,
        **kwargs: Any,
    ) -> TokenOutput:
        """Sample one turn for ``prompt_ids`` (images in placeholder order); verl's server-manager signature."""
        loop = asyncio.get_running_loop()
        sampling = Sampling.from_params(sampling_params, self.default_max_tokens)
        seed = sampling_params.get("seed")
        generator = None if seed is None else torch.Generator().manual_seed(int(seed))
        request = _Request(
            list(prompt_ids), sampling, list(image_data or []), loop.create_future(), request_id, generator
        )
        self._pending.append(request)
        if self._arrived is None:
            self._arrived = asyncio.Event()
        self._arrived.set()
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._serve())
        return await request.future

    async def _serve(self) -> None:
        """Collect requests until every live episode has asked (or ``batch_wait_s``), then decode them."""
        while self._pending:
            deadline = time.monotonic() + self.batch_wait_s
            await asyncio.sleep(0)
            arrived = self._arrived
            assert arrived is not None  # generate creates it before it starts this worker
            while len(self._pending) < self._live and time.monotonic() < deadline:
                arrived.clear()
                try:
                    await asyncio.wait_for(arrived.wait(), timeout=deadline - time.monotonic())
                except TimeoutError:
                    logger.warning(
                        "hf_server: %d of %d episodes asked in time", len(self._pending), self._live
                    )
            batch, self._pending = self._pending, []
            try:
                if self.abortable:  # the event loop stays free to take ``abort`` while the batch decodes
                    outputs = await asyncio.to_thread(self._generate_batch, batch)
                else:
                    outputs = self._generate_batch(batch)
            except Exception as error:  # every waiting episode must see the failure, not hang
                for request in batch:
                    request.future.set_exception(error)
                continue
            for request, output in zip(batch, outputs, strict=True):
                request.future.set_result(output)

    async def abort(self) -> None:
        """Stop every turn in flight at its next token and return queued ones unstarted (``stop_reason`` "aborted");
        returns once nothing decodes."""
        self.aborting.set()
        try:
            await self.drain()
        finally:
            self.aborting.clear()

    async def drain(self) -> None:
        """Wait until every request taken so far has its output."""
        while self._worker is not None and not self._worker.done():
            await asyncio.sleep(0.01)

    def _generate_batch(self, batch: list[_Request]) -> list[TokenOutput]:
        """Decode every request of ``batch``, one sub-batch per distinct sampling configuration, under the
        weights' lock; each output is tagged with the weights' version."""
        with self.decoding:
            outputs = self._generate_locked(batch)
        # verl's rollout server: every output names its weights (None before the first sync).
        if self.abortable:
            for output in outputs:
                output.extra_fields = {**output.extra_fields, "global_steps": self.weight_version}
        return outputs

    def _generate_locked(self, batch: list[_Request]) -> list[TokenOutput]:
        if self.aborting.is_set():  # aborted before it began: nothing generated, all to be resumed
            return [TokenOutput(token_ids=[], log_probs=[], stop_reason="aborted") for _ in batch]
        start = time.perf_counter()
        outputs: list[TokenOutput | None] = [None] * len(batch)
        by_sampling: dict[Sampling, list[int]] = {}
        for i, request in enumerate(batch):
            by_sampling.setdefault(request.sampling, []).append(i)

        # Requests sorted by content, then request id (the G identical prompts of a group), and sub-batches in
        # the order of their first request, so the generator is consumed in the same order whatever order the
        # requests arrived in (request ids are deterministic under ``rollout.full_determinism``).
        def order(i: int) -> tuple:
            return len(batch[i].prompt_ids), batch[i].prompt_ids, batch[i].request_id

        for indices in by_sampling.values():
            indices.sort(key=order)
        for sampling, indices in sorted(by_sampling.items(), key=lambda item: order(item[1][0])):
            results = self._decode([batch[i] for i in indices], sampling)
            for i, result in zip(indices, results, strict=True):
                outputs[i] = result
        self.stats.generate_s += time.perf_counter() - start
        self.stats.num_batches += 1
        self.stats.num_requests += len(batch)
        return cast(list[TokenOutput], outputs)  # each index is in one sub-batch: no slot is left None

    @torch.inference_mode()
    def _decode(self, requests: list[_Request], sampling: Sampling) -> list[TokenOutput]:
        """Prefill each distinct prompt once, expand the cache to one row per request, then sample."""
        logits, cache, attention, next_pos = self.prefill_shared(requests)
        own = [request.generator for request in requests]
        generator: torch.Generator | list[torch.Generator] = self.generator
        if any(g is not None for g in own):  # row by row only when some request brought its own seed
            generator = [self.generator if g is None else g for g in own]
        return self._sample_loop(logits, cache, attention, next_pos, sampling, generator)

    def prefill_shared(self, requests: list[Any]) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor]:
        """Prefill each distinct (prompt, images) once and expand the results to one row per request: the
        last logits [B, V], the KV cache, the attention mask [B, T] and each row's next position [B]."""
        unique: dict[tuple, int] = {}  # (prompt ids, image keys) -> prefill row
        prompts: list[Any] = []
        rows_of: list[int] = []
        for request in requests:
            key = (tuple(request.prompt_ids), tuple(map(image_key, request.images)))
            if key not in unique:
                unique[key] = len(prompts)
                prompts.append(request)
            rows_of.append(unique[key])
        rows = torch.tensor(rows_of)  # [B] request -> prefilled row
        logits, cache, attention, next_pos = self._prefill(prompts)
        for layer in cache.layers:
            # A DynamicCache's layers are DynamicLayers, which have it; transformers types the list by the mixins.
            layer.batch_select_indices(rows)  # pyright: ignore[reportAttributeAccessIssue]
        self.stats.num_prefill_rows += len(prompts)
        return logits[rows], cache, attention[rows], next_pos[rows]

    def _prefill(
        self, prompts: list[_Request]
    ) -> tuple[torch.Tensor, DynamicCache, torch.Tensor, torch.Tensor]:
        """Left-padded forward over the distinct prompts; returns last logits, cache, mask, next positions."""
        length = max(len(p.prompt_ids) for p in prompts)
        input_ids = torch.full((len(prompts), length), self.pad_id, dtype=torch.long)  # [U, L]
        attention = torch.zeros((len(prompts), length), dtype=torch.long)  # [U, L]
        for row, prompt in enumerate(prompts):
            input_ids[row, length - len(prompt.prompt_ids) :] = torch.tensor(prompt.prompt_ids)
            attention[row, length - len(prompt.prompt_ids) :] = 1
        vision = self.image_inputs.encode([img for p in prompts for img in p.images])
        positions = rope_positions(
            self.model, input_ids, attention, vision.get("image_grid_thw")
        )  # [3, U, L]
        cache = DynamicCache(config=self.model.config)
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
            **vision,
        )
        next_pos = positions.amax(dim=(0, 2)) + 1  # [U]
        return out.logits[:, -1].float(), out.past_key_values, attention, next_pos

    def _sample_loop(
        self,
        logits: torch.Tensor,
        cache: DynamicCache,
        attention: torch.Tensor,
        next_pos: torch.Tensor,
        sampling: Sampling,
        generator: torch.Generator | list[torch.Generator],
    ) -> list[TokenOutput]:
        """Sample (from ``generator``: ``sample_tokens``) until every row hit EOS, a stop token/string or its
        budget."""
        num_rows = logits.shape[0]
        tokens: list[list[int]] = [[] for _ in range(num_rows)]
        logprobs: list[list[float]] = [[] for _ in range(num_rows)]
        done = [False] * num_rows
        stop_ids = self.eos_ids | set(sampling.stop_token_ids)
        window = max((len(s) for s in sampling.stop), default=0) + 2
        for step in range(sampling.max_tokens):
            token, logprob = sample_tokens(logits, sampling, generator, self.banned_ids)  # [B], [B]
            for row in range(num_rows):
                if done[row]:
                    continue
                tokens[row].append(int(token[row]))
                logprobs[row].append(float(logprob[row]))
                if int(token[row]) in stop_ids or self._hit_stop(tokens[row], sampling.stop, window):
                    done[row] = True
            if all(done) or step + 1 == sampling.max_tokens or self.aborting.is_set():
                break
            attention = torch.cat([attention, torch.ones((num_rows, 1), dtype=attention.dtype)], dim=1)
            positions = (next_pos + step).view(1, num_rows, 1).expand(3, -1, -1)  # [3, B, 1]
            out = self.model(
                input_ids=token.view(num_rows, 1),
                attention_mask=attention,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
            )
            logits = out.logits[:, -1].float()
        self.stats.num_generated_tokens += sum(map(len, tokens))
        return [
            TokenOutput(token_ids=ids, log_probs=lps, stop_reason="completed" if finished else "aborted")
            for ids, lps, finished in zip(
                tokens, logprobs, self._finished(done, tokens, sampling), strict=True
            )
        ]

    def _finished(self, done: list[bool], tokens: list[list[int]], sampling: Sampling) -> list[bool]:
        """Per row: whether its turn ended (a stop or its budget) rather than by ``abort``."""
        return [
            d or len(t) >= sampling.max_tokens or not self.aborting.is_set()
            for d, t in zip(done, tokens, strict=True)
        ]

    def _hit_stop(self, ids: list[int], stop: tuple[str, ...], window: int) -> bool:
        """Whether the text of the last ``window`` tokens now contains a stop string."""
        if not stop:
            return False
        tail = self.tokenizer.decode(ids[-window:], skip_special_tokens=False)
        return any(s in tail for s in stop)


def _without(logits: torch.Tensor, banned: torch.Tensor | None) -> torch.Tensor:
    """A copy of ``logits`` [B, V] with the ``banned`` ids [P] at -inf."""
    return logits.clone() if banned is None else logits.index_fill(-1, banned, float("-inf"))


def vision_placeholder_ids(config: Any) -> list[int]:
    """Token ids a policy must never sample: the image and video placeholders, which mean something only with
    an image or video behind them (a sampled one breaks the pairing of placeholders with ``image_grid_thw`` in
    every later forward pass, verl #7038). verl's vLLM server masks the same ids."""
    return [config.image_token_id, config.video_token_id]


def sample_tokens(
    logits: torch.Tensor,
    sampling: Sampling,
    generator: torch.Generator | list[torch.Generator],
    banned: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row of ``logits`` [B, V] from ``generator`` (one for the batch, or one per row),
    never one of the ``banned`` ids [P]; returns ids [B] and their log-probs under temperature over the whole
    vocabulary (what the trainer recomputes: a banned id only leaves the draw, not the distribution scored)."""
    if sampling.temperature <= 0:
        token = _without(logits, banned).argmax(dim=-1)
        return token, torch.log_softmax(logits, dim=-1).gather(-1, token[:, None]).squeeze(-1)
    scaled = logits / sampling.temperature
    logprobs = torch.log_softmax(scaled, dim=-1)  # [B, V] what the trainer recomputes
    filtered = _without(scaled, banned)
    if 0 < sampling.top_k < filtered.shape[-1]:
        kth = filtered.topk(sampling.top_k, dim=-1).values[:, -1:]
        filtered[filtered < kth] = float("-inf")
    if sampling.top_p < 1.0:
        sorted_logits, order = filtered.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop = cumulative - sorted_logits.softmax(dim=-1) >= sampling.top_p  # keep the token crossing p
        filtered.scatter_(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    probs = filtered.softmax(dim=-1)  # [B, V]
    if isinstance(generator, torch.Generator):
        token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    else:  # each row draws from its own generator: a row's token does not depend on the rows beside it
        token = torch.cat(
            [torch.multinomial(row[None], 1, generator=g)[0] for row, g in zip(probs, generator, strict=True)]
        )
    return token, logprobs.gather(-1, token[:, None]).squeeze(-1)
