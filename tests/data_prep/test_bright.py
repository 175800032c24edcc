"""``ragym prep bright|mm-bright`` on exact-format fixtures: row accounting, qrels, images, and runnable rows."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from ragym.envs.events import events_of
from ragym.envs.registry import make_env
from ragym.envs.retrieval.trec import read_trec_qrels
from ragym.rewards import Episode, Rubric
from ragym.rl.prep import main as prep_main
from tests.data_prep.bright_fixtures import BRIGHT_DOCS, write_bright, write_mm_bright

SHARED_QRELS = Path(__file__).resolve().parents[3] / "shared" / "data" / "bright_qrels"


def rows(out: Path, split: str = "test") -> list[dict]:
    frame = pd.read_parquet(out / "data" / f"{split}.parquet")
    return [{**r, "extra_info": dict(r["extra_info"])} for r in frame.to_dict("records")]


def test_bright_rows_in_equal_out_plus_rejected(tmp_path: Path) -> None:
    raw, out = write_bright(tmp_path / "raw"), tmp_path / "out"
    assert prep_main(["bright", "--raw", str(raw), "--task", "biology", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert (
        report["splits"]["queries"]["num_rows_in"] == 6 and report["splits"]["queries"]["num_rows_out"] == 2
    )
    assert report["splits"]["queries"]["rejected_by_reason"] == {
        "empty_query": 1,
        "excluded_overlaps_gold": 1,
        "gold_not_in_corpus": 1,
        "no_gold": 1,
    }
    assert report["splits"]["documents"] == {
        "num_rows_in": 7,
        "num_rows_out": 5,
        "num_rows_rejected": 2,
        "rejected_by_reason": {"duplicate_id": 1, "missing_field": 1},
    }
    (first,), (second,) = rows(out, "warmup"), rows(out)  # two usable queries: int(0.8 x 2) = 1 warm-up
    options = json.loads(first["extra_info"]["env_options"])
    assert options["excluded_ids"] == [] and set(options["qrels"]) == set(
        list(json.loads(first["reward_model"]["ground_truth"])["qrels"])
    )
    assert json.loads(second["extra_info"]["env_options"])["excluded_ids"] == ["moth_lamps/Lamp_2.txt"]
    assert len((out / "documents.jsonl").read_text().splitlines()) == 5


def test_a_query_given_twice_is_rejected_as_a_duplicate_id(tmp_path: Path) -> None:
    """The same example row twice is one row out and one ``duplicate_id``, not two episodes of one query."""
    raw, out = write_bright(tmp_path / "raw"), tmp_path / "out"
    shard = raw / "examples" / "biology-00000-of-00001.parquet"
    examples = pd.read_parquet(shard)
    pd.concat([examples, examples.iloc[[0]]]).to_parquet(shard)
    assert prep_main(["bright", "--raw", str(raw), "--task", "biology", "--out", str(out)]) == 0
    queries = json.loads((out / "report.json").read_text())["splits"]["queries"]
    assert (queries["num_rows_in"], queries["num_rows_out"]) == (7, 2)
    assert queries["rejected_by_reason"]["duplicate_id"] == 1
    query_ids = [
        json.loads(r["extra_info"]["env_options"])["query_id"] for r in rows(out, "warmup") + rows(out)
    ]
    assert sorted(query_ids) == ["0", "1"]


def test_a_null_query_or_document_id_is_a_missing_field(tmp_path: Path) -> None:
    """A null id reads back from parquet as NaN: it is rejected, never kept as the id "nan"."""
    raw, out = write_bright(tmp_path / "raw"), tmp_path / "out"
    for config, extra in (("examples", {"query": "Why do bees dance?"}), ("documents", {"content": "Bees."})):
        shard = raw / config / "biology-00000-of-00001.parquet"
        frame = pd.read_parquet(shard)
        null = frame.iloc[[1]].assign(id=None, **extra)
        pd.concat([frame, null]).to_parquet(shard)
    assert prep_main(["bright", "--raw", str(raw), "--task", "biology", "--out", str(out)]) == 0
    splits = json.loads((out / "report.json").read_text())["splits"]
    assert splits["queries"]["rejected_by_reason"]["missing_field"] == 1
    assert splits["documents"]["rejected_by_reason"]["missing_field"] == 2  # the fixture's own, and this one
    assert (splits["queries"]["num_rows_out"], splits["documents"]["num_rows_out"]) == (2, 5)
    query_ids = [
        json.loads(r["extra_info"]["env_options"])["query_id"] for r in rows(out, "warmup") + rows(out)
    ]
    assert sorted(query_ids) == ["0", "1"]
    assert "nan" not in (out / "documents.jsonl").read_text()


@pytest.mark.parametrize("content", ["", " \n\t"])
def test_a_document_without_text_is_rejected(tmp_path: Path, content: str) -> None:
    """An empty (or whitespace) document is nothing to retrieve: rejected as ``empty_document``, never written."""
    raw, out = write_bright(tmp_path / "raw"), tmp_path / "out"
    shard = raw / "documents" / "biology-00000-of-00001.parquet"
    frame = pd.read_parquet(shard)
    pd.concat([frame, pd.DataFrame([{"id": "empty/e_0.txt", "content": content}])]).to_parquet(shard)
    assert prep_main(["bright", "--raw", str(raw), "--task", "biology", "--out", str(out)]) == 0
    documents = json.loads((out / "report.json").read_text())["splits"]["documents"]
    assert (documents["num_rows_in"], documents["num_rows_out"]) == (8, 5)
    assert documents["rejected_by_reason"] == {"duplicate_id": 1, "empty_document": 1, "missing_field": 1}
    assert "empty/e_0.txt" not in (out / "documents.jsonl").read_text()


@pytest.mark.parametrize(("config", "split"), [("examples", "queries"), ("documents", "documents")])
def test_a_jsonl_line_that_is_not_a_json_object_is_rejected(tmp_path: Path, config: str, split: str) -> None:
    """Before, one line that is not JSON ended the whole prep with a ``JsonlError`` traceback."""
    raw, out = write_bright(tmp_path / "raw"), tmp_path / "out"
    shard = raw / config / "biology-00000-of-00001.parquet"
    lines = [json.dumps(row, default=list) for row in pd.read_parquet(shard).to_dict("records")]
    shard.unlink()
    (raw / config / "biology.jsonl").write_text("\n".join([*lines, "{bad", "[1]"]) + "\n")
    assert prep_main(["bright", "--raw", str(raw), "--task", "biology", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    counts = report["splits"][split]
    assert counts["num_rows_in"] == len(lines) + 2
    assert counts["num_rows_out"] == {"queries": 2, "documents": 5}[split]
    assert counts["rejected_by_reason"]["malformed_json"] == 2
    details = [e["detail"] for e in report["rejected_examples"] if e["reason"] == "malformed_json"]
    assert (
        f"biology.jsonl:{len(lines) + 1}: not JSON" in details[0] and "not a JSON object: [1]" in details[1]
    )


def test_bright_row_runs_in_the_env_and_scores(tmp_path: Path) -> None:
    raw, out = write_bright(tmp_path / "raw"), tmp_path / "out"
    prep_main(
        [
            "bright",
            "--raw",
            str(raw),
            "--task",
            "biology",
            "--out",
            str(out),
            "--limit",
            "2",
            "--warmup-fraction",
            "1",
            "--memory-dir",
            str(tmp_path / "mem"),
        ]
    )
    row = rows(out, "warmup")[1]
    assert row["extra_info"]["split"] == "warmup" and rows(out) == []
    env = make_env(row["extra_info"]["env_id"], **json.loads(row["extra_info"]["env_kwargs"]))
    _, info = env.reset(options=json.loads(row["extra_info"]["env_options"]))
    assert "moth_lamps/Lamp_2.txt" not in events_of(info["events"], "first_stage")[0]["ranking"]
    _, _, _, _, info = env.step("<reason>r</reason><stop></stop>")
    episode = Episode(
        row["data_source"], ["t"], info["events"], json.loads(row["reward_model"]["ground_truth"])
    )
    result = Rubric.from_recipe("recipes/rewards/memora.yaml").score(episode)
    assert (
        result.breakdown["ndcg"] == result.breakdown["first_stage_ndcg"] == pytest.approx(1.0)
    )  # BM25 finds it
    assert json.loads((tmp_path / "mem" / "bright_biology.jsonl").read_text())["ndcg"] == pytest.approx(1.0)


def write_stream(raw: Path, ids: list[str]) -> Path:
    """A BRIGHT task whose examples come in the order of ``ids`` (not sorted), each with its own gold."""
    write_bright(raw)
    gold = list(BRIGHT_DOCS)
    examples = [
        {
            "id": qid,
            "query": f"question {qid} about light",
            "gold_ids": [gold[i % len(gold)]],
            "excluded_ids": ["N/A"],
        }
        for i, qid in enumerate(ids)
    ]
    pd.DataFrame(examples).to_parquet(raw / "examples" / "biology-00000-of-00001.parquet")
    return raw


def test_split_is_chronological_80_20_recorded_and_held_out_rows_never_write(tmp_path: Path) -> None:
    ids = [
        "17",
        "3",
        "40",
        "8",
        "21",
        "5",
        "33",
        "2",
        "11",
        "29",
    ]  # row order is the time order, not id order
    raw, out, mem = write_stream(tmp_path / "raw", ids), tmp_path / "out", tmp_path / "mem"
    args = ["bright", "--raw", str(raw), "--task", "biology", "--out", str(out), "--memory-dir", str(mem)]
    assert prep_main(args) == 0
    warmup, test = rows(out, "warmup"), rows(out, "test")
    assert [json.loads(r["extra_info"]["env_options"])["query_id"] for r in warmup] == ids[:8]
    assert [json.loads(r["extra_info"]["env_options"])["query_id"] for r in test] == ids[8:]
    assert [r["extra_info"]["index"] for r in warmup + test] == list(range(10))
    split = json.loads((out / "report.json").read_text())["details"]["split"]
    assert split["warmup_fraction"] == 0.8 and (split["num_warmup"], split["num_test"]) == (8, 2)
    assert split["warmup_query_ids"] == ids[:8] and split["test_query_ids"] == ids[8:]
    assert "row order" in split["order"]
    kwargs = [json.loads(r["extra_info"]["env_kwargs"]) for r in (warmup[0], test[0])]
    assert [k["memory_frozen"] for k in kwargs] == [False, True]
    for row in (warmup[0], test[0]):  # a warm-up episode writes the domain memory; a held-out one never does
        env = make_env("MEMORA-v0", **json.loads(row["extra_info"]["env_kwargs"]))
        env.reset(options=json.loads(row["extra_info"]["env_options"]))
        env.step("<reason>r</reason><stop></stop>")
    assert [
        json.loads(line)["query_id"] for line in (mem / "bright_biology.jsonl").read_text().splitlines()
    ] == ["17"]
    # Without a memory folder the held-out rows are frozen too: a runner sharing one env never lets them write.
    prep_main([*args[:-2], "--out", str(tmp_path / "nodir")])
    assert json.loads(rows(tmp_path / "nodir")[0]["extra_info"]["env_kwargs"])["memory_frozen"] is True
    prep_main([*args, "--out", str(tmp_path / "all"), "--freeze-memory", "--warmup-fraction", "0"])
    assert rows(tmp_path / "all", "warmup") == [] and len(rows(tmp_path / "all")) == 10
    with pytest.raises(SystemExit):
        prep_main([*args, "--warmup-fraction", "1.5"])


def test_bright_long_documents_and_trec_qrels(tmp_path: Path) -> None:
    raw = write_bright(tmp_path / "raw")
    prep_main(["bright", "--raw", str(raw), "--task", "biology", "--out", str(tmp_path / "long"), "--long"])
    assert (
        json.loads((tmp_path / "long" / "report.json").read_text())["splits"]["queries"]["num_rows_out"] == 1
    )
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("0\t0\tinsects_attracted_to_light/Phototaxis_3.txt\t1\n1\t0\tbird_song/Song_0.txt\t0\n")
    prep_main(
        [
            "bright",
            "--raw",
            str(raw),
            "--task",
            "biology",
            "--out",
            str(tmp_path / "q"),
            "--qrels",
            str(qrels),
        ]
    )
    report = json.loads((tmp_path / "q" / "report.json").read_text())
    assert (
        report["splits"]["queries"]["num_rows_out"] == 1
        and report["splits"]["queries"]["rejected_by_reason"]["no_gold"] == 4
    )
    assert json.loads(rows(tmp_path / "q")[0]["extra_info"]["env_options"])["qrels"] == {
        "insects_attracted_to_light/Phototaxis_3.txt": 1
    }


def test_mm_bright_task2_resolves_images_and_task1_ignores_them(tmp_path: Path) -> None:
    raw = write_mm_bright(tmp_path / "raw")
    out = tmp_path / "t2"
    prep_main(["mm-bright", "--raw", str(raw), "--domain", "academia", "--task", "2", "--out", str(out)])
    report = json.loads((out / "report.json").read_text())["splits"]["queries"]
    assert report["num_rows_out"] == 1 and report["rejected_by_reason"] == {
        "missing_image": 1,
        "no_query_image": 1,
    }
    options = json.loads(rows(out)[0]["extra_info"]["env_options"])
    assert Path(options["image_path"]).read_bytes()[:4] == b"\x89PNG"
    assert options["excluded_ids"] == ["academia/a7beca61_5.txt"]
    env = make_env("MEMORA-v0", **json.loads(rows(out)[0]["extra_info"]["env_kwargs"]))
    obs, _ = env.reset(options=options)
    assert obs["text"].count("<image>") == len(obs["images"]) == 1 and obs["images"][0].shape == (12, 16, 3)
    prep_main(
        ["mm-bright", "--raw", str(raw), "--domain", "academia", "--task", "1", "--out", str(tmp_path / "t1")]
    )
    assert json.loads((tmp_path / "t1" / "report.json").read_text())["splits"]["queries"]["num_rows_out"] == 3


def test_mm_bright_task2_rejects_a_query_image_that_does_not_decode(tmp_path: Path) -> None:
    """A corrupt query image is rejected as ``unreadable_image``; the row is not written for reset to fail on."""
    raw, out = write_mm_bright(tmp_path / "raw"), tmp_path / "out"
    shard = raw / "examples_images" / "academia-00000-of-00001.parquet"
    corrupt = pd.DataFrame([{"path": "academia/q_13/image_1.png", "bytes": b"not a png"}])
    pd.concat([pd.read_parquet(shard), corrupt]).to_parquet(shard)
    prep_main(["mm-bright", "--raw", str(raw), "--domain", "academia", "--task", "2", "--out", str(out)])
    report = json.loads((out / "report.json").read_text())["splits"]["queries"]
    assert report["num_rows_out"] == 1
    assert report["rejected_by_reason"] == {"unreadable_image": 1, "no_query_image": 1}
    assert [json.loads(r["extra_info"]["env_options"])["query_id"] for r in rows(out)] == ["12"]


def test_mm_bright_task2_rejects_a_query_image_past_the_aspect_ratio(tmp_path: Path) -> None:
    """A 2 x 500 query image decoded, so its row was kept, and MEMORA then refused it at every reset (past the
    ratio 200 Qwen-VL accepts); it is now rejected as ``image_aspect_ratio``."""
    raw, out = write_mm_bright(tmp_path / "raw"), tmp_path / "out"
    shard = raw / "examples_images" / "academia-00000-of-00001.parquet"
    buffer = io.BytesIO()
    Image.fromarray(np.full((500, 2, 3), 128, np.uint8)).save(buffer, format="PNG")
    strip = pd.DataFrame([{"path": "academia/q_13/image_1.png", "bytes": buffer.getvalue()}])
    pd.concat([pd.read_parquet(shard), strip]).to_parquet(shard)
    prep_main(["mm-bright", "--raw", str(raw), "--domain", "academia", "--task", "2", "--out", str(out)])
    report = json.loads((out / "report.json").read_text())["splits"]["queries"]
    assert report["rejected_by_reason"] == {"image_aspect_ratio": 1, "no_query_image": 1}
    assert [json.loads(r["extra_info"]["env_options"])["query_id"] for r in rows(out)] == ["12"]


def test_mm_bright_descriptions_lines_that_cannot_be_used_are_counted_and_skipped(tmp_path: Path) -> None:
    """Before, a line without an id was a KeyError traceback and a line that is not JSON a JsonlError one; now
    each is a rejected row of the ``descriptions`` split and its query goes on without a description."""
    raw, out = write_mm_bright(tmp_path / "raw"), tmp_path / "out"
    lines = [
        {"id": "12", "description": "a line plot whose legend is cut off"},
        {"description": "no id"},
        {"id": "13", "description": None},
        "{bad",
        [1],
        {"id": 12, "description": "a second description of query 12"},
    ]
    path = tmp_path / "descriptions.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    args = ["--raw", str(raw), "--domain", "academia", "--task", "1", "--descriptions", str(path)]
    assert prep_main(["mm-bright", *args, "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["splits"]["descriptions"] == {
        "num_rows_in": 6,
        "num_rows_out": 1,
        "num_rows_rejected": 5,
        "rejected_by_reason": {"duplicate_id": 1, "malformed_json": 2, "missing_field": 2},
    }
    assert report["splits"]["queries"]["num_rows_out"] == 3
    described = {
        options["query_id"]: options.get("image_description")
        for options in (json.loads(r["extra_info"]["env_options"]) for r in rows(out, "warmup") + rows(out))
    }
    assert described == {"12": "a line plot whose legend is cut off", "13": None, "14": None}
    details = [e["detail"] for e in report["rejected_examples"] if e["split"] == "descriptions"]
    assert any(d.startswith(f"{path}:4: not JSON") for d in details)


def test_each_prep_task_writes_its_own_memory_file(tmp_path: Path) -> None:
    """Short and long BRIGHT documents, and MM-BRIGHT's Task 1 and Task 2 of one domain, share a memory folder
    but never a memory file: their document ids (and, across tasks, their queries) would leak or not match."""
    mem, bright, mm = tmp_path / "mem", write_bright(tmp_path / "bright"), write_mm_bright(tmp_path / "mm")
    preps = {
        "bright_biology": ["bright", "--raw", str(bright), "--task", "biology"],
        "bright_biology_long": ["bright", "--raw", str(bright), "--task", "biology", "--long"],
        "mm_bright_task1_academia": ["mm-bright", "--raw", str(mm), "--domain", "academia", "--task", "1"],
        "mm_bright_task2_academia": ["mm-bright", "--raw", str(mm), "--domain", "academia", "--task", "2"],
    }
    for name, args in preps.items():
        out = tmp_path / name
        prep_main([*args, "--out", str(out), "--memory-dir", str(mem), "--warmup-fraction", "1"])
        domains = {json.loads(r["extra_info"]["env_kwargs"])["domain"] for r in rows(out, "warmup")}
        assert domains == {name}
        assert json.loads((out / "report.json").read_text())["details"]["memory_file"] == str(
            mem.resolve() / f"{name}.jsonl"
        )
        row = rows(out, "warmup")[0]
        env = make_env("MEMORA-v0", **json.loads(row["extra_info"]["env_kwargs"]))
        env.reset(options=json.loads(row["extra_info"]["env_options"]))
        env.step("<reason>r</reason><stop></stop>")
    assert sorted(p.name for p in mem.iterdir()) == sorted(f"{name}.jsonl" for name in preps)


@pytest.mark.parametrize(
    ("command", "file", "says"),
    [
        ("bright", "documents/biology-00000-of-00001.parquet", "is not a readable parquet file ("),
        ("mm-bright", "examples_multimodal/academia.parquet", "is not a readable parquet file ("),
        ("bright", "examples/biology.json", "is not JSON ("),
    ],
)
def test_an_input_file_not_in_its_format_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, file: str, says: str
) -> None:
    """Before, pyarrow's ArrowInvalid (or json's error) ended the prep with a traceback."""
    if command == "bright":
        raw, task = write_bright(tmp_path / "raw"), ["--task", "biology"]
    else:
        raw, task = write_mm_bright(tmp_path / "raw"), ["--domain", "academia"]
    if file.endswith(".json"):  # the split as one JSON file instead of its shards
        (raw / "examples" / "biology-00000-of-00001.parquet").unlink()
    (raw / file).write_text("junk\n")
    assert prep_main([command, "--raw", str(raw), *task, "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"ragym prep {command}: {raw / file} {says}")
    assert not (tmp_path / "out" / "report.json").exists()


@pytest.mark.parametrize(("content", "found"), [("5", "int"), ('{"id": "0", "query": "q"}', "dict")])
def test_a_split_json_that_is_not_a_list_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, found: str
) -> None:
    """Before, a number was list()'s TypeError traceback and an object became one row per key."""
    raw, out = write_bright(tmp_path / "raw"), tmp_path / "out"
    (raw / "examples" / "biology-00000-of-00001.parquet").unlink()
    (raw / "examples" / "biology.json").write_text(content)
    assert prep_main(["bright", "--raw", str(raw), "--task", "biology", "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"ragym prep bright: {raw / 'examples' / 'biology.json'} is not a JSON list of rows (found {found})"
    )
    assert not (out / "report.json").exists()


@pytest.mark.parametrize("line", ["0 0 bird_song/Song_0.txt", "0 0 bird_song/Song_0.txt one"])
def test_a_qrels_line_that_is_not_a_judgement_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str
) -> None:
    """Before, three fields were a ValueError traceback and a relevance that is not an integer one without the
    file; the qrels are every query's gold, so the prep writes nothing."""
    raw, out, qrels = write_bright(tmp_path / "raw"), tmp_path / "out", tmp_path / "qrels.tsv"
    qrels.write_text(f"1 0 bird_song/Song_0.txt 1\n{line}\n")
    argv = ["bright", "--raw", str(raw), "--task", "biology", "--out", str(out), "--qrels", str(qrels)]
    assert prep_main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        f"ragym prep bright: {qrels}:2: expected 'qid iter docid rel' (rel an integer), got {line!r}"
    )
    assert not (out / "report.json").exists()


def test_qrels_that_are_not_utf8_are_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw, out, qrels = write_bright(tmp_path / "raw"), tmp_path / "out", tmp_path / "qrels.tsv"
    qrels.write_bytes(b"1 0 bird_song/Song_0.txt 1\n\xff\xfe 0 x 1\n")
    argv = ["bright", "--raw", str(raw), "--task", "biology", "--out", str(out), "--qrels", str(qrels)]
    assert prep_main(argv) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .startswith(f"ragym prep bright: {qrels}: not UTF-8 text, so not TREC qrels")
    )
    assert not (out / "report.json").exists()


def test_missing_split_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="documents"):
        prep_main(["bright", "--raw", str(tmp_path), "--task", "biology", "--out", str(tmp_path / "o")])


@pytest.mark.skipif(not SHARED_QRELS.exists(), reason=f"{SHARED_QRELS} is absent (real BRIGHT qrels)")
def test_real_bright_qrels_have_the_documented_query_counts() -> None:
    documented = {
        "biology": 103,
        "economics": 103,
        "psychology": 101,
        "robotics": 101,
        "stackoverflow": 117,
        "sustainable_living": 108,
        "leetcode": 142,
        "pony": 112,
        "aops": 111,
    }
    for task, count in documented.items():
        qrels = read_trec_qrels(SHARED_QRELS / f"{task}.tsv")
        assert len(qrels) == count, task
        assert all(rel > 0 for judged in qrels.values() for rel in judged.values())
    assert "insects_attracted_to_light/Phototaxis_3.txt" in read_trec_qrels(SHARED_QRELS / "biology.tsv")["0"]


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_split_files_saved_with_a_bom_and_crlf_read_as_the_shards(tmp_path: Path, suffix: str) -> None:
    """The examples split as one ``.json`` list or ``.jsonl`` re-saved with a UTF-8 BOM and CRLF: the same report
    as its parquet shard (the BOM made the ``.json`` 'not JSON' and cost the ``.jsonl`` its first query)."""
    from ragym.data_prep.bright import read_split

    raw = write_bright(tmp_path / "raw")
    shard = raw / "examples" / "biology-00000-of-00001.parquet"
    rows = pd.read_parquet(shard).to_dict("records")
    rows = [{k: (list(v) if isinstance(v, np.ndarray) else v) for k, v in r.items()} for r in rows]
    shard.unlink()
    lines = [json.dumps(rows)] if suffix == ".json" else [json.dumps(r) for r in rows]
    (raw / "examples" / f"biology{suffix}").write_bytes(
        b"\xef\xbb\xbf" + "\r\n".join(lines).encode() + b"\r\n"
    )
    assert read_split(raw, "examples", "biology") == rows
