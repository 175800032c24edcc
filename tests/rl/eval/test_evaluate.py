"""``ragym eval``: metrics from scripted episodes on a real synthetic KB, the official aggregation, the report."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from verl.workers.rollout.replica import TokenOutput

from ragym.data_prep.synthetic_kb import main as build_kb
from ragym.envs.image_cache import read_image
from ragym.envs.kbvqa.kb import load_kb
from ragym.rewards.episode import Episode
from ragym.rl.core.hf_server import ServerStats
from ragym.rl.engine.trainer import read_rows
from ragym.rl.eval.backends import Backend
from ragym.rl.eval.evaluate import (
    EpisodeRecord,
    EvalConfig,
    eval_config,
    eval_reward,
    gold_ranks,
    run_eval,
    summarize,
    summarize_source,
)
from ragym.rl.eval.report import write_report
from ragym.rl.models import load_processor
from ragym.rl.recipe.compose import load_recipe

K = 5  # candidates per SearchImage batch (KBVQAConfig default, the paper's K)


class RowScriptedServer:
    """verl's generate over per-row scripts, keyed by the row's first query image (the first image sent)."""

    def __init__(self, tokenizer: Any, scripts: dict[bytes, list[str]]) -> None:
        self.tokenizer, self.scripts = tokenizer, scripts
        self.stats = ServerStats()

    def track_episodes(self, num_episodes: int) -> None:
        pass

    def episode_done(self) -> None:
        pass

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: list[Any] | None = None,
        **kwargs: Any,
    ) -> TokenOutput:
        script = self.scripts[np.asarray(image_data[0]).tobytes()]
        # The turn from the conversation itself (request ids may repeat across episodes under full_determinism):
        # system, user and the generation prompt open 3 messages; each earlier turn adds an assistant and a user.
        turn = (prompt_ids.count(self.tokenizer.convert_tokens_to_ids("<|im_start|>")) - 3) // 2
        return TokenOutput(token_ids=self.tokenizer.encode(script[turn], add_special_tokens=False))


def _turn(action: str) -> str:
    return f"<reason>r</reason>{action}"


def _key(row: dict[str, Any]) -> bytes:
    """The script key of a row: the pixels of its first query image."""
    kb_dir = json.loads(row["extra_info"]["env_kwargs"])["kb_dir"]
    image = json.loads(row["extra_info"]["env_options"])["query_images"][0]
    return read_image(Path(kb_dir) / image).tobytes()


@pytest.fixture(scope="module")
def kb_rows(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    kb = tmp_path_factory.mktemp("kb")
    assert build_kb(["--out", str(kb), "--preset", "tiny"]) == 0
    return kb, read_rows(str(kb / "data" / "test.parquet"))


def _evaluate(
    rows: list[dict[str, Any]], scripts: dict[bytes, list[str]], policy: Path, response_length: int = 4096
) -> list[EpisodeRecord]:
    processor = load_processor(policy)
    backend = Backend(
        RowScriptedServer(processor.tokenizer, scripts), processor.tokenizer, processor, "scripted"
    )
    config = load_recipe(
        "kbvqa_tiny_cpu",
        [f"actor_rollout_ref.model.path={policy}", f"data.max_response_length={response_length}"],
    )
    return run_eval(rows, backend, config, EvalConfig(batch_size=4))


def test_oracle_script_gives_the_expected_metrics(
    kb_rows: tuple[Path, list[dict[str, Any]]], tiny_policy_dir: Callable[[str], Path]
) -> None:
    """Search image 1, rerank its gold entity by name, answer right: Ident. (every image of a row matched) is
    the share of single-image rows whose gold entity is in the first batch."""
    kb_dir, rows = kb_rows
    names = dict(zip(load_kb(kb_dir).entities["entity_id"], load_kb(kb_dir).entities["name"], strict=True))
    scripts = {}
    for row in rows:
        options = json.loads(row["extra_info"]["env_options"])
        scripts[_key(row)] = [
            _turn("<search_call>SearchImage(1)</search_call>"),
            _turn(f"<rerank>{names[options['gold_entities'][0]]}</rerank>"),
            _turn(f"<answer>{options['answers'][0]}</answer>"),
        ]
    records = _evaluate(rows, scripts, tiny_policy_dir("qwen2_5_vl"))
    metrics = summarize(records)["all"]
    ranks = [gold_ranks(row)[0] for row in rows]
    first_batch_hits = sum(len(r) == 1 and r[0] is not None and r[0] < K for r in ranks)
    assert metrics["num_episodes"] == len(rows)
    assert metrics["accuracy"] == 1.0
    assert metrics["ident"] == pytest.approx(first_batch_hits / len(rows))
    assert (metrics["avg_turns"], metrics["avg_rejections"], metrics["format_error_rate"]) == (3.0, 0.0, 0.0)
    assert metrics["retriever_r1"] == pytest.approx(
        sum(r == 0 for rr in ranks for r in rr) / sum(map(len, ranks))
    )
    assert metrics["pool_size"] == K * 3 and metrics["retriever_r_pool"] >= metrics["retriever_r1"]


def test_format_errors_rejections_and_wrong_answers_are_counted(
    kb_rows: tuple[Path, list[dict[str, Any]]], tiny_policy_dir: Callable[[str], Path]
) -> None:
    _, rows = kb_rows
    rows = rows[:4]
    script = [
        "no tags at all",
        _turn("<search_call>SearchImage(1)</search_call>"),
        _turn("<rerank>Reject()</rerank>"),
        _turn("<answer>certainly not this</answer>"),
    ]
    scripts = {_key(row): script for row in rows}
    metrics = summarize(_evaluate(rows, scripts, tiny_policy_dir("qwen2_5_vl")))["all"]
    assert metrics["accuracy"] == 0.0 and metrics["ident"] == 0.0
    assert (metrics["avg_turns"], metrics["avg_rejections"], metrics["format_error_rate"]) == (4.0, 1.0, 0.25)


def test_episodes_a_budget_cut_are_counted_by_cause(
    kb_rows: tuple[Path, list[dict[str, Any]]], tiny_policy_dir: Callable[[str], Path]
) -> None:
    """docs/scale.md: ``ragym eval``'s summary splits ``truncated`` by cause, as training's ``episode/*`` do; the
    summary had no truncation at all, so an accuracy over cut episodes read like one over whole ones."""
    _, rows = kb_rows
    rows = rows[:2]
    script = [_turn("<search_call>SearchImage(1)</search_call>"), _turn("<answer>x</answer>")]
    scripts = {_key(row): script for row in rows}
    policy = tiny_policy_dir("qwen2_5_vl")
    cuts = ("truncated", "truncated_by_policy", "truncated_by_observation", "truncated_by_images")
    whole = summarize(_evaluate(rows, scripts, policy))
    assert [whole["all"][key] for key in cuts] == [0.0, 0.0, 0.0, 0.0]
    # Room for the search turn, not for the batch of candidate images it brings back.
    cut = summarize(_evaluate(rows, scripts, policy, response_length=40))
    for summary in (cut["all"], *cut["by_source"].values()):
        assert [summary[key] for key in cuts] == [1.0, 0.0, 1.0, 1.0]


def _record(source: str, split: str, correct: float) -> EpisodeRecord:
    episode = Episode(source, ["t"], [], "a", False, {}).to_json()
    return EpisodeRecord(source, 0, split, correct, "a", 2, 0, 0, 1.0, [0], 15, episode)


@pytest.mark.parametrize(
    ("records", "accuracy", "how"),
    [
        # InfoSeek's official score: harmonic mean of the unseen-question (1/2) and unseen-entity (3/4) splits.
        (
            [_record("infoseek", "val_unseen_question", c) for c in (1, 0)]
            + [_record("infoseek", "val_unseen_entity", c) for c in (1, 1, 1, 0)],
            0.6,
            "harmonic mean of splits",
        ),
        # One split only: the plain mean (no harmonic mean without both splits).
        ([_record("infoseek", "val_unseen_question", c) for c in (1, 0, 0, 0)], 0.25, "mean"),
        ([_record("evqa", "test", c) for c in (1, 1, 0)], 2 / 3, "mean"),
        # Several benchmarks (``ragym eval``'s "all", a ``prep mix`` file): every episode counts, 3 of 6, not
        # InfoSeek's harmonic mean (1/1 and 1/2: 2/3) over its rows alone.
        (
            [_record("infoseek", "val_unseen_question", 1), _record("infoseek", "val_unseen_entity", 1)]
            + [_record("infoseek", "val_unseen_entity", 0)]
            + [_record("evqa", "test", c) for c in (1, 0, 0)],
            0.5,
            "mean",
        ),
    ],
)
def test_official_aggregation(records: list[EpisodeRecord], accuracy: float, how: str) -> None:
    summary = summarize_source(records)
    assert summary["accuracy"] == pytest.approx(accuracy)
    assert summary["accuracy_aggregation"] == how


def test_infoseek_accuracy_of_two_zero_splits_is_printed_as_zero() -> None:
    records = [_record("infoseek", f"val_unseen_{split}", 0.0) for split in ("question", "entity")]
    summary = summarize_source(records)
    assert summary["accuracy_aggregation"] == "harmonic mean of splits"
    assert (
        json.dumps(summary["accuracy"]) == "0.0"
    )  # not upstream's 1e-12 stand-in (approx(0) would accept it)


def test_report_files(tmp_path: Path) -> None:
    records = [_record("infoseek", "val_unseen_question", 1.0), _record("evqa", "test", 0.0)]
    metrics = {"model": "m", "backend": "hf", "data": ["x.parquet"], **summarize(records)}
    write_report(metrics, [r.__dict__ for r in records], tmp_path)
    assert json.loads((tmp_path / "metrics.json").read_text())["by_source"]["evqa"]["accuracy"] == 0.0
    table = (tmp_path / "metrics.md").read_text()
    assert "| infoseek | 1 | 100.0 | 100.0 | 100.0 | 100.0 |" in table and "| evqa | 1 | 0.0 |" in table
    assert len((tmp_path / "episodes.jsonl").read_text().splitlines()) == 2
    assert (tmp_path / "accuracy_ident_recall.png").stat().st_size > 0
    assert (tmp_path / "turns_rejections.png").stat().st_size > 0


def test_a_run_into_an_earlier_runs_folder_keeps_none_of_its_files(tmp_path: Path) -> None:
    """A second evaluation into the same ``--out`` that ran no episode (``--limit 0``, every row bad, stopped at
    once) left the first run's plots beside its own metrics, as if they were its own."""
    records = [_record("infoseek", "val_unseen_question", 1.0)]
    write_report(
        {"model": "a", "backend": "hf", "data": ["x.parquet"], **summarize(records)},
        [r.__dict__ for r in records],
        tmp_path,
    )
    assert (tmp_path / "accuracy_ident_recall.png").is_file()
    write_report({"model": "b", "backend": "hf", "data": ["x.parquet"], **summarize([])}, [], tmp_path)
    assert json.loads((tmp_path / "metrics.json").read_text())["model"] == "b"
    assert (tmp_path / "episodes.jsonl").read_text() == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "episodes.jsonl",
        "metrics.json",
        "metrics.md",
        "rollouts.jsonl",
    ]


def test_cli_runs_the_hf_backend_end_to_end(
    kb_rows: tuple[Path, list[dict[str, Any]]], tiny_policy_dir: Callable[[str], Path], tmp_path: Path
) -> None:
    from ragym.rl.eval.evaluate import main

    kb_dir, _ = kb_rows
    out = tmp_path / "eval"
    assert (
        main(
            [
                "--model",
                str(tiny_policy_dir("qwen2_5_vl")),
                "--data",
                str(kb_dir / "data" / "test.parquet"),
                "--out",
                str(out),
                "--recipe",
                "kbvqa_tiny_cpu",
                "--limit",
                "2",
                "--backend",
                "hf",
                "data.max_response_length=48",
                "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
            ]
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["backend"] == "hf" and metrics["all"]["num_episodes"] == 2
    # The saved rollouts re-score offline under any reward recipe.
    from ragym.rewards.cli import main as score

    assert (
        score(["--recipe", "recipes/rewards/mmagent_r2.yaml", "--episodes", str(out / "rollouts.jsonl")]) == 0
    )


def test_hf_lengths_past_the_policys_positions_are_refused_before_the_model_loads(
    kb_rows: tuple[Path, list[dict[str, Any]]],
    short_policy_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Hugging Face backend ran positions the policy never had (vLLM refuses such lengths itself): prompt_length
    1024 + response_length 48 is past the short policy's 1040 positions, refused before it loads; 1024 + 16 fits
    and evaluates as before."""
    from ragym.rl.errors import UsageError
    from ragym.rl.eval import evaluate

    loaded: list[Any] = []
    real = evaluate.hf_backend
    monkeypatch.setattr(evaluate, "hf_backend", lambda *args: loaded.append(args) or real(*args))
    kb_dir, _ = kb_rows

    def run(response_length: int, out: Path) -> int:
        return evaluate.main(
            [
                *("--model", str(short_policy_dir), "--data", str(kb_dir / "data" / "test.parquet")),
                *("--out", str(out), "--recipe", "kbvqa_tiny_cpu", "--limit", "1", "--backend", "hf"),
                f"data.max_response_length={response_length}",
                "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=1",
            ]
        )

    message = (
        "actor_rollout_ref.rollout.prompt_length 1024 + response_length 48 = 1072 exceeds the policy's "
        f"max_position_embeddings 1040 ({short_policy_dir}): lower them (data.max_prompt_length, "
        "data.max_response_length) or use a model with more positions"
    )
    with pytest.raises(UsageError, match=f"^{re.escape(message)}$"):
        run(48, tmp_path / "long")
    assert loaded == [] and not (tmp_path / "long").exists()
    assert run(16, tmp_path / "fits") == 0
    assert len(loaded) == 1
    assert json.loads((tmp_path / "fits" / "metrics.json").read_text())["all"]["num_episodes"] == 1


def test_gold_ranks_of_demo_rows_ignore_the_demo_aids(tmp_path: Path) -> None:
    """Demo rows name KBVQA-Demo-v0 with aid kwargs; the retriever ceiling is that of the served lists."""
    from dataclasses import replace

    from ragym.data_prep.synthetic_kb import PRESETS
    from ragym.data_prep.synthetic_kb import build_kb as build

    kb = build(tmp_path / "demo", replace(PRESETS["demo"], num_entities=60, num_rows=10), seed=0)
    row = read_rows(str(kb / "data" / "train.parquet"))[0]
    assert row["extra_info"]["env_id"] == "KBVQA-Demo-v0"
    ranks, pool = gold_ranks(row)
    gold = json.loads(row["extra_info"]["env_options"])["gold_entities"][0]
    served = [
        h.docid
        for h in load_kb(kb)
        .candidate_retriever()
        .search(str(kb / json.loads(row["extra_info"]["env_options"])["query_images"][0]), 3)
    ]
    assert pool == 3 and ranks == [served.index(gold) if gold in served else None]  # K=1 x (Rej_max + 1)


def test_eval_scores_answers_as_the_official_scorers() -> None:
    """``ragym eval``'s outcome term reads a numerical answer without a number as 0, as the official InfoSeek
    and MMhops scorers do (the training reward does not); the paper's +-1 year for Time answers."""
    from ragym.rewards import Rubric

    rubric = Rubric.from_recipe(eval_reward(EvalConfig())["recipe"])
    truth = {"answer_eval": [{"wikidata": 0, "range": [-1, 1]}], "question_type": "Numerical"}
    episode = Episode(
        "infoseek", ["t"], [{"type": "answer", "turn": 0, "text": "zero", "forced": False}], truth
    )
    assert rubric.score(episode).breakdown == {"outcome": 1.0}
    assert [t.params["time_year_tolerance"] for t in rubric.terms] == [1]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        # A zero batch size was range()'s ValueError after the model loaded; a negative one ran no episode, exit 0.
        (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
        (["--batch-size", "-2"], "--batch-size must be >= 1, got -2"),
        (["--trace-episodes", "-1"], "--trace-episodes must be >= 0 (0: none), got -1"),
    ],
)
def test_an_out_of_range_count_is_a_usage_error(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from ragym.rl.eval.args import parse_eval_args

    with pytest.raises(SystemExit) as stop:
        parse_eval_args(["--model", "m", "--data", "d.parquet", "--out", "o", *flags])
    assert stop.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"ragym eval: error: {message}"


def test_an_export_record_cut_short_is_named(tmp_path: Path) -> None:
    from ragym.rl.errors import UsageError

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "ragym_export.json").write_text('{"source": "/runs/a", "recipe": {"data": {"train_')
    with pytest.raises(UsageError, match=r"ragym_export\.json is not JSON .*--recipe RECIPE"):
        eval_config(tmp_path, None, [])


def test_a_do_sample_word_from_the_command_line_is_refused(tmp_path: Path) -> None:
    """``do_sample=no`` is the string "no", a true value: eval sampled where the user asked for greedy decoding."""
    from ragym.rl.errors import UsageError

    (tmp_path / "config.json").write_text("{}")
    key = "actor_rollout_ref.rollout.val_kwargs.do_sample"
    with pytest.raises(UsageError, match=f"^{key} 'no' is not true or false"):
        eval_config(tmp_path, "kbvqa_tiny_cpu", [f"{key}=no"])
    assert (
        eval_config(
            tmp_path, "kbvqa_tiny_cpu", [f"{key}=false"]
        ).actor_rollout_ref.rollout.val_kwargs.do_sample
        is False
    )


@pytest.mark.parametrize("where", ["model", "model/eval", "file"])
def test_an_out_folder_in_the_model_or_a_file_is_refused_before_it_loads(
    kb_rows: tuple[Path, list[dict[str, Any]]],
    tiny_policy_dir: Callable[[str], Path],
    tmp_path: Path,
    where: str,
) -> None:
    """``--out`` in the model folder wrote the run's results, traces and plots among the model's files; a file there
    failed only after the model had loaded."""
    import shutil

    from ragym.rl.errors import UsageError
    from ragym.rl.eval.evaluate import main

    model = tmp_path / "model"
    shutil.copytree(tiny_policy_dir("qwen2_5_vl"), model)
    out = tmp_path / where
    if where == "file":
        out.write_text("x")
    kb_dir, _ = kb_rows
    argv = ["--model", str(model), "--data", str(kb_dir / "data" / "test.parquet"), "--out", str(out)]
    before = sorted(p.name for p in model.iterdir())
    with pytest.raises(UsageError, match=rf"--out {out} (is a file|lies in --model {model})"):
        main([*argv, "--recipe", "kbvqa_tiny_cpu", "--limit", "1", "--backend", "hf"])
    assert sorted(p.name for p in model.iterdir()) == before


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ("tokenizer.json", "tokenizer.json"),
        ("processor_config.json", "processor_config.json or preprocessor_config.json"),
        ("model.safetensors", r"whole model.safetensors \(cut short: \d+ of \d+ bytes\)"),
    ],
)
def test_a_damaged_model_folder_is_named_before_it_loads(
    kb_rows: tuple[Path, list[dict[str, Any]]],
    tiny_policy_dir: Callable[[str], Path],
    tmp_path: Path,
    damage: str,
    named: str,
) -> None:
    """A model folder that lost a file (or whose weights a copy cut short) failed inside transformers with a
    traceback (``Can't load image processor``, ``incomplete metadata``)."""
    import shutil

    from ragym.rl.errors import UsageError
    from ragym.rl.eval.evaluate import main

    model = tmp_path / "model"
    shutil.copytree(tiny_policy_dir("qwen2_5_vl"), model)
    if damage == "model.safetensors":
        (model / damage).write_bytes((model / damage).read_bytes()[: (model / damage).stat().st_size // 2])
    else:
        (model / damage).unlink()
    kb_dir, _ = kb_rows
    argv = [
        "--model",
        str(model),
        "--data",
        str(kb_dir / "data" / "test.parquet"),
        "--out",
        str(tmp_path / "ev"),
    ]
    with pytest.raises(UsageError, match=rf"--model {model} is incomplete, it has no {named}: "):
        main([*argv, "--recipe", "kbvqa_tiny_cpu", "--limit", "1", "--backend", "hf"])
    assert not (tmp_path / "ev").exists()
