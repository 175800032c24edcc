"""The verl agent loop that drives any registered ragym environment (``agent_name: ragym_env``).

Per episode: the row's ``extra_info`` names the env and its reset options; the env's system prompt and
first observation form the prompt; then each turn the model generates (token ids in, token ids out,
stopping at the env's stop strings), the decoded text goes to ``env.step``, and the next observation
(text + images) is appended as context tokens with mask 0. Response ids are exactly the generated ids
plus those context tokens; nothing generated is re-tokenized. The env's events, the turn texts and
per-episode metrics travel in ``extra_fields``, which verl's reward loop merges into the reward's
``extra_info``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

from omegaconf import DictConfig
from PIL import Image
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    DictConfigWrap,
    register,
)
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.utils.profiler import simple_timer
from verl.utils.rollout_trace import rollout_trace_op
from verl.workers.rollout.replica import TokenOutput

from ragym.data_prep.rows import AGENT_NAME
from ragym.envs import events as ev
from ragym.envs.image_ref import ImageRef, image_ref
from ragym.envs.metrics import episode_metrics
from ragym.envs.registry import make_env
from ragym.rl.agent_loop.observations import EpisodeSpec, observation_message
from ragym.rl.agent_loop.render_cache import RenderCache
from ragym.rl.errors import one_line
from ragym.rl.recipe.env_settings import recipe_env_settings, turn_cap_problem
from ragym.rl.recipe.images import apply_recipe_images
from ragym.rl.recipe.retrieval import recipe_retrieval_url

logger = logging.getLogger(__name__)
_WARNED: set[str] = set()


def _warn_once(problem: str | None) -> None:
    """Log a settings problem once per process (every episode of a run would repeat it)."""
    if problem is not None and problem not in _WARNED:
        _WARNED.add(problem)
        logger.warning("%s", problem)


MAX_CACHED_RENDERS = 4096
"""Renders (conversation -> token ids) the render cache keeps: first prompts of live groups, turn prefixes."""

TURN_VERSIONS = "turn_weight_versions"
"""``extra_fields`` key: per generated turn, the (first, last) weight versions the server tagged it with."""
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
"""Tokens only the processor may place: a turn is cut before the first one the model generates."""


@dataclass
class _Episode:
    """Mutable rollout state of one episode."""

    messages: list[dict[str, Any]]
    images: list[Image.Image]
    image_refs: list[ImageRef]
    """``images`` by reference, in the same order: what leaves the loop beside verl's ``multi_modal_data``."""
    runtime_ids: list[int]
    request_id: str
    response_logprobs: list[float] | None
    """None when the sampling params do not ask for logprobs."""
    response_mask: list[int] = field(default_factory=list)
    turns: list[str] = field(default_factory=list)
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    """Response positions [start, end) each generated turn was appended at, in turn order (turn-level credit)."""
    events: list[dict[str, Any]] = field(default_factory=list)
    observations: list[dict[str, Any]] = field(default_factory=list)
    """Each observation put in context (the task first): its text and image count, for ``ragym view``."""
    truncated: bool = False
    failed: bool = False
    """The env raised (an ``episode_error`` event): no token of the episode trains the policy."""
    metrics: dict[str, Any] = field(default_factory=dict)
    server_fields: dict[str, Any] = field(default_factory=dict)
    """What the generation server tagged the turns with: the weights' steps (``global_steps``, and the
    ``min_global_steps`` / ``max_global_steps`` across turns that verl's v1 trainer reads per trajectory)."""


class RagymEnvAgentLoop(AgentLoopBase):
    """Multi-turn rollouts of a ragym env: generated tokens mask 1, observation tokens mask 0."""

    tokenizer: Any
    """The policy's tokenizer. verl annotates it ``AutoTokenizer``, the factory, which has none of a tokenizer's
    methods; ``PreTrainedTokenizerBase``'s have no overloads (one token's id is typed ``int | list[int]``)."""

    keep_image_pixels: bool = False
    """Whether images referred to by content alone (``ragym.envs.image_ref``) stay in this process's image cache
    for the output's consumer: the local engine's trainer, in this process (``make_agent_loop``). Under verl the
    consumer is verl's worker, which takes ``multi_modal_data``'s pixels, so the cache holds no second copy."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # verl also passes its tool list (``tools=``); ragym's tools are the env's actions, so it is unused.
        super().__init__(*args, **kwargs)
        self.response_length: int = self.rollout_config.response_length
        self.max_turns: int | None = self.rollout_config.multi_turn.max_assistant_turns
        self._stop_ids = {self.tokenizer.convert_tokens_to_ids("<|im_end|>"), self.tokenizer.eos_token_id}
        self._im_end_id = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self._vision_ids = {self.tokenizer.convert_tokens_to_ids(token) for token in VISION_TOKENS}
        # Same token ids as verl's processor path, without re-running image preprocessing every turn.
        self.render_cache = RenderCache.install(self.continuous_token_builder, MAX_CACHED_RENDERS)
        self._full_determinism = bool(self.rollout_config.full_determinism)  # read once: OmegaConf is slow
        self._retrieval_url = recipe_retrieval_url(self.config)  # the recipe's service, for envs that search
        self._images = apply_recipe_images(self.config)  # the recipe's image budget; sizes the image cache
        self._env_settings = recipe_env_settings(self.config)  # the recipe's ragym.env (Rej_max)

    @rollout_trace_op
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Run one episode of the env the row names and return verl's output for it."""
        # verl's helpers run tokenization on ``self.loop``; an in-process caller may construct the loop once
        # and run episodes under several event loops, so bind it to the one running this episode.
        self.loop = asyncio.get_running_loop()
        spec = EpisodeSpec.from_extra_info(dict(kwargs["extra_info"]))
        request_id = _deterministic_request_id(spec.seed, kwargs) if self._full_determinism else uuid4().hex
        try:
            env, obs, info = await self._start(spec)
        except Exception as err:  # noqa: BLE001 - a row whose env cannot start is an error episode, not a dead run
            return await self._failed_start(spec, err, request_id, sampling_params)
        try:
            first, images = observation_message(obs, turn=-1)
        except ValueError as err:  # a first observation the policy cannot be shown: the env's bug, recorded
            env.close()
            return await self._failed_start(spec, err, request_id, sampling_params)
        messages = [{"role": "system", "content": env.system_prompt}, first]
        self._assert_mm_supported(bool(images))
        prompt_ids = await self._prompt_ids(messages, images)
        if len(prompt_ids) > self.rollout_config.prompt_length:
            env.close()
            error = ValueError(self._prompt_problem(prompt_ids))
            return await self._failed_start(spec, error, request_id, sampling_params, cut="max_prompt_length")
        logprobs = [] if sampling_params.get("logprobs") else None
        refs = await self._image_refs(obs["images"])
        episode = _Episode(
            messages, images, refs, list(prompt_ids), request_id, logprobs, events=info["events"]
        )
        episode.observations.append({"text": obs["text"], "num_images": len(images)})
        params = {**sampling_params, "stop": list(env.stop_strings), "include_stop_str_in_output": True}
        try:
            await self._play(env, episode, params)
        finally:
            env.close()
        return self._output(episode, spec.env_id)

    async def _start(self, spec: EpisodeSpec) -> tuple[Any, dict[str, Any], dict[str, Any]]:
        """Build the row's env and reset it: (env, first observation, info)."""
        env = make_env(
            spec.env_id, **spec.recipe_env_kwargs(self._retrieval_url, self._images, self._env_settings)
        )
        _warn_once(turn_cap_problem(spec.env_id, env, self.max_turns))
        try:
            obs, info = await self._in_executor(
                functools.partial(env.reset, seed=spec.seed, options=spec.env_options)
            )
        except BaseException:
            env.close()
            raise
        return env, obs, info

    async def _prompt_ids(self, messages: list[dict[str, Any]], images: list[Image.Image]) -> list[int]:
        """The episode's prompt ids, whole: verl's ``ct_build_initial_tokens`` fails on a multimodal prompt over
        ``rollout.prompt_length`` (the whole rollout with it) and cuts a text one from its start, system prompt
        first, with no trace in the episode; ``run`` records such a prompt instead."""
        build = functools.partial(
            self.continuous_token_builder.build_initial_tokens, messages, images=images or None
        )
        return list(await self._in_executor(build))

    def _prompt_problem(self, prompt_ids: list[int]) -> str:
        """Why a prompt does not fit, with its size (of which visual) and the key to raise."""
        visual = sum(t in self._vision_ids for t in prompt_ids)
        return (
            f"the prompt is {len(prompt_ids)} tokens ({visual} visual), over actor_rollout_ref.rollout.prompt_length "
            f"{self.rollout_config.prompt_length} (data.max_prompt_length); raise it or lower the image budget "
            "(ragym.images)"
        )

    async def _failed_start(
        self,
        spec: EpisodeSpec,
        err: Exception,
        request_id: str,
        sampling_params: dict[str, Any],
        cut: str | None = None,
    ) -> AgentLoopOutput:
        """An error episode for a row whose env could not be built or reset, or whose prompt does not fit (``cut``,
        the length: recorded as a ``truncated`` event too): a placeholder prompt, one generated token (the server
        tags it with the weights' step, as every trajectory needs), all mask 0."""
        error = one_line(err)
        logger.warning(
            "row %s (%s): the env could not start, recorded as an error episode: %s",
            spec.seed,
            spec.env_id,
            error,
        )
        messages = [{"role": "user", "content": f"(no episode: {spec.env_id} could not start: {error})"}]
        prompt_ids = await self.ct_build_initial_tokens(messages)
        logprobs = [] if sampling_params.get("logprobs") else None
        episode = _Episode(
            messages,
            [],
            [],
            list(prompt_ids),
            request_id,
            logprobs,
            events=[ev.episode_error(-1, "reset", error), *([ev.truncated(-1, cut)] if cut else [])],
            truncated=cut is not None,
            failed=True,
        )
        params = {**sampling_params, "max_tokens": 1}
        output: TokenOutput = await self.server_manager.generate(
            request_id=request_id, prompt_ids=episode.runtime_ids, sampling_params=params, image_data=None
        )
        _merge_server_fields(episode, output)
        token_ids = list(output.token_ids[:1]) or [self._im_end_id]
        episode.runtime_ids = [*episode.runtime_ids, *token_ids]
        episode.response_mask = [0] * len(token_ids)
        if logprobs is not None:
            episode.response_logprobs = [0.0] * len(token_ids)
        return self._output(episode, spec.env_id)

    async def _play(self, env: Any, episode: _Episode, sampling_params: dict[str, Any]) -> None:
        """Alternate generation and env steps until the env ends the episode or a budget does."""
        while True:
            token_ids, cut = await self._generate(episode, sampling_params)
            text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
            episode.turns.append(text)
            # A cut turn the env never sees (docs/rewards.md): the rewards judge it by its text.
            if cut is not None:
                return self._truncate(episode, len(episode.turns) - 1, cut)
            turn = len(episode.turns) - 1
            try:
                with simple_timer("tool_calls", episode.metrics):
                    obs, _, terminated, truncated, info = await self._in_executor(env.step, text)
            except Exception as err:  # noqa: BLE001 - a step the env cannot take ends the episode, recorded
                return self._env_error(episode, turn, "env.step raised", err)
            episode.events = info["events"]
            if terminated or truncated:
                episode.truncated = bool(truncated)
                return
            if self.max_turns is not None and len(episode.turns) >= self.max_turns:
                return self._truncate(episode, turn, "max_turns")
            if len(episode.response_mask) >= self.response_length:
                return self._truncate(episode, turn, "max_response_length")
            try:
                message, images = observation_message(obs, turn)
            except ValueError as err:
                # An observation the policy cannot be shown (image markers without their images, text the
                # tokenizer refuses) is the env's bug, like a step that raised: this episode ends, the run goes on.
                return self._env_error(episode, turn, "the env's observation cannot be shown", err)
            overflow = await self._append_observation(episode, obs, message, images, token_ids, turn)
            if overflow is not None:
                return self._truncate(episode, turn, "max_response_length", *overflow)

    async def _generate(
        self, episode: _Episode, sampling_params: dict[str, Any]
    ) -> tuple[list[int], str | None]:
        """One assistant turn, appended with mask 1 and its logprobs: (the ids kept, why it was cut: a generated
        vision token, or the response length filled before a stop token or string; None when it ended)."""
        params = {**sampling_params, "max_tokens": self.response_length - len(episode.response_mask)}
        with simple_timer("generate_sequences", episode.metrics):
            output: TokenOutput = await self.server_manager.generate(
                request_id=episode.request_id,
                prompt_ids=episode.runtime_ids,
                sampling_params=params,
                image_data=list(episode.images) or None,
            )
        if episode.response_logprobs is not None and output.log_probs is None:
            raise ValueError("logprobs were requested but the server returned none")
        _merge_server_fields(episode, output)
        # A generated vision token would desynchronise placeholders and images in every later forward pass.
        keep = next(
            (i for i, t in enumerate(output.token_ids) if t in self._vision_ids), len(output.token_ids)
        )
        token_ids = list(output.token_ids[:keep])
        # verl's ct_merge_* helpers, inline: a merge costs less than their executor-thread hand-off.
        builder = self.continuous_token_builder
        start = len(episode.response_mask)
        merged = builder.merge_assistant_tokens(episode.runtime_ids, token_ids)
        mask, logprobs = builder.align_response_metadata(
            merged,
            episode.response_mask,
            episode.response_logprobs,
            # The server returned logprobs when they were requested (checked above).
            assistant_logprobs=output.log_probs[:keep]
            if episode.response_logprobs is not None and output.log_probs is not None
            else None,
        )
        episode.runtime_ids, episode.response_mask, episode.response_logprobs = (
            merged.token_ids,
            mask,
            logprobs,
        )
        episode.turn_spans.append((start, len(mask)))
        if keep < len(output.token_ids):
            return token_ids, "generated_vision_token"
        if len(token_ids) >= params["max_tokens"] and token_ids[-1] not in self._stop_ids:
            text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
            if not any(stop in text for stop in params.get("stop", ())):
                return token_ids, "max_response_length"
        return token_ids, None

    def _env_error(self, episode: _Episode, turn: int, what: str, err: Exception) -> None:
        """End the episode at ``turn`` as an error episode: the env failed, not the policy (nothing trains on it)."""
        logger.warning("%s at turn %d, recorded as an error episode: %s", what, turn, one_line(err))
        episode.events = [*episode.events, ev.episode_error(turn, "step", one_line(err))]
        episode.failed = True

    async def _append_observation(
        self,
        episode: _Episode,
        obs: dict[str, Any],
        message: dict[str, Any],
        images: list[Any],
        token_ids: list[int],
        turn: int,
    ) -> tuple[int, int] | None:
        """Append the observation (``message`` and its ``images``) as mask-0 context; when it would not fit with
        room for one more generated token, append nothing and return its size:
        (tokens, of which visual), so the truncation names what the env's observation and its images cost."""
        self._assert_mm_supported(bool(images))
        previous = [*episode.messages, {"role": "assistant", "content": episode.turns[-1]}]
        runtime, mask, logprobs = episode.runtime_ids, episode.response_mask, episode.response_logprobs
        if not token_ids or token_ids[-1] not in self._stop_ids:
            # A stop string ended the turn: close it as the template would, as context (mask 0).
            runtime, mask = [*runtime, self._im_end_id], [*mask, 0]
            logprobs = None if logprobs is None else [*logprobs, 0.0]
        # Inline (see ``_generate``): with the render cache this is a template lookup, no image preprocessing.
        builder = self.continuous_token_builder
        merged = builder.merge_context_tokens(previous, [*previous, message], runtime)
        mask, logprobs = builder.align_response_metadata(merged, mask, logprobs)
        # An observation that leaves no token for the next turn does not fit either.
        if len(mask) >= self.response_length:
            added = merged.token_ids[len(runtime) :]
            return len(added), sum(t in self._vision_ids for t in added)
        episode.messages = [*previous, message]
        episode.runtime_ids, episode.response_mask = merged.token_ids, mask
        episode.response_logprobs = logprobs
        episode.images.extend(images)
        episode.image_refs.extend(await self._image_refs(obs["images"]))
        episode.observations.append({"text": obs["text"], "num_images": len(images)})
        return None

    def _truncate(
        self,
        episode: _Episode,
        turn: int,
        reason: str,
        observation_tokens: int | None = None,
        visual_tokens: int | None = None,
    ) -> None:
        """End the episode on a loop budget, recorded as a ``truncated`` event the rewards can see (with the size
        of the observation that did not fit, when one did not)."""
        episode.events = [*episode.events, ev.truncated(turn, reason, observation_tokens, visual_tokens)]
        episode.truncated = True

    def _output(self, episode: _Episode, env_id: str) -> AgentLoopOutput:
        """verl's output: prompt, response (generated + context tokens), mask, logprobs, images, extra fields."""
        if episode.failed:
            # The rubric scores an error episode 0 for the env's failure, not the policy's: nothing it
            # generated gets that as an advantage.
            episode.response_mask = [0] * len(episode.response_mask)
        num_response = len(episode.response_mask)
        response_ids = episode.runtime_ids[len(episode.runtime_ids) - num_response :]
        prompt_ids = episode.runtime_ids[: len(episode.runtime_ids) - num_response]
        extra_fields = {
            "events": episode.events,
            "turns": episode.turns,
            "observations": episode.observations,
            "truncated": episode.truncated,
            "episode_metrics": episode_metrics(env_id, episode.events),
            "env_id": env_id,
            # The context's images by reference (ragym.envs.image_ref), for consumers that hold no pixels: the
            # local engine's batch and traces. verl's own hops take the pixels of multi_modal_data (docs/training.md).
            "image_refs": episode.image_refs,
            "turn_ids": _turn_ids(episode.turn_spans, episode.response_mask),
            "turn_scores": [],
            "tool_rewards": [],
            **episode.server_fields,
        }
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=episode.response_mask,
            response_logprobs=episode.response_logprobs,
            multi_modal_data={"images": episode.images} if episode.images else {},
            num_turns=_num_turns(episode.messages),
            metrics=AgentLoopMetrics.model_validate(episode.metrics),  # what pydantic does with the dict
            extra_fields=extra_fields,
        )

    async def _image_refs(self, images: Any) -> list[ImageRef]:
        """References to an observation's images, digested off the event loop (11 MB an episode at the 7B recipe's
        budget; hashing releases the GIL)."""
        if not len(images):
            return []
        keep = self.keep_image_pixels
        return await self._in_executor(lambda: [image_ref(image, keep) for image in images])

    async def _in_executor(self, fn: Any, *args: Any) -> Any:
        """Run blocking env code off the event loop so concurrent episodes keep generating."""
        return await self.loop.run_in_executor(None, fn, *args)


# Registered here, not with @register: verl types its decorator as returning type[AgentLoopBase], which would hide
# this class's own attributes (``keep_image_pixels``) from type checkers.
register(AGENT_NAME)(RagymEnvAgentLoop)


def _num_turns(messages: list[dict[str, Any]]) -> int:
    """Turns as verl's own multi-turn loop counts them (``user_turns + assistant_turns + 1``, tool_agent_loop.py):
    the prompt, every observation after it, every generated turn; the system prompt is none. The last generated
    turn is never in ``messages`` (each is added with the observation that follows it), hence the + 1."""
    return sum(message["role"] != "system" for message in messages) + 1


def _turn_ids(spans: list[tuple[int, int]], mask: list[int]) -> list[int]:
    """Per response token: the turn that generated it (mask 1 inside that turn's span), else -1."""
    ids = [-1] * len(mask)
    for turn, (start, end) in enumerate(spans):
        for position in range(start, min(end, len(mask))):
            if mask[position]:
                ids[position] = turn
    return ids


def _deterministic_request_id(row_index: int, kwargs: dict[str, Any]) -> str:
    """A request id that names the sample the same way in every run: verl's legacy worker gives each sample a
    unique ``priority``; its v1 worker passes none, but numbers a row's G samples (``session_id``)."""
    if "priority" in kwargs:
        return f"det-{int(kwargs['priority'])}"
    return f"det-{row_index}-{int(kwargs['session_id'])}"


def _merge_server_fields(episode: _Episode, output: TokenOutput) -> None:
    """Carry the server's tags into the episode as verl's own loops do: the first turn's fields, then the
    latest weights' step as ``max_global_steps``; each turn's (first, last) weight versions, which differ for a
    turn aborted at a weight update and resumed on the new weights (``turn_weight_versions``, when the server tags
    versions); preemptions summed into the metrics."""
    fields = output.extra_fields
    step = fields.get("global_steps")
    turn = [fields.get("min_global_steps", step), fields.get("max_global_steps", step)]
    if not episode.server_fields:
        episode.server_fields = {
            **fields,
            "min_global_steps": turn[0],
            "max_global_steps": turn[1],
        }
    elif turn[1] is not None:
        episode.server_fields["max_global_steps"] = turn[1]
    if turn[0] is not None:
        episode.server_fields.setdefault(TURN_VERSIONS, []).append(turn)
    preempted = output.num_preempted if output.num_preempted is not None else 0
    previous = episode.metrics.get("num_preempted")
    if previous is None:
        episode.metrics["num_preempted"] = output.num_preempted if output.num_preempted is not None else -1
    else:
        episode.metrics["num_preempted"] = previous + preempted


def make_agent_loop(config: DictConfig, server: Any, tokenizer: Any, processor: Any) -> RagymEnvAgentLoop:
    """The agent loop in-process, without Ray: for the local engine, evaluation and tests.

    ``config`` is the composed verl config (``actor_rollout_ref.rollout`` and ``data`` are read);
    ``server`` has verl's ``generate(request_id=, prompt_ids=, sampling_params=, image_data=) -> TokenOutput``.
    """
    loop = RagymEnvAgentLoop(
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=processor,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        hf_model_type=processor.config.model_type if processor is not None else None,
    )
    loop.keep_image_pixels = True  # the caller holds the outputs' images by reference (ragym.envs.image_ref)
    return loop
