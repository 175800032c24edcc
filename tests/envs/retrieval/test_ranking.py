"""nDCG@k and recall@k against pytrec-eval-terrier on the real BRIGHT qrels, plus hand-checked cases."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from ragym.rewards import ndcg_at_k, recall_at_k


def test_hand_checked_values() -> None:
    run = {"q1": {"a": 3.0, "b": 2.0, "c": 1.0}, "q2": {"x": 1.0}, "q3": {"z": 1.0}}
    qrels = {"q1": {"a": 0, "b": 2, "c": 1, "d": 1}, "q2": {"y": 1}, "qX": {"a": 1}}
    dcg = 2 / math.log2(3) + 1 / math.log2(4)
    idcg = 2 + 1 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_k(run, qrels, k=10) == pytest.approx({"q1": dcg / idcg, "q2": 0.0})
    assert ndcg_at_k(run, qrels, k=1)["q1"] == 0.0
    assert recall_at_k(run, qrels, k=2) == pytest.approx({"q1": 1 / 3, "q2": 0.0})
    # trec_eval breaks score ties by docid, descending.
    assert ndcg_at_k({"q": {"a": 1.0, "b": 1.0}}, {"q": {"b": 1}}, k=1) == {"q": 1.0}
    with pytest.raises(ValueError, match="positive int"):
        ndcg_at_k(run, qrels, k=0)


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for line in path.read_text().splitlines():
        qid, _, docid, rel = line.split()
        qrels.setdefault(qid, {})[docid] = int(rel)
    return qrels


def test_agrees_with_pytrec_eval_on_bright_qrels(shared_data: Path) -> None:
    pytrec_eval = pytest.importorskip("pytrec_eval", reason="pytrec-eval-terrier is not installed")
    folder = shared_data / "bright_qrels"
    if not folder.is_dir():
        pytest.skip(f"{folder} is absent")
    rng = random.Random(0)
    for path in sorted(folder.glob("*.tsv")):
        qrels = _read_qrels(path)
        # Graded and zero relevances too, although BRIGHT itself is binary.
        for judged in qrels.values():
            for docid in judged:
                judged[docid] = rng.choice([0, 1, 1, 2, 3])
        # Runs mixing relevant docs with distractors, with many score ties.
        run = {
            qid: {d: float(rng.randint(0, 6)) for d in [*judged, *(f"neg{i}" for i in range(12))]}
            for qid, judged in qrels.items()
        }
        run["not_judged"] = {"a": 1.0}
        for k in (1, 5, 10):
            expected = pytrec_eval.RelevanceEvaluator(qrels, {f"ndcg_cut.{k}", f"recall.{k}"}).evaluate(run)
            ndcg, recall = ndcg_at_k(run, qrels, k), recall_at_k(run, qrels, k)
            assert set(ndcg) == set(expected), path.name
            for qid, values in expected.items():
                assert ndcg[qid] == pytest.approx(values[f"ndcg_cut_{k}"], abs=1e-6), (path.name, qid, k)
                assert recall[qid] == pytest.approx(values[f"recall_{k}"], abs=1e-6), (path.name, qid, k)
