"""``ragym demo --out DIR``: the CPU demo, end to end (the README's main command, ``make demo``).

Builds the synthetic KB-VQA demo KB and a tiny Qwen2.5-VL policy (when DIR does not have them yet),
warm-starts the policy by imitating a noisy scripted expert, evaluates it on held-out rows, runs GRPO with
the local engine on ``recipes/kbvqa_tiny_cpu.yaml``, evaluates again, and writes ``DIR/report.md`` (with a
plot), ``DIR/metrics.json`` and ``DIR/checkpoint/`` (a Hugging Face model directory). Re-running resumes.
``--task answer`` runs it on a task whose answer the policy learns (``ragym.rl.demo.tasks``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import resource
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pandas as pd
from omegaconf import OmegaConf

from ragym.envs.files import read_jsonl
from ragym.envs.retrieval.search_settings import use_torch_threads
from ragym.rl.agent_loop.loop import make_agent_loop
from ragym.rl.core.vision import ImageInputs
from ragym.rl.demo.args import DEMO_RECIPE, parse_demo_args
from ragym.rl.demo.margin import decision_margin
from ragym.rl.demo.report import outcome_by_identification, trained_entities, write_report
from ragym.rl.demo.tasks import DEFAULT_TASK, WarmStartMissed, task_overrides
from ragym.rl.engine.config import RecipeReader, read_engine_config
from ragym.rl.engine.trainer import LocalTrainer, read_rows
from ragym.rl.errors import UsageError
from ragym.rl.export import record_export
from ragym.rl.recipe.compose import load_recipe
from ragym.rl.tiny.warm_start import (
    COPY_TAGS,
    ValueSwap,
    WarmStartConfig,
    WarmStartTarget,
    expert_samples,
    imitate,
)
from ragym.rl.train import check_keys
from ragym.rl.view.data import load as load_traces
from ragym.rl.view.site import Site

logger = logging.getLogger(__name__)

COPY_PRETRAIN_RECORD = "copy_pretrain.json"
"""What copy pretraining did (``ragym.rl.tiny.copy_pretrain.pretrain_summary``), in the tiny policy's folder."""
SUMMARY_KEYS = {
    "reward_mean": "reward/total",
    "outcome": "reward/outcome",
    "format": "reward/format",
    "verification": "reward/verification",
    "ident_acc": "episode/ident_acc",
    "avg_rejections": "episode/rejections",
    "avg_turns": "episode/turns",
    "response_length": "episode/response_length",
}
"""metrics.json name -> engine metric name."""


def _kb_corpus(kb_dir: Path, repeats: int) -> Iterator[str]:
    """Entity names and passages of the KB, so the tokenizer gives names few tokens (copyable, short)."""
    names = pd.read_parquet(kb_dir / "entities.parquet")["name"].tolist()
    texts = pd.read_parquet(kb_dir / "passages.parquet")["text"].tolist()
    for _ in range(repeats):
        yield from names
        yield from texts


def _build_inputs(
    out: Path, reader: RecipeReader, seed: int, policy_from: Path | None = None
) -> tuple[Path, Path]:
    """The demo KB and the tiny policy before its warm start under ``out`` (built once; copied from
    ``policy_from`` when given: a whole tiny policy of the same seed and settings, ``reusable_policy``)."""
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb
    from ragym.rl.tiny.copy_pretrain import CopyPretrainConfig
    from ragym.rl.tiny.policy import TinyPolicyConfig, build_tiny_policy, default_corpus

    kb_dir, policy_dir = out / "kb", out / "tiny_policy"
    preset, arch = reader.get("ragym.demo.kb_preset"), reader.get("ragym.demo.arch")
    repeats = reader.get("ragym.demo.kb_corpus_repeats")
    if not (kb_dir / "kb.json").exists():
        build_kb(kb_dir, PRESETS[preset], seed=0, name="synthetic-demo")
    sizes = TinyPolicyConfig(**reader.get("ragym.demo.policy"))
    pretrain = CopyPretrainConfig(**reader.get("ragym.demo.copy_pretrain"), seed=seed)
    if not (policy_dir / "config.json").exists():
        # Built aside and renamed when whole: a demo killed during copy pretraining must not resume from a
        # policy that skipped it.
        building = out / "tiny_policy.building"
        shutil.rmtree(building, ignore_errors=True)
        if policy_from is not None:
            shutil.copytree(policy_from, building)
            logger.info("tiny policy: copied from %s (same seed and ragym.demo settings)", policy_from)
        else:
            corpus = itertools.chain(default_corpus(), _kb_corpus(kb_dir, repeats))
            build_tiny_policy(arch, building, corpus=corpus, seed=seed, config=sizes)
            if pretrain.steps:
                _copy_pretrain(building, pretrain)
        shutil.rmtree(policy_dir, ignore_errors=True)  # a folder without config.json holds nothing usable
        building.rename(policy_dir)
    return kb_dir, policy_dir


def _copy_pretrain(policy_dir: Path, cfg: Any) -> None:
    """Copy-pretrain the tiny policy in ``policy_dir`` on its ordinary tokens (``ragym.rl.tiny.copy_pretrain``)."""
    import torch

    from ragym.rl.models import load_policy
    from ragym.rl.tiny.copy_pretrain import LOSS_WINDOW, copy_pretrain, pretrain_summary

    start = time.perf_counter()
    model, tokenizer, _ = load_policy(policy_dir)
    special = set(tokenizer.all_special_ids)
    ordinary = torch.tensor([i for i in range(len(tokenizer)) if i not in special])
    losses = copy_pretrain(model, ordinary, cfg)
    model.save_pretrained(policy_dir, safe_serialization=True)
    summary = {**pretrain_summary(losses, cfg), "seconds": time.perf_counter() - start}
    (policy_dir / COPY_PRETRAIN_RECORD).write_text(json.dumps(summary, indent=1))
    logger.info(
        "copy pretraining: %d steps, loss %.3f -> %.3f (mean of the last %d) in %.1fs",
        summary["steps"],
        summary["first_loss"],
        summary["tail_loss"],
        LOSS_WINDOW,
        summary["seconds"],
    )
    if not summary["met"]:
        logger.warning(
            "copy pretraining did not reach its loss: %.3f > ragym.demo.copy_pretrain.until_loss=%s after %d "
            "steps (the policy has not learnt to copy from its context; the warm start's copy target decides)",
            summary["tail_loss"],
            cfg.until_loss,
            summary["steps"],
        )


def _warm_start(
    config: Any, reader: RecipeReader, policy_dir: Path, out_dir: Path, seed: int
) -> dict[str, Any]:
    """Imitate the noisy expert on training rows and save the result as a HF model in ``out_dir``."""
    from ragym.rl.models import load_policy

    cfg = WarmStartConfig(**reader.get("ragym.demo.warm_start"), seed=seed)
    logger.info("warm start: %s", cfg)
    start = time.perf_counter()
    asyncio.set_event_loop(asyncio.new_event_loop())
    model, tokenizer, processor = load_policy(warm_start_init(policy_dir, cfg.init_from))
    rows = read_rows(reader.get("data.train_files"), cfg.num_episodes)

    def loop_factory(server: Any) -> Any:
        return make_agent_loop(config, server, tokenizer, processor)

    values = copyable_values(tokenizer, rows) if cfg.swap_values else None
    epochs = [
        expert_samples(rows, loop_factory, tokenizer, cfg, epoch, values) for epoch in range(cfg.epochs)
    ]
    logger.info(
        "warm start: %d x %d expert episodes in %.1fs", len(epochs), len(rows), time.perf_counter() - start
    )
    # A token's id (convert_tokens_to_ids's type also covers a list of tokens).
    ids = {
        token: cast(int, tokenizer.convert_tokens_to_ids(token))
        for token in ["<rerank>", *(f"<{tag}>" for tag in COPY_TAGS), *(f"</{tag}>" for tag in COPY_TAGS)]
    }
    decision_after = ids["<rerank>"]
    # Where the expert copies from an observation: the confirmed name into a search call, a value into the answer.
    copy_spans = [(ids[f"<{tag}>"], ids[f"</{tag}>"]) for tag in COPY_TAGS]
    losses = imitate(model, ImageInputs(processor.image_processor), epochs, cfg, decision_after, copy_spans)
    model.save_pretrained(out_dir, safe_serialization=True)
    processor.save_pretrained(out_dir)
    asyncio.get_event_loop().close()
    info = {
        "episodes": len(rows),
        "epochs": len(epochs),
        "steps": len(losses),
        "first_loss": losses[0],
        "final_loss": losses[-1],
        "seconds": time.perf_counter() - start,
        "noise": cfg.noise,
        "reject_noise": cfg.reject_noise,
        "protocol_share": cfg.protocol_share,
        "copy_weight": cfg.copy_weight,
        "init_from": cfg.init_from,
    }
    (out_dir / "warm_start.json").write_text(json.dumps(info, indent=2))
    logger.info("warm start: %s", info)
    return info


def copyable_values(tokenizer: Any, rows: list[dict[str, Any]]) -> ValueSwap:
    """What the demo's expert copies, by kind (``ragym.demo.warm_start.swap_values``): each word of the KB's entity
    names by its place in the name (``Amber`` / ``Vartor`` / ``Moth``), then the training rows' answers (the
    regions, years, ... the passages state). Read from the KB and the training rows, never the held-out ones."""
    kb_dirs = {json.loads(row["extra_info"]["env_kwargs"])["kb_dir"] for row in rows}
    names = [n for kb in sorted(kb_dirs) for n in pd.read_parquet(Path(kb) / "entities.parquet")["name"]]
    width = {len(n.split()) for n in names}
    if len(width) != 1:
        raise ValueError(f"swap_values needs names of one length in words; the KB's have {sorted(width)}")
    places = [sorted({n.split()[i] for n in names}) for i in range(width.pop())]
    answers = sorted(
        {a for row in rows for a in json.loads(row["extra_info"]["env_options"]).get("answers", [])}
    )
    return ValueSwap.from_words(tokenizer, [*places, *([answers] if answers else [])])


RESTART_SEEDS = 1000
"""Attempt ``k`` of a restarted warm start draws its expert noise, shuffles and swaps with seed ``seed + k * 1000``
(``ragym.demo.warm_start_target.restarts``); the copy-pretrained tiny policy and GRPO keep ``seed``."""


def warm_start_until_target(
    config: Any, reader: RecipeReader, policy_dir: Path, warm_dir: Path, seed: int
) -> dict[str, Any]:
    """The warm start into ``warm_dir``, imitated again with the next draws while it misses its target on the
    training questions (``ragym.demo.warm_start_target.restarts`` times at most; the held-out check that follows,
    ``check_warm_start``, decides as before). Each attempt is built aside and the one kept is renamed into place
    whole; its ``warm_start.json`` lists every attempt: its seed and what it missed on the training questions."""
    target = WarmStartTarget(**reader.get("ragym.demo.warm_start_target"))
    if not target.restarts:
        return _warm_start(config, reader, policy_dir, warm_dir, seed)
    warm = WarmStartConfig(**reader.get("ragym.demo.warm_start"), seed=seed)
    rows, values = training_questions(reader, policy_dir)  # what every attempt is read on
    confirm = expert_confirm(rows, warm.reject_noise, warm.noise)
    attempts: list[dict[str, Any]] = []
    folder = warm_dir
    for attempt in range(target.restarts + 1):
        draws = seed + RESTART_SEEDS * attempt
        folder = warm_dir.with_name(f"{warm_dir.name}.attempt{attempt}")
        shutil.rmtree(folder, ignore_errors=True)
        _warm_start(config, reader, policy_dir, folder, draws)
        probe = training_probe(folder, config, rows, values, warm.quote)
        misses = warm_start_misses(probe, target, confirm)
        attempts.append(
            {"attempt": attempt, "seed": draws, "training_probe": target_figures(probe), "missed": misses}
        )
        if not misses:
            break
        if attempt < target.restarts:
            logger.warning(
                "seed %d: warm start attempt %d (draws %d) missed its target on the training questions: %s; "
                "imitating again with draws %d",
                seed,
                attempt,
                draws,
                "; ".join(misses),
                draws + RESTART_SEEDS,
            )
    info = json.loads((folder / "warm_start.json").read_text())
    info["attempts"] = attempts
    (folder / "warm_start.json").write_text(json.dumps(info, indent=2))
    shutil.rmtree(warm_dir, ignore_errors=True)
    folder.rename(warm_dir)
    for other in warm_dir.parent.glob(f"{warm_dir.name}.attempt*"):
        shutil.rmtree(other, ignore_errors=True)
    return info


def training_questions(reader: RecipeReader, policy_dir: Path) -> tuple[list[dict[str, Any]], ValueSwap]:
    """The training questions a restarted warm start is checked on (as many as the held-out evaluation reads) and
    the values to swap in their episodes (``copyable_values``, in the tiny policy's tokenizer, which every attempt
    shares)."""
    from ragym.rl.models import load_processor

    train = reader.get("data.train_files")
    episodes = read_rows(train, reader.get("ragym.demo.warm_start.num_episodes"))
    values = copyable_values(load_processor(policy_dir).tokenizer, episodes)
    return read_rows(train, reader.get("data.val_max_samples")), values


def training_probe(
    policy_dir: Path, config: Any, rows: list[dict[str, Any]], values: ValueSwap, quote: bool
) -> dict[str, Any]:
    """``decision_margin`` of ``policy_dir`` on training questions ``rows`` (as many as the held-out evaluation
    reads), each episode's names and answers swapped for others of their kind (``values``), so that a recalled
    training name or answer does not pass for a copy: what the held-out check reads on unseen entities, without
    reading them."""
    return decision_margin(policy_dir, config, rows, quote, values=values)


def warm_start_init(policy_dir: Path, init_from: str | None) -> Path:
    """The policy a warm start begins from: the demo's tiny policy, or ``init_from`` (``ragym.demo.warm_start``),
    a finished warm start with the same tokenizer; anything else is refused in one line before any imitation."""
    if init_from is None:
        return policy_dir
    start = finished_warm_start(init_from)
    for name in ("config.json", "tokenizer.json"):  # the model's shape, and the KB's tokens
        if _file_settings(start / name) != _file_settings(policy_dir / name):
            raise UsageError(
                f"ragym.demo.warm_start.init_from={init_from}: its {name} differs from this run's tiny policy's "
                f"({policy_dir}): a policy of another size or KB cannot continue on these prompts"
            )
    return start


def finished_warm_start(init_from: str) -> Path:
    """``init_from`` as a folder, refused in one line unless a warm start finished there (its ``warm_start.json``)."""
    start = Path(init_from)
    if not (start / "warm_start.json").is_file():
        raise UsageError(
            f"ragym.demo.warm_start.init_from={init_from}: not a finished warm start (no warm_start.json there)"
        )
    return start


_SAVE_NOTES = frozenset({"dtype", "torch_dtype", "transformers_version"})
"""Config keys ``save_pretrained`` writes or drops that do not change the model (the weights are fp32 either way)."""


def _file_settings(path: Path) -> Any:
    """A policy folder's JSON file without ``_SAVE_NOTES`` at any depth."""

    def settings(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: settings(v) for k, v in value.items() if k not in _SAVE_NOTES}
        return value

    return settings(json.loads(path.read_text()))


def _summary(metrics: dict[str, float]) -> dict[str, Any]:
    out: dict[str, Any] = {name: metrics[key] for name, key in SUMMARY_KEYS.items()}
    out["actions"] = {k.split("/")[-1]: v for k, v in metrics.items() if k.startswith("episode/actions/")}
    return out


DEMO_STATE = "demo.json"
"""What a demo folder was built with (seed, ``ragym.demo`` settings): a re-run resumes only the same demo."""


def check_demo_folder(out: Path, seed: int, demo_settings: dict[str, Any]) -> None:
    """Refuse to resume a demo folder built with another seed or other ``ragym.demo`` settings; record them
    in a new folder. The KB, tiny policy, warm start and GRPO run in ``out`` all depend on them."""
    state_path = out / DEMO_STATE
    built = {"seed": seed, "ragym.demo": demo_settings}
    if not state_path.is_file():
        products = [name for name in ("kb", "tiny_policy", "warm_start", "grpo") if (out / name).exists()]
        if products:
            raise UsageError(
                f"{out} holds {', '.join(products)} but no {DEMO_STATE}, so what it was built "
                "with is unknown; give a new --out"
            )
        state_path.write_text(json.dumps(built, indent=1))
        return
    before = json.loads(state_path.read_text())
    if before["seed"] != seed:
        raise UsageError(
            f"{out} holds the demo of --seed {before['seed']} (its tiny policy, warm start and "
            f"GRPO run); rerun with --seed {before['seed']} to resume it, or give a new --out"
        )
    changed = sorted(
        k
        for k in set(before["ragym.demo"]) | set(demo_settings)
        if before["ragym.demo"].get(k) != demo_settings.get(k)
    )
    if changed:
        raise UsageError(
            f"{out} was built with other ragym.demo.{changed[0]} (was "
            f"{before['ragym.demo'].get(changed[0])!r}); set it back to resume, or give a new --out"
        )


def reusable_policy(folder: Path, seed: int, demo_settings: dict[str, Any]) -> Path | None:
    """``folder``'s tiny policy (built and copy-pretrained, before any warm start) when it is whole and was
    built with ``seed`` and these ``ragym.demo`` settings apart from the warm start's; else None."""
    state = folder / DEMO_STATE
    if not (folder / "tiny_policy" / "config.json").is_file() or not state.is_file():
        return None
    built = json.loads(state.read_text())

    def policy_settings(demo: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in demo.items() if k != "warm_start"}

    same = built["seed"] == seed and policy_settings(built["ragym.demo"]) == policy_settings(demo_settings)
    return folder / "tiny_policy" if same else None


def prepare(
    out: Path,
    seed: int,
    steps: int | None = None,
    recipe: str = DEMO_RECIPE,
    extra_overrides: list[str] | None = None,
    policy_from: Path | None = None,
) -> tuple[Any, RecipeReader, list[str]]:
    """The demo's inputs under ``out`` (KB, tiny policy, warm-started policy in ``out/warm_start``), each built
    only when missing; returns the composed recipe (pointing at them), its reader and its overrides.
    ``policy_from``: another demo folder whose tiny policy this one copies instead of building and
    copy-pretraining its own, when ``reusable_policy`` finds it the same (else it builds its own)."""
    out.mkdir(parents=True, exist_ok=True)
    overrides = [
        f"data.seed={seed}",
        f"trainer.default_local_dir={out / 'grpo'}",
        f"actor_rollout_ref.model.path={out / 'warm_start'}",
    ]
    overrides += [f"trainer.total_training_steps={steps}"] if steps is not None else []
    kb_dir = out / "kb"
    overrides += [
        f"data.train_files={kb_dir}/data/train.parquet",
        f"data.val_files={kb_dir}/data/test.parquet",
    ]
    overrides += list(extra_overrides or [])
    config = load_recipe(recipe, overrides)
    reader = RecipeReader(config)
    cfg = read_engine_config(reader)
    demo = reader.get("ragym.demo")
    # A bad target, or a key the run sets itself, is refused now, not after the warm start's minutes.
    WarmStartTarget(**reader.get("ragym.demo.warm_start_target"))
    init_from = reader.get("ragym.demo.warm_start.init_from")
    if init_from is not None and not (out / "warm_start" / "warm_start.json").is_file():
        finished_warm_start(init_from)  # before the KB and tiny policy are built
    check_cotrain(config)
    refuse_set_by_run(config)
    refuse_mistyped(config)
    check_demo_folder(out, seed, demo)
    use_torch_threads(cfg.num_threads)  # the warm start below runs before the trainer would set them
    shared = reusable_policy(policy_from, seed, demo) if policy_from is not None else None
    _, policy_dir = _build_inputs(out, reader, seed, shared)
    warm_dir = out / "warm_start"
    reader.get("ragym.demo.warm_start")  # read on resume too: the unused-key list must not depend on it
    if not (warm_dir / "warm_start.json").exists():
        warm_start_until_target(config, reader, policy_dir, warm_dir, seed)
    check_warm_start(config, reader, warm_dir, seed)
    return config, reader, overrides


def check_cotrain(config: Any) -> None:
    """A bad ``ragym.cotrain`` setting (an unknown key, a rate <= 0) is refused in its one line
    now; the trainer reads the section only after the KB, the copy pretraining and the warm start."""
    from ragym.rl.cotrain.config import SECTION, read_cotrain

    section = OmegaConf.select(config, SECTION, default=None)
    if section is not None:
        read_cotrain(OmegaConf.to_container(section, resolve=True))  # pyright: ignore[reportArgumentType]


def refuse_set_by_run(config: Any) -> None:
    """One line for a recipe that sets a key the run sets itself (``SET_BY_RUN``: the seeds come from ``--seed``)."""
    from ragym.rl.recipe.check import SET_BY_RUN

    given = [key for key in SET_BY_RUN if OmegaConf.select(config, key) is not None]
    if given:
        raise UsageError("; ".join(f"{key} is set by {SET_BY_RUN[key]}, not by the recipe" for key in given))


def refuse_mistyped(config: Any) -> None:
    """One line for each ``ragym`` setting of the wrong type (``section_type_problems``) or naming a reward metric no
    step logs (``reward_metric_problems``), before any minutes run."""
    from ragym.rl.recipe.check import reward_metric_problems, section_type_problems

    problems = section_type_problems(config) + reward_metric_problems(config)
    if problems:
        raise UsageError("; ".join(problems))


WARM_PROBE = "probe.json"
"""The warm start's decision margin and token accuracies (``ragym.rl.demo.margin``), in its folder."""


def target_figures(probe: dict[str, Any]) -> dict[str, float | None]:
    """The figures of ``probe`` that ``warm_start_misses`` judges: the decisions' mean probabilities (at the knife's
    edge a greedy share of 0 or 1 says nothing of a P(confirm a match) of 0.47) and the tokens' greedy shares.

    >>> target_figures({"confirm_match": {"mean": 0.47, "greedy_share": 0.0}, "reject_no_match": {"mean": 0.99},
    ...                 "copy": {"greedy_share": 0.998}, "other": {"greedy_share": 1.0}})
    {'confirm_match': 0.47, 'reject_no_match': 0.99, 'copy': 0.998, 'format': 1.0}
    """
    return {
        "confirm_match": probe["confirm_match"].get("mean"),
        "reject_no_match": probe["reject_no_match"].get("mean"),
        "copy": probe["copy"].get("greedy_share"),
        "format": probe["other"].get("greedy_share"),
    }


def warm_start_misses(probe: dict[str, Any], target: WarmStartTarget, expert_confirm: float) -> list[str]:
    """What the warm start missed of ``target`` (``ragym.demo.warm_start_target``), one phrase each.

    >>> probe = {"confirm_match": {"mean": 0.6}, "reject_no_match": {"mean": 0.99},
    ...          "copy": {"greedy_share": 0.5}, "other": {"greedy_share": 1.0}}
    >>> target = WarmStartTarget("stop", max_confirm_gap=0.15, min_confirm=None, min_reject=0.9,
    ...                          min_format_accuracy=0.95, min_copy_accuracy=0.8)
    >>> warm_start_misses(probe, target, 0.2)
    ["P(confirm a match) 0.600 is 0.400 from the expert's 0.200 (at most 0.15)", 'copy accuracy 0.500 < 0.8']
    >>> from dataclasses import replace
    >>> warm_start_misses(probe, replace(target, max_confirm_gap=None, min_confirm=0.7), 0.8)
    ['P(confirm a match) 0.600 < 0.7', 'copy accuracy 0.500 < 0.8']
    """
    misses = []
    figures = target_figures(probe)
    confirm, reject = figures["confirm_match"], figures["reject_no_match"]
    gap = target.max_confirm_gap
    if confirm is not None and gap is not None and abs(confirm - expert_confirm) > gap:
        misses.append(
            f"P(confirm a match) {confirm:.3f} is {abs(confirm - expert_confirm):.3f} from the expert's "
            f"{expert_confirm:.3f} (at most {gap})"
        )
    if confirm is not None and target.min_confirm is not None and confirm < target.min_confirm:
        misses.append(f"P(confirm a match) {confirm:.3f} < {target.min_confirm}")
    if reject is not None and reject < target.min_reject:
        misses.append(f"P(reject a batch without the match) {reject:.3f} < {target.min_reject}")
    for name, least in (("format", target.min_format_accuracy), ("copy", target.min_copy_accuracy)):
        share = figures[name]
        if least is not None and share is not None and share < least:
            misses.append(f"{name} accuracy {share:.3f} < {least}")
    return misses


def probe_policy(policy_dir: Path, config: Any, reader: RecipeReader) -> dict[str, Any]:
    """``decision_margin`` of ``policy_dir`` on the held-out rows the demo evaluates, replaying the expert its
    warm start imitated (``ragym.demo.warm_start.quote``)."""
    rows = read_rows(reader.get("data.val_files"), reader.get("data.val_max_samples"))
    return decision_margin(policy_dir, config, rows, reader.get("ragym.demo.warm_start.quote"))


def expert_confirm(rows: list[dict[str, Any]], reject_noise: float, noise: float) -> float:
    """What the probe's ``confirm_match`` (the token after ``<rerank>`` on a batch holding the match) is for the
    expert the warm start imitated: ``1 - reject_noise - noise`` where the env offers Reject, written after
    ``<rerank>``. Without it (``allow_reject`` false: Table 5's "w/o Reject") the expert skips the image instead and
    writes no ``<rerank>``, so every ``<rerank>`` it writes names the match: ``1 - noise``; the probe then reads
    whether the policy names the candidate the check matched, not its odds of confirming.

    >>> row = {"extra_info": {"env_kwargs": '{"allow_reject": false}'}}
    >>> expert_confirm([row], 0.5, 0.0), expert_confirm([{"extra_info": {"env_kwargs": "{}"}}], 0.5, 0.0)
    (1.0, 0.5)
    """
    offers_reject = all(json.loads(r["extra_info"]["env_kwargs"]).get("allow_reject", True) for r in rows)
    return 1.0 - noise - (reject_noise if offers_reject else 0.0)


def check_warm_start(config: Any, reader: RecipeReader, warm_dir: Path, seed: int) -> dict[str, Any]:
    """Probe the warm start on the held-out rows (once; kept in ``WARM_PROBE``) and hold it to
    ``ragym.demo.warm_start_target`` before GRPO starts: a warm start that missed its target is a failed run,
    never a row to average, so it stops the demo (``action: stop``) or is logged (``warn``)."""
    path = warm_dir / WARM_PROBE
    if not path.is_file():
        path.write_text(json.dumps(probe_policy(warm_dir, config, reader)))
    probe = json.loads(path.read_text())
    target = WarmStartTarget(**reader.get("ragym.demo.warm_start_target"))
    warm = reader.get("ragym.demo.warm_start")
    rows = read_rows(reader.get("data.val_files"), 1)
    misses = warm_start_misses(probe, target, expert_confirm(rows, warm["reject_noise"], warm["noise"]))
    if misses:
        text = f"seed {seed}: the warm start in {warm_dir} missed its target: {'; '.join(misses)}"
        if target.action == "stop":
            raise WarmStartMissed(text + " (ragym.demo.warm_start_target.action=warn runs GRPO anyway)")
        logger.warning("%s", text)
    return probe


def run_demo(
    out: Path,
    seed: int,
    steps: int | None,
    recipe: str = DEMO_RECIPE,
    extra_overrides: list[str] | None = None,
    task: str = DEFAULT_TASK,
) -> dict[str, Any]:
    """The whole demo of ``task`` (``ragym.rl.demo.tasks``) into ``out``; returns what ``metrics.json`` holds."""
    start = time.perf_counter()
    extra = task_overrides(task) + list(extra_overrides or [])
    config, reader, overrides = prepare(out, seed, steps, recipe, extra)
    cfg = read_engine_config(reader)
    warm = json.loads((out / "warm_start" / "warm_start.json").read_text())
    unused = check_keys(recipe, overrides, reader)
    logger.warning("recipe keys the local engine does not use: %s", ", ".join(unused) or "none")
    trainer = LocalTrainer(config, cfg)
    before_path = out / "before.json"
    if not before_path.exists():  # a resumed demo keeps the evaluation of the warm-start policy
        before_path.write_text(json.dumps(trainer.evaluate()))
    before = json.loads(before_path.read_text())
    trainer.fit()
    after = trainer.evaluate()
    trainer.save_model(out / "checkpoint")
    # Recorded like an exported model, so ``ragym eval --model DIR/checkpoint`` finds its recipe.
    record_export(
        out / "checkpoint",
        Path(cfg.output_dir) / f"global_step_{trainer.step}",
        "local",
        trainer.step,
        recipe,
        cast(dict[str, Any], OmegaConf.to_container(config, resolve=True)),
    )
    trainer.close()
    margins = {
        "before": json.loads((out / "warm_start" / WARM_PROBE).read_text()),
        "after": probe_policy(out / "checkpoint", config, reader),
    }
    history = [row for _, row in read_jsonl(out / "grpo" / "metrics.jsonl")]
    train = [h for h in history if "reward/total" in h]
    # Every held-out episode is traced (the recipe's trace_groups_per_step covers val_max_samples); a re-run of a
    # finished demo evaluates again, so the last episode of each row counts.
    traced = [line for _, line in read_jsonl(Path(cfg.output_dir) / "traces" / "episodes.jsonl")]
    seen = trained_entities(read_rows(reader.get("data.train_files")))  # seen: a training question's entity
    held_out = {
        step: outcome_by_identification(
            list({e["row_index"]: e for e in traced if e["phase"] == "val" and e["step"] == step}.values()),
            seen,
        )
        for step in (0, trainer.step)
    }
    result = {
        "seed": seed,
        "task": task,
        "before": {
            **_summary(before),
            "zero_adv_group_share": train[0]["grpo/zero_adv_group_share"],
            **held_out[0],
        },
        "after": {
            **_summary(after),
            "zero_adv_group_share": train[-1]["grpo/zero_adv_group_share"],
            **held_out[trainer.step],
        },
        "decision_margin": margins,
        "grpo_steps": len({h["step"] for h in train}),
        "warm_start": warm,
        "wall_time_s": time.perf_counter() - start,
        # ru_maxrss is in KiB on Linux: the peak resident memory of this process (the whole demo).
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "unused_recipe_keys": unused,
    }
    (out / "metrics.json").write_text(json.dumps(result, indent=2))
    Site(load_traces(out)).export(out / "view")  # the report links this static trajectory viewer
    write_report(out, result, train)
    return result


def main(argv: list[str]) -> int:
    """``ragym demo --out DIR [--task T] [--seed S] [--steps N]``."""
    args = parse_demo_args(argv)
    result = run_demo(args.out, args.seed, args.steps, args.recipe, args.overrides, args.task)
    before, after = result["before"], result["after"]
    confirmed = [
        f"{p['outcome_identified']:.2f}" if p["outcome_identified"] is not None else "-"
        for p in (before, after)
    ]
    print(
        f"held-out reward {before['reward_mean']:.3f} -> {after['reward_mean']:.3f} "
        f"(ident_acc {before['ident_acc']:.2f} -> {after['ident_acc']:.2f}, outcome on confirmed questions "
        f"{confirmed[0]} -> {confirmed[1]}) in {result['wall_time_s']:.0f}s, "
        f"peak RSS {result['peak_rss_mb']:.0f} MB; report: {args.out / 'report.md'}"
    )
    return 0
