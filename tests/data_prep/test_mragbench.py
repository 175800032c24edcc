"""``ragym prep mragbench``: rows in = out + rejected with reasons, corpus dedupe, stable splits, env-ready."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from ragym.data_prep.mragbench import prepare
from ragym.envs.events import events_of
from ragym.envs.r3g.corpus import read_rgb
from ragym.envs.r3g.env import R3GEnv
from ragym.envs.retrieval.encoders import PixelImageEncoder
from ragym.rl.prep import main as prep_main
from tests.data_prep.mragbench_fixture import BROKEN, NUM_VALID, records, write_fixture


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    raw = write_fixture(tmp_path_factory.mktemp("mrag") / "raw")
    out = tmp_path_factory.mktemp("mrag") / "task"
    assert prep_main(["mragbench", "--raw", str(raw), "--out", str(out), "--test-fraction", "0.5"]) == 0
    return out, json.loads((out / "report.json").read_text())


def rows(out: Path) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(out / "data" / f"{s}.parquet") for s in ("train", "test")])


def test_rows_in_equal_out_plus_rejected_with_reasons(prepared: tuple[Path, dict]) -> None:
    out, report = prepared
    questions = report["splits"]["questions"]
    assert (questions["num_rows_in"], questions["num_rows_out"], questions["num_rows_rejected"]) == (
        13,
        NUM_VALID,
        5,
    )
    rejected = {r["detail"].split(" (id")[0]: r["reason"] for r in report["rejected_examples"]}
    assert rejected == {f"row {index}": reason for index, reason in BROKEN.items()}
    assert sum(report["details"]["splits"].values()) == NUM_VALID == len(rows(out))
    assert 0 < report["details"]["splits"]["test"] < NUM_VALID  # both splits used at 0.5


def test_corpus_dedupes_identical_images_and_holds_gold(prepared: tuple[Path, dict]) -> None:
    out, report = prepared
    corpus = pd.read_parquet(out / "corpus" / "corpus.parquet")
    # Each valid question: 2 gold crops and 2 retrieved images, one of them byte-identical to a gold crop
    # (stored once) and one crop of another photo: 8 x 2 gold + 8 retrieved.
    assert report["details"]["num_corpus_images"] == len(corpus) == NUM_VALID * 3
    assert not corpus["image_id"].duplicated().any()
    truth = [json.loads(t["ground_truth"]) for t in rows(out)["reward_model"]]
    assert all(len(t["gold_images"]) == 2 and set(t["gold_images"]) <= set(corpus["image_id"]) for t in truth)
    assert {t["answer_choice"] for t in truth} == {"A"} and all(
        t["options"]["A"] == t["answer"] for t in truth
    )


def test_features_are_the_encoders(prepared: tuple[Path, dict]) -> None:
    out, _ = prepared
    corpus = pd.read_parquet(out / "corpus" / "corpus.parquet")
    stored = np.load(out / "corpus" / "embeddings.npy")
    fresh = PixelImageEncoder().encode_entities([read_rgb(out / corpus["path"].iloc[0])], [""])[0]
    assert np.allclose(stored[0], fresh / np.linalg.norm(fresh), atol=1e-6)


def test_splits_do_not_depend_on_limit(prepared: tuple[Path, dict], tmp_path: Path) -> None:
    out, _ = prepared
    raw = write_fixture(tmp_path / "raw")
    report = prepare(raw, tmp_path / "small", limit=4, test_fraction=0.5)
    assert report.num_in["questions"] == report.num_out["questions"] == 4
    full = {e["question_id"]: e["split"] for e in rows(out)["extra_info"]}
    small = {e["question_id"]: e["split"] for e in rows(tmp_path / "small")["extra_info"]}
    assert small == {q: full[q] for q in small}


def test_a_prepared_row_runs_in_the_env(prepared: tuple[Path, dict]) -> None:
    out, _ = prepared
    row = rows(out).iloc[0]
    env = R3GEnv(**json.loads(row["extra_info"]["env_kwargs"]))
    options = json.loads(row["extra_info"]["env_options"])
    obs, _ = env.reset(options=options)
    assert "A. " in obs["text"] and obs["images"][0].shape[2] == 3
    env.step("<plan>compare the photo</plan>")
    obs, *_, info = env.step("<retrieve></retrieve>")
    retrieval = events_of(info["events"], "coarse_retrieval")[0]
    assert len(obs["images"]) == 5 and retrieval["gold_in_pool"]  # crops of the same photo are the nearest


def test_rows_carry_the_benchmarks_retrieved_list_in_order(prepared: tuple[Path, dict]) -> None:
    """MRAG's evidence: each row's retrieved_images (gt crop first, then another photo's crop, as the
    fixture lists them); Incomplete keeps only the first, as MRAG-Bench's loader does."""
    out, report = prepared
    corpus = pd.read_parquet(out / "corpus" / "corpus.parquet")
    options = [json.loads(e["env_options"]) for e in rows(out)["extra_info"]]
    assert report["details"]["num_rows_without_retrieved"] == 0
    for o in options:
        expected = 1 if o["scenario"] == "Incomplete" else 2
        assert len(o["retrieved_images"]) == expected and set(o["retrieved_images"]) <= set(
            corpus["image_id"]
        )
        assert o["retrieved_images"][0] == o["gold_images"][0]  # the fixture's list starts with a gt crop
        assert o["retrieved_images"][1:] == [] or o["retrieved_images"][1] not in o["gold_images"]
    assert any(o["scenario"] == "Incomplete" for o in options)


def test_a_prepared_row_runs_as_mrag(prepared: tuple[Path, dict]) -> None:
    out, _ = prepared
    row = rows(out).iloc[0]
    env = R3GEnv(
        **json.loads(row["extra_info"]["env_kwargs"]),
        use_plan=False,
        pool_source="benchmark",
        rerank="none",
        top_k=5,
    )
    options = json.loads(row["extra_info"]["env_options"])
    env.reset(options=options)
    obs, *_, info = env.step("<retrieve></retrieve>")
    chosen = events_of(info["events"], "evidence_selected")[0]
    assert chosen["selected"] == options["retrieved_images"] == chosen["ranking"]
    assert len(obs["images"]) == len(options["retrieved_images"])


def test_missing_parquet_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="data/test-"):
        prepare(tmp_path, tmp_path / "out")


def test_every_question_rejected_still_writes_the_report_and_empty_rows(tmp_path: Path) -> None:
    """No question kept means no corpus image to encode: the prep still accounts for every row and ends."""
    raw = write_fixture(tmp_path / "raw", [{**r, "answer_choice": "E"} for r in records()[:3]])
    out = tmp_path / "task"
    assert prep_main(["mragbench", "--raw", str(raw), "--out", str(out)]) == 0
    questions = json.loads((out / "report.json").read_text())["splits"]["questions"]
    assert (questions["num_rows_in"], questions["num_rows_out"]) == (3, 0)
    assert questions["rejected_by_reason"] == {"bad_answer_choice": 3}
    assert rows(out).empty
    assert len(pd.read_parquet(out / "corpus" / "corpus.parquet")) == 0


def test_a_parquet_without_rows_is_an_empty_split_with_its_report(tmp_path: Path) -> None:
    """``datasets`` refuses a split without rows; the prep reads none and reports 0 = 0 + 0, as for BRIGHT."""
    raw = write_fixture(tmp_path / "raw", [])
    out = tmp_path / "task"
    assert prep_main(["mragbench", "--raw", str(raw), "--out", str(out)]) == 0
    questions = json.loads((out / "report.json").read_text())["splits"]["questions"]
    assert questions == {
        "num_rows_in": 0,
        "num_rows_out": 0,
        "num_rows_rejected": 0,
        "rejected_by_reason": {},
    }
    assert rows(out).empty


def test_a_shard_without_rows_beside_one_with_rows_adds_none(tmp_path: Path) -> None:
    """Before, datasets failed on the empty shard (a batch size of 0) with a traceback."""
    import pyarrow.parquet as pq

    raw = write_fixture(tmp_path / "raw")
    shard = raw / "data" / "test-00000-of-00001.parquet"
    pq.write_table(pq.read_table(shard).slice(0, 0), raw / "data" / "test-00001-of-00002.parquet")
    shard.rename(raw / "data" / "test-00000-of-00002.parquet")
    assert prep_main(["mragbench", "--raw", str(raw), "--out", str(tmp_path / "task")]) == 0
    questions = json.loads((tmp_path / "task" / "report.json").read_text())["splits"]["questions"]
    assert (questions["num_rows_in"], questions["num_rows_out"]) == (13, NUM_VALID)


def test_a_shard_that_is_not_parquet_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before, pyarrow's ArrowInvalid, which does not name the file, ended the prep with a traceback."""
    shard = tmp_path / "raw" / "data" / "test-00000-of-00001.parquet"
    shard.parent.mkdir(parents=True)
    shard.write_text("junk\n")
    assert prep_main(["mragbench", "--raw", str(tmp_path / "raw"), "--out", str(tmp_path / "task")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"ragym prep mragbench: {shard} is not a parquet file (")
    assert not (tmp_path / "task" / "report.json").exists()


def test_a_shard_whose_rows_cannot_be_read_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A good footer over a corrupt page: datasets' error names no file, and ended the prep with a traceback."""
    import pyarrow.parquet as pq

    from tests.rl.data.bad_rows import zeroed_pages

    raw = write_fixture(tmp_path / "raw")
    shard = zeroed_pages(raw / "data" / "test-00000-of-00001.parquet")
    assert pq.ParquetFile(shard).metadata.num_rows > 0  # the footer still reads
    assert prep_main(["mragbench", "--raw", str(raw), "--out", str(tmp_path / "task")]) == 2
    # The fixture's writer prints its progress first; the prep's error is one line.
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ragym prep")]
    assert line.startswith(f"ragym prep mragbench: {shard}: its rows cannot be read (") and line.endswith(")")
    assert not (tmp_path / "task" / "report.json").exists()


def test_an_id_repeated_with_surrounding_spaces_is_a_duplicate(tmp_path: Path) -> None:
    """Ids are kept stripped, so " 101" repeats "101": one row, one ``duplicate_id``."""
    valid = records()[:2]
    raw = write_fixture(tmp_path / "raw", [*valid, {**valid[1], "id": f" {valid[1]['id']} "}])
    report = prepare(raw, tmp_path / "task")
    assert report.rejected["questions"] == {"duplicate_id": 1}
    assert sorted(rows(tmp_path / "task")["extra_info"].map(lambda e: e["question_id"])) == ["100", "101"]


@pytest.mark.parametrize("what", ["query_image", "gt_image", "retrieved_image"])
def test_an_image_past_the_aspect_ratio_rejects_its_row(tmp_path: Path, what: str) -> None:
    """A 2 x 500 image decoded, so its row was kept, and R3G's env then refused it (past the ratio 200 Qwen-VL
    accepts) in every episode that showed it; the row is now rejected with the reason."""
    buffer = io.BytesIO()
    Image.fromarray(np.full((500, 2, 3), 128, np.uint8)).save(buffer, format="PNG")
    strip = {"bytes": buffer.getvalue(), "path": None}
    valid = records()[:2]
    column = {"query_image": "image", "gt_image": "gt_images", "retrieved_image": "retrieved_images"}[what]
    broken = {**valid[1], column: strip if column == "image" else [strip]}
    report = prepare(write_fixture(tmp_path / "raw", [valid[0], broken]), tmp_path / "task")
    assert report.rejected["questions"] == {f"{what}_aspect_ratio": 1}
    assert report.num_out["questions"] == 1 and len(rows(tmp_path / "task")) == 1


def test_questions_stream_through_the_prep_not_held_all_at_once(tmp_path: Path, monkeypatch) -> None:
    """The 16,130 images of MRAG-Bench were all copied out of the parquet into one Python list before the first
    question was converted: the prep's peak memory grew with the dataset. It now reads one question at a time,
    so its peak stays under the query images' total size (here 40 images of ~190 KB each). The encoding step,
    which decodes a bounded batch of images at a time, is left out of the measure."""
    import tracemalloc

    from ragym.data_prep import mragbench

    monkeypatch.setattr(mragbench, "write_corpus", lambda *args, **kwargs: None)
    monkeypatch.setattr(mragbench, "write_queries", lambda *args, **kwargs: None)

    rng = np.random.default_rng(0)
    rows = []
    for i in range(40):
        row = dict(records()[i % NUM_VALID], id=str(1000 + i))
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (256, 256, 3), dtype=np.uint8)).save(buffer, format="PNG")
        row["image"] = {"bytes": buffer.getvalue(), "path": None}
        rows.append(row)
    total = sum(len(r["image"]["bytes"]) for r in rows)
    raw = write_fixture(tmp_path / "raw", rows)
    del rows
    tracemalloc.start()
    try:
        report = prepare(raw, tmp_path / "out")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert report.num_out["questions"] == 40
    assert peak < total / 2, f"peak {peak / 2**20:.1f} MiB for {total / 2**20:.1f} MiB of query images"
