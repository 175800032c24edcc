"""MMLongBench-Doc preparation on fixture PDFs made in the test, plus an integration run on shared data."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

from ragym.data_prep.mmlongbench_doc import PrepConfig, RowError, parse_evidence_pages, prepare
from ragym.data_prep.pdf_pages import PageTypeRules, PdfPage, classify_page, read_pdf
from ragym.envs.docmemo.env import DocMemoEnv
from ragym.envs.docmemo.store import doc_key, load_store
from ragym.rl.prep import main as prep_main

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.backends.backend_pdf import PdfPages  # noqa: E402

PAGE_TEXTS = ["Revenue grew in the northern region during spring.", "Staff numbers fell after the merger."]


def write_pdf(path: Path) -> Path:
    """Four pages: two text pages, a bar chart, a numeric grid (table), in that order."""
    plt.rcParams["pdf.fonttype"] = 42  # TrueType text, so the PDF has a real text layer
    with PdfPages(path) as pdf:
        for text in PAGE_TEXTS:
            fig = plt.figure(figsize=(4, 5))
            fig.text(0.1, 0.8, text, fontsize=7)
            pdf.savefig(fig)
            plt.close(fig)
        fig, ax = plt.subplots(figsize=(4, 5))
        ax.bar(range(90), range(90))
        ax.set_title("Sales chart")
        pdf.savefig(fig)
        plt.close(fig)
        fig = plt.figure(figsize=(4, 5))
        for r in range(12):
            fig.text(0.05, 0.95 - r * 0.07, "  ".join(str(100 * r + c) for c in range(5)), fontsize=7)
        pdf.savefig(fig)
        plt.close(fig)
    return path


def sample(doc_id: str, pages: str, answer: str = "x", fmt: str = "Str", **extra) -> dict:
    return {
        "doc_id": doc_id,
        "question": f"What about {answer}?",
        "answer": answer,
        "answer_format": fmt,
        "evidence_pages": pages,
        "evidence_sources": "[]",
        **extra,
    }


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("mmlb")
    docs = root / "documents"
    docs.mkdir()
    write_pdf(docs / "report.pdf")
    (docs / "broken.pdf").write_bytes(b"not a pdf at all")
    samples = [
        sample("report.pdf", "[1]", "north"),
        sample("report.pdf", "[3, 4]", "['a', 'b']", "List"),
        sample("report.pdf", "[]", "Not answerable", "None"),
        sample("report.pdf", "[0]", "cover"),
        sample("absent.pdf", "[2]"),
        sample("report.pdf", "[9]"),
        sample("report.pdf", "[2]", fmt="Bool"),
        sample("report.pdf", "two"),
        sample("broken.pdf", "[1]"),
        {"doc_id": "report.pdf", "question": "q"},
        sample("report.pdf", "[2]", "beyond the limit"),
    ]
    (root / "samples.json").write_text(json.dumps(samples))
    out = root / "out"
    report = prepare(root / "samples.json", docs, out, PrepConfig(dpi=30), limit=10)
    return out, report.as_dict()


def test_report_accounts_for_every_row(prepared):
    out, report = prepared
    counts = report["splits"]["test"]
    assert counts["num_rows_in"] == 10 == counts["num_rows_out"] + counts["num_rows_rejected"]
    assert counts["num_rows_out"] == 4
    assert counts["rejected_by_reason"] == {
        "bad_evidence_pages": 1,
        "evidence_page_out_of_range": 1,
        "missing_fields": 1,
        "missing_pdf": 1,
        "unknown_answer_format": 1,
        "unreadable_pdf": 1,
    }
    assert report["details"]["evidence_page_zero_mapped_to_1"] == [3]
    assert report["details"]["documents_missing"] == ["absent.pdf", "broken.pdf"]
    assert json.loads((out / "report.json").read_text()) == report
    missing = next(r for r in report["rejected_examples"] if r["reason"] == "missing_pdf")
    assert missing["detail"].startswith("sample 4: ") and "absent.pdf" in missing["detail"]


def test_rows_follow_the_common_schema(prepared):
    out, _ = prepared
    rows = pd.read_parquet(out / "data" / "test.parquet")
    assert list(rows.columns) == [
        "data_source",
        "agent_name",
        "prompt",
        "ability",
        "reward_model",
        "extra_info",
    ]
    assert set(rows["data_source"]) == {"mmlongbench_doc"} and set(rows["agent_name"]) == {"ragym_env"}
    truths = [json.loads(r["ground_truth"]) for r in rows["reward_model"]]
    assert [t["evidence_pages"] for t in truths] == [[1], [3, 4], [], [1]]
    assert truths[1] == {"answer": "['a', 'b']", "answer_format": "List", "evidence_pages": [3, 4]}
    for row in rows.itertuples():
        info = row.extra_info
        assert info["env_id"] == "DocMemo-v0" and info["split"] == "test"
        assert json.loads(info["env_options"]) == {
            "question": row.prompt[0]["content"],
            "doc_id": "report.pdf",
        }
        assert Path(json.loads(info["env_kwargs"])["store_root"]) == (out / "docs").resolve()


def test_store_holds_pages_types_and_images(prepared):
    out, _ = prepared
    store = load_store(out / "docs" / doc_key("report.pdf"))
    assert store.num_pages == 4 and store.page_types == ("text", "text", "chart", "table")
    assert store.summaries[0] == PAGE_TEXTS[0] and "Sales chart" in store.texts[2]
    assert store.embeddings.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(store.embeddings, axis=1), 1.0, rtol=1e-5)
    assert store.page_image(0).shape == (150, 120, 3)  # 4x5 inches at 30 dpi
    assert len(list((out / "docs" / "report" / "images").glob("page_*.png"))) == 4


def test_env_runs_on_prepared_rows(prepared):
    out, _ = prepared
    row = pd.read_parquet(out / "data" / "test.parquet").iloc[0]
    env = DocMemoEnv(**json.loads(row["extra_info"]["env_kwargs"]), num_candidates=3)
    obs, info = env.reset(seed=0, options=json.loads(row["extra_info"]["env_options"]))
    assert "Document: 4 pages" in obs["text"]
    # MiniLM should find the one page about northern revenue for a question about "north".
    env_q = DocMemoEnv(**json.loads(row["extra_info"]["env_kwargs"]), num_candidates=1, lambda_0=1.0)
    _, info = env_q.reset(
        seed=0, options={"question": "Did revenue grow in the northern region?", "doc_id": "report.pdf"}
    )
    assert info["events"][-1]["pages"] == [1]


@pytest.mark.parametrize(
    "raw,zero_page,expected",
    [
        ("[5]", "first", ([5], False)),
        ("[8, 7, 8]", "first", ([7, 8], False)),
        ("[]", "first", ([], False)),
        ("[0]", "first", ([1], True)),
        ([2, 3], "first", ([2, 3], False)),
    ],
)
def test_parse_evidence_pages(raw, zero_page, expected):
    assert parse_evidence_pages(raw, zero_page) == expected


@pytest.mark.parametrize(
    "raw,zero_page,reason",
    [
        ("[0]", "reject", "evidence_page_zero"),
        ("[0, 3]", "first", "bad_evidence_pages"),
        ("[1.5]", "first", "bad_evidence_pages"),
        ("{1}", "first", "bad_evidence_pages"),
        ("[true]", "first", "bad_evidence_pages"),
    ],
)
def test_bad_evidence_pages(raw, zero_page, reason):
    with pytest.raises(RowError) as err:
        parse_evidence_pages(raw, zero_page)
    assert err.value.reason == reason


def _page(**kw) -> PdfPage:
    base = {
        "image": np.zeros((2, 2, 3), np.uint8),
        "text": "word " * 100,
        "image_area": 0.0,
        "num_paths": 0,
        "num_numbers": 0,
        "num_tokens": 100,
    }
    return PdfPage(**{**base, **kw})


@pytest.mark.parametrize(
    "features,expected",
    [
        ({}, "text"),
        ({"image_area": 0.8, "text": "caption"}, "image-heavy"),
        ({"image_area": 0.8, "text": "x" * 5000}, "text"),
        ({"num_paths": 200}, "chart"),
        ({"num_numbers": 40, "num_tokens": 100}, "table"),
        ({"num_numbers": 40, "num_tokens": 100, "num_paths": 300}, "table"),
        ({"num_numbers": 40, "num_tokens": 1000}, "text"),
    ],
)
def test_classify_page(features, expected):
    assert classify_page(_page(**features), PageTypeRules()) == expected


def test_read_pdf_names_a_broken_file(tmp_path):
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(b"%PDF-1.4 garbage")
    with pytest.raises(ValueError, match="bad.pdf"):
        read_pdf(bad, 30)


def test_integration_on_shared_documents(shared_data, tmp_path, capsys):
    """Three real questions whose PDFs are present plus one whose PDF is absent, at low DPI."""
    root = shared_data / "mmlongbench_doc"
    if not (root / "samples.json").is_file() or not (root / "documents").is_dir():
        pytest.skip(f"{root} lacks samples.json or documents/")
    samples = json.loads((root / "samples.json").read_text())
    present = {p.name for p in (root / "documents").glob("*.pdf")}
    doc = min(present, key=lambda name: (root / "documents" / name).stat().st_size)
    chosen = [s for s in samples if s["doc_id"] == doc][:3] + [
        next(s for s in samples if s["doc_id"] not in present)
    ]
    (tmp_path / "samples.json").write_text(json.dumps(chosen))
    out = tmp_path / "out"
    argv = [
        "--samples",
        str(tmp_path / "samples.json"),
        "--documents",
        str(root / "documents"),
        "--out",
        str(out),
        "--dpi",
        "20",
        "--limit",
        "4",
    ]
    assert prep_main(["mmlongbench-doc", *argv]) == 0  # the command: prep, then the budget report
    printed = capsys.readouterr().out.strip().splitlines()
    # First the prep report, then the token budget report of the rows at DocMemo's paper recipe (text
    # estimated: no local model).
    assert printed[:2] == [
        "mmlongbench_doc: rows in = rows out + rows rejected",
        "  test  4 = 3 + 1  (missing_pdf 1)",
    ]
    assert printed[-1].startswith("budget: 3 episodes, response p90 ") and "ESTIMATED" in "\n".join(printed)
    store = load_store(out / "docs" / doc_key(doc))
    gold = [
        json.loads(r["ground_truth"])["evidence_pages"]
        for r in pd.read_parquet(out / "data" / "test.parquet")["reward_model"]
    ]
    assert all(1 <= p <= store.num_pages for pages in gold for p in pages)
    assert sum(len(t) for t in store.texts) > 0


def broken_page_pdf(path: Path) -> Path:
    """A PDF that opens, with two pages whose second names an object that does not exist."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R 9 0 R] /Count 2 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 4 0 R /Resources << >> >>",
        b"<< /Length 0 >>\nstream\n\nendstream",
    ]
    data, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(data))
        data += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(data)
    data += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    data += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    data += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    path.write_bytes(data)
    return path


def prepare_samples(tmp_path: Path, samples: list[dict]) -> dict:
    """``samples`` prepared into ``tmp_path/out`` (the report as a dict) against a documents folder holding
    ``report.pdf`` (readable) and ``torn.pdf`` (its second page broken)."""
    docs = tmp_path / "documents"
    docs.mkdir()
    write_pdf(docs / "report.pdf")
    broken_page_pdf(docs / "torn.pdf")
    (tmp_path / "samples.json").write_text(json.dumps(samples))
    return prepare(tmp_path / "samples.json", docs, tmp_path / "out", PrepConfig(dpi=30)).as_dict()


def test_a_page_that_cannot_be_read_is_a_rejected_row(tmp_path):
    report = prepare_samples(tmp_path, [sample("torn.pdf", "[1]"), sample("report.pdf", "[1]", "north")])
    counts = report["splits"]["test"]
    assert counts["num_rows_in"] == 2 == counts["num_rows_out"] + counts["num_rows_rejected"]
    assert counts["rejected_by_reason"] == {"unreadable_page": 1}
    example = next(r for r in report["rejected_examples"] if r["reason"] == "unreadable_page")
    assert "torn.pdf: page 2 cannot be read" in json.dumps(example)
    assert len(pd.read_parquet(tmp_path / "out" / "data" / "test.parquet")) == 1


def test_a_doc_id_that_is_not_a_file_name_is_a_rejected_row(tmp_path):
    """A null or numeric ``doc_id`` is one rejected row (``bad_doc_id``), not a crash of the whole job."""
    samples = [
        sample(None, "[1]"),
        sample(17, "[1]"),
        sample("", "[1]"),
        sample("report.pdf", "[1]", "north"),
    ]
    report = prepare_samples(tmp_path, samples)
    counts = report["splits"]["test"]
    assert (counts["num_rows_in"], counts["num_rows_out"]) == (4, 1)
    assert counts["rejected_by_reason"] == {"bad_doc_id": 3}
    assert len(pd.read_parquet(tmp_path / "out" / "data" / "test.parquet")) == 1


def test_a_sample_without_a_gold_answer_is_a_rejected_row(tmp_path):
    """A null or blank ``answer`` scores 0 against every prediction: rejected as ``missing_answer``."""
    samples = [
        {**sample("report.pdf", "[1]"), "answer": None},
        sample("report.pdf", "[1]", " "),
        sample("report.pdf", "[1]", "north"),
    ]
    report = prepare_samples(tmp_path, samples)
    counts = report["splits"]["test"]
    assert (counts["num_rows_in"], counts["num_rows_out"]) == (3, 1)
    assert counts["rejected_by_reason"] == {"missing_answer": 2}
    [row] = pd.read_parquet(tmp_path / "out" / "data" / "test.parquet")["reward_model"]
    assert json.loads(row["ground_truth"])["answer"] == "north"


def test_a_missing_documents_folder_is_one_line_naming_it(tmp_path, capsys):
    """A wrong ``--documents`` path is an error naming it, not every row rejected as ``missing_pdf``."""
    from ragym.rl.cli import main as ragym

    (tmp_path / "samples.json").write_text(json.dumps([sample("report.pdf", "[1]")]))
    args = ["--samples", str(tmp_path / "samples.json"), "--documents", str(tmp_path / "nowhere")]
    assert ragym(["prep", "mmlongbench-doc", *args, "--out", str(tmp_path / "out")]) == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ragym prep")]
    assert f"--documents {tmp_path / 'nowhere'} is not a folder" in line
    assert not (tmp_path / "out" / "report.json").exists()


def test_samples_json_with_a_bom_reads_and_one_cut_short_is_one_line(tmp_path, capsys):
    """samples.json saved with a UTF-8 BOM was a JSONDecodeError traceback, and so was one cut short (a stopped
    download); the first reads, the second is one line naming the file (exit status 2), no report."""
    from ragym.data_prep.prep import main as prep

    docs = tmp_path / "documents"
    docs.mkdir()
    write_pdf(docs / "report.pdf")
    text = json.dumps([sample("report.pdf", "[1]", "north")])
    path = tmp_path / "samples.json"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    report = prepare(path, docs, tmp_path / "out", PrepConfig(dpi=30))
    assert report.num_out["test"] == 1
    path.write_text(text[: len(text) // 2])
    args = ["--samples", str(path), "--documents", str(docs), "--out", str(tmp_path / "out2")]
    assert prep(["mmlongbench-doc", *args]) == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ragym prep")]
    assert line.startswith(f"ragym prep mmlongbench-doc: {path} is not JSON")
    assert not (tmp_path / "out2" / "report.json").exists()
