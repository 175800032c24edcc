"""The ``docmemo`` grid: DocMemo's Table 4 rows on the shared MMLongBench-Doc documents, cumulative
evidence recall per round.

No policy is trained: every variant runs the real ``DocMemo-v0`` page loop driven by one oracle feedback
policy, ``oracle_loop`` (``benchmarks/docmemo_recall.py`` runs the same function). Each round it selects the
candidates it has not read, reads the evidence view, marks the gold pages it was shown useful and the rest
irrelevant (its only use of the gold), and refines the query as the seed's reasoner does: it writes a refined
query for the next round from what it has read. The oracle refines lexically, from what a policy sees (the
question and the text excerpts the evidence view shows under each page), by one rule (``refined_query``):
terms are lower-cased words of three or more letters outside scikit-learn's English stop-word list; when some
evidence page read so far was marked useful, the query is the question followed by the ``NUM_QUERY_TERMS`` (5)
most frequent terms of those pages' excerpts that the question lacks (ties: first seen first); when none was,
the question followed by its own terms that no excerpt read so far contains (what is missing); with nothing
to add, the question alone. Each variant removes what its Table 4 row removes, in the env
(``DocMemoConfig``), with the same oracle:
- ``full``: DocMemo with every memory and adaptive-granularity evidence access (dense-page crops);
- ``no_tri_level_memory`` (w/o tri-level memory): no schema memory, no page-belief memory (no belief state
  across rounds: every round's beliefs are the current query's similarity prior, so candidates and evidence
  follow the current query alone, lambda = 1 every round; no belief updates) and no episodic memory;
- ``no_belief_update`` (w/o Bayesian page belief updating): the marks still reach episodic memory, the
  beliefs stay at round 1's similarity prior;
- ``no_adaptive_granularity``: no dense-page crops. Recall cannot see it (crops change what the reasoner
  reads, not which pages are retrieved): the row equals ``full`` here by construction;
- ragym's additions: ``no_episodic_memory``, ``no_schema_memory`` (one memory removed each) and
  ``no_propagation`` (``radius=0``).
Each variant differs from ``full`` in exactly the settings its name removes; every other setting
(``reshow_evidence`` included) is ``full``'s. The oracle reads events and the evidence excerpts, not the schema
or episodic memory text, so removing that text cannot change what it selects: ``no_schema_memory`` and
``no_episodic_memory`` equal ``full`` here by construction (recall cannot see them). The paper's Table 4 is
answer accuracy with a trained reasoner; recall per round is the part a CPU can measure. Seeds are
Thompson-sampling seeds.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ragym.rl.ablate.grids import Claim, Grid, Variant, register_grid

SHARED_DOCS = Path(__file__).resolve().parents[3] / "shared" / "data" / "mmlongbench_doc"
"""The shared MMLongBench-Doc samples and PDFs (``/work/shared/data/mmlongbench_doc``)."""
NUM_ROUNDS = 3
"""T: the env's default rounds; one recall metric per round."""
NUM_QUERY_TERMS = 5
"""Terms of the useful evidence the oracle adds to the question when it refines."""
_PAGE_LINE = re.compile(r"Page (\d+) \(")  # the evidence view's page header (envs/docmemo/views.py)
_TEXT_PREFIX = "  Text: "  # the evidence view's excerpt line under a page header
T4 = "DocMemo Table 4 (shape: evidence recall per round instead of answer accuracy)"


def load_rows(grid_dir: Path) -> list[dict[str, Any]]:
    """Answerable prepared rows with gold pages (``DIR/prepared``, prepared from the shared data once)."""
    from ragym.data_prep.mmlongbench_doc import PrepConfig, prepare

    prepared = grid_dir / "prepared"
    if not (prepared / "data" / "test.parquet").is_file():
        if not SHARED_DOCS.is_dir():
            raise FileNotFoundError(
                f"the docmemo grid needs the shared MMLongBench-Doc data at {SHARED_DOCS}"
            )
        prepare(SHARED_DOCS / "samples.json", SHARED_DOCS / "documents", prepared, PrepConfig(dpi=72))
    rows = []
    row: Any  # itertuples' named tuples, a field per column (pandas types them as plain tuples)
    for row in pd.read_parquet(prepared / "data" / "test.parquet").itertuples():
        gold = json.loads(row.reward_model["ground_truth"])["evidence_pages"]
        if gold:
            options, kwargs = (
                json.loads(row.extra_info["env_options"]),
                json.loads(row.extra_info["env_kwargs"]),
            )
            rows.append({"options": options, "gold": set(gold), "kwargs": kwargs})
    return rows


def excerpts_shown(evidence_text: str) -> dict[int, str]:
    """Page number -> the text excerpt the evidence view showed under it (``""``: none shown)."""
    shown: dict[int, str] = {}
    page = None
    for line in evidence_text.splitlines():
        if (m := _PAGE_LINE.match(line)) is not None:
            page = int(m.group(1))
            shown[page] = ""
        elif page is not None and line.startswith(_TEXT_PREFIX):
            shown[page] = line[len(_TEXT_PREFIX) :]
    return shown


def terms(text: str) -> list[str]:
    """Lower-cased words of 3+ letters that are not English stop words, in order, with repeats.

    >>> terms("The Latinos' income in 2015 fell behind the cost of living")
    ['latinos', 'income', 'fell', 'cost', 'living']
    """
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return [w for w in re.findall(r"[a-z]{3,}", text.lower()) if w not in ENGLISH_STOP_WORDS]


def refined_query(question: str, useful_text: list[str], read_text: list[str]) -> str:
    """The oracle's next query: the question plus the most frequent new terms of the useful evidence, or,
    when no evidence read was useful, plus the question's terms that no evidence read contains.

    >>> refined_query("Which fund grew?", ["Pension fund assets grew; pension reserves", "reserves"], [])
    'Which fund grew? pension reserves assets'
    >>> refined_query("Which fund grew in Ohio?", [], ["The fund in Texas grew"])
    'Which fund grew in Ohio? ohio'
    """
    asked = set(terms(question))
    if useful_text:
        counts = Counter(w for text in useful_text for w in terms(text) if w not in asked)
        added = [w for w, _ in counts.most_common(NUM_QUERY_TERMS)]  # ties: first seen first
    else:
        read = {w for text in read_text for w in terms(text)}
        added = [w for w in dict.fromkeys(terms(question)) if w not in read]
    return " ".join([question, *added])


def oracle_loop(
    env: Any, options: dict[str, Any], gold: set[int], seed: int, feedback: bool, remember: bool
) -> list[set[int]]:
    """Distinct evidence pages shown by the end of each round (``remember``: skip pages read before); each
    refinement's query follows ``refined_query`` on the evidence text shown so far."""
    from ragym.envs.events import events_of

    _, info = env.reset(seed=seed, options=options)
    read: set[int] = set()
    irrelevant: set[int] = set()
    text_read: dict[int, str] = {}  # page -> the excerpt shown under it (the policy's own context)
    useful_read: set[int] = set()
    shown: list[set[int]] = []
    for _ in range(env.config.max_rounds):
        candidates = events_of(info["events"], "candidates")[-1]["pages"]
        fresh = [p for p in candidates if p not in read and p not in irrelevant] if remember else candidates
        pages = ",".join(map(str, fresh or candidates[:1]))
        obs, _, _, _, info = env.step(f"<reason>read</reason><select>{pages}</select>")
        evidence = events_of(info["events"], "evidence")[-1]["pages"]
        text_read.update(excerpts_shown(obs["text"]))
        read.update(evidence)
        shown.append(set(read))
        useful = [p for p in evidence if p in gold] if feedback else []
        bad = [p for p in evidence if p not in gold] if feedback else []
        irrelevant.update(bad)
        useful_read.update(useful)
        query = refined_query(
            options["question"], [text_read[p] for p in sorted(useful_read)], list(text_read.values())
        )
        refine = f"<refine><query>{query}</query><useful>{','.join(map(str, useful))}</useful>"
        turn = f"<reason>more</reason>{refine}<irrelevant>{','.join(map(str, bad))}</irrelevant></refine>"
        _, _, term, trunc, info = env.step(turn)
        if term or trunc:
            break
    return shown


def run_docmemo(
    grid_dir: Path, variant: Variant, seed: int, steps: int | None, extra: list[str]
) -> dict[str, Any]:
    """Recall after each round and the final all-hit rate of one variant and Thompson seed, over every row
    (``steps``: only the first ``steps`` rows, for quick checks)."""
    from ragym.envs.registry import make_env

    if extra:
        raise ValueError(f"the docmemo grid takes no recipe overrides, got {extra}")
    start = time.perf_counter()
    rows = load_rows(grid_dir)[:steps]
    recall = np.zeros((len(rows), NUM_ROUNDS))  # (rows, rounds)
    all_hit = np.zeros(len(rows))
    envs_by_kwargs: dict[str, Any] = {}
    for i, row in enumerate(rows):
        key = json.dumps(row["kwargs"], sort_keys=True)
        if key not in envs_by_kwargs:
            kwargs = {**row["kwargs"], "show_images": False, "max_rounds": NUM_ROUNDS, **variant.env}
            envs_by_kwargs[key] = make_env("DocMemo-v0", **kwargs)
        shown = oracle_loop(
            envs_by_kwargs[key],
            row["options"],
            row["gold"],
            seed,
            variant.options.get("feedback", True),
            variant.options.get("remember", True),
        )
        for t in range(NUM_ROUNDS):
            recall[i, t] = len(shown[min(t, len(shown) - 1)] & row["gold"]) / len(row["gold"])
        all_hit[i] = float(row["gold"] <= shown[-1])
    metrics = {f"recall@r{t + 1}": float(recall[:, t].mean()) for t in range(NUM_ROUNDS)}
    metrics["all_hit"] = float(all_hit.mean())
    return {"metrics": metrics, "num_rows": len(rows), "wall_time_s": time.perf_counter() - start}


NO_MEMORY = {
    "schema_memory": False,
    "episodic_memory": False,
    "belief_update": False,
    "belief_memory": False,
    "lambda_0": 1.0,
    "eta": 1.0,
}
"""Env settings of "w/o tri-level memory": no schema, episodic or page-belief memory (similarity alone: with no
belief memory the score's belief term goes too, lambda = 1 every round). Nothing else: ``reshow_evidence``
stays at ``full``'s value, so the row differs from ``full`` in the memories alone (until issue #46 it also
re-showed evidence, which confounded the removal with the evidence rule)."""
FULL = {"crop_dense_pages": True}
"""Every variant's base: DocMemo as the seed describes it, with adaptive-granularity evidence access."""

register_grid(
    Grid(
        "docmemo",
        "docmemo",
        (
            Variant("full", FULL, row="DocMemo (full)"),
            Variant("no_tri_level_memory", {**FULL, **NO_MEMORY}, row="w/o tri-level memory"),
            Variant(
                "no_belief_update", {**FULL, "belief_update": False}, row="w/o Bayesian page belief updating"
            ),
            Variant(
                "no_adaptive_granularity",
                {"crop_dense_pages": False},
                row="w/o adaptive-granularity evidence access",
            ),
            Variant("no_episodic_memory", {**FULL, "episodic_memory": False}),
            Variant("no_schema_memory", {**FULL, "schema_memory": False}),
            Variant("no_propagation", {**FULL, "radius": 0}),
        ),
        (*(f"recall@r{t + 1}" for t in range(NUM_ROUNDS)), "all_hit"),
        (
            Claim("recall@r3", "full", ">", "no_tri_level_memory", T4),
            Claim("recall@r3", "full", ">", "no_belief_update", T4),
        ),
        T4,
    )
)
