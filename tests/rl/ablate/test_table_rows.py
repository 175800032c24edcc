"""Issue #30 item 7: the ablation grids vary the papers' own table values and rows (ragym's additions
labelled as such), Table 5's `neither` has no Rerank action, DocMemo's removals remove that memory, the
weak-top-1 demo KB ranks look-alikes above the gold, and reports say how far GRPO moved each variant."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ragym.rl.ablate.cli import _register_optional_grids, run_grid
from ragym.rl.ablate.grids import GRIDS, RAGYM_ROW, Claim, Grid, Variant, row_label
from ragym.rl.ablate.stats import TOO_FEW, WARM_STARTS, check_claim, claims_under_rl
from tests.envs.fakes import EveryName

_register_optional_grids()


def rows(name: str) -> dict[str, str]:
    """variant -> its table-row label in grid ``name``."""
    return {v.name: row_label(v) for v in GRIDS[name].variants}


def test_delta_grid_has_table_8_values_and_labels_the_rest_as_ragyms() -> None:
    grid = GRIDS["delta"]
    labels = rows("delta")
    table = {v.reward["verification"]["delta"] for v in grid.variants if v.row}
    assert table == {0.1, 0.2, 0.3} and grid.variants[0].reward["verification"]["delta"] == 0.2
    assert {n for n, r in labels.items() if r == RAGYM_ROW} == {"delta=0.0", "delta=0.5", "delta=1.0"}
    # Every claim compares the table's own values, never a ragym addition.
    named = {c.left for c in grid.claims} | {c.right for c in grid.claims}
    assert named == {"delta=0.1", "delta=0.2", "delta=0.3"}


def test_k_grid_has_table_6_values_with_k5_as_base() -> None:
    grid = GRIDS["k"]
    ks = {v.name: v.env["candidates_per_batch"] for v in grid.variants}
    assert grid.variants[0].name == "k=5" and ks["k=5"] == 5
    assert {ks[v.name] for v in grid.variants if v.row} == {3, 5, 7}
    assert rows("k")["k=1"] == RAGYM_ROW
    named = {c.left for c in grid.claims} | {c.right for c in grid.claims}
    assert named == {"k=3", "k=5", "k=7"}
    # K=7 pages through 21 candidates at Rej_max=2: the grid's KB keeps codes unique that deep.
    from ragym.data_prep.synthetic_kb import PRESETS

    assert PRESETS[grid.kb_preset].signature_window >= 7 * 3
    assert all(v.kb_preset == grid.kb_preset for v in grid.variants)


def test_verification_grid_rows_and_neither_has_no_verification_actions() -> None:
    grid = GRIDS["verification"]
    assert rows("verification") == {
        "full": "w/ Rerank + Reject",
        "rerank_only": "w/o Reject",
        "neither": "w/o Rerank, w/o Reject",
        "full_paid_at_limit": RAGYM_ROW,  # the full model with the Reject at the limit paid: ragym's
    }
    env = {v.name: v.env for v in grid.variants}
    assert env["neither"]["verification_actions"] is False and env["neither"]["max_rejections"] == 0
    assert env["neither"].get("visual_check", True) is True  # the hint is not what `neither` removes
    assert "verification_actions" not in env["full"] and "verification_actions" not in env["rerank_only"]
    # Table 5's "w/o Reject" has no Reject action at all, unlike Table 7's Rej_max = 0 (Reject offered).
    assert (env["rerank_only"]["allow_reject"], env["rerank_only"]["max_rejections"]) == (False, 0)
    assert "allow_reject" not in env["full"] and "allow_reject" not in GRIDS["rejmax"].variants[1].env
    assert GRIDS["rejmax"].variants[1].env["max_rejections"] == 0
    assert grid.kb_preset == "demo_weak_top1"


def test_memora_r_grid_rows_are_memora_table_4_rows() -> None:
    """Every variant is one of MEMORA Table 4's own rows (none is ragym's), and the claims compare them."""
    labels = rows("memora_r")
    assert list(labels) == [
        "zero-shot",
        "+ contrastive FT",
        "+ hard negatives",
        "+ reasoning-trace augmentation",
    ]
    assert RAGYM_ROW not in labels.values() and len(set(labels.values())) == 4
    assert labels["+ reasoning-trace augmentation"] == "+ reasoning trace augmentation (full MEMORA-R)"
    assert "Qwen-Embedding" in labels["zero-shot"] and "hard negative" in labels["+ hard negatives"]


def test_docmemo_grid_has_table_4_rows_and_each_removal_removes_that_memory() -> None:
    grid = GRIDS["docmemo"]
    labels = rows("docmemo")
    table_rows = {r for r in labels.values() if r != RAGYM_ROW}
    assert table_rows == {
        "DocMemo (full)",
        "w/o tri-level memory",
        "w/o Bayesian page belief updating",
        "w/o adaptive-granularity evidence access",
    }
    env = {v.name: v.env for v in grid.variants}
    assert env["full"]["crop_dense_pages"] is True
    none = env["no_tri_level_memory"]
    assert none["belief_memory"] is False  # nor round 1's similarity kept as the evidence ranking
    assert none["lambda_0"] == 1.0 and none["eta"] == 1.0  # candidates by similarity alone: no belief memory
    assert not any(v.options for v in grid.variants)  # the oracle is the same; only the env changes


DOCMEMO_REMOVES = {
    "full": set(),
    # The three memories; without page-belief memory the score's belief term goes too (eta = 1: lambda = 1).
    "no_tri_level_memory": {"schema_memory", "episodic_memory", "belief_memory", "belief_update", "eta"},
    "no_belief_update": {"belief_update"},
    "no_adaptive_granularity": {"crop_dense_pages"},
    "no_episodic_memory": {"episodic_memory"},
    "no_schema_memory": {"schema_memory"},
    "no_propagation": {"radius"},
}
"""Variant -> the DocMemoConfig fields its name says it changes from ``full`` (issue #46 item 6)."""


def test_each_docmemo_variant_differs_from_full_in_exactly_what_its_name_removes() -> None:
    """Until issue #46 the memory-less rows also set reshow_evidence, so each confounded two changes."""
    from dataclasses import asdict

    from ragym.envs.docmemo.env import DocMemoConfig

    grid = GRIDS["docmemo"]
    assert [v.name for v in grid.variants] == list(DOCMEMO_REMOVES)
    configs = {v.name: asdict(DocMemoConfig(**v.env)) for v in grid.variants}
    for name, config in configs.items():
        changed = {key for key, value in config.items() if value != configs["full"][key]}
        assert changed == DOCMEMO_REMOVES[name], name


# ----- the env side of the removals --------------------------------------------------------------------------
class FixedRetriever:
    """Scores page i with ``scores[i]`` whatever the query."""

    def __init__(self, scores: list[float]) -> None:
        self.scores = scores

    def search(self, query: str, k: int) -> list:
        from ragym.envs.retrieval.hits import Hit

        order = np.argsort(-np.asarray(self.scores), kind="stable")[:k]
        return [Hit(str(i + 1), float(self.scores[i])) for i in order]


def _two_rounds(**overrides: object) -> tuple[dict, dict]:
    """Round 1 select + refine marking the first candidate useful; returns round 2's obs and info."""
    from ragym.envs.docmemo.env import DocMemoEnv
    from ragym.envs.events import events_of

    scores = [0.1 * (i % 5) for i in range(20)]
    env = DocMemoEnv(retriever=EveryName(FixedRetriever(scores)), show_images=False, **overrides)
    _, info = env.reset(seed=0)
    page = events_of(info["events"], "candidates")[-1]["pages"][0]
    env.step(f"<reason>r</reason><select>{page}</select>")
    turn = f"<reason>r</reason><refine><query>q</query><note>n</note><useful>{page}</useful></refine>"
    obs, _, _, _, info = env.step(turn)
    return obs, info


def test_docmemo_memory_switches_remove_that_memory_only() -> None:
    from ragym.envs.events import events_of

    obs, info = _two_rounds()
    assert "Memory of earlier rounds" in obs["text"] and "Document:" in obs["text"]
    first, after = (
        events_of(info["events"], "candidates")[0]["means"],
        events_of(info["events"], "beliefs")[-1],
    )
    assert first != after["means"]  # the useful mark moved the beliefs
    obs, info = _two_rounds(belief_update=False)
    assert (
        events_of(info["events"], "candidates")[0]["means"]
        == events_of(info["events"], "beliefs")[-1]["means"]
    )
    assert "note: n" in obs["text"]  # the marks and note still reach episodic memory
    obs, _ = _two_rounds(episodic_memory=False)
    assert "Memory of earlier rounds" not in obs["text"] and "Document:" in obs["text"]
    obs, _ = _two_rounds(schema_memory=False)
    assert "Document:" not in obs["text"] and "Memory of earlier rounds" in obs["text"]


# ----- Table 5's `neither`: no Rerank action ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def weak_kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb

    preset = replace(PRESETS["demo_weak_top1"], num_entities=60, num_rows=40)
    return build_kb(tmp_path_factory.mktemp("kb") / "kb", preset, seed=0)


def _options(kb: Path) -> dict:
    import pandas as pd

    return json.loads(pd.read_parquet(kb / "data" / "train.parquet")["extra_info"].iloc[0]["env_options"])


def test_neither_env_has_no_rerank_action_and_takes_the_top1(weak_kb: Path) -> None:
    from ragym.envs.events import events_of
    from ragym.envs.kbvqa.demo import KBVQADemoEnv
    from ragym.envs.kbvqa.metrics import kbvqa_metrics

    env = KBVQADemoEnv(
        kb_dir=str(weak_kb),
        candidates_per_batch=3,
        max_rejections=0,
        visual_check=True,
        rerank_by_index=True,
        verification_actions=False,
    )
    assert "<rerank>" not in env.system_prompt and "Reject" not in env.system_prompt.replace("no Reject", "")
    with_actions = KBVQADemoEnv(kb_dir=str(weak_kb), candidates_per_batch=3, max_rejections=0)
    assert "<rerank>Reject()</rerank>" in with_actions.system_prompt
    options = _options(weak_kb)
    env.reset(seed=0, options=options)
    obs, _, _, _, info = env.step("<reason>r</reason><search_call>SearchImage(1)</search_call>")
    batch = events_of(info["events"], "search_image")[-1]
    top1 = batch["candidates"][0]
    assert (
        obs["text"].startswith("Confirmed:") and "Visual check" not in obs["text"] and len(obs["images"]) == 1
    )
    decision = events_of(info["events"], "verification")[-1]
    assert (decision["decision"], decision["entity"]) == ("rerank", top1)
    for action in ("<rerank>1</rerank>", "<rerank>Reject()</rerank>"):
        _, _, _, _, info = env.step(f"<reason>r</reason>{action}")
        assert events_of(info["events"], "protocol_violation")[-1]["reason"] == "no_verification_actions"
    assert len(events_of(info["events"], "verification")) == 1  # neither turn decided anything
    _, _, _, _, info = env.step("<reason>r</reason><answer>x</answer>")
    assert kbvqa_metrics(info["events"])["ident_acc"] == float(top1 == options["gold_entities"][0])
    with pytest.raises(ValueError, match="max_rejections=0"):
        KBVQADemoEnv(kb_dir=str(weak_kb), max_rejections=2, verification_actions=False)


def test_weak_top1_kb_puts_lookalikes_above_the_gold_without_losing_it() -> None:
    from ragym.data_prep.synthetic_kb_io import lure_gold

    rng = np.random.default_rng(0)
    ranked = np.stack([rng.permutation(50) for _ in range(400)])  # (queries, candidates)
    gold = ranked[np.arange(400), rng.integers(0, 12, 400)]  # gold at rank 0-11
    lured = lure_gold(ranked, gold, 1.0, 9, seed=0)
    in_prefix = (ranked[:, :9] == gold[:, None]).any(1)
    assert not (lured[in_prefix, 0] == gold[in_prefix]).any()  # never first any more
    assert ((lured[:, :9] == gold[:, None]).any(1) == in_prefix).all()  # R@9 unchanged
    assert (np.sort(lured, 1) == np.sort(ranked, 1)).all() and (lured[:, 9:] == ranked[:, 9:]).all()
    assert (lure_gold(ranked, gold, 0.0, 9, seed=0) == ranked).all()
    half = lure_gold(ranked, gold, 0.5, 9, seed=0)
    top1 = (ranked[:, 0] == gold).mean()
    assert 0.25 * top1 < (half[:, 0] == gold).mean() < 0.75 * top1


# ----- how far GRPO moved each variant ---------------------------------------------------------------------
GRID = Grid(
    "moves",
    "fake",
    (Variant("a"), Variant("b"), Variant("c")),
    ("ident_acc", "rejections"),
    (Claim("ident_acc", "a", ">", "b", "t"), Claim("ident_acc", "a", ">", "c", "t")),
)


def runner_from(after: dict, before: dict):
    """A fake runner returning made-up metrics after and before GRPO."""

    def run(out: Path, variant: Variant, seed: int, steps: int | None, extra: list[str]) -> dict:
        return {
            "metrics": after[variant.name][seed],
            "before_grpo": before[variant.name][seed],
            "wall_time_s": 1.0,
        }

    return run


def m(ident: float, rej: float) -> dict[str, float]:
    return {"ident_acc": ident, "rejections": rej}


def test_a_grid_where_grpo_moved_nothing_is_flagged_as_warm_starts(tmp_path: Path) -> None:
    same = {
        "a": {0: m(0.521, 0.5), 1: m(0.521, 0.6)},
        "b": {0: m(0.4, 0.2), 1: m(0.4, 0.2)},
        "c": {0: m(0.604, 0.0), 1: m(0.604, 0.0)},
    }
    results = run_grid(GRID, tmp_path, [0, 1], None, [], runner=runner_from(same, same))
    moved = results["grpo_movement"]
    assert moved["verdict"] == WARM_STARTS
    assert {v["moved"] for v in moved["variants"].values()} == {"no seed"}
    assert moved["variants"]["a"]["after_minus_before"]["ident_acc"] == [0.0, 0.0]
    assert all(c["rl_verdict"] == "no RL measurement" and c["rl_seeds"] == [] for c in results["claims"])
    report = (tmp_path / "report.md").read_text()
    assert f"This grid {WARM_STARTS}" in report and "| a | +0.000 / +0.000 |" in report


def test_movement_is_per_variant_and_seed_and_claims_count_only_moved_seeds(tmp_path: Path) -> None:
    seeds = [0, 1, 2, 3]
    before = {
        "a": dict.fromkeys(seeds, m(0.5, 1.0)),
        "b": dict.fromkeys(seeds, m(0.4, 0.2)),
        "c": dict.fromkeys(seeds, m(0.6, 0.0)),
    }
    # GRPO moved a on seeds 0-2 (Ident. up 0.2, 0.22, 0.18, rejections down 0.5), not on seed 3; b and c never.
    after = {**before, "a": {0: m(0.7, 0.5), 1: m(0.72, 0.5), 2: m(0.68, 0.5), 3: m(0.5, 1.0)}}
    results = run_grid(GRID, tmp_path, seeds, None, [], runner=runner_from(after, before))
    moved = results["grpo_movement"]
    assert moved["verdict"] == "partly RL"
    a = moved["variants"]["a"]
    assert a["moved_per_seed"] == [True, True, True, False] and a["moved"] == "some seeds"
    assert a["after_minus_before"]["ident_acc"] == pytest.approx([0.2, 0.22, 0.18, 0.0])
    assert a["after_minus_before"]["rejections"] == pytest.approx([-0.5, -0.5, -0.5, 0.0])
    # Gain 0.2, 0.22, 0.18, 0: mean 0.15, std 0.101325, t(0.975, 3) = 3.182446: half-width 0.161230.
    assert a["gain"]["ident_acc"]["mean"] == pytest.approx(0.15)
    assert a["gain"]["ident_acc"]["half_width"] == pytest.approx(0.161230, abs=1e-6)
    assert moved["variants"]["b"]["moved"] == "no seed"
    claims = {c["claim"]: c for c in results["claims"]}
    # a - b: 0.3, 0.32, 0.28, 0.1 on all seeds ([0.089, 0.411]); on the seeds a moved 0.3, 0.32, 0.28 ([0.250, 0.350]).
    ab = claims["ident_acc: a > b"]
    assert ab["verdict"] == "reproduced" and ab["rl_seeds"] == [0, 1, 2] and ab["rl_verdict"] == "reproduced"
    assert ab["rl_difference"]["low"] == pytest.approx(0.250317, abs=1e-6)
    # a - c: 0.1, 0.12, 0.08, -0.1 holds zero over all seeds ([-0.111, 0.211]: a tie), but on the seeds GRPO moved
    # (0.1, 0.12, 0.08: [0.050, 0.150]) it is reproduced.
    ac = claims["ident_acc: a > c"]
    assert (ac["verdict"], ac["rl_verdict"]) == ("tie", "reproduced")
    report = (tmp_path / "report.md").read_text()
    assert (
        "| a | +0.200 / +0.220 / +0.180 / +0.000 | -0.500 / -0.500 / -0.500 / +0.000 | some seeds |" in report
    )
    assert "| a | +0.150 [-0.011, +0.311] | -0.375 [" in report  # the gain table: mean [95% interval]
    assert (
        "| ident_acc: a > c | t | +0.100 / +0.120 / +0.080 / -0.100 | +0.050 [-0.111, +0.211] | tie | 0, 1, 2 | "
        "+0.100 [+0.050, +0.150] | reproduced |"
    ) in report
    assert "Not moved by GRPO on any seed (their rows measure their warm starts, not RL): b, c." in report
    assert "| a | ragym's addition (not in the table) |" in report


def test_a_claim_that_grpo_moved_on_one_seed_has_too_few_seeds_under_rl() -> None:
    runs = {"a": {0: m(0.7, 0.0), 1: m(0.6, 0.0)}, "b": {0: m(0.4, 0.0), 1: m(0.4, 0.0)}}
    claim = check_claim(Claim("ident_acc", "a", ">", "b", "t"), runs, [0, 1])
    moved = {"a": {"moved_per_seed": [True, False]}, "b": {"moved_per_seed": [False, False]}}
    claims_under_rl([claim], moved, [0, 1])
    assert claim["rl_seeds"] == [0] and claim["rl_verdict"] == TOO_FEW
    assert claim["rl_difference"]["half_width"] is None
