"""``ragym eval``'s MMAgent-R² columns (Tables 2-4): which column a prepared row belongs to, the figures of each
column from hand-made episodes (expected values computed by hand), the report files, and the retriever ceiling
of rows whose gold entity is unknown."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ragym.envs.kbvqa.tables import NO_GOLD, na_notes, not_available, row_groups
from ragym.rewards.episode import Episode
from ragym.rl.eval import evaluate
from ragym.rl.eval.evaluate import EpisodeRecord, gold_ranks, summarize, summarize_source
from ragym.rl.eval.report import write_report


def _row(source: str, truth: Any, split: str = "test", question_type: str | None = None) -> dict[str, Any]:
    options = {"question": "q", "query_images": ["a.png"], "gold_entities": [None]}
    if question_type is not None:
        options["question_type"] = question_type
    return {
        "data_source": source,
        "reward_model": {"ground_truth": json.dumps(truth)},
        "extra_info": {"split": split, "env_options": json.dumps(options)},
    }


@pytest.mark.parametrize(
    ("row", "groups"),
    [
        (_row("evqa", {"answer": "a", "question_type": "templated"}), ("single_hop", "templated")),
        (_row("evqa", {"answer": "a", "question_type": "multi_answer"}), ("single_hop", "multi_answer")),
        (_row("evqa", {"answer": "a", "question_type": "2_hop"}), ("two_hop", "2_hop")),
        (
            _row("infoseek", {"question_type": "Numerical"}, "val_unseen_entity"),
            ("unseen_entity", "Numerical"),
        ),
        (_row("infoseek", {"question_type": "Time"}, "val_unseen_question"), ("unseen_question", "Time")),
        (_row("infoseek", {"question_type": "String"}, "train"), (None, "String")),  # no evaluation subset
        (_row("mmhops", {"question_type": "Time"}, "test", "Compare"), ("compare", "Time")),
        (_row("mmhops", {"question_type": "String"}, "test", "Bridge"), ("bridge", "String")),
        (_row("synthetic_kbvqa", ["Paris"]), (None, None)),  # a list ground truth: no question type
    ],
)
def test_row_groups(row: dict[str, Any], groups: tuple[str | None, str | None]) -> None:
    assert row_groups(row) == groups


def test_ragym_eval_groups_a_row_by_its_envs_tables() -> None:
    """``ragym eval`` records the columns KB-VQA's hooks (``EnvHooks.eval_tables``) give a KB-VQA row; an env
    without tables gets none, whatever its ground truth holds."""
    row = _row("infoseek", {"question_type": "Time"}, "val_unseen_question")
    kbvqa = {**row, "extra_info": {**row["extra_info"], "env_id": "KBVQA-v0"}}
    docmemo = {**row, "extra_info": {**row["extra_info"], "env_id": "DocMemo-v0"}}
    assert evaluate.row_groups(kbvqa) == ("unseen_question", "Time")
    assert evaluate.row_groups(docmemo) == (None, None)


def _record(
    source: str,
    correct: float,
    subset: str | None,
    qtype: str | None,
    ident: float | None = None,
    ranks: list[int | None] = (),
    split: str = "test",
    retriever: str | None = "dense",
) -> EpisodeRecord:
    episode = Episode(source, ["t"], [], "a", False, {}).to_json()
    return EpisodeRecord(
        data_source=source,
        index=0,
        split=split,
        correct=correct,
        answer="a",
        turns=2,
        rejections=0,
        format_errors=0,
        ident=ident,
        gold_ranks=list(ranks),
        pool_size=15,
        episode=episode,
        subset=subset,
        question_type=qtype,
        text_retriever=retriever,
    )


EVQA = [
    _record("evqa", 1.0, "single_hop", "templated", ident=1.0, ranks=[0]),
    _record("evqa", 0.0, "single_hop", "automatic", ident=0.0, ranks=[3]),
    _record("evqa", 1.0, "single_hop", "automatic", ident=None, ranks=[]),  # gold unknown: no Ident., no rank
    _record("evqa", 0.0, "two_hop", "2_hop", ident=0.0, ranks=[None]),
]
INFOSEEK = [
    _record("infoseek", 1.0, "unseen_question", "String", split="val_unseen_question", ranks=[0]),
    _record("infoseek", 0.0, "unseen_question", "Numerical", split="val_unseen_question", ranks=[1]),
    _record("infoseek", 1.0, "unseen_entity", "Numerical", split="val_unseen_entity", retriever="bm25"),
]


def test_evqa_single_hop_two_hop_and_question_types() -> None:
    paper = summarize_source(EVQA)["paper"]
    single, two = paper["subsets"]["single_hop"], paper["subsets"]["two_hop"]
    assert single["num_episodes"] == 3 and single["accuracy"] == pytest.approx(2 / 3)
    assert single["ident"] == 0.5  # two episodes with a known gold: 1 and 0
    assert (single["retriever_r1"], single["retriever_r_pool"]) == (0.5, 1.0)  # ranks 0 and 3
    assert (two["accuracy"], two["retriever_r_pool"]) == (0.0, 0.0)
    assert paper["all"]["accuracy"] == 0.5 and paper["all"]["num_episodes"] == 4
    types = paper["question_types"]
    assert list(types) == ["templated", "automatic", "2_hop"]  # the benchmark's order, absent types left out
    assert (types["automatic"]["accuracy"], types["automatic"]["num_episodes"]) == (0.5, 2)


def test_infoseek_unseen_columns_all_is_the_harmonic_mean() -> None:
    summary = summarize_source(INFOSEEK)
    paper = summary["paper"]
    assert paper["subsets"]["unseen_question"]["accuracy"] == 0.5
    assert paper["subsets"]["unseen_entity"]["accuracy"] == 1.0
    assert paper["all"]["accuracy"] == pytest.approx(2 * 0.5 * 1.0 / 1.5)  # harmonic mean of 0.5 and 1.0
    assert paper["question_types"]["Numerical"]["accuracy"] == 0.5
    assert summary["text_retriever"] == {"dense": 2, "bm25": 1}


def test_other_sources_and_mixed_summaries_have_no_paper_columns() -> None:
    assert summarize_source([_record("synthetic_kbvqa", 1.0, None, None)])["paper"] is None
    assert summarize(EVQA + INFOSEEK)["all"]["paper"] is None


def test_report_files_carry_the_paper_columns(tmp_path: Path) -> None:
    mmhops = [
        _record("mmhops", 1.0, "bridge", "String", ident=1.0, ranks=[0]),
        _record("mmhops", 0.0, "compare", "Numerical", ident=0.0, ranks=[None, 2]),
    ]
    records = EVQA + INFOSEEK + mmhops
    metrics = {"model": "m", "backend": "hf", "data": ["x.parquet"], **summarize(records)}
    write_report(metrics, [r.__dict__ for r in records], tmp_path)
    saved = json.loads((tmp_path / "metrics.json").read_text())["by_source"]
    assert saved["mmhops"]["paper"]["subsets"]["compare"]["retriever_r_pool"] == 0.5
    table = (tmp_path / "metrics.md").read_text()
    assert "\n## MMAgent-R² columns\n\n### evqa (MMAgent-R² Tables 2, 4)\n\n| | Single-Hop" in table
    assert "| | Single-Hop | Two-Hop | All | templated | automatic | 2_hop |" in table
    assert "| Acc. | 66.7 | 0.0 | 50.0 | 100.0 | 50.0 | 0.0 |" in table
    assert "| | Unseen-Q | Unseen-E | All | String | Numerical |" in table
    assert "| | Bridging | Comparison | All | String | Numerical |" in table
    assert "| Ident. | 100.0 | 0.0 | 50.0 | 100.0 | 0.0 |" in table
    assert "text retriever = dense (2), bm25 (1)" in table


def test_an_unknown_gold_has_no_retriever_rank(tmp_path: Path) -> None:
    """An evaluation row kept with a null gold is outside the R@1 / R@pool ceiling, not a miss in it."""
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb
    from ragym.rl.engine.trainer import read_rows

    kb = build_kb(tmp_path / "kb", PRESETS["tiny"], seed=0)
    row = next(
        r
        for r in read_rows(str(kb / "data" / "test.parquet"))
        if len(json.loads(r["extra_info"]["env_options"])["query_images"]) == 2
    )
    options = json.loads(row["extra_info"]["env_options"])
    known, pool = gold_ranks(row)
    options["gold_entities"][0] = None
    row = {**row, "extra_info": {**row["extra_info"], "env_options": json.dumps(options)}}
    assert gold_ranks(row) == (known[1:], pool)


def test_an_n_a_cell_says_why(tmp_path: Path) -> None:
    """MMhops rows name no gold entity: Table 4's Ident. and R@k are n/a, and the report says why, per cell."""
    mmhops = [_record("mmhops", 1.0, "bridge", "String"), _record("mmhops", 0.0, "bridge", "Time")]
    paper = summarize_source(mmhops)["paper"]
    na = paper["not_available"]
    assert set(na) == {"Bridging", "Comparison", "All", "String", "Time"}
    assert na["Comparison"] == dict.fromkeys(["Acc.", "Ident.", "R@1", "R@pool"], "no episode in this column")
    assert set(na["Bridging"]) == {"Ident.", "R@1", "R@pool"}  # its accuracy is known
    assert "golds ragym cannot derive" in na["Bridging"]["Ident."] and "MMhops" in na["Bridging"]["R@1"]
    notes = na_notes("mmhops", paper)
    assert notes[0].startswith("mmhops Ident., R@1, R@pool n/a in Bridging, All, String, Time: no episode")
    assert notes[1] == "mmhops Acc., Ident., R@1, R@pool n/a in Comparison: no episode in this column"
    metrics = {"model": "m", "backend": "hf", "data": ["x.parquet"], **summarize(mmhops)}
    write_report(metrics, [r.__dict__ for r in mmhops], tmp_path)
    assert f"- {notes[0]}" in (tmp_path / "metrics.md").read_text()
    # Another benchmark's unknown gold gets the reason without MMhops' note; known figures get none.
    assert summarize_source(EVQA)["paper"]["not_available"] == {}
    infoseek = summarize_source(INFOSEEK)["paper"]["not_available"]
    assert infoseek["Unseen-E"] == dict.fromkeys(["Ident.", "R@1", "R@pool"], NO_GOLD)
    assert infoseek["Unseen-Q"] == {"Ident.": NO_GOLD}  # ranked, but no Ident. recorded


def test_the_ceiling_without_candidate_lists_is_n_a_for_that_reason() -> None:
    live = [replace(_record("infoseek", 1.0, "unseen_entity", "String", ident=1.0), pool_size=None)]
    reasons = not_available("infoseek", live, {"retriever_r1": None, "ident": 1.0})
    assert reasons == {
        "retriever_r1": "the rows' env serves no precomputed candidate lists, on which the "
        "ceiling is measured"
    }


def test_an_episode_whose_env_could_not_start_counts_as_not_identified() -> None:
    """Its answer counts wrong and no event names its golds: Ident. counts it 0 where the column reports Ident.,
    and an MMhops column with no gold stays n/a."""
    crashed = replace(_record("evqa", 0.0, "single_hop", "templated"), started=False)
    single = summarize_source([*EVQA, crashed])["paper"]["subsets"]["single_hop"]
    assert (single["num_episodes"], single["accuracy"], single["ident"]) == (4, 0.5, pytest.approx(1 / 3))
    mmhops = [
        _record("mmhops", 1.0, "bridge", "String"),
        replace(_record("mmhops", 0.0, "bridge", "Time"), started=False),
    ]
    assert summarize_source(mmhops)["paper"]["subsets"]["bridge"]["ident"] is None


def test_a_record_says_whether_its_env_started() -> None:
    from types import SimpleNamespace

    from ragym.envs import events as ev

    row = {
        "data_source": "evqa",
        "reward_model": {"ground_truth": json.dumps({"answer": ["a"]})},
        "extra_info": {"index": 0, "env_id": "KBVQA-v0", "env_kwargs": "{}", "env_options": "{}"},
    }

    def record(stage: str) -> EpisodeRecord:
        events = [ev.episode_error(-1 if stage == "reset" else 0, stage, "boom")]
        metrics = {"turns": 0.0, "format_errors": 0.0, **dict.fromkeys(evaluate.TRUNCATIONS, 0.0)}
        fields = {"events": events, "episode_metrics": metrics}
        result = SimpleNamespace(output=SimpleNamespace(extra_fields=fields), score={"reward/outcome": 0.0})
        return evaluate.record_episode(row, result, lambda _: ([], None))  # pyright: ignore[reportArgumentType]

    assert (record("reset").started, record("step").started) == (False, True)
