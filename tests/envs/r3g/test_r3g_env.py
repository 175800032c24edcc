"""R3G-v0: plan first, coarse pool and Stage-1, judge fusion, evidence, ablation switches, injected encoder."""

from __future__ import annotations

import json
import math
from pathlib import Path

import gymnasium
import numpy as np
import pandas as pd
import pytest
from gymnasium.utils.env_checker import check_env
from PIL import Image

from ragym import envs
from ragym.envs.events import events_of
from ragym.envs.r3g.env import R3GEnv

PLAN, RETRIEVE = "<plan>the part's colour</plan>", "<retrieve></retrieve>"


def first_row(task: Path) -> dict:
    return json.loads(pd.read_parquet(task / "data" / "train.parquet").iloc[0]["extra_info"]["env_options"])


def judge_from_captions(pool_text: str) -> str:
    """Judge lines that give answerability 1 exactly where the caption shows the cue."""
    lines = [line for line in pool_text.splitlines() if line.startswith("[")]
    return (
        "<judge>\n"
        + "\n".join(
            f"[{i}] r=0.5 t=0.5 a={1 if 'visible' in line else 0} caption" for i, line in enumerate(lines, 1)
        )
        + "\n</judge>"
    )


def test_check_env_passes(r3g_task: Path) -> None:
    check_env(gymnasium.make("R3G-v0", task_dir=str(r3g_task)).unwrapped, skip_render_check=True)
    assert "R3G-v0" in envs.registered_envs()


def test_retrieval_before_plan_is_a_violation_with_no_evidence(r3g_task: Path) -> None:
    env = R3GEnv(task_dir=str(r3g_task))
    env.reset(seed=0, options=first_row(r3g_task))
    obs, *_, info = env.step(RETRIEVE)
    assert obs["images"] == () and "plan" in obs["text"]
    assert [e["reason"] for e in events_of(info["events"], "protocol_violation")] == ["retrieve_before_plan"]
    assert not events_of(info["events"], "coarse_retrieval")
    obs, *_ = env.step(PLAN)
    obs, *_, info = env.step(RETRIEVE)
    assert len(obs["images"]) == 5 and len(events_of(info["events"], "coarse_retrieval")) == 1


def test_fused_episode_matches_hand_computed_scores(r3g_task: Path) -> None:
    env = R3GEnv(task_dir=str(r3g_task), show_captions=True, temperature=0.05)
    options = first_row(r3g_task)
    obs, _ = env.reset(seed=0, options=options)
    assert not any(g in obs["text"] for g in options["gold_images"])  # gold never shown
    env.step(PLAN)
    pool_obs, *_ = env.step(RETRIEVE)
    obs, *_, info = env.step(judge_from_captions(pool_obs["text"]))
    retrieval = events_of(info["events"], "coarse_retrieval")[0]
    sims = retrieval["similarities"]
    assert sims == sorted(sims, reverse=True)
    weights = [math.exp(s / 0.05) for s in sims]
    assert retrieval["stage1"] == pytest.approx([w / sum(weights) for w in weights])
    chosen = events_of(info["events"], "evidence_selected")[0]
    gold = options["gold_images"][0]
    expected_s2 = [0.2 * 0.5 + 0.35 * 0.5 + 0.45 * (1.0 if p == gold else 0.0) for p in chosen["pool"]]
    assert chosen["stage2"] == pytest.approx(expected_s2)
    assert chosen["final"] == pytest.approx(
        [a + b for a, b in zip(retrieval["stage1"], expected_s2, strict=True)]
    )
    assert chosen["selected"] == [gold] and chosen["ranking"][0] == gold
    assert (
        len(obs["images"]) == 1 and "visible" in obs["text"] and "Your plan: the part's colour" in obs["text"]
    )
    *_, terminated, truncated, info = env.step("<answer>A</answer>")
    assert terminated and not truncated and events_of(info["events"], "answer")[0]["text"] == "A"


def test_stage1_only_is_the_no_module_ablation(r3g_task: Path) -> None:
    env = R3GEnv(task_dir=str(r3g_task), rerank="stage1", use_plan=False)
    env.reset(seed=0, options=first_row(r3g_task))
    obs, *_, info = env.step(PLAN)
    assert events_of(info["events"], "protocol_violation")[0]["reason"] == "plan_disabled"
    obs, *_, info = env.step(RETRIEVE)
    chosen = events_of(info["events"], "evidence_selected")[0]
    assert chosen["selected"] == chosen["pool"][:1] and chosen["stage2"] == [None] * 5
    assert len(obs["images"]) == 1 and "<judge>" not in env.system_prompt
    *_, info = env.step("<judge>[1] r=1 t=1 a=1 x</judge>")
    assert events_of(info["events"], "protocol_violation")[-1]["reason"] == "judge_disabled"


def test_stage2_only_and_top_k(r3g_task: Path) -> None:
    env = R3GEnv(task_dir=str(r3g_task), rerank="stage2", top_k=2)
    env.reset(seed=0, options=first_row(r3g_task))
    env.step(PLAN)
    env.step(RETRIEVE)
    obs, *_, info = env.step("<judge>\n[4] r=0 t=0 a=1 a\n[2] r=1 t=0 a=0 b\n[1] r=0 t=0 a=0 c\n</judge>")
    chosen = events_of(info["events"], "evidence_selected")[0]
    assert chosen["final"] == pytest.approx([0.0, 0.2, 0.0, 0.45, 0.0])
    assert chosen["selected"] == [chosen["pool"][3], chosen["pool"][1]] and len(obs["images"]) == 2
    errors = events_of(info["events"], "judge_error")
    assert [(e["candidate"], e["reason"]) for e in errors] == [(3, "not_judged"), (5, "not_judged")]


def test_malformed_judge_lines_are_per_candidate_errors(r3g_task: Path) -> None:
    env = R3GEnv(task_dir=str(r3g_task))
    env.reset(seed=0, options=first_row(r3g_task))
    env.step(PLAN)
    env.step(RETRIEVE)
    obs, *_, info = env.step("<judge>[1] r=2 t=0 a=0 x\n[2] r=0.5 t=0.5\n[7] r=1 t=1 a=1 y\nhello</judge>")
    reasons = sorted((e["candidate"] or 0, e["reason"]) for e in events_of(info["events"], "judge_error"))
    assert reasons == [
        (0, "bad_line"),
        (1, "out_of_range"),
        (2, "missing_score"),
        (3, "not_judged"),
        (4, "not_judged"),
        (5, "not_judged"),
        (7, "unknown_candidate"),
    ]
    chosen = events_of(info["events"], "evidence_selected")[0]
    assert chosen["stage2"] == [None] * 5 and chosen["selected"] == chosen["pool"][:1]
    assert "5 candidate(s) had missing, invalid or repeated scores" in obs["text"]
    assert "2 judge line(s) named no candidate" in obs["text"]
    *_, info = env.step("<judge>[1] r=1 t=1 a=1 x</judge>")
    assert events_of(info["events"], "protocol_violation")[-1]["reason"] == "second_judge"


def test_a_candidate_named_by_a_judge_error_ranks_with_stage2_zero(r3g_task: Path) -> None:
    """A repeated candidate, or one whose first line was bad, is a judge_error: Stage-2 0, as the notice says,
    not the score of one of its lines; a line naming no pooled candidate is ignored and said so."""
    env = R3GEnv(task_dir=str(r3g_task), rerank="stage2")
    env.reset(seed=0, options=first_row(r3g_task))
    env.step(PLAN)
    env.step(RETRIEVE)
    judge = (
        "<judge>\n[1] r=1 t=1 a=1 first\n[1] r=0 t=0 a=0 again\n[2] r=x t=1 a=1 bad\n[2] r=1 t=1 a=1 good\n"
        "[3] r=0 t=0 a=0.5 c\n[4] r=0 t=0 a=0 d\n[5] r=0 t=0 a=0 e\n[9] r=1 t=1 a=1 z\n</judge>"
    )
    obs, *_, info = env.step(judge)
    errors = events_of(info["events"], "judge_error")
    assert [(e["candidate"], e["reason"]) for e in errors] == [
        (1, "duplicate_candidate"),
        (2, "bad_score"),
        (9, "unknown_candidate"),
    ]
    chosen = events_of(info["events"], "evidence_selected")[0]
    assert chosen["stage2"] == pytest.approx([None, None, 0.225, 0.0, 0.0])
    assert chosen["selected"] == [chosen["pool"][2]]
    assert "2 candidate(s)" in obs["text"] and "1 judge line(s)" in obs["text"]


def test_turn_budget_forces_an_empty_answer(r3g_task: Path) -> None:
    env = R3GEnv(task_dir=str(r3g_task), max_turns=3)
    env.reset(seed=0, options=first_row(r3g_task))
    env.step("nonsense")
    obs, *_ = env.step(PLAN)
    assert "last turn" in obs["text"]
    *_, terminated, truncated, info = env.step(RETRIEVE)
    assert truncated and not terminated
    assert events_of(info["events"], "answer") == [{"type": "answer", "turn": 2, "text": "", "forced": True}]


def test_seeded_reset_is_deterministic(r3g_task: Path) -> None:
    a, b = R3GEnv(task_dir=str(r3g_task)), R3GEnv(task_dir=str(r3g_task))
    (oa, ia), (ob, ib) = a.reset(seed=7), b.reset(seed=7)
    assert oa["text"] == ob["text"] and ia == ib and np.array_equal(oa["images"][0], ob["images"][0])


class FirstPixelEncoder:
    """A fake injected encoder: the feature of an image is its top-left pixel."""

    def encode_queries(self, images: list[np.ndarray]) -> np.ndarray:
        return np.stack([im[0, 0].astype(np.float32) for im in images])


COLOURS = {"red": (255, 0, 0), "green": (0, 255, 0), "teal": (0, 200, 200)}
QUERY = np.array([0, 255, 40]) / np.linalg.norm([0, 255, 40])


def colour_task(root: Path) -> Path:
    """Three one-colour corpus images whose features are their colours, and a green-teal query image."""
    (root / "corpus").mkdir()
    for name, rgb in COLOURS.items():
        Image.new("RGB", (4, 4), rgb).save(root / "corpus" / f"{name}.png")
    Image.new("RGB", (4, 4), (0, 255, 40)).save(root / "query.png")
    pd.DataFrame(
        {"image_id": list(COLOURS), "path": [f"corpus/{n}.png" for n in COLOURS], "caption": [""] * 3}
    ).to_parquet(root / "corpus" / "corpus.parquet")
    np.save(root / "corpus" / "embeddings.npy", np.array(list(COLOURS.values()), dtype=np.float32))
    (root / "corpus" / "manifest.json").write_text(json.dumps({"image_encoder": {"name": "none"}}))
    return root


def cosine(name: str) -> float:
    return float(QUERY @ (np.array(COLOURS[name]) / np.linalg.norm(COLOURS[name])))


def test_injected_encoder_ranks_the_corpus_by_cosine(tmp_path: Path) -> None:
    env = R3GEnv(
        task_dir=str(colour_task(tmp_path)), encoder=FirstPixelEncoder(), pool_size=2, use_plan=False
    )
    env.reset(options={"question": "q", "query_image": "query.png", "gold_images": ["teal"]})
    *_, info = env.step(RETRIEVE)
    pool = events_of(info["events"], "coarse_retrieval")[0]
    assert pool["pool"] == ["green", "teal"] and pool["gold_in_pool"] is True
    assert pool["similarities"] == pytest.approx([cosine("green"), cosine("teal")], rel=1e-5)


def test_mrag_feeds_the_benchmark_list_in_its_order_unranked(tmp_path: Path) -> None:
    """pool_source=benchmark, rerank=none: the row's retrieved_images, in the benchmark's order, are the
    evidence, although ragym's cosine would rank teal and green above red."""
    env = R3GEnv(
        task_dir=str(colour_task(tmp_path)),
        encoder=FirstPixelEncoder(),
        use_plan=False,
        pool_source="benchmark",
        rerank="none",
        top_k=5,
    )
    given = ["red", "teal", "green"]
    _, info = env.reset(
        options={
            "question": "q",
            "query_image": "query.png",
            "gold_images": ["teal"],
            "retrieved_images": given,
        }
    )
    assert (info["events"][0]["pool_source"], info["events"][0]["pool_size"]) == ("benchmark", 3)
    assert "benchmark retrieved" in env.system_prompt and "<judge>" not in env.system_prompt
    obs, *_, info = env.step(RETRIEVE)
    pool = events_of(info["events"], "coarse_retrieval")[0]
    assert pool["pool"] == given
    assert pool["similarities"] == pytest.approx([cosine(n) for n in given], rel=1e-5)
    chosen = events_of(info["events"], "evidence_selected")[0]
    assert chosen["ranking"] == chosen["selected"] == given and chosen["stage2"] == [None] * 3
    assert chosen["rerank"] == "none" and len(obs["images"]) == 3 and "in retrieval order" in obs["text"]
    assert obs["images"][0][0, 0].tolist() == [255, 0, 0]  # red first, as the benchmark listed it
    *_, info = env.step("<judge>[1] r=1 t=1 a=1 x</judge>")
    assert events_of(info["events"], "protocol_violation")[-1]["reason"] == "judge_disabled"


def test_no_reranking_on_the_corpus_pool_is_plain_top_k(tmp_path: Path) -> None:
    env = R3GEnv(
        task_dir=str(colour_task(tmp_path)),
        encoder=FirstPixelEncoder(),
        use_plan=False,
        pool_size=3,
        top_k=3,
        rerank="none",
    )
    env.reset(options={"question": "q", "query_image": "query.png", "gold_images": ["teal"]})
    obs, *_, info = env.step(RETRIEVE)
    chosen = events_of(info["events"], "evidence_selected")[0]
    assert chosen["selected"] == ["green", "teal", "red"] and len(obs["images"]) == 3


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({}, "retrieved_images"),
        ({"retrieved_images": []}, "retrieved_images"),
        ({"retrieved_images": ["red", "blue"]}, "blue"),
    ],
)
def test_benchmark_pool_without_a_usable_list_is_an_error(tmp_path: Path, options: dict, match: str) -> None:
    env = R3GEnv(task_dir=str(colour_task(tmp_path)), pool_source="benchmark", rerank="none")
    with pytest.raises(ValueError, match=match):
        env.reset(options={"question": "q", "query_image": "query.png", "gold_images": ["teal"], **options})


def test_judge_guidelines_switch_drops_only_the_criteria(r3g_task: Path) -> None:
    """The no-guidelines ablation asks for the same three scores without their definitions; fusion is unchanged."""
    criteria = ("semantic relatedness", "target correspondence", "answerability")
    with_guidelines, without = (
        R3GEnv(task_dir=str(r3g_task)),
        R3GEnv(task_dir=str(r3g_task), judge_guidelines=False),
    )
    assert all(c in with_guidelines.system_prompt for c in criteria)
    assert not any(c in without.system_prompt for c in criteria)
    assert "`[i] r=R t=T a=A rationale`" in without.system_prompt and "<plan>" in without.system_prompt
    finals = []
    for env in (with_guidelines, without):
        _, info = env.reset(seed=0, options=first_row(r3g_task))
        env.step(PLAN)
        env.step(RETRIEVE)
        *_, info = env.step("<judge>\n[2] r=1 t=0 a=1 b\n</judge>")
        finals.append(events_of(info["events"], "evidence_selected")[0]["final"])
    assert finals[0] == finals[1]
    assert info["events"][0]["judge_guidelines"] is False


@pytest.mark.parametrize(
    "bad", [{"rerank": "both"}, {"top_k": 6}, {"temperature": 0.0}, {"pool_source": "clip"}]
)
def test_bad_config_is_an_error(r3g_task: Path, bad: dict) -> None:
    with pytest.raises(ValueError):
        R3GEnv(task_dir=str(r3g_task), **bad)
