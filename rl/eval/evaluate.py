"""``ragym eval --model DIR --data PARQUET --out DIR``: the agent loop with a policy, scored like the paper.

Per data source: answer accuracy with the official aggregation (InfoSeek: harmonic mean of the
unseen-question and unseen-entity splits when the rows carry that split; every split is also listed),
entity identification accuracy (Ident., MMAgent-R² Table 4) beside the retriever's R@1 and R@K ceiling
(K = candidates per batch x (Rej_max + 1), the pool reranking and rejection can reach), average rejections,
turns and the format-error rate; the MMAgent-R² Tables 2-4 columns (E-VQA Single-Hop / Two-Hop, InfoSeek
Unseen-Q / Unseen-E, MMhops Bridging / Comparison) with per-question-type columns (``EnvHooks.eval_tables``);
the text retriever SearchText used. Written as ``metrics.json``, ``metrics.md``, ``episodes.jsonl``,
``rollouts.jsonl`` (re-scorable with ``ragym score``) and plots.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from ragym.envs.events import events_of
from ragym.envs.hooks import env_hooks, one_env_per_hooks, tables_for
from ragym.envs.metrics import eval_figures
from ragym.envs.retrieval.search_settings import use_torch_threads
from ragym.rewards.infoseek import infoseek_final_score
from ragym.rewards.verl import episode_from_verl
from ragym.rl.core.checkpoints import missing_model_files
from ragym.rl.core.rollout import EpisodeResult, run_episodes
from ragym.rl.data.rows import load_rows
from ragym.rl.errors import UsageError
from ragym.rl.eval.args import EvalConfig, parse_eval_args
from ragym.rl.eval.backends import Backend, choose_backend, hf_backend, vllm_backend
from ragym.rl.lora import ADAPTER_CONFIG, adapter_base, is_adapter_dir
from ragym.rl.models import position_problem
from ragym.rl.recipe.counts import switch_problems
from ragym.rl.recipe.images import check_processor_factor, recipe_images, recipe_processor_kwargs
from ragym.rl.view.trace import TraceConfig, TraceWriter

logger = logging.getLogger(__name__)

TRUNCATIONS = ("truncated", "truncated_by_policy", "truncated_by_observation", "truncated_by_images")
"""Episode metrics of a budget's cut (``ragym.envs.metrics.shared_metrics``): the summary holds each one's share."""
OFFICIAL_SPLITS = ("unseen_question", "unseen_entity")
"""InfoSeek's two evaluation subsets (MMhops uses the same protocol); matched inside ``extra_info.split``."""


@dataclass
class EpisodeRecord:
    """What one evaluated episode contributes to the metrics."""

    data_source: str
    index: int
    split: str
    correct: float
    """Outcome score under the benchmark's official metric (0 or 1; relaxed scores may be fractional)."""
    answer: str | None
    turns: int
    rejections: int
    format_errors: int
    ident: float | None
    """Ident. of the episode (MMAgent-R² 4.2.2): 1 when every query image's confirmed entity is its gold
    entity, else 0 (0 too where the env raised); None where the env has no such metric or the row no gold
    (``ragym.envs.metrics``)."""
    gold_ranks: list[int | None]
    """Per query image: the gold entity's rank in the retriever's list within the pool, None if outside."""
    pool_size: int | None
    """Candidates reachable per image, K x (Rej_max + 1); None when the retriever ceiling is unknown."""
    episode: str
    """The episode as ``ragym.rewards.episode.Episode`` JSON: ``ragym score`` re-scores it with any reward recipe."""
    subset: str | None = None
    """The paper's column the row belongs to (E-VQA single_hop / two_hop, InfoSeek unseen_question /
    unseen_entity, MMhops bridge / compare: the env's ``EnvHooks.eval_tables``), None elsewhere."""
    question_type: str | None = None
    """The row's question type (InfoSeek / MMhops String, Numerical, Time; E-VQA templated, ...), if any."""
    text_retriever: str | None = None
    """What SearchText searched (``bm25`` or ``dense``, from the ``task`` event); None for other envs."""
    truncations: dict[str, float] = field(default_factory=dict)
    """Whether a budget cut the episode, and by what cause: its ``TRUNCATIONS`` episode metrics (1 or 0)."""
    started: bool = True
    """False when the env could not start (a ``reset`` ``episode_error``): no event names the row's golds, so
    ``eval_figures`` counts it as not identified wherever the other episodes report Ident."""


Ranker = Callable[[dict[str, Any]], tuple[list[int | None], int | None]]
"""Row -> (gold rank per query image, pool size): the retriever's ceiling, independent of the policy."""


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else dict(value)


def gold_ranks(row: dict[str, Any]) -> tuple[list[int | None], int | None]:
    """The retriever's ceiling for ``row``: its env's ``EnvHooks.gold_ranks`` (KB-VQA: gold ranks in the KB's
    served candidate lists), or no ranks for an env without one."""
    found = env_hooks(str(row["extra_info"]["env_id"])).gold_ranks
    return found(row) if found is not None else ([], None)


def row_groups(row: dict[str, Any]) -> tuple[str | None, str | None]:
    """(the column of its env's tables the row belongs to, its question type); (None, None) for an env without
    tables (``EnvHooks.eval_tables``)."""
    tables = env_hooks(str(row["extra_info"]["env_id"])).eval_tables
    return tables.groups(row) if tables is not None else (None, None)


def record_episode(row: dict[str, Any], result: EpisodeResult, ranker: Ranker) -> EpisodeRecord:
    """Everything the metrics need from one scored episode, read from its events."""
    events = result.output.extra_fields["events"]
    metrics = result.output.extra_fields["episode_metrics"]  # ragym.envs.metrics, computed by the agent loop
    answers = events_of(events, "answer")
    ranks, pool = ranker(row)
    extra_info = {**dict(row["extra_info"]), **result.output.extra_fields}
    episode = episode_from_verl(row["data_source"], row["reward_model"]["ground_truth"], extra_info)
    subset, question_type = row_groups(row)
    tasks = events_of(events, "task")
    return EpisodeRecord(
        data_source=str(row["data_source"]),
        index=int(row["extra_info"]["index"]),
        split=str(row["extra_info"].get("split", "")),
        correct=float(result.score.get("reward/outcome", 0.0)),
        answer=answers[-1]["text"] if answers else None,
        turns=int(metrics["turns"]),
        rejections=int(metrics.get("rejections") or 0),
        format_errors=int(metrics["format_errors"]),
        ident=metrics.get("ident_acc"),
        gold_ranks=ranks,
        pool_size=pool,
        episode=episode.to_json(),
        subset=subset,
        question_type=question_type,
        text_retriever=tasks[0]["text_retriever"] if tasks else None,
        truncations={key: float(metrics[key]) for key in TRUNCATIONS},
        started=not any(e["stage"] == "reset" for e in events_of(events, "episode_error")),
    )


def _mean(values: list[float]) -> float | None:
    return float(np.mean(values)) if values else None


def official_accuracy(records: list[EpisodeRecord]) -> tuple[float, str]:
    """(accuracy, how): the InfoSeek harmonic mean when the episodes are one benchmark's and both unseen splits are
    present, else the mean (over several benchmarks, every episode counts, not InfoSeek's alone)."""
    by_split = {name: [r.correct for r in records if name in r.split] for name in OFFICIAL_SPLITS}
    if len({r.data_source for r in records}) == 1 and all(by_split.values()):
        return infoseek_final_score(*(by_split[name] for name in OFFICIAL_SPLITS)), "harmonic mean of splits"
    return float(np.mean([r.correct for r in records])), "mean"


def summarize_source(records: list[EpisodeRecord]) -> dict[str, Any]:
    """The paper's metrics for the episodes of one data source (its Tables 2-4 columns under ``paper``)."""
    accuracy, how = official_accuracy(records)
    turns = sum(r.turns for r in records)
    sources = {r.data_source for r in records}
    summary = {
        **eval_figures(records),
        "accuracy": accuracy,
        "accuracy_aggregation": how,
        "accuracy_by_split": {
            s: _mean([r.correct for r in records if r.split == s]) for s in sorted({r.split for r in records})
        },
        # Which text search the numbers came from (the task event's; the paper's is dense E5).
        "text_retriever": dict(Counter(r.text_retriever for r in records if r.text_retriever is not None)),
        "pool_size": next((r.pool_size for r in records if r.pool_size is not None), None),
        "avg_rejections": float(np.mean([r.rejections for r in records])),
        "avg_turns": float(np.mean([r.turns for r in records])),
        "format_error_rate": sum(r.format_errors for r in records) / max(1, turns),
        "answered": float(np.mean([r.answer is not None for r in records])),
        # The share of episodes a budget cut, by cause: an accuracy over cut episodes is not one over whole ones.
        **{key: float(np.mean([r.truncations.get(key, 0.0) for r in records])) for key in TRUNCATIONS},
        # Each env's own figures (EnvHooks.eval_summary; R3G: accuracy and Recall@1/3/5 overall and per
        # scenario), under the env's name; None where no episode is the env's.
        **env_summaries([(json.loads(r.episode), r.correct) for r in records]),
    }
    tables = tables_for(next(iter(sources))) if len(sources) == 1 else None  # a paper reports one benchmark
    summary["paper"] = tables.columns(next(iter(sources)), records, summary) if tables is not None else None
    return summary


def env_summaries(episodes: list[tuple[dict[str, Any], float]]) -> dict[str, Any]:
    """Every env's ``EnvHooks.eval_summary`` of its own episodes' (events, correct) pairs, by the env's name, from
    (``Episode`` JSON, correct) pairs: the episode's ``env_id`` says whose it is, as no event of an episode whose
    env could not start does."""
    summaries = {}
    for hooks in map(env_hooks, one_env_per_hooks("eval_summary")):
        assert hooks.eval_summary is not None  # one_env_per_hooks keeps the hooks that define it
        own = [
            (e["events"], correct)
            for e, correct in episodes
            if e["env_id"] is not None and env_hooks(e["env_id"]).name == hooks.name
        ]
        summaries[hooks.name] = hooks.eval_summary(own)
    return summaries


def summarize(records: list[EpisodeRecord]) -> dict[str, Any]:
    """Per-data-source metrics plus the same over all episodes."""
    sources = sorted({r.data_source for r in records})
    return {
        "by_source": {s: summarize_source([r for r in records if r.data_source == s]) for s in sources},
        "all": summarize_source(records),
    }


def eval_reward(cfg: EvalConfig) -> dict[str, Any]:
    """The reward kwargs episodes are scored with: the outcome term alone, under the official scorers' rules."""
    params = {
        "time_year_tolerance": cfg.time_year_tolerance,
        "bem_model_path": cfg.bem_model_path,
        "no_number_as_zero": cfg.no_number_as_zero,
    }
    return {"recipe": {"terms": {"outcome": {"weight": 1.0, "params": params}}}}


DO_SAMPLE = "actor_rollout_ref.rollout.val_kwargs.do_sample"
"""The recipe's switch between sampling and greedy decoding in evaluation."""


def sampling_from(config: DictConfig) -> dict[str, Any]:
    """The recipe's validation sampling (greedy unless ``val_kwargs.do_sample``)."""
    val = config.actor_rollout_ref.rollout.val_kwargs
    if not val.do_sample:
        return {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "logprobs": False}
    return {"temperature": val.temperature, "top_p": val.top_p, "top_k": val.top_k, "logprobs": False}


def run_eval(
    rows: list[dict[str, Any]],
    backend: Backend,
    config: DictConfig,
    cfg: EvalConfig,
    ranker: Ranker = gold_ranks,
    on_batch: Callable[[list[EpisodeRecord]], None] | None = None,
    trace: TraceWriter | None = None,
) -> list[EpisodeRecord]:
    """One greedy episode per row through the ragym agent loop on ``backend``, in batches with a progress bar;
    ``on_batch`` gets each batch's records as soon as they exist (``ragym eval`` streams them to disk)."""
    from ragym.rl.agent_loop.loop import make_agent_loop

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)  # verl's agent loop binds to the current loop at construction
    agent_loop = make_agent_loop(config, backend.server, backend.tokenizer, backend.processor)
    reward = eval_reward(cfg)
    records: list[EpisodeRecord] = []
    try:
        for start in tqdm(range(0, len(rows), cfg.batch_size), desc="eval", unit="batch", dynamic_ncols=True):
            batch = rows[start : start + cfg.batch_size]
            results, _ = run_episodes(
                loop, agent_loop, backend.server, batch, 1, sampling_from(config), reward, "eval"
            )
            if trace is not None:  # episodes for ``ragym view``, up to the writer's budget
                trace.record(0, "eval", batch, results)
            done = [record_episode(row, result, ranker) for row, result in zip(batch, results, strict=True)]
            records += done
            if on_batch is not None:
                on_batch(done)
    finally:
        loop.close()
    return records


def eval_config(model: Path, recipe: str | None, overrides: list[str]) -> DictConfig:
    """The recipe the agent loop runs with: ``--recipe``, else the one ``ragym export`` recorded."""
    from ragym.rl.recipe.compose import load_recipe

    exported = model / "ragym_export.json"
    if not (model / "config.json").is_file() and not is_adapter_dir(model):
        raise UsageError(
            f"--model {model} is not a Hugging Face model folder (no config.json) nor a peft adapter "
            f"folder (no {ADAPTER_CONFIG}); give the folder `ragym export` wrote, or a run's "
            "global_step_N / the demo's checkpoint/"
        )
    if recipe is not None:
        config = load_recipe(recipe, overrides)
    elif exported.is_file() and _export_record(exported).get("recipe"):
        # A mapping merged with a dotlist's mapping is a DictConfig (merge's type also covers lists).
        config = cast(
            DictConfig,
            OmegaConf.merge(
                OmegaConf.create(_export_record(exported)["recipe"]),
                OmegaConf.from_dotlist(overrides),
            ),
        )
    else:
        raise UsageError(f"{model} records no recipe (no ragym_export.json); pass --recipe RECIPE")
    # eval decodes greedily unless do_sample: a word from the command line ("no") would read as true
    problems = switch_problems(config, [DO_SAMPLE])
    if problems:
        raise UsageError(problems[0])
    config.actor_rollout_ref.model.path = str(model)
    return config


def _export_record(path: Path) -> dict[str, Any]:
    """``ragym_export.json``; one that is not JSON (an export cut short) is a usage error naming it."""
    try:
        return json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UsageError(
            f"{path} is not JSON ({err}): export the checkpoint again, or pass --recipe RECIPE"
        ) from err


def check_model(model: Path) -> None:
    """Refuse, naming the file, a model folder (or an adapter folder's base) that lacks a file it loads or whose
    weights a copy cut short: transformers would fail on it with a traceback. A hub id (no such folder) passes."""
    if not model.is_dir():
        return
    adapters = is_adapter_dir(model)
    missing = missing_model_files(model, adapters)
    if missing:
        raise UsageError(
            f"--model {model} is incomplete, it has no {', '.join(missing)}: restore the files, or export the "
            "checkpoint again"
        )
    if adapters:
        check_model(adapter_base(model))


def check_out(out: Path, model: Path) -> None:
    """Refuse, before the model loads, an ``--out`` that is a file or lies in the model folder (its results, traces
    and plots would mix with the model's files, and a second run there would remove the first's)."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file: give a folder for the results")
    if model.is_dir() and (out.resolve() == model.resolve() or model.resolve() in out.resolve().parents):
        raise UsageError(f"--out {out} lies in --model {model}: give a folder outside the model's")


def main(argv: list[str]) -> int:
    """``ragym eval --model DIR --data PARQUET [--data ...] --out DIR [--recipe R] [overrides...]``."""
    from ragym.rl.eval.report import ReportStream

    args = parse_eval_args(argv)
    check_model(args.model)
    check_out(args.out, args.model)
    cfg = EvalConfig(
        batch_size=args.batch_size,
        time_year_tolerance=args.time_year_tolerance,
        bem_model_path=args.bem_model_path,
    )
    config = eval_config(args.model, args.recipe, args.overrides)
    row_set = load_rows(args.data, args.limit, args.bad_rows)
    rows = row_set.rows
    rollout = config.actor_rollout_ref.rollout
    pixels = recipe_processor_kwargs(config)  # the recipe's image budget, as training tokenised images
    if choose_backend(args.backend) == "vllm":
        backend = vllm_backend(
            args.model,
            rollout.prompt_length + rollout.response_length,
            rollout.gpu_memory_utilization,
            pixels,
        )
    else:
        # vLLM refuses a length past the model's positions; the Hugging Face model would run it on positions it never had.
        problem = position_problem(args.model, rollout.prompt_length, rollout.response_length)
        if problem is not None:
            raise UsageError(problem)
        use_torch_threads()  # on CPU (and for a GPU's host-side work): robust beside other processes
        backend = hf_backend(args.model, rollout.response_length, cfg.batch_wait_s, cfg.seed, pixels)
    check_processor_factor(recipe_images(config), backend.processor)
    logger.info("evaluating %s on %d rows with the %s backend", args.model, len(rows), backend.name)
    trace = TraceWriter(args.out / "traces", backend.tokenizer, TraceConfig(args.trace_episodes))
    stream, records = ReportStream(args.out), []

    def keep(done: list[EpisodeRecord]) -> None:
        records.extend(done)
        stream.add([asdict(r) for r in done])

    try:
        run_eval(rows, backend, config, cfg, trace=trace, on_batch=keep)
    finally:  # what was evaluated is always written; ``complete`` says whether every valid row was
        metrics = stream.finish(
            {
                "model": str(args.model),
                "backend": backend.name,
                "data": args.data,
                "complete": len(records) == len(rows),
                "num_rows": len(rows),
                "bad_rows": [bad.describe() for bad in row_set.bad],
                **summarize(records),
            }
        )
    print(json.dumps(metrics["all"], indent=1))
    for source, summary in metrics["by_source"].items():
        tables = tables_for(source) if summary.get("paper") else None
        for note in tables.notes(source, summary["paper"]) if tables is not None else []:
            print(f"note: {note}")  # why a column of the paper's tables is n/a (also in metrics.md)
    return 0
