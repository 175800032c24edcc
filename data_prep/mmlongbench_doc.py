"""MMLongBench-Doc -> DocMemo document stores + verl parquet rows.

``ragym prep mmlongbench-doc --samples samples.json --documents DIR --out OUT [--dpi 144] [--limit N]``
(then the token budget report of the rows at ``docmemo_qwen2_5_vl_7b``: ``ragym.rl.budget.prep_report``)

Writes ``OUT/docs/<doc_key>/`` (``ragym.envs.docmemo.store`` layout: page images at ``--dpi``, page text, extractive
summaries, page types, page embeddings from all-MiniLM-L6-v2 over page text, or from a CLIP-style model
over page images with ``--visual-model-path``), ``OUT/data/test.parquet`` (data_source
``mmlongbench_doc``, ground truth ``{"answer", "answer_format", "evidence_pages"}`` with 1-based pages) and
``OUT/report.json``: rows in = rows out + rows rejected, by reason (a question whose PDF is missing is
rejected as ``missing_pdf``). Three upstream items give ``evidence_pages`` as ``[0]``; every other item is
1-based, and those three point at the cover page, so ``[0]`` becomes ``[1]`` (``--zero-page first``,
counted in the report) or the row is rejected (``--zero-page reject``).
"""

from __future__ import annotations

import argparse
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from PIL import Image

from ragym.data_prep.encoding import EncodeConfig, Item, encode_to_array
from ragym.data_prep.encoding.encoders import EnvEncoderItems
from ragym.data_prep.pdf_pages import PageTypeRules, UnreadablePage, classify_page, read_outline, read_pdf
from ragym.data_prep.report import PrepReport, UnreadableFile, row_limit
from ragym.data_prep.rows import verl_row
from ragym.envs.docmemo.store import DocStore, doc_key, save_store, summarise
from ragym.envs.retrieval.page_encoders import PageEncoder, TextPageEncoder, VisualPageEncoder

log = logging.getLogger(__name__)
DATA_SOURCE = "mmlongbench_doc"
ANSWER_FORMATS = ("Int", "Float", "Str", "List", "None")
REQUIRED_FIELDS = ("doc_id", "question", "answer", "answer_format", "evidence_pages")
PAGE_ENCODING = EncodeConfig(shard_size=1024, batch_size=32, progress=False)
"""Pages go through the shared encoding step one document at a time (a document is its own small run)."""


@dataclass(frozen=True)
class PrepConfig:
    """Knobs of the MMLongBench-Doc preparation."""

    dpi: int = 144
    """Page render resolution (72 = PDF points; the paper's page images are about 144)."""
    summary_chars: int = 240
    """Length budget of each extractive page summary."""
    zero_page: str = "first"
    """What ``evidence_pages == [0]`` means: ``first`` (page 1) or ``reject`` (drop the row, reported)."""
    split: str = "test"
    """Split name written into ``extra_info`` (MMLongBench-Doc is an evaluation set)."""
    env_id: str = "DocMemo-v0"
    """Environment the rows are for."""
    page_types: PageTypeRules = field(default_factory=PageTypeRules)
    """Layout thresholds for page types."""


class RowError(ValueError):
    """A sample that cannot become a row; ``reason`` is the report's key."""

    def __init__(self, reason: str, detail: str) -> None:
        """``reason``: short code; ``detail``: what was wrong, for the report."""
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def parse_evidence_pages(raw: Any, zero_page: str) -> tuple[list[int], bool]:
    """1-based evidence pages from the upstream string (e.g. ``"[7, 8]"``), and whether ``[0]`` was mapped."""
    try:
        pages = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as err:
        raise RowError("bad_evidence_pages", f"{raw!r} is not a JSON list") from err
    if not isinstance(pages, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in pages):
        raise RowError("bad_evidence_pages", f"{raw!r} is not a list of integers")
    if pages == [0]:
        if zero_page == "reject":
            raise RowError("evidence_page_zero", "evidence_pages is [0]")
        return [1], True
    if any(p < 1 for p in pages):
        raise RowError("bad_evidence_pages", f"{raw!r} has a page below 1")
    return sorted(set(pages)), False


def build_store(pdf: Path, out_dir: Path, doc_id: str, encoder: PageEncoder, cfg: PrepConfig) -> DocStore:
    """Render, read, summarise, type and embed every page of ``pdf`` into ``out_dir``."""
    pages = read_pdf(pdf, cfg.dpi)
    (out_dir / "images").mkdir(parents=True, exist_ok=True)
    for number, page in enumerate(pages, start=1):
        Image.fromarray(page.image).save(out_dir / "images" / f"page_{number:04d}.png")
    texts = tuple(" ".join(p.text.split()) for p in pages)
    # The text encoder never looks at the image: only a visual encoder gets the page image path to decode.
    visual = not isinstance(encoder, TextPageEncoder)
    items = [
        Item(f"{doc_id}#{n}", text, str(out_dir / "images" / f"page_{n:04d}.png") if visual else None)
        for n, text in enumerate(texts, start=1)
    ]
    store = DocStore(
        doc_id=doc_id,
        texts=texts,
        summaries=tuple(summarise(t, cfg.summary_chars) or "(no text layer)" for t in texts),
        page_types=tuple(classify_page(p, cfg.page_types) for p in pages),
        embeddings=encode_to_array(items, EnvEncoderItems(encoder, "pages"), config=PAGE_ENCODING),
        encoder=encoder.name,
        sections=read_outline(pdf),
    )
    save_store(store, out_dir, cfg.dpi)
    return store


def make_row(sample: dict[str, Any], index: int, pages: list[int], store_root: Path, cfg: PrepConfig) -> dict:
    """One parquet row in the common schema; gold stays in ``reward_model`` only."""
    truth = {"answer": sample["answer"], "answer_format": sample["answer_format"], "evidence_pages": pages}
    options = {"question": sample["question"], "doc_id": sample["doc_id"]}
    return verl_row(
        data_source=DATA_SOURCE,
        ability="long_document_qa",
        question=sample["question"],
        ground_truth=truth,
        index=index,
        split=cfg.split,
        env_id=cfg.env_id,
        env_kwargs={"store_root": str(store_root)},
        env_options=options,
    )


def _check_sample(sample: Any) -> None:
    if not isinstance(sample, dict):
        raise RowError("not_an_object", f"sample is {type(sample).__name__}")
    missing = [k for k in REQUIRED_FIELDS if k not in sample]
    if missing:
        raise RowError("missing_fields", f"missing {missing}")
    if not isinstance(sample["question"], str) or not sample["question"].strip():
        raise RowError("empty_question", "question is empty")
    if not isinstance(sample["doc_id"], str) or not sample["doc_id"].strip():
        raise RowError("bad_doc_id", f"doc_id {sample['doc_id']!r} is not a PDF file name")
    answer = sample["answer"]
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        # The scorer gives such a gold 0 for every prediction: the row could never be answered right.
        raise RowError("missing_answer", f"answer {answer!r} is empty")
    if sample["answer_format"] not in ANSWER_FORMATS:
        raise RowError("unknown_answer_format", f"answer_format {sample['answer_format']!r}")


class _Stores:
    """Builds each referenced document once; remembers documents that failed, with why."""

    def __init__(self, documents: Path, root: Path, encoder: PageEncoder, cfg: PrepConfig) -> None:
        self.documents, self.root, self.encoder, self.cfg = documents, root, encoder, cfg
        self.built: dict[str, DocStore | RowError] = {}

    def get(self, doc_id: str) -> DocStore:
        if doc_id not in self.built:
            pdf = self.documents / doc_id
            if not pdf.is_file():
                self.built[doc_id] = RowError("missing_pdf", f"{pdf} does not exist")
            else:
                try:
                    log.info("building store for %s", doc_id)
                    self.built[doc_id] = build_store(
                        pdf, self.root / doc_key(doc_id), doc_id, self.encoder, self.cfg
                    )
                except UnreadablePage as err:
                    self.built[doc_id] = RowError("unreadable_page", str(err))
                except ValueError as err:
                    self.built[doc_id] = RowError("unreadable_pdf", str(err))
        result = self.built[doc_id]
        if isinstance(result, RowError):
            raise result
        return result


def prepare(
    samples_path: Path,
    documents: Path,
    out: Path,
    cfg: PrepConfig,
    limit: int | None = None,
    encoder: PageEncoder | None = None,
) -> PrepReport:
    """Run the preparation, write stores, parquet and report; returns the report."""
    if not Path(documents).is_dir():
        # Not one missing PDF (the shared sample lacks most) but none at all: a wrong path, not 1,082 rejections.
        raise FileNotFoundError(f"--documents {documents} is not a folder (the PDFs, file name = doc_id)")
    try:  # utf-8-sig: a file saved with a BOM reads the same
        samples = json.loads(Path(samples_path).read_text(encoding="utf-8-sig"))
    except ValueError as err:  # cut short (a stopped download), not JSON, not UTF-8: no sample can be counted
        raise UnreadableFile(f"{samples_path} is not JSON ({err})") from err
    if not isinstance(samples, list):
        raise UnreadableFile(f"{samples_path}: expected a JSON list of samples")
    samples = samples[:limit] if limit is not None else samples
    stores = _Stores(Path(documents), out / "docs", encoder or TextPageEncoder(), cfg)
    report = PrepReport("mmlongbench_doc")
    rows, zero_mapped = [], []
    for index, sample in enumerate(samples):
        report.read(cfg.split)
        try:
            _check_sample(sample)
            pages, mapped = parse_evidence_pages(sample["evidence_pages"], cfg.zero_page)
            store = stores.get(sample["doc_id"])
            if pages and pages[-1] > store.num_pages:
                raise RowError("evidence_page_out_of_range", f"page {pages[-1]} > {store.num_pages} pages")
        except RowError as err:
            report.reject(cfg.split, err.reason, f"sample {index}: {err.detail}")
            continue
        if mapped:
            zero_mapped.append(index)
        rows.append(make_row(sample, index, pages, (out / "docs").resolve(), cfg))
        report.keep(cfg.split)
    (out / "data").mkdir(parents=True, exist_ok=True)
    columns = ["data_source", "agent_name", "prompt", "ability", "reward_model", "extra_info"]
    pd.DataFrame(rows, columns=columns).to_parquet(out / "data" / f"{cfg.split}.parquet")
    report.details.update(
        {
            "evidence_page_zero_mapped_to_1": zero_mapped,
            "documents_built": sorted(d for d, s in stores.built.items() if isinstance(s, DocStore)),
            "documents_missing": sorted(d for d, s in stores.built.items() if isinstance(s, RowError)),
        }
    )
    report.save(out)
    return report


def main(argv: list[str]) -> int:
    """Command line entry point; prints the report summary."""
    parser = argparse.ArgumentParser(
        prog="ragym prep mmlongbench-doc", description=(__doc__ or "").partition("\n")[0]
    )
    parser.add_argument("--samples", type=Path, required=True, help="MMLongBench-Doc samples.json")
    parser.add_argument(
        "--documents", type=Path, required=True, help="folder of the PDFs (file name = doc_id)"
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--dpi", type=int, default=PrepConfig.dpi)
    parser.add_argument("--limit", type=row_limit, help="only the first N samples")
    parser.add_argument("--zero-page", choices=["first", "reject"], default=PrepConfig.zero_page)
    parser.add_argument("--device", default="cpu", help="device of the page encoder")
    parser.add_argument(
        "--visual-model-path",
        help="embed page images with this local CLIP-style model instead "
        "(the env then needs encoder=visual and the same visual_model_path)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = PrepConfig(dpi=args.dpi, zero_page=args.zero_page)
    if args.visual_model_path:
        encoder: PageEncoder = VisualPageEncoder(args.visual_model_path, device=args.device)
    else:
        encoder = TextPageEncoder(device=args.device)
    report = prepare(args.samples, args.documents, args.out, cfg, args.limit, encoder)
    print(report.format())
    return 0
