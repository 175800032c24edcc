"""How often distinct queries reach MEMORA's own-query threshold, over content words and over all words.

``ragym.envs.memora.memory`` hides from a query every record whose query is a near copy of it under another id:
a content-word cosine of at least ``OWN_QUERY_SIMILARITY``. A threshold too high lets rewordings through (the
query reads its own labels); too low hides distinct queries (a memory slot lost). This prints, for real Stack
Exchange text (the Skeptics questions, short, and answers, as long as a BRIGHT post; ``../shared/data``), the
share of texts that have a distinct neighbour at or above each threshold, and the pairs of distinct queries of
the synthetic domain the rule hides.

    python benchmarks/memora_own_query.py [--data ../shared/data/stackexchange_skeptics/web_science_dataset.jsonl]
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ragym.envs.memora.memory import OWN_QUERY_SIMILARITY, bag_of_words, content_words, cosine
from ragym.envs.memora.synthetic import SyntheticConfig, synthetic_domain

THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)
DATA = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "data"
    / "stackexchange_skeptics"
    / "web_science_dataset.jsonl"
)


def nearest_distinct(texts: list[str], bag: Callable[[str], Counter]) -> np.ndarray:
    """Each text's highest cosine with another text, shape (len(texts),)."""
    bags = [bag(t) for t in texts]
    vocab = {w: i for i, w in enumerate(sorted({w for b in bags for w in b}))}
    rows = [i for i, b in enumerate(bags) for _ in b]
    cols = [vocab[w] for b in bags for w in b]
    vals = [float(n) for b in bags for n in b.values()]
    x = sp.csr_matrix((vals, (rows, cols)), shape=(len(texts), len(vocab)))  # (texts, vocabulary)
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    x = sp.diags(1.0 / np.maximum(norms, 1e-12)) @ x
    sims = (x @ x.T).toarray()  # (texts, texts)
    np.fill_diagonal(sims, 0.0)
    return sims.max(axis=1)


def main() -> None:
    """Print the share table and the synthetic domain's hidden pairs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="Skeptics JSON lines (question, answer)")
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.data.read_text().splitlines() if line.strip()]
    sets = {
        "questions": list(dict.fromkeys(r["question"] for r in rows)),
        "answers": list(dict.fromkeys(r["answer"] for r in rows)),
    }
    print("| texts | words | median words | " + " | ".join(f">= {t}" for t in THRESHOLDS) + " |")
    print("|---|---|---|" + "---|" * len(THRESHOLDS))
    for name, texts in sets.items():
        median = int(np.median([len(t.split()) for t in texts]))
        for words, bag in (("content", content_words), ("all", bag_of_words)):
            best = nearest_distinct(texts, bag)
            shares = " | ".join(f"{np.mean(best >= t - 1e-9):.1%}" for t in THRESHOLDS)
            print(f"| {len(texts)} Skeptics {name} | {words} | {median} | {shares} |")
    for seed in range(3):
        queries = [content_words(q["query"]) for q in synthetic_domain(SyntheticConfig(seed=seed)).queries]
        pairs = list(itertools.combinations(queries, 2))
        hidden = sum(cosine(a, b) >= OWN_QUERY_SIMILARITY - 1e-9 for a, b in pairs)
        print(
            f"synthetic domain seed {seed}: {hidden} of {len(pairs)} query pairs at >= {OWN_QUERY_SIMILARITY}"
        )


if __name__ == "__main__":
    main()
