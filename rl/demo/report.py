"""The CPU demo's report: a plot of reward components over GRPO steps and ``report.md``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragym.envs.metrics import episode_metrics

PLOTTED = (
    "reward/total",
    "reward/outcome",
    "reward/format",
    "reward/verification",
    "grpo/zero_adv_group_share",
)
"""Per-step series drawn in ``reward_components.png``."""
ROLLOUT_KEYS = ("reward/total", "reward/verification", "episode/ident_acc", "episode/rejections",
                "episode/actions/rerank", "grpo/zero_adv_group_share")  # fmt: skip
"""Per-step metrics compared between the first and the last GRPO step."""


GAIN_TERMS = ("outcome", "format", "verification")
"""The weighted reward terms whose sum is ``reward_mean`` (all weights 1 in the demo's reward recipe)."""


def gain_shares(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float | None]:
    """Each reward term's share of the held-out reward gain (its change over the total's); None without a gain.

    >>> gain_shares({"reward_mean": 1.0, "outcome": 0.0, "format": 1.0, "verification": 0.0},
    ...             {"reward_mean": 2.0, "outcome": 0.25, "format": 1.0, "verification": 0.75})
    {'outcome': 0.25, 'format': 0.0, 'verification': 0.75}
    """
    gain = after["reward_mean"] - before["reward_mean"]
    if abs(gain) < 1e-9:
        return dict.fromkeys(GAIN_TERMS)
    return {term: (after[term] - before[term]) / gain for term in GAIN_TERMS}


def outcome_by_identification(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Held-out outcome on the questions whose entity the policy confirmed (episode Ident. 1) and on the others,
    from trace lines (``ragym.rl.view.trace``: ``env_id``, ``events``, ``terms``); None where there is none."""
    split: dict[str, list[float]] = {"identified": [], "not_identified": []}
    for episode in episodes:
        identified = episode_metrics(episode["env_id"], episode["events"]).get("ident_acc") == 1.0
        split["identified" if identified else "not_identified"].append(float(episode["terms"]["outcome"]))
    out: dict[str, Any] = {}
    for name, values in split.items():
        out[f"outcome_{name}"] = sum(values) / len(values) if values else None
        out[f"num_{name}"] = len(values)
    return out


def plot_rewards(train: list[dict[str, Any]], path: Path) -> None:
    """Reward components (training rollouts) and the zero-advantage group share over steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [h["step"] for h in train]
    fig, ax = plt.subplots(figsize=(7, 4))
    for key in PLOTTED:
        ax.plot(
            steps,
            [h.get(key, 0.0) for h in train],
            label=key,
            linestyle="--" if key.startswith("grpo") else "-",
        )
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("mean over the step's episodes")
    ax.set_title("KBVQA-v0 demo: rollout reward components")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _cell(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else "n/a" if value is None else str(value)


def _row(name: str, *values: Any) -> str:
    return f"| {name} | {' | '.join(_cell(v) for v in values)} |"


def diagnosis(result: dict[str, Any], train: list[dict[str, Any]]) -> str:
    """One plain sentence on what GRPO changed, naming the rejection-farming failure when it shows."""
    before, after = result["before"]["reward_mean"], result["after"]["reward_mean"]
    verdict = "raised" if after > before else "did not raise"
    text = f"GRPO {verdict} the held-out reward ({before:.3f} -> {after:.3f})."
    first, last = train[0], train[-1]
    if (
        last["episode/rejections"] > first["episode/rejections"]
        and last["episode/ident_acc"] <= first["episode/ident_acc"]
    ):
        text += (
            " Rollouts reject more without identifying more: the policy is collecting the correct-rejection"
            " reward (delta per Reject of a batch without the gold entity) instead of verifying."
        )
    return text


def margin_lines(margins: dict[str, Any]) -> list[str]:
    """The decision-margin table: the policy's probability of the right decision where the batch holds the match
    and where it does not, before and after GRPO (``ragym.rl.demo.margin``)."""
    lines = ["## Decision margin (held-out)", "",
             "The held-out evaluation is greedy: a question counts as identified only when confirming the match is "
             "the policy's most likely next token, so Ident. moves only when this probability crosses about 0.5. "
             "It is read on the noiseless expert's episodes of the same held-out questions (`ragym.rl.demo.margin`).",
             "", "| decision | n | before: mean [q25, q75] | after: mean [q25, q75] | greedy right, before -> after |",
             "|---|---|---|---|---|"]  # fmt: skip
    for key, name in (
        ("confirm_match", "confirm, batch holds the match"),
        ("reject_no_match", "reject, it does not"),
    ):
        b, a = margins["before"][key], margins["after"][key]
        if not b["n"]:
            continue
        lines.append(f"| {name} | {b['n']} | {b['mean']:.3f} [{b['q25']:.3f}, {b['q75']:.3f}] | {a['mean']:.3f} "
                     f"[{a['q25']:.3f}, {a['q75']:.3f}] | {b['greedy_share']:.2f} -> {a['greedy_share']:.2f} |")  # fmt: skip
    return lines + [""]


def write_report(out: Path, result: dict[str, Any], train: list[dict[str, Any]]) -> Path:
    """Write ``out/report.md`` and ``out/reward_components.png``; returns the report path."""
    plot_rewards(train, out / "reward_components.png")
    before, after, warm = result["before"], result["after"], result["warm_start"]
    split = ("outcome_identified", "num_identified", "outcome_not_identified", "num_not_identified")
    rows = [_row(k, before[k], after[k]) for k in before if k != "actions" and k not in split]
    actions = sorted(set(before["actions"]) | set(after["actions"]))
    rows += [
        _row(f"actions/{a} per episode", before["actions"].get(a, 0.0), after["actions"].get(a, 0.0))
        for a in actions
    ]
    text = "\n".join([
        "# ragym CPU demo: GRPO on KBVQA-v0 with a tiny Qwen2.5-VL policy",
        "",
        f"Task `{result['task']}` (`ragym demo --task {result['task']}`); seed {result['seed']}; "
        f"{result['grpo_steps']} GRPO steps; wall time {result['wall_time_s']:.0f} s; "
        f"peak RSS {result['peak_rss_mb']:.0f} MB.",
        "",
        "**Warm start** (not RL): supervised imitation of a deliberately imperfect scripted expert that rejects "
        f"a batch holding the match with probability {warm['reject_noise']} and reranks a wrong candidate with "
        f"probability {warm['noise']} ({warm['episodes']} training questions x {warm['epochs']} epochs "
        f"of env-generated episodes, fresh expert noise each epoch, plus a noiseless episode for a share "
        f"{warm['protocol_share']} of them with its decision tokens out of the loss; {warm['steps']} steps, "
        f"loss {warm['first_loss']:.2f} -> {warm['final_loss']:.2f}).",
        "",
        "## Held-out evaluation (warm start = before, after GRPO)",
        "",
        diagnosis(result, train),
        "",
        "| metric | before | after |",
        "|---|---|---|",
        *rows,
        "",
        "zero_adv_group_share: share of GRPO groups whose episodes all scored the same (first / last step).",
        "",
        *(margin_lines(result["decision_margin"]) if "decision_margin" in result else []),
        "## What the reward gain is made of",
        "",
        "Held-out outcome on the questions whose entity the policy confirmed (Ident. 1) and on the others, and "
        "each reward term's share of the held-out reward gain (its change / the total's change; the shares sum to 1).",
        "",
        "| | before | after |",
        "|---|---|---|",
        _row("outcome, entity confirmed", before.get("outcome_identified"), after.get("outcome_identified")),
        _row("questions with the entity confirmed", before.get("num_identified"), after.get("num_identified")),
        _row("outcome, entity not confirmed", before.get("outcome_not_identified"),
             after.get("outcome_not_identified")),
        _row("questions without", before.get("num_not_identified"), after.get("num_not_identified")),
        "",
        "| term | before | after | share of the reward gain |",
        "|---|---|---|---|",
        *[_row(term, before[term], after[term], share) for term, share in gain_shares(before, after).items()],
        "",
        "## Training rollouts (sampled), first vs last GRPO step",
        "",
        "| metric | first step | last step |",
        "|---|---|---|",
        *[_row(key, float(train[0].get(key, 0.0)), float(train[-1].get(key, 0.0))) for key in ROLLOUT_KEYS],
        "",
        "## Reward components over GRPO steps (training rollouts)",
        "",
        "![reward components](reward_components.png)",
        "",
        "## Episodes, turn by turn",
        "",
        "[Open the trajectory viewer](view/index.html): the sampled GRPO groups of every step and the held-out "
        "evaluations, each turn with its observation images, events (gold entity marked), reward terms and the "
        "tokens as the trainer saw them. Served live: `ragym view DIR`.",
        "",
        f"Unused recipe keys (logged, not silently ignored): {', '.join(result['unused_recipe_keys']) or 'none'}.",
        "",
    ])  # fmt: skip
    path = out / "report.md"
    path.write_text(text)
    return path
