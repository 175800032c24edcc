"""Supervised warm start on env-generated trajectories of a noisy scripted expert.

A randomly initialised tiny policy never emits a well-formed turn, so every GRPO group would score the
same and teach nothing. The demo therefore first imitates ``ragym.envs.kbvqa.policies.SignaturePolicy`` whose
verification decisions are replaced by a random other candidate with probability ``noise`` and by a needless
Reject with probability ``reject_noise`` (the demo's expert is over-cautious): the warm-started policy knows
the grammar and the protocol but verifies badly, which GRPO then has to fix from reward alone. The decision
token is up-weighted in the loss, and every epoch draws the expert's noise afresh.
Trajectories are tokenized by the same agent loop that GRPO uses (a replay server returns the expert's
turn texts as "generated" tokens), so masks and context tokens are exactly those of a real rollout.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
import torch
from verl.workers.rollout.replica import TokenOutput

from ragym.envs.kbvqa.policies import SignaturePolicy
from ragym.envs.registry import make_env
from ragym.envs.scripted import run_episode
from ragym.rl.core.grpo import Sample, response_log_probs
from ragym.rl.core.rollout import row_kwargs
from ragym.rl.core.vision import ImageInputs
from ragym.rl.errors import UsageError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WarmStartConfig:
    """How many expert episodes, how noisy, and how long to imitate them."""

    num_episodes: int
    """Training rows turned into expert episodes."""
    noise: float
    """Probability that a verification decision is replaced by a random wrong candidate."""
    reject_noise: float
    """Probability that the expert rejects a batch that holds the match. The demo's is high (an over-cautious
    expert): the warm-started policy's likeliest decision is then Reject() even on a match, and GRPO has to
    learn from reward that confirming pays."""
    protocol_share: float
    """Share of rows that also get an episode of the noiseless expert whose decision tokens are left out of
    the loss: they teach what follows a confirmation (text search, answer), which an over-cautious expert
    rarely reaches, without teaching its decisions. Without them the few confirmations GRPO samples end in
    malformed turns, the binary format reward punishes them, and confirming never pays."""
    decision_weight: float
    """Loss weight of the decision token (the first token after ``<rerank>``) relative to other tokens: the
    one token that matters is otherwise drowned by the formulaic rest of the turn."""
    epochs: int
    """Passes over the rows (the KB-VQA demo draws fresh expert noise each pass; the R3G demo replays the same
    noise branches, weighted by their probabilities)."""
    batch_size: int
    """Episodes per optimiser step."""
    lr: float
    """AdamW learning rate."""
    seed: int
    """Expert noise and shuffling seed."""
    copy_weight: float = 1.0
    """Loss weight of the generated tokens inside the copy spans ``imitate`` is given (the demo's: a SearchText
    call and an answer, where the policy copies a name or a value from an observation) relative to other
    tokens; the expert's episodes have few such tokens among many formulaic ones."""
    quote: bool = False
    """The expert's reason quotes the observation where its action's name or value is (``quoted``): the words
    before it, then it, so the copy into the reason continues a phrase of the context (what induction heads
    learn) and the action then copies from a few tokens back."""
    context_weight: float = 0.0
    """Loss weight of the observation tokens (the env's text between turns; the generated tokens weigh 1): the
    next-token loss a pretrained model has had on all text. The env's text repeats names (a candidate, its
    confirmation, its passage's title and first words), so it holds many copies to learn copying from."""
    lr_decay: bool = False
    """Decay the learning rate linearly to 0 over the imitation steps. With a constant rate and small batches,
    a decision whose targets conflict (a noisy expert) ends wherever the last few batches pushed it."""
    soft_decisions: bool = False
    """Imitate both of the expert's branches at a batch holding the match (confirm, and the needless Reject),
    each weighted by its probability, instead of one sampled branch: the exact expectation over
    ``reject_noise``, so the policy's P(confirm) is the expert's odds, not the share of its last draws that
    confirmed (docs/results.md: why the demo's learning was fragile). Needs ``noise`` 0."""
    swap_values: float = 0.0
    """Share of expert episodes whose copyable values (``ValueSwap``: the words of the KB's names, the answers) are
    each replaced throughout the episode, prompt and turns alike, by another value of the same kind drawn at random.
    The copies stay copies, while a prior over the training set's values (a name or region the last batches held,
    a frequent one) predicts nothing. No shipped task sets it: on the answer task, with a decaying rate, it
    rescued the stopped warm starts measured and stopped others (docs/results.md, the answer task). 0: every
    episode as the expert played it."""
    init_from: str | None = None
    """A finished warm start (a folder with ``warm_start.json``) this imitation continues from, on this run's
    own prompts, instead of the copy-pretrained tiny policy; its tokenizer must be this run's. An ablation variant
    whose prompt differs from the grid's first (no Reject line, another K) starts there: the first's prompts hold
    several times its decisions, from which the policy learnt to read the visual check (docs/results.md)."""

    def __post_init__(self) -> None:
        if not is_share(self.swap_values):
            raise UsageError(
                f"ragym.demo.warm_start.swap_values must be a share in [0, 1], got {self.swap_values!r}"
            )


def is_share(value: object) -> bool:
    """Whether a setting's ``value`` is a number in [0, 1] (from YAML or an override; true/false is not one).

    >>> is_share(0.5), is_share(1), is_share(True), is_share("0.5"), is_share(1.5)
    (True, True, False, False, False)
    """
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1


COPY_TAGS = ("search_call", "answer")
"""Action tags whose text the warm start weights by ``copy_weight``: the expert copies a name or value there."""


@dataclass(frozen=True)
class WarmStartTarget:
    """What a warm start must reach before GRPO starts (``ragym.demo.warm_start_target``), read on the noiseless
    expert's held-out episodes (``ragym.rl.demo.margin``): a warm start that misses it is a failed run."""

    action: str
    """``stop``: the run ends with one line naming what was missed; ``warn``: it is logged and GRPO runs."""
    max_confirm_gap: float | None
    """Largest distance of the policy's P(confirm a match) from the expert's rate (1 - reject_noise - noise);
    None: unchecked."""
    min_confirm: float | None
    """Least P(confirm a match), for a task whose expert mostly confirms (a policy above its rate confirms more,
    which GRPO then keeps or trims); None: unchecked."""
    min_reject: float
    """Least P(Reject) where no candidate matches."""
    min_format_accuracy: float
    """Least share of the expert's other generated tokens (grammar, tags, protocol) that are the policy's argmax."""
    min_copy_accuracy: float | None
    """Least share of the copied tokens (a confirmed name, an answer's value) that are the argmax; None: unchecked."""
    restarts: int = 0
    """How many times a warm start that misses this target on the training questions (the same checks, read on
    their noiseless expert episodes with their names and answers swapped, ``ValueSwap``) is imitated again from the same
    tiny policy with the next seed of its draws, before the held-out check decides. Whether a 2-layer policy
    discovers a copy no induction pattern covers is a draw (docs/results.md, the answer task); the training
    questions say so without reading the held-out ones. 0: one warm start."""

    def __post_init__(self) -> None:
        if self.action not in ("stop", "warn"):
            raise UsageError(f"ragym.demo.warm_start_target.action must be stop or warn, got {self.action!r}")
        # Checked here, before the warm start runs: a bad threshold would otherwise surface as a TypeError minutes
        # later, when the probe is compared with it.
        for name in (
            "max_confirm_gap",
            "min_confirm",
            "min_reject",
            "min_format_accuracy",
            "min_copy_accuracy",
        ):
            value = getattr(self, name)
            nullable = name in ("max_confirm_gap", "min_confirm", "min_copy_accuracy")
            if value is None and nullable:
                continue
            if not is_share(value):
                allowed = "a number in [0, 1]" + (" or null" if nullable else "")
                raise UsageError(f"ragym.demo.warm_start_target.{name} must be {allowed}, got {value!r}")
        if not (
            isinstance(self.restarts, int) and not isinstance(self.restarts, bool) and self.restarts >= 0
        ):
            raise UsageError(
                f"ragym.demo.warm_start_target.restarts must be a whole number >= 0, got {self.restarts!r}"
            )


_COPY_SLOT = re.compile(r'(<rerank>|<answer>|SearchText\(\[")(?!Reject\(\))')
"""Where the expert writes a name or answer copied from an observation (Reject() excluded)."""
_NAME_SLOT = re.compile(r'(<answer>|SearchText\(\[")')
"""The same when Rerank takes candidate numbers (only answers and text queries copy names)."""
_TAKEN = re.compile(r"^Confirmed: the entity in Image (\d+) is (.+)\. \(the retriever's top-1")
"""The env's own confirmation of the top-1 without verification actions (``ragym.envs.kbvqa.demo.top1_text``)."""


class Expert(Protocol):
    """A scripted policy on its own env, as ``_replay`` plays it (``NoisyExpert``, ``r3g.R3GExpert``)."""

    env: Any

    def reset(self, obs: dict[str, Any]) -> None: ...

    def act(self, text: str, /) -> str: ...


class NoisyExpert(SignaturePolicy):
    """``SignaturePolicy`` whose verification choice is a random wrong one with probability ``noise``."""

    def __init__(
        self, env: Any, rng: np.random.Generator, noise: float, reject_noise: float, quote: bool = False
    ) -> None:
        super().__init__(env)
        self.rng, self.noise, self.reject_noise, self.quote = rng, noise, reject_noise, quote

    @classmethod
    def for_row(
        cls,
        row: dict[str, Any],
        rng: np.random.Generator,
        noise: float,
        reject_noise: float,
        quote: bool = False,
    ) -> NoisyExpert:
        """An expert on a fresh env built as the dataset row says."""
        info = row["extra_info"]
        env = make_env(info["env_id"], **json.loads(info["env_kwargs"]))
        return cls(env, rng, noise, reject_noise, quote)

    def choose(self, hits: list[tuple[str, str | None]], match: str | None) -> str | None:
        """The expert's choice; with probability ``noise`` another candidate, ``reject_noise`` a needless Reject."""
        right = match
        draw = self.rng.random()
        if draw < self.noise:
            options = [name for name, _ in hits if name != right]
            return options[int(self.rng.integers(len(options)))] if options else right
        if right is not None and draw < self.noise + self.reject_noise:
            return None
        return right

    def act(self, obs_text: str) -> str:
        """The expert's turn, with a space before copied names and answers.

        Observations show names after a space (``[1] <image> Cobalt Vartor Moth``), so byte-level BPE
        tokenizes them as " Cobalt" ...; written as ``<rerank> Cobalt Vartor Moth`` (the parser strips the
        space) the decision is the exact same tokens as in the context, a copy a tiny policy can learn.
        A candidate number (``rerank_by_index``) is one whole token with no space before it.
        """
        taken = _TAKEN.match(obs_text)
        if taken:  # no verification actions: the env took the top-1, which the expert then looks up
            self.confirmed[int(taken.group(1))] = taken.group(2)
        slot = _NAME_SLOT if self.by_index else _COPY_SLOT
        turn = slot.sub(r"\1 ", super().act(obs_text))
        return quoted(turn, obs_text) if self.quote else turn


_QUOTABLE = re.compile(
    r'^<reason>[^<]*</reason>(<search_call>SearchText\(\[" (.+?)"\]\)|<answer> (.+?)</answer>)'
)
"""A turn that copies one name into a text search, or a value into the answer."""
QUOTE_LEAD_WORDS = 3
"""Words of the observation before the copied text that the quoting reason repeats."""


def quoted(turn: str, obs_text: str) -> str:
    """``turn`` with a reason that quotes the observation where the action's name or value is (``quote``): the
    words before its last occurrence there, then it, as the words it then copies are in the observation.

    >>> quoted('<reason>read</reason><answer> 1732</answer>', 'Jade Moth: a moth, first recorded in 1732.')
    '<reason>first recorded in 1732</reason><answer> 1732</answer>'
    >>> quoted('<reason>look up</reason><search_call>SearchText([" Jade Moth"])</search_call>',
    ...        'Confirmed: the entity in Image 1 is Jade Moth.')
    '<reason>Image 1 is Jade Moth</reason><search_call>SearchText([" Jade Moth"])</search_call>'
    """
    match = _QUOTABLE.match(turn)
    copied = match and (match.group(2) or match.group(3))
    at = obs_text.rfind(f" {copied}") if copied else -1
    if at < 0:  # nothing copied from this observation (an answer without evidence: "unknown")
        return turn
    lead = " ".join(obs_text[:at].split()[-QUOTE_LEAD_WORDS:])
    return f"<reason>{lead} {copied}</reason>{turn[turn.index('</reason>') + len('</reason>') :]}"


class ReplayServer:
    """A generation server that 'generates' the queued turn texts of one episode, in order."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.turns: list[str] = []

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: list[Any] | None = None,
        **kwargs: Any,
    ) -> TokenOutput:
        """The next queued turn, tokenized."""
        ids = self.tokenizer.encode(self.turns.pop(0), add_special_tokens=False)
        return TokenOutput(token_ids=ids, log_probs=[0.0] * len(ids), stop_reason="completed")


@dataclass(frozen=True)
class ValueSwap:
    """The values an expert copies, by kind, as token ids: ``kinds[k]`` lists the kind's values, each value the ids
    of its spellings (one token each: after a space, and bare where that is one token too), the same spellings in
    the same order for every value of the kind. ``swap`` maps every value of each kind to one drawn at random, a
    bijection, so two values of an episode never merge."""

    kinds: tuple[tuple[tuple[int, ...], ...], ...]

    @classmethod
    def from_words(cls, tokenizer: Any, kinds: Sequence[Sequence[str]]) -> ValueSwap:
        """Each kind's words as the tokenizer spells them; a word that is not one token after a space is refused,
        and the bare spelling is kept for a kind only where every word of it is one token bare too.

        >>> class Tok:  # one token per word, bare or after a space
        ...     def encode(self, text, add_special_tokens=False):
        ...         return [hash(text) % 1000]
        >>> [len(k[0]) for k in ValueSwap.from_words(Tok(), [["Amber", "Dune"]]).kinds]
        [2]
        """
        out = []
        for words in kinds:
            spaced = [tokenizer.encode(f" {w}", add_special_tokens=False) for w in words]
            bare = [tokenizer.encode(w, add_special_tokens=False) for w in words]
            if any(len(ids) != 1 for ids in spaced):
                raise ValueError(
                    "swap_values needs one token a value after a space in the policy's tokenizer (the demo's "
                    f"tiny tokenizer is trained on the KB so that they are), not so for: {sorted(words)[:5]} ..."
                )
            both = all(len(ids) == 1 for ids in bare)
            out.append(tuple((s[0], b[0]) if both else (s[0],) for s, b in zip(spaced, bare, strict=True)))
        return cls(tuple(out))

    def mapping(self, rng: np.random.Generator) -> dict[int, int]:
        """Token id -> token id: each kind's values permuted at random, every spelling alike."""
        table: dict[int, int] = {}
        for values in self.kinds:
            order = rng.permutation(len(values))
            for value, other in zip(values, (values[i] for i in order), strict=True):
                table.update(zip(value, other, strict=True))
        return table

    def swap(self, sample: Sample, rng: np.random.Generator) -> Sample:
        """``sample`` with its values swapped throughout (prompt, turns, observations); the rest untouched.

        >>> swap = ValueSwap((((1,), (2,), (3,)),))  # one kind: three values, one spelling each
        >>> out = swap.swap(Sample([9, 1], [1, 2, 9], [1, 1, 0], [], 0.0, "u"), np.random.default_rng(0))
        >>> out.prompt_ids[0], out.response_ids[2], out.response_ids[0] == out.prompt_ids[1]
        (9, 9, True)
        """
        table = self.mapping(rng)
        return replace(
            sample,
            prompt_ids=[table.get(t, t) for t in sample.prompt_ids],
            response_ids=[table.get(t, t) for t in sample.response_ids],
        )


def expert_samples(
    rows: list[dict[str, Any]],
    agent_loop_factory: Any,
    tokenizer: Any,
    cfg: WarmStartConfig,
    epoch: int = 0,
    values: ValueSwap | None = None,
) -> list[tuple[Sample, float] | tuple[Sample, float, float]]:
    """Expert episodes for ``rows``, tokenized through the agent loop (``agent_loop_factory(server)``), each
    with the loss weight of its decision tokens (``cfg.decision_weight``; 0 for protocol episodes).

    ``epoch`` seeds the expert's noise: each epoch gets fresh draws, so the policy learns the expert's decision
    probabilities instead of memorising which episode had which noisy decision (which it does within a few
    epochs on one fixed draw, ending deterministic and name-dependent on held-out questions).
    ``values``: what ``cfg.swap_values`` of the episodes get swapped (their own draws, so the expert's are the
    same with or without).
    """
    if cfg.swap_values and values is None:
        raise ValueError("swap_values is set but no values to swap were given (ValueSwap)")
    samples = _expert_samples(rows, agent_loop_factory, tokenizer, cfg, epoch)
    if not cfg.swap_values or values is None:
        return samples
    draws = np.random.default_rng([cfg.seed, epoch, 1])
    out: list[Any] = []
    for sample, *weights in samples:
        if draws.random() < cfg.swap_values:
            sample = values.swap(sample, draws)
        out.append((sample, *weights))
    return out


def _expert_samples(
    rows: list[dict[str, Any]], agent_loop_factory: Any, tokenizer: Any, cfg: WarmStartConfig, epoch: int
) -> list[tuple[Sample, float] | tuple[Sample, float, float]]:
    rng = np.random.default_rng([cfg.seed, epoch])
    server = ReplayServer(tokenizer)
    agent_loop = agent_loop_factory(server)
    samples: list[Any] = []
    for row in rows:
        if cfg.soft_decisions:
            samples += decision_branches(row, rng, cfg, server, agent_loop)
        else:
            noisy = NoisyExpert.for_row(row, rng, cfg.noise, cfg.reject_noise, cfg.quote)
            samples.append((_replay(row, noisy, server, agent_loop), cfg.decision_weight))
        if rng.random() < cfg.protocol_share:
            protocol = NoisyExpert.for_row(row, rng, 0.0, 0.0, cfg.quote)
            samples.append((_replay(row, protocol, server, agent_loop), 0.0))
    return samples


def decision_branches(
    row: dict[str, Any], rng: np.random.Generator, cfg: WarmStartConfig, server: ReplayServer, agent_loop: Any
) -> list[tuple[Sample, float, float]]:
    """``row``'s expert episode down each branch of its noisy decision, with the decision weight and the
    branch's probability: the confirming one (1 - ``reject_noise``) and the rejecting one (``reject_noise``);
    one branch of probability 1 when no batch holds the match (both branches reject everything alike)."""
    if cfg.noise:
        raise ValueError("soft_decisions enumerates reject_noise only; set ragym.demo.warm_start.noise=0")
    confirming = _replay(row, NoisyExpert.for_row(row, rng, 0.0, 0.0, cfg.quote), server, agent_loop)
    rejecting = _replay(row, NoisyExpert.for_row(row, rng, 0.0, 1.0, cfg.quote), server, agent_loop)
    if confirming.response_ids == rejecting.response_ids:
        return [(confirming, cfg.decision_weight, 1.0)]
    return [
        (confirming, cfg.decision_weight, 1.0 - cfg.reject_noise),
        (rejecting, cfg.decision_weight, cfg.reject_noise),
    ]


def _replay(row: dict[str, Any], expert: Expert, server: ReplayServer, agent_loop: Any) -> Sample:
    """``expert``'s episode on ``row``, replayed through the agent loop as if the policy had generated it."""
    info = dict(row["extra_info"])
    episode = run_episode(expert.env, expert, int(info["index"]), json.loads(info["env_options"]))
    server.turns = list(episode["turns"])
    loop = asyncio.get_event_loop()
    output = loop.run_until_complete(agent_loop.run({"logprobs": True}, **row_kwargs(row), priority=0))
    images = list((output.multi_modal_data or {}).get("images", []))
    return Sample(
        list(output.prompt_ids),
        list(output.response_ids),
        list(output.response_mask),
        images,
        0.0,
        str(info["index"]),
    )


def span_mask(token_ids: Sequence[int], spans: Sequence[tuple[int, int]]) -> torch.Tensor:
    """1.0 on the tokens strictly between an opening id and its closing id of ``spans`` ((open, close) pairs).

    >>> span_mask([5, 1, 7, 8, 2, 7, 1, 9], [(1, 2)]).tolist()
    [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    """
    closing = dict(spans)
    inside, close, out = False, None, []
    for token in token_ids:
        if inside and token == close:
            inside = False
        out.append(1.0 if inside else 0.0)
        if not inside and token in closing:
            inside, close = True, closing[token]
    return torch.tensor(out)


def token_weights(
    sample: Sample,
    decision_after: int | Sequence[int] | None,
    decision_weight: float,
    copy_spans: Sequence[tuple[int, int]] = (),
    copy_weight: float = 1.0,
    context_weight: float = 0.0,
) -> torch.Tensor:
    """Per-token loss weights: the response mask, ``decision_weight`` on generated tokens after ``decision_after``
    (one token id, or several), ``copy_weight`` on generated tokens inside ``copy_spans`` (``span_mask``),
    ``context_weight`` on the observation tokens (mask 0)."""
    mask = torch.tensor(sample.response_mask, dtype=torch.float32)  # [R]
    if copy_spans and copy_weight != 1.0:
        mask = mask * (1.0 + (copy_weight - 1.0) * span_mask(sample.response_ids, copy_spans))
    if context_weight:
        mask = mask + context_weight * (1.0 - torch.tensor(sample.response_mask, dtype=torch.float32))
    if decision_after is None:
        return mask
    after = torch.tensor([decision_after] if isinstance(decision_after, int) else list(decision_after))
    ids = torch.tensor(sample.response_ids)
    previous = torch.cat([torch.tensor(sample.prompt_ids[-1:]), ids[:-1]])  # token before each response token
    return mask * torch.where(torch.isin(previous, after), decision_weight, 1.0)


def imitate(
    model: torch.nn.Module,
    image_inputs: ImageInputs,
    epochs: Sequence[Sequence[tuple[Sample, float] | tuple[Sample, float, float]]],
    cfg: WarmStartConfig,
    decision_after: int | Sequence[int] | None = None,
    copy_spans: Sequence[tuple[int, int]] = (),
) -> list[float]:
    """Maximise the weighted log-likelihood of the mask-1 tokens, one pass over each of ``epochs`` (the
    samples of one epoch each, with their decision-token weights); returns each step's loss.

    ``decision_after``: the token id (``<rerank>``), or ids, whose next generated token gets the sample's weight.
    ``copy_spans``: (open, close) token-id pairs whose inner generated tokens get ``cfg.copy_weight``.
    An optional third element scales all of a sample's weights: the probability of that episode among an
    expert's enumerated noise branches, so the loss is the exact expectation over the noise (soft targets).
    """
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    total = sum(-(-len(samples) // cfg.batch_size) for samples in epochs)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: 1.0 - step / total if cfg.lr_decay else 1.0
    )
    generator = torch.Generator().manual_seed(cfg.seed)
    losses = []
    model.train()
    for samples in epochs:
        order = torch.randperm(len(samples), generator=generator).tolist()
        for start in range(0, len(order), cfg.batch_size):
            pairs = [samples[i] for i in order[start : start + cfg.batch_size]]
            batch = [pair[0] for pair in pairs]
            unscaled = [
                token_weights(
                    pair[0], decision_after, pair[1], copy_spans, cfg.copy_weight, cfg.context_weight
                )
                for pair in pairs
            ]
            # Normalised by the unscaled weights: by the scaled ones, a batch of two unlikely branches would
            # count as much as a likely one and pull the soft targets towards 50/50.
            num_tokens = float(sum(w.sum() for w in unscaled))
            weights = [
                w * (pair[2] if len(pair) > 2 else 1.0) for w, pair in zip(unscaled, pairs, strict=True)
            ]
            optimizer.zero_grad(set_to_none=True)
            loss = 0.0
            for sample, weight in zip(batch, weights, strict=True):  # unpadded: CPU attention ~3x faster
                mask = weight[None]  # [1, R]
                log_prob, _ = response_log_probs(
                    model, image_inputs, [sample], mask.shape[1], temperature=1.0
                )
                part = -(log_prob * mask).sum() / num_tokens
                part.backward()
                loss += float(part.detach())
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            losses.append(loss)
            if len(losses) % 20 == 0:
                logger.info("warm start step %d: loss %.3f", len(losses), loss)
    model.eval()
    return losses
