"""The token view's data: an episode's token ids as runs of prompt, generated, observation and image tokens."""

from __future__ import annotations

from typing import Any

PLACEHOLDER_TEXTS = ("<|image_pad|>", "<|video_pad|>")
"""Token texts the processor expands per image: shown as one collapsed span per image."""


def token_spans(episode: dict[str, Any]) -> list[dict[str, Any]]:
    """The token sequence as runs: ``prompt``, ``gen`` (mask 1), ``ctx`` (mask 0) and ``image`` (one
    placeholder run; ``bad`` when any of it has mask 1). Each non-image run lists [id, text, advantage]."""
    prompt, response = episode["prompt_ids"], episode["response_ids"]
    mask, texts, adv = episode["response_mask"], episode["token_text"], episode.get("advantages")
    spans: list[dict[str, Any]] = []
    for pos, token in enumerate(prompt + response):
        r = pos - len(prompt)
        kind = "prompt" if r < 0 else ("gen" if mask[r] else "ctx")
        text = texts[pos]
        if text in PLACEHOLDER_TEXTS:
            last = spans[-1] if spans else None
            if last and last["kind"] == "image" and last["end"] == pos:
                last.update(end=pos + 1, count=last["count"] + 1, bad=last["bad"] or kind == "gen")
            else:
                spans.append(
                    {"kind": "image", "start": pos, "end": pos + 1, "count": 1, "bad": kind == "gen"}
                )
            continue
        value = adv[r] if adv is not None and r >= 0 else None
        if not spans or spans[-1]["kind"] != kind or spans[-1]["end"] != pos:
            spans.append({"kind": kind, "start": pos, "end": pos, "tokens": []})
        spans[-1]["end"] = pos + 1
        spans[-1]["tokens"].append([token, text, value])
    return spans


def token_issues(episode: dict[str, Any]) -> list[str]:
    """Invariant breaks visible in the tokens: placeholders with mask 1, image runs != images."""
    if not episode.get("response_ids"):
        return []
    runs = [s for s in token_spans(episode) if s["kind"] == "image"]
    issues = (
        [f"{sum(s['bad'] for s in runs)} image placeholder runs with mask 1"]
        if any(s["bad"] for s in runs)
        else []
    )
    if len(runs) != len(episode["images"]):
        issues.append(f"{len(runs)} image placeholder runs for {len(episode['images'])} images")
    return issues
