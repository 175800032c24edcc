"""``ragym prep`` on the official-format fixtures: every row accounted for, variants accepted, broken rows
rejected with their reason, the reachability filter on training splits only, rows the env and reward read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ragym.data_prep.kb_build import is_row_split
from ragym.data_prep.kb_records import PASSAGE_CHARS
from ragym.data_prep.prep import prep_dataset, without_gold_lines
from ragym.data_prep.synthetic_kb import PRESETS, build_kb
from ragym.envs.kbvqa.kb import load_kb
from ragym.rewards.answers import score_answer


def _rows(kb: Path, split: str) -> pd.DataFrame:
    return pd.read_parquet(kb / "data" / f"{split}.parquet")


def _rejected(report: dict) -> dict[str, dict[str, int]]:
    """``{split: {reason: count}}`` of the splits with a rejected row."""
    return {s: c["rejected_by_reason"] for s, c in report["splits"].items() if c["rejected_by_reason"]}


def _options(row: pd.Series) -> dict:
    return json.loads(row["extra_info"]["env_options"])


@pytest.mark.parametrize("name", ["infoseek", "evqa", "mmhops"])
def test_every_row_is_accounted_for_with_its_reason(prepared, name: str) -> None:
    kb, report, expected = prepared[name]
    assert _rejected(report) == expected
    for split, counts in report["splits"].items():
        assert counts["num_rows_in"] == counts["num_rows_out"] + counts["num_rows_rejected"]
        if is_row_split(split):
            assert len(_rows(kb, split)) == counts["num_rows_out"]
    saved = json.loads((kb / "report.json").read_text())
    assert saved["splits"] == report["splits"] and saved["details"]["num_entities"] == len(
        pd.read_parquet(kb / "entities.parquet")
    )


@pytest.mark.parametrize("name", ["infoseek", "evqa", "mmhops"])
def test_reachability_filters_training_rows_only(prepared, name: str) -> None:
    kb, _, _ = prepared[name]
    queries = load_kb(kb).queries.set_index("image")["candidates"]
    unreachable_eval = 0
    for split in [p.stem for p in (kb / "data").glob("*.parquet")]:
        for _, row in _rows(kb, split).iterrows():
            options = _options(row)
            pools = [list(queries[p]) for p in options["query_images"]]
            assert all(len(p) == 2 for p in pools)  # (Rej_max + 1) x K
            assert json.loads(row["extra_info"]["candidates"]) == pools  # stored with the row
            reachable = all(g is None or g in p for g, p in zip(options["gold_entities"], pools, strict=True))
            assert reachable or split != "train"
            unreachable_eval += not reachable
    if name == "infoseek":
        assert unreachable_eval == 1  # the black query of val is kept: evaluation is never filtered


def test_rows_have_the_synthetic_schema_and_scoreable_ground_truth(prepared, tmp_path: Path) -> None:
    synthetic = pd.read_parquet(build_kb(tmp_path / "syn", PRESETS["tiny"]) / "data" / "train.parquet")
    for name, (kb, _, _) in prepared.items():
        rows = _rows(kb, "train")
        assert list(rows.columns) == list(synthetic.columns)
        assert set(synthetic.iloc[0]["extra_info"]) <= set(rows.iloc[0]["extra_info"])
        for _, row in rows.iterrows():
            assert row["data_source"] == name and row["agent_name"] == "ragym_env"
            truth = json.loads(row["reward_model"]["ground_truth"])
            assert score_answer(name, "certainly not the answer", truth) == 0.0
            assert len(_options(row)["gold_entities"]) == len(_options(row)["query_images"])


def test_infoseek_variants(prepared) -> None:
    kb, _, _ = prepared["infoseek"]
    rows = {r["extra_info"]["sample_id"]: r for _, r in _rows(kb, "train").iterrows()}
    truth = {k: json.loads(r["reward_model"]["ground_truth"]) for k, r in rows.items()}
    # The three numerical forms are kept as published and all score as the range [27, 33].
    for n in (1, 2, 3):
        gt = truth[f"infoseek_train_{n:08d}"]
        assert gt["question_type"] == "Numerical"
        assert score_answer("infoseek", "30", gt) == 1.0 and score_answer("infoseek", "34", gt) == 0.0
    assert truth["infoseek_train_00000004"]["question_type"] == "Time"  # inferred: train has no qtype file
    fields = json.loads(rows["infoseek_train_00000004"]["extra_info"]["dataset_fields"])
    assert fields["question_type_inferred"] is True
    # OVEN .JPEG, flat folder and id2image.jsonl layouts were all found (rows 1, 5, 6 are kept).
    assert {"infoseek_train_00000001", "infoseek_train_00000005", "infoseek_train_00000006"} <= set(rows)
    val = _rows(kb, "val")
    splits = [json.loads(r["extra_info"]["dataset_fields"])["data_split"] for _, r in val.iterrows()]
    assert sorted(splits) == ["val_unseen_entity"] * 3 + ["val_unseen_question"] * 2
    types = [json.loads(r["reward_model"]["ground_truth"])["question_type"] for _, r in val.iterrows()]
    assert types == ["String", "Numerical", "Time", "String", "String"]  # qtype file values in any case


EVAL_GOLD_UNKNOWN = {
    "infoseek": (
        "val",
        {"infoseek_val_00000004": "gold_entity_not_in_kb", "infoseek_val_00000005": "missing_gold_entity"},
    ),
    "evqa": ("test", {"evqa_test_4_0": "gold_entity_not_in_kb"}),
    "mmhops": ("test", {"MMhops_test_00003": "gold_entity_not_in_kb"}),
}
"""Per fixture: the evaluation split and its rows whose gold entity the KB cannot name (training twins are
rejected under the same reasons, see the fixtures' expected rejections)."""


@pytest.mark.parametrize("name", ["infoseek", "evqa", "mmhops"])
def test_evaluation_rows_without_a_known_gold_are_kept_and_counted(prepared, name: str) -> None:
    kb, report, _ = prepared[name]
    split, unknown = EVAL_GOLD_UNKNOWN[name]
    rows = {r["extra_info"]["sample_id"]: r for _, r in _rows(kb, split).iterrows()}
    for sample_id, reason in unknown.items():
        assert _options(rows[sample_id])["gold_entities"] == [None]  # scored on the answer, no verification
        assert json.loads(rows[sample_id]["extra_info"]["dataset_fields"])["gold_missing"] == reason
    expected = {}
    for reason in unknown.values():
        expected[reason] = expected.get(reason, 0) + 1
    assert report["details"]["eval_gold_unknown"] == {split: expected}
    assert "gold_entity_not_in_kb" not in _rejected(report).get(split, {})
    train = _rows(kb, "train")
    assert not any(
        "gold_missing" in json.loads(r["extra_info"]["dataset_fields"]) for _, r in train.iterrows()
    )


def test_infoseek_golds_are_matched_by_qid_and_counted(prepared) -> None:
    _, report, _ = prepared["infoseek"]
    # Wiki6M keys are QIDs: train rows 0-7 match by QID, row 11 (Q999) matches nothing, row 12 has no withkb
    # line; val rows 0-2 match, row 4 (Q999) does not, row 5 has no withkb line (row 3 was rejected before).
    assert report["details"]["gold_match"] == {
        "train": {"qid": 8, "title": 0, "unmatched": 1, "no_gold": 1},
        "val": {"qid": 3, "title": 0, "unmatched": 1, "no_gold": 1},
    }


def test_evqa_pairs_two_hop_and_multi_answer(prepared) -> None:
    kb, report, _ = prepared["evqa"]
    assert report["splits"]["train"]["num_rows_in"] == 11  # ten CSV rows, the first with two image ids
    rows = _rows(kb, "train")
    entities = load_kb(kb).entities.set_index("entity_id")
    first = [r for _, r in rows.iterrows() if r["extra_info"]["sample_id"].startswith("evqa_train_2_")]
    assert len(first) == 2  # one sample per (question, image)
    two_hop = next(
        r
        for _, r in rows.iterrows()
        if json.loads(r["reward_model"]["ground_truth"])["question_type"] == "2_hop"
    )
    fields = json.loads(two_hop["extra_info"]["dataset_fields"])
    gold = _options(two_hop)["gold_entities"]
    assert (
        len(gold) == 1
        and entities.loc[gold[0], "key"] == fields["hop_urls"][0]
        and len(fields["hop_urls"]) == 2
    )
    multi = next(r for _, r in rows.iterrows() if "&&" in r["reward_model"]["ground_truth"])
    assert (
        score_answer("evqa", "Bob Jones and Ann Smith", json.loads(multi["reward_model"]["ground_truth"]))
        == 1.0
    )


def test_mmhops_multi_image_rows_carry_one_gold_per_image(prepared) -> None:
    kb, report, _ = prepared["mmhops"]
    test = _rows(kb, "test")
    compare = next(r for _, r in test.iterrows() if len(_options(r)["query_images"]) == 2)
    options = _options(compare)
    names = load_kb(kb).entities.set_index("entity_id").loc[options["gold_entities"], "key"].tolist()
    assert names == ["Q102", "Q104"] and "<image>" not in options["question"]
    numerical = next(r for _, r in test.iterrows() if _options(r)["question_type"] == "Bridge")
    assert score_answer("mmhops", "three", json.loads(numerical["reward_model"]["ground_truth"])) == 1.0
    train = {r["extra_info"]["sample_id"]: r for _, r in _rows(kb, "train").iterrows()}
    assert _options(train["MMhops_train_00003"])["gold_entities"] == [
        None
    ]  # no gold column value: kept, counted
    assert report["details"]["rows_without_gold"] == {"train": 1, "test": 1}  # test: a gold not in the KB


@pytest.mark.parametrize("name", ["infoseek", "evqa", "mmhops"])
def test_rows_without_a_gold_are_counted_per_split_and_said(prepared, name: str) -> None:
    """Every written row whose gold entity is unknown for an image is counted (the rows say so themselves),
    and the prep prints what such a row trains on."""
    kb, report, _ = prepared[name]
    counted = {}
    for split in [p.stem for p in (kb / "data").glob("*.parquet")]:
        num = sum(None in _options(row)["gold_entities"] for _, row in _rows(kb, split).iterrows())
        if num:
            counted[split] = num
    assert report["details"]["rows_without_gold"] == counted
    lines = without_gold_lines(report)
    assert len(lines) == len(counted) and all("outcome and format terms only" in x for x in lines)
    assert name != "mmhops" or lines[0].startswith("mmhops train: 1 rows without a gold entity")


def test_kb_contents(prepared) -> None:
    for kb, report, _ in prepared.values():
        loaded = load_kb(kb)
        assert (loaded.passages["text"].str.len() <= PASSAGE_CHARS).all()
        assert len(loaded.passages) == report["details"]["num_passages"] > len(loaded.entities)
        assert np.allclose(np.linalg.norm(loaded.entity_embeddings, axis=1), 1.0, atol=1e-5)
        assert report["details"]["entities_without_image"] == 1
        imageless = loaded.entities[loaded.entities["image"] == "images/no_image.png"]
        assert len(imageless) == 1 and (kb / "images" / "no_image.png").exists()
    mm = load_kb(prepared["mmhops"][0]).passages
    assert (mm["entity_id"] == "").sum() == 1  # the text-corpus page of no entity is searchable, unlinked


def test_the_prepared_kb_records_and_serves_its_entity_index(prepared) -> None:
    from ragym.envs.retrieval.retrievers import FaissRetriever, IndexSpec

    for kb_dir, _, _ in prepared.values():
        kb = load_kb(kb_dir)
        record = kb.manifest["index"]["entities"]
        assert (
            record["path"] == "index/entities" and record["kind"] == "exact"
        )  # a few entities: below the size
        assert record["num_vectors"] == len(kb.entities) and record["recall@15"] == 1.0
        ids = (kb_dir / "index" / "entities" / "shard-000.ids").read_text().splitlines()
        assert ids == kb.entities["entity_id"].tolist()
        built, flat = kb.image_retriever(), kb.image_retriever(IndexSpec(kind="flat"))
        assert isinstance(built, FaissRetriever) and built is not flat
        queries = list(kb.query_embeddings[:5])
        assert [[h.docid for h in r] for r in built.batch_search(queries, 3)] == [
            [h.docid for h in r] for r in flat.batch_search(queries, 3)
        ]


def test_output_folder_must_be_empty(prepared) -> None:
    kb, _, _ = prepared["mmhops"]
    with pytest.raises(SystemExit):
        prep_dataset("mmhops", ["--raw", str(kb), "--out", str(kb)])


@pytest.mark.parametrize("flags", [["--max-rejections", "-1"], ["--candidates-per-batch", "0"]])
def test_a_k_or_rej_max_no_env_takes_is_refused_before_any_work(
    flags: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, faiss asserted a positive pool (a traceback) after the KB's images were encoded."""
    with pytest.raises(SystemExit) as stop:
        prep_dataset("infoseek", ["--raw", str(tmp_path / "absent"), "--out", str(tmp_path / "kb"), *flags])
    assert stop.value.code == 2
    assert "--candidates-per-batch must be >= 1 and --max-rejections >= 0" in capsys.readouterr().err
    assert not (tmp_path / "kb").exists()


def test_resume_reuses_the_encoding_steps_shards(tmp_path: Path) -> None:
    from tests.data_prep import kbvqa_fixtures as fx

    fx.write_infoseek(tmp_path / "raw")
    args = ["--raw", str(tmp_path / "raw"), "--out", str(tmp_path / "kb")]
    first = prep_dataset("infoseek", args)
    shards = sorted((tmp_path / "kb" / "index" / "encoded").rglob("*.npy"))
    assert {p.parent.parent.name for p in shards} >= {"entities", "queries"}
    stamps = [p.stat().st_mtime_ns for p in shards]
    vectors = np.load(tmp_path / "kb" / "index" / "entity_embeddings.npy")
    second = prep_dataset("infoseek", [*args, "--resume"])
    assert [p.stat().st_mtime_ns for p in shards] == stamps  # nothing re-encoded
    assert np.array_equal(np.load(tmp_path / "kb" / "index" / "entity_embeddings.npy"), vectors)
    assert second["splits"] == first["splits"] and second["details"]["recall"] == first["details"]["recall"]


def test_a_split_with_every_row_rejected_is_written_empty_and_mix_says_so(tmp_path: Path, capsys) -> None:
    """An all-rejected split still gets its parquet (the rows' columns, no row), so ``mix`` names the real
    problem, a split without rows and the report that says why, not a prep that never ran."""
    from ragym.data_prep.prep import mix
    from tests.data_prep import kbvqa_fixtures as fx

    fx.write_infoseek(tmp_path / "raw")
    train = tmp_path / "raw" / "infoseek_train.jsonl"
    lines = train.read_text().splitlines()
    train.write_text("\n".join([lines[10], lines[13]]) + "\n")  # missing_image, malformed_answer
    report = prep_dataset("infoseek", ["--raw", str(tmp_path / "raw"), "--out", str(tmp_path / "infoseek")])
    assert report["splits"]["train"]["num_rows_in"] == report["splits"]["train"]["num_rows_rejected"] == 2
    rows = _rows(tmp_path / "infoseek", "train")
    assert rows.empty and list(rows.columns) == list(_rows(tmp_path / "infoseek", "val").columns)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        mix(["--out", str(tmp_path / "mix"), "--root", str(tmp_path), "infoseek=5"])
    kb = tmp_path / "infoseek"
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.endswith(f"{kb / 'data' / 'train.parquet'} has no rows; {kb / 'report.json'} says why")


@pytest.mark.parametrize(
    ("name", "file", "keep"),
    [("infoseek", "infoseek_train.jsonl", 0), ("evqa", "train.csv", 1), ("evqa", "train.csv", 0)],
)
def test_a_split_file_without_rows_is_an_empty_split(tmp_path: Path, name: str, file: str, keep: int) -> None:
    """An empty split file (an E-VQA csv with its header alone, or 0 bytes) is reported 0 = 0 + 0 and written
    empty."""
    from tests.data_prep import kbvqa_fixtures as fx

    getattr(fx, f"write_{name}")(tmp_path / "raw")
    path = tmp_path / "raw" / file
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines()[:keep]))
    report = prep_dataset(name, ["--raw", str(tmp_path / "raw"), "--out", str(tmp_path / name)])
    assert report["splits"]["train"] == {
        "num_rows_in": 0,
        "num_rows_out": 0,
        "num_rows_rejected": 0,
        "rejected_by_reason": {},
    }
    assert _rows(tmp_path / name, "train").empty


def test_a_kb_without_a_usable_article_is_one_line_after_its_report(tmp_path: Path, capsys) -> None:
    """Nothing to index: no traceback and nothing written, but the printed report says why each entry failed."""
    from ragym.rl.cli import main as ragym
    from tests.data_prep import kbvqa_fixtures as fx

    fx.write_infoseek(tmp_path / "raw")
    kb = tmp_path / "raw" / "Wiki6M_ver_1_0.jsonl"
    bad = [line for line in kb.read_text().splitlines() if '"Q201"' in line or '"Q202"' in line]
    kb.write_text("".join(line + "\n" for line in bad))  # one line not JSON, one article without text
    assert ragym(["prep", "infoseek", "--raw", str(tmp_path / "raw"), "--out", str(tmp_path / "kb")]) == 2
    captured = capsys.readouterr()
    kb_line = "kb 2 = 0 + 2 (kb_entry_without_text 1, malformed_json 1)".split()
    assert kb_line in [
        line.split() for line in captured.out.splitlines()
    ]  # columns padded to the longest split
    assert "no_kb_article" in captured.out
    [line] = [line for line in captured.err.splitlines() if line.startswith("ragym prep")]
    assert line == (
        "ragym prep infoseek: the KB has no usable article "
        "(2 KB entries read, rejected: kb_entry_without_text 1, malformed_json 1)"
    )
    assert not (tmp_path / "kb").exists()


def test_a_kept_row_without_a_gold_scores_on_its_answer_alone(prepared) -> None:
    """The paper's reward on a kept evaluation row: outcome and format apply, verification does not."""
    from ragym import envs
    from ragym.envs.kbvqa.actions import Answer, Reject, SearchImage, format_action
    from ragym.rewards.episode import Episode
    from ragym.rewards.rubric import Rubric

    kb, _, _ = prepared["infoseek"]
    row = next(
        r for _, r in _rows(kb, "val").iterrows() if r["extra_info"]["sample_id"] == "infoseek_val_00000004"
    )
    env = envs.make_env("KBVQA-v0", **json.loads(row["extra_info"]["env_kwargs"]))
    env.reset(options=_options(row))
    turns = [format_action(a) for a in (SearchImage(1), Reject(), Answer("Saturn"))]
    for turn in turns:
        *_, info = env.step(turn)
    truth = json.loads(row["reward_model"]["ground_truth"])
    result = Rubric.from_recipe("recipes/rewards/mmagent_r2.yaml").score(
        Episode("infoseek", turns, info["events"], truth)
    )
    assert result.breakdown["verification"] is None and result.breakdown["outcome"] == 1.0
    assert result.total == result.breakdown["outcome"] + result.breakdown["format"]


@pytest.mark.parametrize(
    ("name", "flag"), [("infoseek", "--image-dir"), ("evqa", "--inat-dir"), ("mmhops", "--kb-image-root")]
)
def test_an_image_folder_that_does_not_exist_is_one_line_naming_it(
    tmp_path: Path, capsys, name: str, flag: str
) -> None:
    """A wrong image folder is an error naming it, not every row rejected as missing_image."""
    from ragym.rl.cli import main as ragym
    from tests.data_prep import kbvqa_fixtures as fx

    getattr(fx, f"write_{name}")(tmp_path / "raw")
    args = ["--raw", str(tmp_path / "raw"), flag, str(tmp_path / "nowhere"), "--out", str(tmp_path / "kb")]
    assert ragym(["prep", name, *args]) == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ragym prep")]
    assert f"{flag} {tmp_path / 'nowhere'} is not a folder" in line
    assert not (tmp_path / "kb").exists()


@pytest.mark.parametrize(
    ("name", "files", "named"),
    [
        ("infoseek", "infoseek_*.jsonl", "no infoseek_{train,val}.jsonl in"),
        ("evqa", "*.csv", "no train.csv / val.csv / test.csv in"),
        ("mmhops", "data/*.parquet", "no data/{train,validation,test}-*.parquet in"),
    ],
)
def test_no_split_file_at_all_is_one_line_naming_the_files(
    tmp_path: Path, capsys, name: str, files: str, named: str
) -> None:
    """A KB alone is no dataset: before, InfoSeek counted its KB entries as rows read and wrote a KB of no row."""
    from ragym.rl.cli import main as ragym
    from tests.data_prep import kbvqa_fixtures as fx

    getattr(fx, f"write_{name}")(tmp_path / "raw")
    for path in (tmp_path / "raw").glob(files):
        path.unlink()
    assert ragym(["prep", name, "--raw", str(tmp_path / "raw"), "--out", str(tmp_path / "kb")]) == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ragym prep")]
    assert f"{named} {tmp_path / 'raw'}" in line
    assert not (tmp_path / "kb").exists()


def test_an_mmhops_shard_that_is_not_parquet_is_one_line_naming_it(tmp_path: Path, capsys) -> None:
    """Before, pyarrow's ArrowInvalid, which does not name the shard, ended the prep with a traceback."""
    from ragym.rl.cli import main as ragym
    from tests.data_prep import kbvqa_fixtures as fx

    fx.write_mmhops(tmp_path / "raw")
    shard = tmp_path / "raw" / "data" / "validation-00000-of-00001.parquet"
    shard.write_text("junk\n")
    assert ragym(["prep", "mmhops", "--raw", str(tmp_path / "raw"), "--out", str(tmp_path / "kb")]) == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ragym prep")]
    assert line.startswith(f"ragym prep mmhops: {shard} is not a parquet file (")
    assert not (tmp_path / "kb").exists()


def test_an_mmhops_shard_whose_rows_cannot_be_read_is_one_line_naming_it(tmp_path: Path, capsys) -> None:
    """A good footer over corrupt pages: datasets' error names no shard, and ended the prep with a traceback."""
    import pyarrow.parquet as pq

    from ragym.rl.cli import main as ragym
    from tests.data_prep import kbvqa_fixtures as fx
    from tests.rl.data.bad_rows import zeroed_pages

    fx.write_mmhops(tmp_path / "raw")
    shard = zeroed_pages(tmp_path / "raw" / "data" / "validation-00000-of-00001.parquet")
    assert pq.ParquetFile(shard).metadata.num_rows > 0  # the footer still reads
    assert ragym(["prep", "mmhops", "--raw", str(tmp_path / "raw"), "--out", str(tmp_path / "kb")]) == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ragym prep")]
    assert line.startswith(f"ragym prep mmhops: {shard}: its rows cannot be read (") and line.endswith(")")


@pytest.mark.parametrize(
    ("shard", "split", "num_in"),
    [("validation-00000-of-00001", "validation", 0), ("train-00000-of-00002", "train", 5)],
)
def test_an_mmhops_shard_without_rows_reads_as_none(
    tmp_path: Path, shard: str, split: str, num_in: int
) -> None:
    """Before, datasets failed on a shard with its columns and no row (a traceback); now it adds no row, and a
    split of such shards alone is reported 0 = 0 + 0 and written empty."""
    import pyarrow.parquet as pq

    from tests.data_prep import kbvqa_fixtures as fx

    fx.write_mmhops(tmp_path / "raw")
    path = tmp_path / "raw" / "data" / f"{shard}.parquet"
    pq.write_table(pq.read_table(path).slice(0, 0), path)
    report = prep_dataset("mmhops", ["--raw", str(tmp_path / "raw"), "--out", str(tmp_path / "kb")])
    counts = report["splits"][split]
    assert counts["num_rows_in"] == num_in == counts["num_rows_out"] + counts["num_rows_rejected"]
    assert len(_rows(tmp_path / "kb", split)) == counts["num_rows_out"]


def test_an_evqa_csv_without_the_columns_is_one_line_naming_it(tmp_path: Path, capsys) -> None:
    """Before, its ValueError ended the prep with a traceback."""
    from ragym.rl.cli import main as ragym
    from tests.data_prep import kbvqa_fixtures as fx

    fx.write_evqa(tmp_path / "raw")
    (tmp_path / "raw" / "train.csv").write_text("question,answer\nWhat?,That\n")
    assert ragym(["prep", "evqa", "--raw", str(tmp_path / "raw"), "--out", str(tmp_path / "kb")]) == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ragym prep")]
    assert line.startswith(f"ragym prep evqa: {tmp_path / 'raw' / 'train.csv'}: header lacks columns [")
    assert not (tmp_path / "kb").exists()


def test_an_image_cut_short_is_counted_unreadable_not_a_failed_encoding(tmp_path: Path) -> None:
    """A JPEG cut short passed PIL's ``verify``, and the encoding step then stopped the prep on it (a traceback)."""
    from tests.data_prep import kbvqa_fixtures as fx

    fx.write_infoseek(tmp_path / "raw")
    entity_image = fx.image_file(tmp_path / "raw" / "kb_images", fx.url(0))
    query_image = tmp_path / "raw" / "images" / "oven_90000002.jpg"
    for path in (entity_image, query_image):
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    report = prep_dataset("infoseek", ["--raw", str(tmp_path / "raw"), "--out", str(tmp_path / "kb")])
    assert report["details"]["entity_images_unreadable"] == 1
    assert report["details"]["entities_without_image"] == 2  # the imageless place and the entity cut short
    assert "unreadable_image" in _rejected(report)["train"]


def test_an_image_past_the_aspect_ratio_qwen_vl_accepts_is_counted(tmp_path: Path) -> None:
    """A 10,000 x 40 strip decodes, so it was kept, and the env then refused it in every episode showing it."""
    from PIL import Image

    from tests.data_prep import kbvqa_fixtures as fx

    fx.write_infoseek(tmp_path / "raw")
    strip = Image.fromarray(np.full((40, 10_000, 3), 200, np.uint8))
    strip.save(fx.image_file(tmp_path / "raw" / "kb_images", fx.url(0)), format="JPEG")
    strip.transpose(Image.Transpose.TRANSPOSE).save(tmp_path / "raw" / "images" / "oven_90000002.jpg")
    report = prep_dataset("infoseek", ["--raw", str(tmp_path / "raw"), "--out", str(tmp_path / "kb")])
    assert report["details"]["entity_images_aspect_ratio"] == 1
    assert report["details"]["entities_without_image"] == 2  # the imageless place and the strip
    assert "image_aspect_ratio" in _rejected(report)["train"]


def test_an_evqa_kb_saved_with_a_bom_reads_as_the_original(tmp_path: Path) -> None:
    """The KB JSON re-saved with a UTF-8 BOM: the same KB (it was a ValueError traceback at its first byte)."""
    from ragym.data_prep.kb_files import read_kb_file
    from ragym.data_prep.report import PrepReport
    from tests.data_prep import kbvqa_fixtures as fx

    fx.write_evqa(tmp_path / "raw")
    path = tmp_path / "raw" / "encyclopedic_kb_wiki.json"
    plain = read_kb_file(path, PrepReport("evqa"))
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert read_kb_file(path, PrepReport("evqa")) == plain


@pytest.mark.parametrize("file", ["encyclopedic_kb_wiki.json", "inaturalist/val_id2name.json"])
def test_an_evqa_json_file_cut_short_is_one_line_naming_it(tmp_path: Path, capsys, file: str) -> None:
    """A download of the KB (4.9 GB) or an id2name file that stopped: before, a ValueError traceback."""
    from ragym.rl.cli import main as ragym
    from tests.data_prep import kbvqa_fixtures as fx

    fx.write_evqa(tmp_path / "raw")
    path = tmp_path / "raw" / file
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    assert ragym(["prep", "evqa", "--raw", str(tmp_path / "raw"), "--out", str(tmp_path / "kb")]) == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ragym prep")]
    assert line.startswith(f"ragym prep evqa: {path}") and "cut short" in line
    assert not (tmp_path / "kb").exists()
