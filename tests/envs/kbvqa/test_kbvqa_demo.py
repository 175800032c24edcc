"""``KBVQA-Demo-v0``: the CPU demo's aids (signatures shown, the visual check, Rerank by number) on KBVQA-v0."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from ragym import envs
from ragym.envs.events import events_of
from ragym.envs.kbvqa.actions import Reject, Rerank, SearchImage, format_action
from ragym.envs.kbvqa.demo import DemoAids, KBVQADemoEnv, faulty_check

SEARCH1 = format_action(SearchImage(1))
REJECT = format_action(Reject())


def single_rows(kb: Path) -> list[dict]:
    frame = pd.concat([pd.read_parquet(kb / "data" / f"{s}.parquet") for s in ("train", "test")])
    options = [json.loads(e["env_options"]) for e in frame["extra_info"]]
    return [o for o in options if o["question_type"] == "single"]


def demo_env(kb: Path, **kwargs) -> KBVQADemoEnv:
    return envs.make_env("KBVQA-Demo-v0", kb_dir=str(kb), **kwargs)


def test_visual_signatures_show_only_when_enabled(tiny_kb: Path) -> None:
    option = single_rows(tiny_kb)[0]
    for show in (False, True):
        env = demo_env(tiny_kb, show_visual_signature=show, candidates_per_batch=3)
        obs, _ = env.reset(options=option)
        batch, *_ = env.step(SEARCH1)
        assert ("signature:" in obs["text"]) == show
        assert batch["text"].count("signature:") == (4 if show else 0) and len(batch["images"]) == 3


def test_no_aids_is_the_paper_env(tiny_kb: Path) -> None:
    """All aids off: the same observations and events as KBVQA-v0, turn for turn."""
    script = [SEARCH1, REJECT, format_action(Rerank("nobody")), REJECT, format_action(SearchImage(1))]
    runs = []
    for env in (demo_env(tiny_kb), envs.make_env("KBVQA-v0", kb_dir=str(tiny_kb))):
        obs, info = env.reset(options=single_rows(tiny_kb)[2])
        texts = [obs["text"]] + [env.step(turn)[0]["text"] for turn in script]
        runs.append((env.system_prompt, texts, env.step(REJECT)[-1]["events"]))
    assert runs[0] == runs[1]


@pytest.mark.parametrize("by_index", [False, True])
def test_visual_check_names_the_match_exactly_when_the_gold_entity_is_in_the_batch(
    tiny_kb: Path, by_index: bool
) -> None:
    env = demo_env(tiny_kb, candidates_per_batch=3, rerank_by_index=by_index, visual_check=True)
    seen = {True: 0, False: 0}
    for options in single_rows(tiny_kb)[:12]:
        env.reset(options=options)
        obs, *_ = env.step(SEARCH1)
        for _ in range(env.config.max_rejections + 1):  # every batch the image can get
            batch = env.state.active_batch()
            last = obs["text"].splitlines()[-1]
            if batch.gold_in_batch:
                i = batch.candidates.index(batch.gold_entity)
                named = f"[{i + 1}]" if by_index else batch.names[i]
                assert last == f"Visual check: {named} matches the query image."
            else:
                assert last == "Visual check: no candidate matches the query image."
            seen[batch.gold_in_batch] += 1
            obs, *_ = env.step(REJECT)
            if "Candidates for" not in obs["text"]:
                break
    assert seen[True] and seen[False]  # both kinds of batch were checked


def test_visual_check_line_is_a_valid_rerank_argument(tiny_kb: Path) -> None:
    env = demo_env(tiny_kb, candidates_per_batch=3, rerank_by_index=True, visual_check=True)
    for options in single_rows(tiny_kb):
        env.reset(options=options)
        obs, *_ = env.step(SEARCH1)
        if env.state.active_batch().gold_in_batch:
            break
    number = obs["text"].splitlines()[-1].split()[2]
    obs, *_, info = env.step(format_action(Rerank(number)))
    assert events_of(info["events"], "verification")[-1]["correct"] is True
    assert obs["text"].startswith("Confirmed: the entity in Image 1 is ")


def test_signature_aids_need_a_kb_with_signatures(tiny_kb: Path, tmp_path: Path) -> None:
    kb = tmp_path / "kb"
    shutil.copytree(tiny_kb, kb)
    queries = pd.read_parquet(kb / "queries.parquet")
    queries["signature"] = None
    queries.to_parquet(kb / "queries.parquet")
    for aid in ("visual_check", "show_visual_signature"):
        with pytest.raises(ValueError, match="need signatures"):
            demo_env(kb, **{aid: True})
    demo_env(kb, rerank_by_index=True)  # needs no signatures


@pytest.mark.parametrize(
    ("argument", "position"),
    # "²" is a digit to str.isdigit but not to int, nor are 5000 digits: neither may raise out of step
    [
        ("1", 0),
        ("[2]", 1),
        (" 3 ", 2),
        ("4", None),
        ("0", None),
        ("²", None),
        ("[²]", None),
        ("9" * 5000, None),
    ],
)
def test_rerank_by_index_resolves_the_numbered_candidate(tiny_kb: Path, argument: str, position) -> None:
    env = demo_env(tiny_kb, candidates_per_batch=3, rerank_by_index=True)
    assert "number N of the matching candidate" in env.system_prompt
    env.reset(options=single_rows(tiny_kb)[0])
    env.step(SEARCH1)
    batch = env.state.active_batch()
    obs, *_, info = env.step(f"<reason>r</reason><rerank>{argument}</rerank>")
    if position is None:  # out of range: the usual unknown-entity violation, and the batch stays open
        assert events_of(info["events"], "protocol_violation")[-1]["reason"] == "unknown_entity"
        assert "candidate number" in obs["text"] and not batch.decided
    else:
        assert events_of(info["events"], "verification")[-1]["entity"] == batch.candidates[position]


def test_aid_keywords_set_the_aids_and_the_rest_the_config(tiny_kb: Path) -> None:
    env = KBVQADemoEnv(visual_check=True, kb_dir=str(tiny_kb))
    assert env.aids == DemoAids(visual_check=True) and env.config.kb_dir == str(tiny_kb)
    with pytest.raises(TypeError, match="no_such_field"):
        KBVQADemoEnv(visual_check=True, no_such_field=1, kb_dir=str(tiny_kb))


FAULTY_CASES = [
    # (name, true number, K, accuracy, draws, named number)
    ("truthful draw keeps the match", 2, 3, 0.7, [0.69, 0.0, 0.0], 2),
    ("truthful draw keeps 'none'", None, 3, 0.7, [0.0, 0.0, 0.0], None),
    ("error on a match, K=3: a wrong candidate", 2, 3, 0.7, [0.7, 0.2, 0.0], 1),
    ("error on a match, K=3: the last other one", 1, 3, 0.7, [0.7, 0.2, 0.99], 3),
    ("error on a match, K=3: a miss", 2, 3, 0.7, [0.9, 0.5, 0.0], None),
    ("error on a match, K=1: always a miss", 1, 1, 0.7, [0.9, 0.0, 0.0], None),
    ("error without a match: a false match", None, 3, 0.7, [0.9, 0.9, 0.5], 2),
    ("error without a match, K=1: the only candidate", None, 1, 0.0, [0.0, 0.0, 0.99], 1),
    ("accuracy 1 never errs", None, 3, 1.0, [0.999, 0.0, 0.0], None),
]


@pytest.mark.parametrize(
    ("true", "k", "accuracy", "draws", "named"),
    [c[1:] for c in FAULTY_CASES],
    ids=[c[0] for c in FAULTY_CASES],
)
def test_faulty_check_names_wrong_candidates_and_misses(true, k, accuracy, draws, named) -> None:
    assert faulty_check(true, k, accuracy, draws) == named


def _check_lines(kb: Path, **aids) -> list[tuple[bool, str]]:
    """(gold in batch, visual-check line) for every batch of the first single-image rows."""
    env = demo_env(kb, candidates_per_batch=1, rerank_by_index=True, visual_check=True, **aids)
    lines = []
    for options in single_rows(kb)[:20]:
        env.reset(options=options)
        obs, *_ = env.step(SEARCH1)
        while "Candidates for" in obs["text"]:
            lines.append((env.state.active_batch().gold_in_batch, obs["text"].splitlines()[-1]))
            obs, *_ = env.step(REJECT)
    return lines


def test_imperfect_visual_check_errs_both_ways_deterministically_per_seed(tiny_kb: Path) -> None:
    truth = _check_lines(tiny_kb)
    noisy = _check_lines(tiny_kb, visual_check_accuracy=0.5, visual_check_seed=3)
    assert [g for g, _ in truth] == [g for g, _ in noisy]  # the same batches are served
    right = "Visual check: [1] matches the query image."
    assert all((line == right) == gold for gold, line in truth)
    misses = sum(gold and line != right for gold, line in noisy)
    false_matches = sum(not gold and line == right for gold, line in noisy)
    assert misses and false_matches  # both kinds of error happen at accuracy 0.5
    assert misses + false_matches < len(noisy)  # and not every check errs
    assert (
        _check_lines(tiny_kb, visual_check_accuracy=0.5, visual_check_seed=3) == noisy
    )  # same episode, same check
    assert _check_lines(tiny_kb, visual_check_accuracy=0.5, visual_check_seed=4) != noisy  # the seed matters


@pytest.mark.parametrize("accuracy", [-0.1, 1.5, True, "0.9"])
def test_visual_check_accuracy_outside_0_1_is_refused(tiny_kb: Path, accuracy) -> None:
    with pytest.raises(ValueError, match="visual_check_accuracy"):
        demo_env(tiny_kb, visual_check=True, visual_check_accuracy=accuracy)
