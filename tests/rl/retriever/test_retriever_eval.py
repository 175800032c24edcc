"""MEMORA-R evaluation, export and ablation: metric plumbing, BRIGHT files, faiss export round trip, Table 4."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ragym.envs.retrieval.encoders import make_text_encoder
from ragym.envs.retrieval.hits import Hit, Retriever
from ragym.envs.retrieval.retrievers import normalise
from ragym.rl.errors import UsageError
from ragym.rl.retriever.ablation import (
    CONTRASTIVE,
    REASONING,
    ZERO_SHOT,
    format_table,
    run_ablation,
    table4_rows,
)
from ragym.rl.retriever.config import ModelConfig, recipe_from_dict, with_overrides
from ragym.rl.retriever.data import EvalSet, heldout_eval_set, load_bright, load_corpus
from ragym.rl.retriever.evaluate import EvalConfig, dense_run, encode, evaluate_encoder, score_run
from ragym.rl.retriever.export import export_retriever, load_dense_retriever
from ragym.rl.retriever.train import load_encoder
from tests.data_prep.bright_fixtures import BRIGHT_DOCS, write_bright
from tests.rl.retriever_fixtures import prepared_dir


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepared_dir(tmp_path_factory.mktemp("retriever_eval"))


@pytest.fixture(scope="module")
def encoder():
    return load_encoder(ModelConfig(max_seq_length=32))


@pytest.mark.parametrize(
    ("run", "expected_ndcg", "expected_recall1"),
    [
        ({"a": {"d1": 2.0, "x": 1.0}, "b": {"d2": 1.0}}, 1.0, 1.0),  # both first
        ({"a": {"x": 2.0, "d1": 1.0}, "b": {"d2": 1.0}}, (0.6309297535714575 + 1.0) / 2, 0.5),
        ({"a": {"d1": 1.0}}, 0.5, 0.5),  # b missing from the run scores 0
    ],
)
def test_score_run_averages_over_judged_queries(
    run: dict, expected_ndcg: float, expected_recall1: float
) -> None:
    qrels = {"a": {"d1": 1}, "b": {"d2": 1}, "c": {"d3": 0}}  # c has no relevant document: not averaged
    metrics = score_run(run, qrels, EvalConfig(recall_ks=(1,)))
    assert metrics["ndcg@10"] == pytest.approx(expected_ndcg)
    assert metrics["recall@1"] == pytest.approx(expected_recall1)


def _bright_files(tmp: Path, qrels_text: str) -> tuple[Path, Path, Path]:
    corpus = tmp / "corpus.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"id": f"d{i}", "text": t}) + "\n"
            for i, t in enumerate(
                [
                    "Vitamin C trials found no cold prevention.",
                    "Moonquakes reveal a dense lunar core.",
                    "Goldfish memory lasts months.",
                ]
            )
        )
    )
    queries = tmp / "queries.jsonl"
    queries.write_text(
        json.dumps({"id": "q0", "query": "Does vitamin C stop colds?"})
        + "\n"
        + json.dumps({"id": "q1", "query": "How long do goldfish remember?"})
        + "\n"
    )
    qrels = tmp / "qrels.tsv"
    qrels.write_text(qrels_text)
    return corpus, queries, qrels


def test_bright_format_eval(tmp_path: Path, encoder) -> None:
    files = _bright_files(tmp_path, "q0\t0\td0\t1\nq1\t0\td2\t1\n")
    bright = load_bright(*files)
    assert bright.qrels == {"q0": {"d0": 1}, "q1": {"d2": 1}} and len(bright.corpus) == 3
    metrics = evaluate_encoder(encoder, bright, EvalConfig(recall_ks=(1,)))
    assert metrics["ndcg@10"] == pytest.approx(1.0) and metrics["num_queries"] == 2
    bad = _bright_files(tmp_path, "q9 0 d0 1\n")
    with pytest.raises(ValueError, match="absent from"):
        load_bright(*bad)
    with pytest.raises(ValueError, match=r"qrels.tsv:1"):
        load_bright(*_bright_files(tmp_path, "q0 d0 1\n"))


def test_bright_excluded_ids_leave_the_ranking_before_scoring(tmp_path: Path, encoder) -> None:
    """BRIGHT's official ``examples`` rows carry ``excluded_ids`` (``["N/A"]`` for none); its run.py removes them
    from each query's ranking before the cut-off, so a document ranked above the gold one stops costing it."""
    corpus, queries, qrels = _bright_files(tmp_path, "q0\t0\td1\t1\n")  # a gold unlike the query
    base = load_bright(corpus, queries, qrels)
    run = dense_run(encoder, base.queries, base.corpus, 3, EvalConfig())["q0"]
    ranked = sorted(run, key=run.__getitem__, reverse=True)
    above = ranked[: ranked.index("d1")]
    assert above  # the encoder ranks another document first
    lines = [json.loads(line) for line in queries.read_text().splitlines()]
    examples = [
        {**lines[0], "gold_ids": ["d1"], "excluded_ids": above},
        {**lines[1], "gold_ids": ["d2"], "excluded_ids": ["N/A"]},
    ]
    queries.write_text("".join(json.dumps(e) + "\n" for e in examples))
    bright = load_bright(corpus, queries, qrels)
    assert bright.excluded == {"q0": frozenset(above)}  # "N/A" is BRIGHT's placeholder for none
    config = EvalConfig(ndcg_k=1, recall_ks=(1,))
    assert evaluate_encoder(encoder, base, config)["recall@1"] == 0.0
    assert evaluate_encoder(encoder, bright, config)["recall@1"] == 1.0
    # searched deep enough that an excluded document takes no place in the top 1
    assert list(dense_run(encoder, bright.queries, bright.corpus, 1, config, bright.excluded)["q0"]) == ["d1"]
    examples[0]["excluded_ids"] = ["d1"]  # BRIGHT's run.py asserts excluded and gold ids never overlap
    queries.write_text("".join(json.dumps(e) + "\n" for e in examples))
    with pytest.raises(UsageError, match=r"queries.jsonl: query 'q0' excludes \['d1'\], relevant in"):
        load_bright(corpus, queries, qrels)
    examples[0]["excluded_ids"] = "d0"
    queries.write_text("".join(json.dumps(e) + "\n" for e in examples))
    with pytest.raises(UsageError, match=r"queries.jsonl:1: excluded_ids must be a list"):
        load_bright(corpus, queries, qrels)


def test_bright_qrels_with_nothing_relevant_are_refused_naming_the_file(tmp_path: Path) -> None:
    # every query would be unjudged: evaluation failed after training with a message naming no file
    with pytest.raises(UsageError, match=r"qrels.tsv: no query with a relevant document"):
        load_bright(*_bright_files(tmp_path, "q0\t0\td0\t0\n"))


def _official_bright(tmp: Path, ids: list[str]) -> tuple[Path, Path, list[dict]]:
    """BRIGHT's ``documents`` and its ``examples`` rows ``ids`` as jsonl, from the hub-format fixture."""
    raw = write_bright(tmp / "hub")
    table = pd.read_parquet(raw / "examples" / "biology-00000-of-00001.parquet")
    rows = [
        {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in row.items()}
        for row in table.to_dict("records")
        if row["id"] in ids
    ]
    corpus, queries = tmp / "documents.jsonl", tmp / "examples.jsonl"
    corpus.write_text("".join(json.dumps({"id": d, "content": c}) + "\n" for d, c in BRIGHT_DOCS.items()))
    queries.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return corpus, queries, rows


def test_bright_without_qrels_judges_each_query_by_its_gold_ids(tmp_path: Path, encoder) -> None:
    """BRIGHT ships no qrels file: its run.py judges each ``examples`` row by ``{gid: 1 for gid in gold_ids}``."""
    corpus, queries, rows = _official_bright(tmp_path, ["0", "1"])
    bright = load_bright(corpus, queries)
    assert bright.qrels == {row["id"]: dict.fromkeys(row["gold_ids"], 1) for row in rows}
    assert len(bright.qrels["0"]) == 3 and bright.excluded == {"1": frozenset({"moth_lamps/Lamp_2.txt"})}
    assert evaluate_encoder(encoder, bright, EvalConfig(recall_ks=(1,)))["num_queries"] == 2


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("3", r"examples.jsonl:2: query '3': no gold_ids to judge the query by \(got \[\]\)"),
        ("4", r"examples.jsonl:2: query '4': gold id 'moth_lamps/Lamp_9.txt' is not in .*documents.jsonl$"),
        ("5", r"examples.jsonl: query '5' excludes \['moth_lamps/Lamp_2.txt'\], relevant in its gold_ids"),
        ("2", r"examples.jsonl:2: query '2' has no text$"),  # its encoding would rank the corpus by nothing
    ],
)
def test_bright_rows_that_cannot_be_judged_by_their_gold_ids_are_refused(
    tmp_path: Path, row: str, message: str
) -> None:
    """Without a qrels file a row with no gold id would go unjudged (left out of the scores silently), and a gold
    id the corpus lacks could never be retrieved (scored 0 for no fault of the encoder)."""
    corpus, queries, _ = _official_bright(tmp_path, ["0", row])
    with pytest.raises(UsageError, match=message):
        load_bright(corpus, queries)


@pytest.mark.parametrize("kind", ["documents", "examples"])
def test_a_bright_id_given_twice_is_refused_naming_the_line(tmp_path: Path, kind: str) -> None:
    """The second row with an id replaced the first one's text (a document) or query unseen."""
    corpus, queries, _ = _official_bright(tmp_path, ["0", "1"])
    path = corpus if kind == "documents" else queries
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join([*lines, lines[0]]))
    what = (
        "document id 'insects_attracted_to_light/Phototaxis_0.txt'" if kind == "documents" else "query id '0'"
    )
    with pytest.raises(UsageError, match=rf"{path.name}:{len(lines) + 1}: {what} is given twice$"):
        load_bright(corpus, queries)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda rows: [], r"test.jsonl: no held-out pairs to evaluate on"),  # crashed after training
        (lambda rows: [*rows, rows[0]], r"test.jsonl: question_id '\d+' twice"),  # one silently dropped
        (  # scored 0 silently: its relevant document can never be retrieved
            lambda rows: [{**rows[0], "answer_id": "999"}, *rows[1:]],
            r"test.jsonl: pair \d+: answer '999' is not in corpus.jsonl",
        ),
    ],
)
def test_a_held_out_split_that_cannot_be_scored_is_refused_naming_the_file(
    tmp_path: Path, data_dir: Path, edit, message: str
) -> None:
    import shutil

    shutil.copytree(data_dir, tmp_path / "data")
    path = tmp_path / "data" / "test.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(row) + "\n" for row in edit(rows)))
    with pytest.raises(UsageError, match=message):
        heldout_eval_set(tmp_path / "data")


def test_a_large_export_is_indexed_by_size_and_still_answers_with_passages(
    tmp_path: Path, encoder, data_dir: Path
) -> None:
    from ragym.data_prep.encoding.index import IndexOptions
    from ragym.envs.retrieval.retrievers import DiskRefinedIndex
    from ragym.envs.retrieval.service.shards import ShardedRetriever

    corpus = load_corpus(data_dir)
    options = IndexOptions(
        exact_below=10, nlist=4, max_shard_vectors=len(corpus) // 2 + 1, num_eval_queries=20
    )
    export_retriever(encoder, corpus, tmp_path / "export", options=options)
    meta = json.loads((tmp_path / "export" / "retriever.json").read_text())
    assert meta["format"] == "ragym-dense-retriever-v2" and meta["index"]["kind"] == "compressed"
    assert meta["index"]["refine"] == "disk" and meta["index"]["num_shards"] == 2
    retriever = load_dense_retriever(tmp_path / "export")
    assert isinstance(retriever.retriever, ShardedRetriever)
    assert all(isinstance(s.index, DiskRefinedIndex) for s in retriever.retriever.shards)
    for hits in retriever.batch_search(["Do vaccines cause autism?", "Is the moon landing fake?"], k=5):
        assert [h.payload["text"] for h in hits] == [
            corpus[h.docid] for h in hits
        ]  # each hit its own passage
    # the same documents exported exactly rank the same top 3 (few documents: the probes cover every cell)
    export_retriever(encoder, corpus, tmp_path / "exact")
    exact = load_dense_retriever(tmp_path / "exact").search("Do vaccines cause autism?", k=3)
    assert [h.docid for h in retriever.search("Do vaccines cause autism?", k=3)] == [h.docid for h in exact]
    # an export written before the index folder (v1: one flat index.faiss) still loads
    import shutil

    shutil.copytree(tmp_path / "exact", tmp_path / "v1")
    (tmp_path / "v1" / "index" / "shard-000.faiss").rename(tmp_path / "v1" / "index.faiss")
    shutil.rmtree(tmp_path / "v1" / "index")
    old = json.loads((tmp_path / "v1" / "retriever.json").read_text()) | {
        "format": "ragym-dense-retriever-v1"
    }
    (tmp_path / "v1" / "retriever.json").write_text(json.dumps(old))
    v1 = load_dense_retriever(tmp_path / "v1").search("Do vaccines cause autism?", k=3)
    assert [(h.docid, h.payload) for h in v1] == [(h.docid, h.payload) for h in exact]


def test_export_round_trip_is_a_retriever(tmp_path: Path, encoder, data_dir: Path) -> None:
    corpus = load_corpus(data_dir)
    export_retriever(encoder, corpus, tmp_path / "export")
    retriever = load_dense_retriever(tmp_path / "export")
    assert isinstance(retriever, Retriever)
    hits = retriever.search("Do vaccines cause autism?", k=3)
    assert len(hits) == 3 and all(isinstance(h, Hit) for h in hits)
    assert hits[0].payload["text"] == corpus[hits[0].docid] and "autism" in hits[0].payload["text"]
    assert hits[0].score >= hits[1].score >= hits[2].score
    # The manifest entry builds the env's own text encoder, which embeds queries as evaluation does.
    spec = json.loads((tmp_path / "export" / "retriever.json").read_text())["kb_text_encoder"]
    env_vector = make_text_encoder(spec).encode_queries(["Do vaccines cause autism?"])
    assert np.allclose(normalise(env_vector), encode(encoder, ["Do vaccines cause autism?"], 8), atol=1e-5)
    # The exported index ranks exactly as evaluation does.
    queries, _, qrels, _ = heldout_eval_set(data_dir)
    exported = retriever.batch_search(list(queries.values()), k=10)
    run = {qid: {h.docid: h.score for h in row} for qid, row in zip(queries, exported, strict=True)}
    config = EvalConfig(recall_ks=(10,))
    assert score_run(run, qrels, config) == pytest.approx(
        {
            k: v
            for k, v in evaluate_encoder(encoder, EvalSet(queries, corpus, qrels, {}), config).items()
            if k != "num_queries"
        }
    )


def test_table4_rows_and_needs_full_recipe() -> None:
    full = recipe_from_dict({"data": {"num_hard_negatives": 2}})
    rows = table4_rows(full)
    assert [r.name for r in rows] == [ZERO_SHOT, CONTRASTIVE, "+ hard negatives", REASONING]
    assert rows[0].recipe is None
    assert [(r.recipe.data.num_hard_negatives, r.recipe.augment.use_reasoning) for r in rows[1:]] == [
        (0, False),
        (2, False),
        (2, True),
    ]
    assert len({r.recipe.train.output_dir for r in rows[1:]}) == 3
    with pytest.raises(ValueError, match="full recipe"):
        table4_rows(with_overrides(full, augment={"use_reasoning": False}))


def test_ablation_trains_every_row(tmp_path: Path, data_dir: Path) -> None:
    recipe = with_overrides(
        recipe_from_dict({}),
        model={"max_seq_length": 32},
        data={"data_dir": str(data_dir)},
        train={"output_dir": str(tmp_path), "batch_size": 4, "max_steps": 2, "show_progress": False},
    )
    probes: dict[str, np.ndarray] = {}

    def probe(row: str, model) -> None:
        probes[row] = encode(model, ["Do vaccines cause autism?"], 8)

    results = run_ablation(recipe, heldout_eval_set(data_dir), EvalConfig(recall_ks=(10,)), on_model=probe)
    assert [r["row"] for r in results] == [r.name for r in table4_rows(recipe)]
    # Every trained row moved the weights away from the backbone and saved a loadable model.
    assert all(
        not np.allclose(probes[row], probes[ZERO_SHOT], atol=1e-6) for row in probes if row != ZERO_SHOT
    )
    assert all(
        (tmp_path / slug / "model" / "modules.json").is_file() for slug in ("contrastive", "reasoning")
    )
    assert results[0]["delta_vs_contrastive"] is None and results[1]["delta_vs_contrastive"] == 0.0
    assert all(0.0 <= r["ndcg@10"] <= 1.0 for r in results)
    table = format_table(results)
    assert table.count("\n") == len(results) + 1 and f"{100 * results[3]['ndcg@10']:.1f}" in table
