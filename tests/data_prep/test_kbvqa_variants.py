"""Documented variants not in the main fixtures: the other KB file shapes (``DATASETS.md`` 1c, 1d), InfoSeek
on a URL-keyed KB, and MMhops image columns under other names."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image as PILImage

from ragym.data_prep import evqa, infoseek, mmhops
from ragym.data_prep.kb_files import read_kb_file
from ragym.data_prep.kb_records import iter_json_object
from ragym.data_prep.report import PrepReport
from tests.data_prep import kbvqa_fixtures as fx

EVQA_ENTRY = {
    "title": "Example Hall",
    "section_titles": ["Example Hall", "History"],
    "section_texts": ["Example Hall is a venue.", "Built in 1901."],
    "image_urls": ["http://x/a.jpg"],
    "image_reference_descriptions": ["d"],
    "image_section_indices": [0],
    "url": fx.WIKI + "Example_Hall",
}
WIKI6M_ROW = {
    "wikidata_id": "Q7",
    "wikipedia_title": "Example Bridge",
    "wikipedia_content": "It spans a river.",
    "wikipedia_summary": "A bridge.",
    "wikipedia_image_url": None,
}


def _mmhops_features(images: dict) -> Any:
    """The columns of an MMhops shard a test writes itself, with ``images``' image columns (``datasets.Features``)."""
    from datasets import Features, List, Value

    return Features(
        {
            "id": Value("string"),
            "problem": Value("string"),
            "answer_eval": List(Value("string")),
            "split": Value("string"),
            "problem_type": Value("string"),
            **images,
        }
    )


@pytest.mark.parametrize(
    ("name", "content", "key"),
    [
        (
            "wiki_100_dict_v4.jsonl",
            json.dumps({fx.WIKI + "Example_Hall": EVQA_ENTRY}) + "\n",
            fx.WIKI + "Example_Hall",
        ),
        ("Wiki100k_ver_1_0-all.json", json.dumps({"Q7": {**WIKI6M_ROW, "extra": 1}}), "Q7"),
        (
            "infoseek_100k_wiki.json",
            json.dumps({fx.WIKI + "Example_Hall": EVQA_ENTRY}),
            fx.WIKI + "Example_Hall",
        ),
        ("Wiki6M_ver_1_0.jsonl.gz", json.dumps(WIKI6M_ROW) + "\n\n", "Q7"),
    ],
)
def test_kb_file_shapes(tmp_path: Path, name: str, content: str, key: str) -> None:
    path = tmp_path / name
    if name.endswith(".gz"):
        with gzip.open(path, "wt") as handle:
            handle.write(content)
    else:
        path.write_text(content)
    report = PrepReport("x")
    [article] = read_kb_file(path, report)
    assert article.key == key and article.title in ("Example Hall", "Example Bridge") and article.text
    assert report.num_in["kb"] == report.num_out["kb"] == 1
    if key == "Q7":
        assert article.image_url is None
    else:
        assert article.image_url == "http://x/a.jpg" and "Built in 1901." in article.text


def test_a_json_kb_that_is_not_an_object_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "kb.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"kb.json: expected one of '\{', found '\['"):
        read_kb_file(tmp_path / "kb.json", PrepReport("x"))


def test_infoseek_on_a_url_keyed_kb_maps_golds_by_entity_title(tmp_path: Path) -> None:
    fx.write_infoseek(tmp_path / "raw")
    kb = {fx.WIKI + t.replace(" ", "_"): {**EVQA_ENTRY, "title": t, "url": ""} for t in fx.TITLES}
    (tmp_path / "raw" / "infoseek_100k_wiki.json").write_text(json.dumps(kb))
    report = PrepReport("infoseek")
    articles, samples = infoseek.read(tmp_path / "raw", report)  # the 100K KB is preferred over Wiki6M
    assert {a.key for a in articles} == set(kb)
    golds = {s.sample_id: s.gold_keys[0] for s in samples}
    assert golds["infoseek_train_00000000"] == fx.WIKI + "Astronaut_portrait"
    assert golds["infoseek_train_00000011"] == "Q999"  # no title to map: rejected later as not in the KB


def test_infoseek_golds_match_by_qid_where_the_kb_carries_one_and_by_title_only_elsewhere(
    tmp_path: Path,
) -> None:
    fx.write_infoseek(tmp_path / "raw")
    astronaut, coffee, chelsea = (fx.WIKI + t for t in ("Astronaut", "Coffee", "Chelsea"))
    kb = {
        astronaut: {**EVQA_ENTRY, "title": "Astronaut (portrait)", "wikidata_id": "Q100"},  # title differs
        coffee: {
            **EVQA_ENTRY,
            "title": "Coffee cup",
            "wikidata_id": "Q555",
        },  # the title of Q101, another QID
        chelsea: {**EVQA_ENTRY, "title": "Chelsea the cat"},  # no QID: the title may name it
    }
    (tmp_path / "raw" / "infoseek_100k_wiki.json").write_text(json.dumps(kb))
    report = PrepReport("infoseek")
    _, samples = infoseek.read(tmp_path / "raw", report)
    golds = {s.sample_id: s.gold_keys[0] for s in samples if s.split == "train"}
    assert golds["infoseek_train_00000000"] == astronaut  # by QID, whatever the title
    assert golds["infoseek_train_00000001"] == "Q101"  # "Coffee cup" is Q555: not in the KB
    assert golds["infoseek_train_00000002"] == chelsea  # by title: that article carries no QID
    # Train rows 0-7, 11, 12 reach matching; golds Q100 | Q101 Q102 Q103 Q104 Q102 Q103 Q105 Q999 | none.
    assert report.details["gold_match"]["train"] == {"qid": 1, "title": 2, "unmatched": 6, "no_gold": 1}


def test_mmhops_image_columns_under_other_names(tmp_path: Path) -> None:
    from datasets import Dataset, Image

    raw = tmp_path / "raw"
    fx.write_mmhops(raw)
    for shard in (raw / "data").glob("*.parquet"):
        shard.unlink()
    features = _mmhops_features({"image_1": Image(), "image_2": Image()})
    png = fx._png(fx.photo(0))
    rows = {
        "id": ["MMhops_test_1", "MMhops_test_2"],
        "problem": ["<image><image>Which?", "<image>Who?"],
        "answer_eval": [["a"], ["b"]],
        "split": ["COMPARE", "Bridge"],
        "problem_type": ["String", "String"],
        "image_1": [{"bytes": png, "path": None}] * 2,
        "image_2": [{"bytes": png, "path": None}, None],
    }
    Dataset.from_dict(rows, features=features).to_parquet(str(raw / "data" / "test-00000-of-00001.parquet"))
    report = PrepReport("mmhops")
    _, samples, _ = mmhops.read(raw, report)
    assert [len(s.images) for s in samples] == [2, 1]
    assert [s.question_type for s in samples] == ["Compare", "Bridge"]
    assert samples[0].gold_keys == (None, None) and samples[1].gold_keys == (None,)  # no gold column: null


def _strip_feature_metadata(raw: Path, drop: tuple[str, ...] = ()) -> None:
    """Rewrite every shard as plain parquet: no Hugging Face feature metadata (images are bare structs)."""
    import pyarrow.parquet as pq

    for shard in (raw / "data").glob("*.parquet"):
        table = pq.read_table(shard).replace_schema_metadata(None)
        pq.write_table(table.drop_columns(list(drop)), shard)


def test_mmhops_shards_without_feature_metadata_read_images_by_content(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    fx.write_mmhops(raw)
    with_features, plain = PrepReport("mmhops"), PrepReport("mmhops")
    _, expected, _ = mmhops.read(raw, with_features)
    _strip_feature_metadata(raw)
    _, samples, _ = mmhops.read(raw, plain)
    assert len(samples) == len(expected) > 0 and samples == expected
    assert plain.rejected == with_features.rejected and plain.num_in == with_features.num_in


def test_mmhops_shards_with_no_image_column_are_refused_in_one_line(tmp_path: Path, capsys) -> None:
    from ragym.rl.prep import main as prep

    raw = tmp_path / "raw"
    fx.write_mmhops(raw)
    _strip_feature_metadata(raw, drop=("images",))
    with pytest.raises(mmhops.ShardSchemaError, match=r"no image column .*'problem'"):
        mmhops.read(raw, PrepReport("mmhops"))
    assert prep(["mmhops", "--raw", str(raw), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err  # also holds the datasets library's progress bars
    [line] = [line for line in err.splitlines() if line.startswith("ragym prep")]
    assert line.startswith("ragym prep mmhops: MMhops train shards") and "no image column" in line
    assert "Traceback" not in err
    assert not (tmp_path / "out" / "data").exists()


def test_mmhops_kb_image_root_default_is_the_one_help_states(tmp_path: Path, capsys) -> None:
    from ragym.data_prep.prep import prep_dataset

    raw = tmp_path / "raw"
    fx.write_mmhops(raw)
    articles, _ = mmhops.read_kb(raw / "MMhops-KB", PrepReport("mmhops"))
    found = [Path(a.image_path) for a in articles if a.image_path]
    assert found and all(raw / "MMhops-KB" / "image" in path.parents for path in found)
    with pytest.raises(SystemExit):
        prep_dataset("mmhops", ["--help"])
    assert "(default KB/image," in " ".join(capsys.readouterr().out.split())


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(
    obj=st.dictionaries(st.text(max_size=8), JSON, max_size=6),
    chunk=st.integers(1, 17),
    indent=st.sampled_from([None, 1]),
)
def test_streamed_json_object_equals_json_load(tmp_path_factory, obj: dict, chunk: int, indent) -> None:
    path = tmp_path_factory.mktemp("stream") / "kb.json"
    path.write_text(json.dumps(obj, indent=indent, ensure_ascii=False))
    assert dict(iter_json_object(path, chunk_chars=chunk)) == obj


@pytest.mark.parametrize("text", ['{"a": 1', '{"a" 1}', '{"a": 1,}', '{"a": tru}', ""])
def test_streamed_json_errors_name_the_file(tmp_path: Path, text: str) -> None:
    (tmp_path / "kb.json").write_text(text)
    with pytest.raises(ValueError, match="kb.json"):
        list(iter_json_object(tmp_path / "kb.json", chunk_chars=3))


@pytest.mark.parametrize("name", ["infoseek", "mmhops"])
def test_a_row_given_twice_is_rejected_as_a_duplicate_id(tmp_path: Path, name: str) -> None:
    """The same source row twice (an InfoSeek line, an MMhops shard) is one row out and one ``duplicate_id``."""
    from ragym.data_prep.prep import prep_dataset

    raw = tmp_path / "raw"
    getattr(fx, f"write_{name}")(raw)
    if name == "infoseek":
        path = raw / "infoseek_val.jsonl"
        path.write_text(path.read_text() + path.read_text().splitlines()[0] + "\n")
        split, sample_id = "val", "infoseek_val_00000000"
    else:
        shard = raw / "data" / "validation-00000-of-00001.parquet"
        shard.with_name("validation-00001-of-00002.parquet").write_bytes(shard.read_bytes())
        split, sample_id = "validation", "MMhops_validation_00001"
    report = prep_dataset(name, ["--raw", str(raw), "--out", str(tmp_path / "out")])
    counts = report["splits"][split]
    assert counts["rejected_by_reason"].get("duplicate_id") == 1
    assert counts["num_rows_in"] == counts["num_rows_out"] + counts["num_rows_rejected"]
    rows = pd.read_parquet(tmp_path / "out" / "data" / f"{split}.parquet")
    assert [r["sample_id"] for r in rows["extra_info"]].count(sample_id) == 1
    [example] = [e for e in report["rejected_examples"] if e["reason"] == "duplicate_id"]
    assert sample_id in example["detail"]


def test_infoseek_files_saved_with_a_bom_and_crlf_read_like_the_originals(tmp_path: Path) -> None:
    """A QA file and a KB file re-saved with a UTF-8 BOM and CRLF line ends: the same rows, the same rejections
    (the BOM rejected each file's first row as ``malformed_json``)."""
    raw = tmp_path / "raw"
    fx.write_infoseek(raw)
    plain = PrepReport("infoseek")
    articles, samples = infoseek.read(raw, plain)
    for name in ("infoseek_train.jsonl", "infoseek_val.jsonl", "Wiki6M_ver_1_0.jsonl"):
        path = raw / name
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes().replace(b"\n", b"\r\n"))
    saved = PrepReport("infoseek")
    assert infoseek.read(raw, saved) == (articles, samples)
    assert saved.rejected == plain.rejected and saved.num_in == plain.num_in


def test_evqa_csv_saved_with_a_bom_and_crlf_and_a_row_not_utf8(tmp_path: Path) -> None:
    """The README's column order (``question`` first) re-saved with a UTF-8 BOM and CRLF reads the same rows (the
    BOM renamed the first column, refusing the file); a row with a byte that is not UTF-8 is one rejected pair
    (it was a UnicodeDecodeError traceback)."""
    raw = tmp_path / "raw"
    fx.write_evqa(raw)
    path = raw / "test.csv"
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame[["question", *[c for c in frame.columns if c != "question"]]].to_csv(path, index=False)
    plain = PrepReport("evqa")
    samples = evqa.read(raw, plain)[1]
    bad = b"Q\xff?,x,4242,inaturalist,1,automatic," + fx.WIKI.encode() + b"Coffee_cup,t,,0,t,test,Q,True\n"
    path.write_bytes(b"\xef\xbb\xbf" + (path.read_bytes() + bad).replace(b"\n", b"\r\n"))
    saved = PrepReport("evqa")
    assert evqa.read(raw, saved)[1] == samples
    assert saved.num_in["test"] == plain.num_in["test"] + 1
    assert saved.rejected["test"] - plain.rejected.get("test", Counter()) == Counter({"not_utf8": 1})
    [example] = [e for e in saved.examples if e["reason"] == "not_utf8"]
    assert "test.csv" in example["detail"]


def test_infoseek_and_mmhops_rows_whose_answers_are_all_empty_are_rejected(tmp_path: Path) -> None:
    """An ``answer_eval`` of empty strings matches no prediction (every episode would score 0): it is
    ``malformed_answer``, as an empty E-VQA answer is; a list with one usable alias is kept."""
    from datasets import Dataset, Image, List

    raw = tmp_path / "infoseek"
    fx.write_infoseek(raw)
    path = raw / "infoseek_val.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0]["answer_eval"], rows[5]["answer_eval"] = ["", " "], ["", "Astronaut"]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = PrepReport("infoseek")
    kept = {s.sample_id for s in infoseek.read(raw, report)[1]}
    assert report.rejected["val"]["malformed_answer"] == 1
    assert rows[0]["data_id"] not in kept and rows[5]["data_id"] in kept

    raw = tmp_path / "mmhops"
    fx.write_mmhops(raw)
    for shard in (raw / "data").glob("*.parquet"):
        shard.unlink()
    features = _mmhops_features({"images": List(Image())})
    png = {"bytes": fx._png(fx.photo(0)), "path": None}
    columns = {
        "id": ["MMhops_test_1", "MMhops_test_2", "MMhops_test_3"],
        "problem": ["<image>Who?"] * 3,
        "answer_eval": [[""], ["  ", ""], ["", "Louvre"]],
        "split": ["Bridge"] * 3,
        "problem_type": ["String", "Time", "String"],
        "images": [[png]] * 3,
    }
    Dataset.from_dict(columns, features=features).to_parquet(
        str(raw / "data" / "test-00000-of-00001.parquet")
    )
    report = PrepReport("mmhops")
    samples = mmhops.read(raw, report)[1]
    assert [s.sample_id for s in samples] == ["MMhops_test_3"]
    assert report.rejected["test"] == Counter({"malformed_answer": 2})


def test_infoseek_withkb_and_qtype_lines_are_counted_not_dropped(tmp_path: Path) -> None:
    """A withkb or qtype line that is broken, lacks its field or repeats a data_id was skipped (or overwrote the
    first) silently, and its row then lost its gold or had its type guessed; each line is now counted under
    ``<split>_withkb`` / ``<split>_qtype`` with its reason, the first line of a data_id standing."""
    raw = tmp_path / "raw"
    fx.write_infoseek(raw)
    with (raw / "infoseek_val_withkb.jsonl").open("a") as f:
        f.write('{"data_id": "infoseek_val_00000005", "entity_id": \n')  # cut short
        f.write('{"data_id": "infoseek_val_00000000", "entity_id": "Q105"}\n')  # a second gold: ignored
        f.write('{"data_id": "infoseek_val_00000004"}\n')  # no entity_id
    with (raw / "infoseek_val_qtype.jsonl").open("a") as f:
        f.write('{"data_id": "infoseek_val_00000000", "question_type": "Numerical"}\n')
        f.write("[1]\n")
    report = PrepReport("infoseek")
    samples = {s.sample_id: s for s in infoseek.read(raw, report)[1]}
    assert report.rejected["val_withkb"] == Counter(malformed_json=1, duplicate_id=1, missing_entity_id=1)
    assert report.rejected["val_qtype"] == Counter(duplicate_id=1, malformed_json=1)
    assert samples["infoseek_val_00000000"].gold_keys == ("Q100",)  # the first line's gold, matched by QID
    assert samples["infoseek_val_00000000"].question_type == "String"
    for split in ("val_withkb", "val_qtype", "train_withkb"):
        assert report.num_in[split] == report.num_out[split] + sum(report.rejected.get(split, {}).values())
    assert report.num_in["val_withkb"] == 8 and report.num_in["train_withkb"] == 12


def test_mmhops_query_images_are_spooled_to_files_not_held_in_memory(tmp_path: Path) -> None:
    """Every MMhops sample held its images' bytes until the KB was built: the whole dataset's images (28,256)
    in memory at once. With a spool folder (what ``ragym prep mmhops`` gives) each image goes to a file as its
    row is read and the sample holds its path, so the reader's peak stays under the images' total size."""
    import tracemalloc

    from datasets import Dataset, Image, List

    raw = tmp_path / "raw"
    fx.write_mmhops(raw)
    for shard in (raw / "data").glob("*.parquet"):
        shard.unlink()
    rng = np.random.default_rng(0)
    pngs = []
    for _ in range(40):
        buffer = BytesIO()
        PILImage.fromarray(rng.integers(0, 255, (256, 256, 3), dtype=np.uint8)).save(buffer, format="PNG")
        pngs.append(buffer.getvalue())
    features = _mmhops_features({"images": List(Image())})
    columns = {
        "id": [f"MMhops_test_{i}" for i in range(40)],
        "problem": ["<image>Who?"] * 40,
        "answer_eval": [["Louvre"]] * 40,
        "split": ["Bridge"] * 40,
        "problem_type": ["String"] * 40,
        "images": [[{"bytes": png, "path": None}] for png in pngs],
    }
    Dataset.from_dict(columns, features=features).to_parquet(
        str(raw / "data" / "test-00000-of-00001.parquet")
    )
    del columns
    tracemalloc.start()
    try:
        samples = mmhops.read(raw, PrepReport("mmhops"), spool=tmp_path / "spool")[1]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [Path(s.images[0]).read_bytes() for s in samples] == pngs
    assert all(Path(s.images[0]).parent.parent == tmp_path / "spool" for s in samples)
    total = sum(map(len, pngs))
    assert peak < total / 2, f"peak {peak / 2**20:.1f} MiB for {total / 2**20:.1f} MiB of images"
