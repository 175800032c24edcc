"""Stack Exchange preparation: readers, best answer, contamination counts, rows accounting, splits, negatives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragym.data_prep.annotators import OFFLINE_ANNOTATOR_NAME, OFFLINE_MARKER, OfflineAnnotator
from ragym.data_prep.hard_negatives import mine_bm25_negatives
from ragym.data_prep.stackexchange import INPUT_ROWS, PrepConfig, main, prepare, split_of
from ragym.data_prep.stackexchange_readers import QAPair, Rejection, read_posts_xml
from tests.rl.retriever_fixtures import write_pairs_jsonl

POSTS_XML = """<?xml version="1.0" encoding="utf-8"?>
<posts>
  <row Id="1" PostTypeId="1" AcceptedAnswerId="3" CreationDate="2012-01-01T10:00:00.000" Score="5"
       Title="Do magnets cure pain?" Body="&lt;p&gt;My aunt swears by &lt;b&gt;magnetic&lt;/b&gt; bracelets.&lt;/p&gt;" />
  <row Id="2" PostTypeId="2" ParentId="1" CreationDate="2012-01-02T10:00:00.000" Score="9" Body="&lt;p&gt;Top voted.&lt;/p&gt;" />
  <row Id="3" PostTypeId="2" ParentId="1" CreationDate="2012-01-03T10:00:00.000" Score="1" Body="&lt;p&gt;Accepted: trials show no effect.&lt;/p&gt;" />
  <row Id="4" PostTypeId="1" CreationDate="2013-05-01T10:00:00.000" Score="2" Title="Is the moon hollow?" Body="&lt;p&gt;Seismic echoes?&lt;/p&gt;" />
  <row Id="5" PostTypeId="2" ParentId="4" CreationDate="2013-05-02T10:00:00.000" Score="3" Body="&lt;p&gt;Low score answer.&lt;/p&gt;" />
  <row Id="6" PostTypeId="2" ParentId="4" CreationDate="2013-05-03T10:00:00.000" Score="7" Body="&lt;p&gt;Moonquakes show a dense core.&lt;/p&gt;" />
  <row Id="7" PostTypeId="1" CreationDate="2014-01-01T10:00:00.000" Score="1" Title="Unanswered?" Body="&lt;p&gt;Nobody knows.&lt;/p&gt;" />
  <row Id="8" PostTypeId="1" AcceptedAnswerId="9" CreationDate="2020-06-01T10:00:00.000" Score="4" Title="Does 5G spread viruses?" Body="&lt;p&gt;Claim seen online.&lt;/p&gt;" />
  <row Id="9" PostTypeId="2" ParentId="8" CreationDate="2020-06-02T10:00:00.000" Score="8" Body="&lt;p&gt;Radio waves cannot carry viruses.&lt;/p&gt;" />
  <row Id="10" PostTypeId="1" AcceptedAnswerId="11" Score="4" Title="Undated question?" Body="&lt;p&gt;No date here.&lt;/p&gt;" />
  <row Id="11" PostTypeId="2" ParentId="10" Score="8" Body="&lt;p&gt;An undated answer.&lt;/p&gt;" />
</posts>
"""


@pytest.fixture
def posts_xml(tmp_path: Path) -> Path:
    path = tmp_path / "skeptics.stackexchange.com" / "Posts.xml"
    path.parent.mkdir()
    path.write_text(POSTS_XML, encoding="utf-8")
    return path


def test_posts_xml_pairs_accepted_else_best_scored_answer(posts_xml: Path) -> None:
    items = {i.question_id if isinstance(i, QAPair) else i.row: i for i in read_posts_xml(posts_xml)}
    assert items["1"].answer_id == "3"  # accepted beats the higher score
    assert items["4"].answer_id == "6"  # no accepted answer: highest score
    assert items["1"].site == "skeptics"
    assert items["1"].question == "Do magnets cure pain?\nMy aunt swears by magnetic bracelets."
    assert items["1"].question_date == "2012-01-01T10:00:00.000"
    assert isinstance(items[f"{posts_xml}:7"], Rejection) and items[f"{posts_xml}:7"].reason == "no_answer"


def test_a_broken_post_is_one_rejected_thread(posts_xml: Path, tmp_path: Path) -> None:
    """A question without an Id, or answers that cannot be ranked (a Score or Id that is not an integer, and no
    accepted answer), reject that thread with a reason; an unranked sibling of an accepted answer is harmless."""
    broken = """  <row PostTypeId="1" Title="Who am I?" Body="&lt;p&gt;No id.&lt;/p&gt;" />
  <row Id="20" PostTypeId="1" Title="Scores?" Body="&lt;p&gt;Bad score.&lt;/p&gt;" />
  <row Id="21" PostTypeId="2" ParentId="20" Score="n/a" Body="&lt;p&gt;Unscored.&lt;/p&gt;" />
  <row Id="22" PostTypeId="2" ParentId="20" Score="3" Body="&lt;p&gt;Scored.&lt;/p&gt;" />
  <row PostTypeId="2" ParentId="4" Score="1" Body="&lt;p&gt;An answer without an id.&lt;/p&gt;" />
  <row Id="23" PostTypeId="2" ParentId="1" Score="n/a" Body="&lt;p&gt;Beside the accepted one.&lt;/p&gt;" />
</posts>
"""
    posts_xml.write_text(POSTS_XML.replace("</posts>\n", broken), encoding="utf-8")
    report = prepare(posts_xml, tmp_path / "out", OfflineAnnotator(), PrepConfig(num_negatives=1)).as_dict()
    threads = report["splits"][INPUT_ROWS]
    assert (threads["num_rows_in"], threads["num_rows_out"]) == (7, 3)  # 1 and 8 and 10 kept
    assert threads["rejected_by_reason"] == {"missing_field:Id": 1, "no_answer": 1, "unrankable_answers": 2}
    details = {e["detail"] for e in report["rejected_examples"]}
    assert {f"{posts_xml}:row 12", f"{posts_xml}:20", f"{posts_xml}:4"} <= details


def test_a_question_post_given_twice_is_counted_twice(posts_xml: Path, tmp_path: Path) -> None:
    again = '  <row Id="4" PostTypeId="1" Title="Is the moon hollow?" Body="&lt;p&gt;Again.&lt;/p&gt;" />\n</posts>\n'
    posts_xml.write_text(POSTS_XML.replace("</posts>\n", again), encoding="utf-8")
    report = prepare(posts_xml, tmp_path / "out", OfflineAnnotator(), PrepConfig(num_negatives=1)).as_dict()
    threads = report["splits"][INPUT_ROWS]
    assert (threads["num_rows_in"], threads["num_rows_out"]) == (6, 4)
    assert threads["rejected_by_reason"] == {"duplicate_question_id": 1, "no_answer": 1}


@pytest.mark.parametrize(
    ("excluded", "cutoff", "reject_undated", "expected"),
    [
        (set(), None, True, {"contaminated_id": 0, "after_cutoff": 0, "undated": 0}),
        (
            {"3"},
            None,
            True,
            {"contaminated_id": 1, "after_cutoff": 0, "undated": 0},
        ),  # an answer id counts too
        ({"4", "8"}, "2019-01-01", True, {"contaminated_id": 2, "after_cutoff": 0, "undated": 1}),
        (set(), "2019-01-01", True, {"contaminated_id": 0, "after_cutoff": 1, "undated": 1}),
        (set(), "2019-01-01", False, {"contaminated_id": 0, "after_cutoff": 1, "undated": 0}),
        (
            set(),
            "2013-05-03",
            True,
            {"contaminated_id": 0, "after_cutoff": 2, "undated": 1},
        ),  # answer date decides
    ],
)
def test_contamination_counts_and_rows_accounting(
    posts_xml: Path,
    tmp_path: Path,
    excluded: set[str],
    cutoff: str | None,
    reject_undated: bool,
    expected: dict,
) -> None:
    config = PrepConfig(num_negatives=1, cutoff=cutoff, reject_undated=reject_undated)
    report = prepare(posts_xml, tmp_path / "out", OfflineAnnotator(), config, excluded).as_dict()
    threads = report["splits"][INPUT_ROWS]
    assert report["details"]["contamination"] == expected
    assert threads["num_rows_in"] == 5  # question posts; answers are attached, not rows
    assert threads["num_rows_in"] == threads["num_rows_out"] + threads["num_rows_rejected"]
    assert threads["rejected_by_reason"]["no_answer"] == 1
    written = sum(1 for s in ("train", "test") for _ in (tmp_path / "out" / f"{s}.jsonl").open())
    assert written == threads["num_rows_out"] == 4 - sum(expected.values())


def test_jsonl_reader_rejects_bad_rows_with_reasons(tmp_path: Path) -> None:
    path = write_pairs_jsonl(tmp_path / "pairs.jsonl", num=6)
    with path.open("a", encoding="utf-8") as f:
        f.write("{not json\n")
        f.write(json.dumps({"question": "q", "questionId": "1"}) + "\n")
        f.write(json.dumps({"question": " ", "questionId": "2", "answer": "a", "answerId": "3"}) + "\n")
        f.write(json.dumps({"question": "dup", "questionId": "100", "answer": "a", "answerId": "4"}) + "\n")
    report = prepare(path, tmp_path / "out", OfflineAnnotator(), PrepConfig(num_negatives=2)).as_dict()
    threads = report["splits"][INPUT_ROWS]
    assert threads["num_rows_in"] == 10 and threads["num_rows_out"] == 6
    assert threads["rejected_by_reason"] == {
        "bad_json": 1,
        "duplicate_question_id": 1,
        "empty_text": 1,
        "missing_field:answer": 1,
    }
    assert {"split": INPUT_ROWS, "reason": "bad_json", "detail": f"{path}:7"} in report["rejected_examples"]


def test_a_null_field_is_a_missing_field(tmp_path: Path) -> None:
    """JSON null in a required field is rejected like an absent one, never kept as the text "None"."""
    path = write_pairs_jsonl(tmp_path / "pairs.jsonl", num=6)
    pair = {"question": "q?", "questionId": "9", "answer": "a", "answerId": "10"}
    with path.open("a", encoding="utf-8") as f:
        for field in ("question", "questionId", "answer"):
            f.write(json.dumps({**pair, field: None}) + "\n")
    report = prepare(path, tmp_path / "out", OfflineAnnotator(), PrepConfig(num_negatives=2)).as_dict()
    threads = report["splits"][INPUT_ROWS]
    assert (threads["num_rows_in"], threads["num_rows_out"]) == (9, 6)
    assert threads["rejected_by_reason"] == {
        "missing_field:question": 1,
        "missing_field:questionId": 1,
        "missing_field:answer": 1,
    }
    assert "None" not in (tmp_path / "out" / "corpus.jsonl").read_text()


def test_a_line_that_is_not_utf8_is_one_rejected_row(tmp_path: Path) -> None:
    """One stray byte (a dump cut mid-character) is one ``bad_json`` row, not the end of the whole run."""
    path = write_pairs_jsonl(tmp_path / "pairs.jsonl", num=6)
    with path.open("ab") as f:
        f.write(b'{"question": "caf\xe9?", "questionId": "9", "answer": "a", "answerId": "10"}\n')
    report = prepare(path, tmp_path / "out", OfflineAnnotator(), PrepConfig(num_negatives=2)).as_dict()
    threads = report["splits"][INPUT_ROWS]
    assert (threads["num_rows_in"], threads["num_rows_out"]) == (7, 6)
    assert threads["rejected_by_reason"] == {"bad_json": 1}


def test_limit_and_deterministic_splits(tmp_path: Path) -> None:
    path = write_pairs_jsonl(tmp_path / "pairs.jsonl")
    assert main(["--input", str(path), "--out", str(tmp_path / "a"), "--limit", "5"]) == 0
    assert main(["--input", str(path), "--out", str(tmp_path / "b")]) == 0
    report_a = json.loads((tmp_path / "a" / "report.json").read_text())
    assert (
        report_a["splits"][INPUT_ROWS]["num_rows_in"] == report_a["splits"][INPUT_ROWS]["num_rows_out"] == 5
    )
    split_a = {
        json.loads(line)["question_id"]: s
        for s in ("train", "test")
        for line in (tmp_path / "a" / f"{s}.jsonl").open()
    }
    split_b = {
        json.loads(line)["question_id"]: s
        for s in ("train", "test")
        for line in (tmp_path / "b" / f"{s}.jsonl").open()
    }
    # A thread keeps its split whatever else is read.
    assert all(split_b[qid] == split for qid, split in split_a.items())
    assert all(split_of(qid, 0.2) == split for qid, split in split_b.items())
    assert main(["--input", str(path), "--out", str(tmp_path / "c")]) == 0
    for name in ("train.jsonl", "test.jsonl", "corpus.jsonl"):
        assert (tmp_path / "b" / name).read_bytes() == (tmp_path / "c" / name).read_bytes()


def test_an_input_of_another_file_type_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_pairs_jsonl(tmp_path / "pairs.jsonl").rename(tmp_path / "pairs.txt")
    assert main(["--input", str(path), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"ragym prep stackexchange: --input {path} is neither a Posts.xml nor a .jsonl file"
    ]
    assert not (tmp_path / "out").exists()


def test_a_posts_xml_cut_short_is_one_line(
    posts_xml: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    posts_xml.write_text(POSTS_XML[:600], encoding="utf-8")
    assert main(["--input", str(posts_xml), "--out", str(tmp_path / "out")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"ragym prep stackexchange: {posts_xml} is not well-formed XML (")
    assert not (tmp_path / "out").exists()


def test_offline_annotations_are_labelled_everywhere(tmp_path: Path) -> None:
    report = prepare(
        write_pairs_jsonl(tmp_path / "p.jsonl"), tmp_path / "out", OfflineAnnotator(), PrepConfig()
    )
    assert (
        report.details["annotator"] == OFFLINE_ANNOTATOR_NAME
        and report.details["offline_annotations"] is True
    )
    rows = [json.loads(line) for s in ("train", "test") for line in (tmp_path / "out" / f"{s}.jsonl").open()]
    assert rows and all(r["annotator"] == OFFLINE_ANNOTATOR_NAME for r in rows)
    assert all(r["reasoning"].startswith(OFFLINE_MARKER) for r in rows)
    assert OfflineAnnotator().annotate("Do magnets cure pain?") == OfflineAnnotator().annotate(
        "Do magnets cure pain?"
    )
    assert "magnets" in OfflineAnnotator().annotate("Do magnets cure pain?")


def test_bm25_negatives_skip_positive_and_same_thread() -> None:
    doc_ids = ["pos", "sibling", "near", "far", "other"]
    texts = [
        "magnets cure pain trials",
        "magnets cure pain bracelets magnets",  # another answer in the query's own thread
        "magnets pain relief claims",
        "the moon is not hollow",
        "pain from cold weather",
    ]
    threads = ["t1", "t1", "t2", "t3", "t4"]
    negatives, topped = mine_bm25_negatives(
        ["magnets cure pain"], ["t1"], doc_ids, texts, threads, 2, depth=5
    )
    assert negatives == [["near", "other"]] and topped == 0
    # Asking for more than BM25 can find tops up with other-thread documents, never the own thread.
    negatives, topped = mine_bm25_negatives(
        ["magnets cure pain"], ["t1"], doc_ids, texts, threads, 3, depth=5
    )
    assert topped == 1 and len(negatives[0]) == 3 and not {"pos", "sibling"} & set(negatives[0])


def test_bm25_negatives_among_tied_answers_are_the_same_on_every_cpu() -> None:
    """Among answers of equal BM25 score, bm25s's own top-k picked them by numpy's partition and sort kernels
    (here, 257 tied answers gave a0, a39, a38, ...: which ones depends on the CPU's AVX-512 or AVX2 sort), so
    train.jsonl's negatives differed between machines. They now follow the env's BM25 rule, tied scores the
    later document first (``ragym.envs.retrieval.retrievers.top_k``)."""
    num = 257
    ids = [f"a{i}" for i in range(num)]
    negatives, _ = mine_bm25_negatives(
        ["glacier melt"],
        ["q"],
        ids,
        ["glacier melt answer"] * num,
        [f"t{i}" for i in range(num)],
        5,
        depth=30,
    )
    assert negatives == [[f"a{i}" for i in range(num - 1, num - 6, -1)]]


def test_shared_skeptics_accounting(shared_data: Path, tmp_path: Path) -> None:
    path = shared_data / "stackexchange_skeptics" / "web_science_dataset.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    report = prepare(path, tmp_path / "out", OfflineAnnotator(), PrepConfig(num_negatives=2, limit=120))
    threads = report.as_dict()["splits"][INPUT_ROWS]
    assert threads["num_rows_in"] == 120
    assert threads["num_rows_in"] == threads["num_rows_out"] + threads["num_rows_rejected"]
    assert sum(report.details["splits"].values()) == threads["num_rows_out"]
