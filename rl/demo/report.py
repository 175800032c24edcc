"""The CPU demo's report: a plot of reward components over GRPO steps and ``report.md``."""

from __future__ import annotations

import json
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
ROLLOUT_KEYS = (
    "reward/total",
    "reward/verification",
    "episode/ident_acc",
    "episode/rejections",
    "episode/actions/rerank",
    "grpo/zero_adv_group_share",
)
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


def trained_entities(rows: list[dict[str, Any]]) -> set[str]:
    """The gold entities of the training rows (``read_rows``'s dicts): a held-out question about one of them is
    "seen", and its answer could be recalled from training rather than read from the passage."""
    return {
        gold for row in rows for gold in json.loads(row["extra_info"]["env_options"])["gold_entities"] if gold
    }


def _gold_entities(episode: dict[str, Any]) -> list[str]:
    return next(e["gold_entities"] for e in episode["events"] if e["type"] == "task")


def outcome_by_identification(episodes: list[dict[str, Any]], seen: set[str] | None = None) -> dict[str, Any]:
    """Held-out outcome on the questions whose entity the policy confirmed (episode Ident. 1) and on the others,
    from trace lines (``ragym.rl.view.trace``: ``env_id``, ``events``, ``terms``); None where there is none.

    With ``seen`` (``trained_entities``) each is also split by whether a gold entity of the question is a training
    row's (``_seen``) or none is (``_unseen``): only on unseen entities does a right answer show copying."""
    split: dict[str, list[float]] = {"identified": [], "not_identified": []}
    if seen is not None:
        split |= {
            f"{name}_{side}": [] for name in ("identified", "not_identified") for side in ("seen", "unseen")
        }
    for episode in episodes:
        identified = episode_metrics(episode["env_id"], episode["events"]).get("ident_acc") == 1.0
        name, outcome = "identified" if identified else "not_identified", float(episode["terms"]["outcome"])
        split[name].append(outcome)
        if seen is not None:
            side = "seen" if seen & set(_gold_entities(episode)) else "unseen"
            split[f"{name}_{side}"].append(outcome)
    out: dict[str, Any] = {}
    for name, values in split.items():
        out[f"outcome_{name}"] = sum(values) / len(values) if values else None
        out[f"num_{name}"] = len(values)
    return out


SPLIT_PREFIXES = ("outcome_", "num_")
"""Held-out summary keys of ``outcome_by_identification``'s split (its own table, not the metric table's)."""
SEEN_ROWS = {
    "identified": ("outcome, entity confirmed", "questions with the entity confirmed"),
    "not_identified": ("outcome, entity not confirmed", "questions without"),
}
"""Split name -> (its outcome row, its count row) in the report."""


def seen_lines(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The outcome split's rows by whether the question's entity is a training question's (seen) or not
    (unseen), where the summaries have that split (``outcome_by_identification`` with ``seen``)."""
    lines = []
    for name, (outcome, count) in SEEN_ROWS.items():
        for side in ("unseen", "seen"):
            key = f"{name}_{side}"
            if f"num_{key}" in before:
                lines += [
                    _row(f"{outcome}, {side} in training", before[f"outcome_{key}"], after[f"outcome_{key}"]),
                    _row(f"{count}, {side} in training", before[f"num_{key}"], after[f"num_{key}"]),
                ]
    return lines


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


BAND = Path(__file__).with_name("band.json")
"""Where the demo lands over seeds and CPU kernel settings, per task (``benchmarks/demo_band.py --write-band``)."""
BAND_FIGURES = {
    "reward_after": "held-out reward after GRPO",
    "reward_gain": "held-out reward gain",
    "ident_after": "held-out Ident. after GRPO",
    "ident_gain": "held-out Ident. gain",
    "outcome_confirmed_after": "held-out outcome on the questions whose entity it confirmed, after GRPO",
}
"""The band's figures the report places this run in: band key -> what it is (a figure the band or the run lacks,
such as the verify task's outcome, is left out)."""


def pass_rule(min_gain: float, min_outcome: float | None) -> str:
    """What a band's run had to do to pass, in words (``benchmarks/demo_band.py``'s ``--min-gain`` /
    ``--min-outcome``).

    >>> pass_rule(0.3, 0.5)
    'answered 0.5 or more of the held-out questions whose entity they confirmed'
    """
    if min_outcome is not None:
        return f"answered {min_outcome} or more of the held-out questions whose entity they confirmed"
    return f"raised the held-out reward and Ident. by {min_gain} or more"


VERIFY_PASS_RULE = pass_rule(0.3, None)
"""What a run of a band recorded without its own ``pass_rule`` (the verify task's) had to do to pass."""


def band_lines(result: dict[str, Any], band: dict[str, Any] | None) -> list[str]:
    """Where this run falls in the measured band of its task: each figure's band (mean, 95% interval, range over
    the measured runs) beside this run's value, and whether the value is inside the range.

    >>> band = {"runs": 20, "settings": "seeds 0-9 x 2 kernels", "passed": 20, "figures": {"reward_gain":
    ...         {"mean": 0.7, "low": 0.68, "high": 0.72, "min": 0.6, "max": 0.75}}}
    >>> result = {"before": {"reward_mean": 1.25, "ident_acc": 0.0}, "after": {"reward_mean": 1.3, "ident_acc": 0.0}}
    >>> band_lines(result, band)[-2]
    '| held-out reward gain | 0.700 [0.680, 0.720] | 0.600 - 0.750 | 0.050 | below the range |'
    """
    if band is None:
        return []
    before, after = result["before"], result["after"]
    values = {
        "reward_after": after["reward_mean"],
        "reward_gain": after["reward_mean"] - before["reward_mean"],
        "ident_after": after["ident_acc"],
        "ident_gain": after["ident_acc"] - before["ident_acc"],
        "outcome_confirmed_after": after.get("outcome_identified"),
    }
    lines = [
        "## Where this run falls",
        "",
        f"The band `ragym demo` of this task lands in, measured over {band['runs']} runs ({band['settings']}; "
        f"{band['passed']} of them {band.get('pass_rule', VERIFY_PASS_RULE)}; docs/results.md):",
        "",
        "| figure | band: mean [95% interval] | range | this run | |",
        "|---|---|---|---|---|",
    ]
    for key, name in BAND_FIGURES.items():
        if key not in band["figures"] or values[key] is None:
            continue
        fig, value = band["figures"][key], values[key]
        where = (
            "below the range"
            if value < fig["min"] - 1e-9
            else "above the range"
            if value > fig["max"] + 1e-9
            else "inside the range"
        )
        lines.append(
            f"| {name} | {fig['mean']:.3f} [{fig['low']:.3f}, {fig['high']:.3f}] | {fig['min']:.3f} - "
            f"{fig['max']:.3f} | {value:.3f} | {where} |"
        )
    return lines + [""]


def read_band(task: str) -> dict[str, Any] | None:
    """The measured band of ``task`` from ``BAND``; None when it has none."""
    import json

    bands = json.loads(BAND.read_text()) if BAND.is_file() else {}
    return bands.get(task)


def margin_lines(margins: dict[str, Any]) -> list[str]:
    """The decision-margin table: the policy's probability of the right decision where the batch holds the match
    and where it does not, before and after GRPO (``ragym.rl.demo.margin``)."""
    lines = [
        "## Decision margin (held-out)",
        "",
        "The held-out evaluation is greedy: a question counts as identified only when confirming the match is "
        "the policy's most likely next token, so Ident. moves only when this probability crosses about 0.5. "
        "It is read on the noiseless expert's episodes of the same held-out questions (`ragym.rl.demo.margin`).",
        "",
        "| decision | n | before: mean [q25, q75] | after: mean [q25, q75] | greedy right, before -> after |",
        "|---|---|---|---|---|",
    ]
    for key, name in (
        ("confirm_match", "confirm, batch holds the match"),
        ("reject_no_match", "reject, it does not"),
    ):
        b, a = margins["before"][key], margins["after"][key]
        if not b["n"]:
            continue
        lines.append(
            f"| {name} | {b['n']} | {b['mean']:.3f} [{b['q25']:.3f}, {b['q75']:.3f}] | {a['mean']:.3f} "
            f"[{a['q25']:.3f}, {a['q75']:.3f}] | {b['greedy_share']:.2f} -> {a['greedy_share']:.2f} |"
        )
    return lines + [""]


def restarted(warm: dict[str, Any]) -> str:
    """A sentence naming the warm start's earlier attempts and what each missed on the training questions
    (``ragym.demo.warm_start_target.restarts``); empty for a warm start kept at its first attempt.

    >>> restarted({"attempts": [{"seed": 5, "missed": ["copy accuracy 0.871 < 0.97"]}, {"seed": 1005, "missed": []}]})
    ' Kept at attempt 2 (draws 1005); before it, draws 5 missed the target on the training questions: copy accuracy 0.871 < 0.97.'
    >>> restarted({}), restarted({"attempts": [{"seed": 0, "missed": []}]})
    ('', '')
    """
    attempts = warm.get("attempts") or []
    if len(attempts) < 2:
        return ""
    earlier = "; ".join(f"draws {a['seed']} missed {', '.join(a['missed'])}" for a in attempts[:-1])
    kept = attempts[-1]
    still = f" (it too missed: {', '.join(kept['missed'])})" if kept["missed"] else ""
    return (
        f" Kept at attempt {len(attempts)} (draws {kept['seed']}){still}; before it, "
        + earlier.replace(" missed ", " missed the target on the training questions: ", 1)
        + "."
    )


def write_report(out: Path, result: dict[str, Any], train: list[dict[str, Any]]) -> Path:
    """Write ``out/report.md`` and ``out/reward_components.png``; returns the report path."""
    plot_rewards(train, out / "reward_components.png")
    before, after, warm = result["before"], result["after"], result["warm_start"]
    rows = [
        _row(k, before[k], after[k]) for k in before if k != "actions" and not k.startswith(SPLIT_PREFIXES)
    ]
    actions = sorted(set(before["actions"]) | set(after["actions"]))
    rows += [
        _row(f"actions/{a} per episode", before["actions"].get(a, 0.0), after["actions"].get(a, 0.0))
        for a in actions
    ]
    text = "\n".join(
        [
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
            f"loss {warm['first_loss']:.2f} -> {warm['final_loss']:.2f}).{restarted(warm)}",
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
            *band_lines(result, read_band(result["task"])),
            "## What the reward gain is made of",
            "",
            "Held-out outcome on the questions whose entity the policy confirmed (Ident. 1) and on the others, each "
            "also by whether a training question asks about the same entity (seen) or none does (unseen: a right "
            "answer there is read from the passage, not recalled), and each reward term's share of the held-out "
            "reward gain (its change / the total's change; the shares sum to 1).",
            "",
            "| | before | after |",
            "|---|---|---|",
            _row(
                "outcome, entity confirmed", before.get("outcome_identified"), after.get("outcome_identified")
            ),
            _row(
                "questions with the entity confirmed",
                before.get("num_identified"),
                after.get("num_identified"),
            ),
            _row(
                "outcome, entity not confirmed",
                before.get("outcome_not_identified"),
                after.get("outcome_not_identified"),
            ),
            _row("questions without", before.get("num_not_identified"), after.get("num_not_identified")),
            *seen_lines(before, after),
            "",
            "| term | before | after | share of the reward gain |",
            "|---|---|---|---|",
            *[
                _row(term, before[term], after[term], share)
                for term, share in gain_shares(before, after).items()
            ],
            "",
            "## Training rollouts (sampled), first vs last GRPO step",
            "",
            "| metric | first step | last step |",
            "|---|---|---|",
            *[
                _row(key, float(train[0].get(key, 0.0)), float(train[-1].get(key, 0.0)))
                for key in ROLLOUT_KEYS
            ],
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
        ]
    )
    path = out / "report.md"
    path.write_text(text)
    return path
