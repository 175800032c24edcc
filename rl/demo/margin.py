"""The demo policy's decision margin: how far each held-out decision is from flipping under greedy decoding.

The demo's held-out evaluation is greedy, so a question counts as identified only when the decision token
after ``<rerank>`` (the candidate's number, or ``Reject``) is the policy's most likely token. A policy whose
probability of confirming a match is 0.45 and one whose probability is 0.05 both identify nothing, and a run that
ends at 0.49 or 0.51 ends on either side of the report's headline by a last-bit difference of the CPU's float
kernels. ``decision_margin`` measures the probabilities themselves: the noiseless expert's episode on each
held-out row is replayed through the agent loop (the tokens GRPO would see) and the policy's probability of the
expert's decision token is read at every decision, split by whether the batch holds the match.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from ragym.rl.core.grpo import Sample
from ragym.rl.core.vision import ImageInputs
from ragym.rl.tiny.warm_start import COPY_TAGS, NoisyExpert, ReplayServer, ValueSwap, _replay, span_mask


def token_outcomes(
    model: torch.nn.Module,
    image_inputs: ImageInputs,
    sample: Sample,
    decision_after: int,
    copy_spans: list[tuple[int, int]],
) -> dict[str, list[tuple[int, float, bool]]]:
    """Per generated token of ``sample``, teacher-forced: (the token, the policy's probability of it, whether it
    is the policy's argmax), grouped as ``decision`` (right after ``decision_after``), ``copy`` (inside
    ``copy_spans``: a name or value the expert copies from an observation) and ``other`` (the formulaic rest)."""
    from ragym.rl.core.grpo import rope_positions

    seq = sample.prompt_ids + sample.response_ids
    input_ids = torch.tensor([seq])  # [1, T]
    attention = torch.ones_like(input_ids)
    vision = image_inputs.encode(sample.images)
    positions = rope_positions(model, input_ids, attention, vision.get("image_grid_thw"))
    with torch.no_grad():
        logits = model(
            input_ids=input_ids, attention_mask=attention, position_ids=positions, **vision
        ).logits[0]
    probs = torch.softmax(logits.float(), dim=-1)  # [T, V]
    inside = span_mask(sample.response_ids, copy_spans).tolist()
    start = len(sample.prompt_ids)
    out: dict[str, list[tuple[int, float, bool]]] = {"decision": [], "copy": [], "other": []}
    for i, token in enumerate(sample.response_ids):
        if not sample.response_mask[i]:
            continue
        at = start + i
        kind = "decision" if seq[at - 1] == decision_after else "copy" if inside[i] else "other"
        out[kind].append((token, float(probs[at - 1, token]), int(probs[at - 1].argmax()) == token))
    return out


def decision_margin(
    policy_dir: Path,
    config: Any,
    rows: list[dict[str, Any]],
    quote: bool = False,
    reject_token: str = "Reject",
    values: ValueSwap | None = None,
) -> dict[str, Any]:
    """The policy's probability of confirming where the batch holds the match and of rejecting where it does
    not, on ``rows``' noiseless expert episodes: means, quartiles, and the share the policy's argmax gets right
    (what greedy decoding does with the same prefix); plus the argmax accuracy on the tokens the expert copies
    from an observation (``copy``: the confirmed name in a text search, the value in the answer) and on the
    rest of its turns (``other``: the grammar and protocol). ``quote``: the expert's reasons quote what it copies, as
    the warm start's expert did (``ragym.demo.warm_start.quote``); read against another expert's turns, the
    policy's own reasons would count as format errors. ``values``: each episode's copied values swapped first (one
    fixed draw), so that on training questions the copy is read, not a recalled training value."""
    from ragym.rl.agent_loop.loop import make_agent_loop
    from ragym.rl.models import load_policy

    model, tokenizer, processor = load_policy(policy_dir)
    model.eval()

    def token_id(token: str) -> int:
        return cast(int, tokenizer.convert_tokens_to_ids(token))

    decision_after = token_id("<rerank>")
    copy_spans = [(token_id(f"<{tag}>"), token_id(f"</{tag}>")) for tag in COPY_TAGS]
    reject_id = tokenizer.encode(reject_token, add_special_tokens=False)[0]
    server = ReplayServer(tokenizer)
    agent_loop = make_agent_loop(config, server, tokenizer, processor)
    image_inputs = ImageInputs(processor.image_processor)
    rng = np.random.default_rng(0)  # a noiseless expert draws nothing from it
    swaps = np.random.default_rng(1)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    groups: dict[str, list[tuple[float, bool]]] = {
        "confirm_match": [],
        "reject_no_match": [],
        "copy": [],
        "other": [],
    }
    try:
        for row in rows:
            sample = _replay(row, NoisyExpert.for_row(row, rng, 0.0, 0.0, quote), server, agent_loop)
            if values is not None:
                sample = values.swap(sample, swaps)
            for kind, tokens in token_outcomes(
                model, image_inputs, sample, decision_after, copy_spans
            ).items():
                for token, prob, argmax in tokens:
                    name = (
                        ("reject_no_match" if token == reject_id else "confirm_match")
                        if kind == "decision"
                        else kind
                    )
                    groups[name].append((prob, argmax))
    finally:
        loop.close()
    return {name: _stats(pairs) for name, pairs in groups.items()}


def _stats(pairs: list[tuple[float, bool]]) -> dict[str, Any]:
    """Mean, quartiles and the argmax's share of the probabilities in ``pairs`` (None where there are none)."""
    if not pairs:
        return {"n": 0, "mean": None, "q25": None, "median": None, "q75": None, "greedy_share": None}
    probs = np.array([p for p, _ in pairs])
    q25, median, q75 = np.quantile(probs, [0.25, 0.5, 0.75]).tolist()
    return {
        "n": len(pairs),
        "mean": float(probs.mean()),
        "q25": q25,
        "median": median,
        "q75": q75,
        "greedy_share": sum(a for _, a in pairs) / len(pairs),
    }
