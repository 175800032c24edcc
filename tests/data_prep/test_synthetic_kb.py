"""The synthetic KB generator: fast, deterministic, the real on-disk format, answerable questions."""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ragym.data_prep import synthetic_kb
from ragym.data_prep.synthetic_kb import PRESETS, build_kb, cached_kb
from ragym.data_prep.synthetic_kb_io import held_out_rows
from ragym.envs.kbvqa.kb import load_kb

ROW_COLUMNS = ["data_source", "agent_name", "prompt", "ability", "reward_model", "extra_info"]


@pytest.fixture(scope="module")
def kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_kb(
        tmp_path_factory.mktemp("kb") / "kb", replace(PRESETS["tiny"], comparison_fraction=0.5), seed=1
    )


def all_rows(kb: Path) -> pd.DataFrame:
    """Train and test rows in question order (the row index)."""
    rows = pd.concat([pd.read_parquet(kb / "data" / f"{s}.parquet") for s in ("train", "test")])
    return rows.iloc[np.argsort(rows["extra_info"].map(lambda e: e["index"]).to_numpy())]


def gold_entities(kb: Path, split: str) -> list[str]:
    """The gold entity of each single-image row of ``split``, in file order."""
    rows = pd.read_parquet(kb / "data" / f"{split}.parquet")
    return [json.loads(e["env_options"])["gold_entities"][0] for e in rows["extra_info"]]


def test_tiny_kb_builds_in_well_under_a_few_seconds(tmp_path: Path) -> None:
    start = time.perf_counter()
    build_kb(tmp_path / "kb", PRESETS["tiny"], seed=0)
    assert time.perf_counter() - start < 3.0


def test_rows_follow_the_verl_schema(kb: Path) -> None:
    rows = all_rows(kb)
    assert list(rows.columns) == ROW_COLUMNS and len(rows) == PRESETS["tiny"].num_rows
    for _, row in rows.iterrows():
        assert row["data_source"] == "synthetic_kbvqa" and row["agent_name"] == "ragym_env"
        assert row["prompt"][0]["role"] == "user"
        assert row["reward_model"]["style"] == "rule"
        assert isinstance(json.loads(row["reward_model"]["ground_truth"]), list)
        extra = row["extra_info"]
        assert extra["env_id"] == "KBVQA-v0" and json.loads(extra["env_kwargs"])["kb_dir"] == str(
            kb.resolve()
        )
        options = json.loads(extra["env_options"])
        assert (
            len(options["query_images"])
            == len(options["gold_entities"])
            == (2 if options["question_type"] == "comparison" else 1)
        )
    assert sorted(rows["extra_info"].map(lambda e: e["index"])) == list(range(len(rows)))


def test_every_answer_is_stated_in_a_gold_entity_passage(kb: Path) -> None:
    tables = load_kb(kb)
    text_of = dict(zip(tables.passages["entity_id"], tables.passages["text"], strict=True))
    name_of = dict(zip(tables.entities["entity_id"], tables.entities["name"], strict=True))
    for _, row in all_rows(kb).iterrows():
        options = json.loads(row["extra_info"]["env_options"])
        answer = json.loads(row["reward_model"]["ground_truth"])[0]
        gold_text = " ".join(text_of[g] for g in options["gold_entities"])
        if options["question_type"] == "comparison":
            years = {
                name_of[g]: int(re.search(r"recorded in (\d{4})", text_of[g]).group(1))
                for g in options["gold_entities"]
            }
            assert answer == min(years, key=years.get)
        else:
            assert answer in gold_text


def test_same_seed_same_kb_different_seed_different_kb(tmp_path: Path) -> None:
    a, b, c = (build_kb(tmp_path / n, PRESETS["tiny"], seed=s) for n, s in [("a", 0), ("b", 0), ("c", 1)])
    assert np.array_equal(
        np.load(a / "index/entity_embeddings.npy"), np.load(b / "index/entity_embeddings.npy")
    )
    assert pd.read_parquet(a / "entities.parquet").equals(pd.read_parquet(b / "entities.parquet"))
    assert not pd.read_parquet(a / "entities.parquet").equals(pd.read_parquet(c / "entities.parquet"))


def test_names_and_signatures_are_unique_and_families_look_alike(kb: Path) -> None:
    tables = load_kb(kb)
    assert tables.entities["name"].is_unique and tables.entities["signature"].is_unique
    emb = tables.entity_embeddings
    size = PRESETS["tiny"].family_size
    same = [emb[i] @ emb[i + 1] for i in range(0, len(emb) - 1) if i // size == (i + 1) // size]
    other = [emb[i] @ emb[(i + size) % len(emb)] for i in range(len(emb))]
    assert np.mean(same) > np.mean(other)


def test_query_signatures_match_their_gold_entity(kb: Path) -> None:
    tables = load_kb(kb)
    sig = dict(zip(tables.entities["entity_id"], tables.entities["signature"], strict=True))
    for _, row in all_rows(kb).iterrows():
        options = json.loads(row["extra_info"]["env_options"])
        for path, gold in zip(options["query_images"], options["gold_entities"], strict=True):
            assert tables.queries["signature"].iloc[tables.query_index(path)] == sig[gold]


def test_cached_kb_builds_once_and_rows_point_at_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAGYM_CACHE", str(tmp_path))
    first = cached_kb("tiny")
    stamp = (first / "kb.json").stat().st_mtime_ns
    assert cached_kb("tiny") == first and (first / "kb.json").stat().st_mtime_ns == stamp
    kwargs = json.loads(pd.read_parquet(first / "data/train.parquet")["extra_info"][0]["env_kwargs"])
    assert kwargs["kb_dir"] == str(first.resolve())
    with pytest.raises(KeyError, match="unknown synthetic preset"):
        cached_kb("nope")


def test_demo_rows_build_the_one_candidate_visual_check_env(tmp_path: Path) -> None:
    from ragym import envs

    out = build_kb(tmp_path / "demo", replace(PRESETS["demo"], num_entities=60, num_rows=10), seed=0)
    extra = pd.read_parquet(out / "data/train.parquet")["extra_info"][0]
    assert extra["env_id"] == "KBVQA-Demo-v0"  # the aids live in the demo env, not in the paper's
    env = envs.make_env(extra["env_id"], **json.loads(extra["env_kwargs"]))
    env.reset(options=json.loads(extra["env_options"]))
    obs, *_ = env.step("<reason>look</reason><search_call>SearchImage(1)</search_call>")
    assert len(obs["images"]) == 1 and obs["text"].splitlines()[-1].startswith("Visual check: ")
    obs, *_ = env.step("<reason>take it</reason><rerank>1</rerank>")  # Rerank by number
    assert obs["text"].startswith("Confirmed: the entity in Image 1 is ")


@pytest.mark.parametrize("alphabet", [24, 48])
def test_alphabet_signatures_keep_the_gold_code_unique_among_served_candidates(
    tmp_path: Path, alphabet: int
) -> None:
    preset = replace(PRESETS["demo"], num_entities=120, num_rows=100, signature_alphabet=alphabet)
    tables = load_kb(build_kb(tmp_path / "demo", preset, seed=0))
    sig = dict(zip(tables.entities["entity_id"], tables.entities["signature"], strict=True))
    assert set(sig.values()) <= {f"#{chr(65 + c // 10)}{c % 10}" for c in range(alphabet)}
    for code, candidates in zip(tables.queries["signature"], tables.queries["candidates"], strict=True):
        served = [sig[e] for e in candidates[: preset.signature_window]]
        assert served.count(code) <= 1  # never names a look-alike besides the gold entity


def test_too_small_a_signature_alphabet_is_a_clear_error(tmp_path: Path) -> None:
    preset = replace(PRESETS["demo"], num_entities=60, num_rows=40, signature_alphabet=3)
    with pytest.raises(ValueError, match="signature alphabet 3 is too small"):
        build_kb(tmp_path / "demo", preset, seed=0)


def test_cli_writes_a_kb_and_refuses_a_non_empty_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "cli"
    assert (
        synthetic_kb.main(["--out", str(out), "--preset", "tiny", "--num-entities", "30", "--num-rows", "8"])
        == 0
    )
    assert load_kb(out).manifest["num_entities"] == 30
    assert json.loads(capsys.readouterr().out)["num_rows"] == 8
    with pytest.raises(SystemExit):
        synthetic_kb.main(["--out", str(out)])


def test_demo_slots_task_names_the_region_and_its_passage_ends_with_it(tmp_path: Path) -> None:
    """``demo_slots`` (``slots`` passages, region questions): every question names the region, and a SearchText of
    the gold entity's name shows its passage alone with the answer as the observation's last word; the same KB in
    the ``demo`` preset asks about the same entities in its own wording (all three attributes), split otherwise."""
    from ragym import envs

    sizes = {"num_entities": 60, "num_rows": 40}
    kb = build_kb(tmp_path / "slots", replace(PRESETS["demo_slots"], **sizes), seed=0)
    prose = build_kb(tmp_path / "prose", replace(PRESETS["demo"], **sizes), seed=0)
    names = pd.read_parquet(kb / "entities.parquet").set_index("entity_id")["name"]
    env = None
    for _, row in all_rows(kb).iterrows():
        extra = row["extra_info"]
        options = json.loads(extra["env_options"])
        assert re.fullmatch(r"In which region is the \w+ in the image found\?", options["question"])
        env = env or envs.make_env(extra["env_id"], **json.loads(extra["env_kwargs"]))
        env.reset(options=options)
        (gold,) = options["gold_entities"]
        obs, *_ = env.step(
            f'<reason>look up</reason><search_call>SearchText(["{names[gold]}"])</search_call>'
        )
        (answer,) = options["answers"]
        assert obs["text"].endswith(
            f", found in the region of {answer}."
        )  # the answer in the passage's last slot
        assert (
            obs["text"].count("[1] ") == 1 and f"[1] {names[gold]}: " in obs["text"]
        )  # the gold's passage alone
    golds = [json.loads(e["env_options"])["gold_entities"] for e in all_rows(kb)["extra_info"]]
    prose_options = [json.loads(e["env_options"]) for e in all_rows(prose)["extra_info"]]
    assert golds == [o["gold_entities"] for o in prose_options]
    questions = " ".join(o["question"] for o in prose_options)
    assert "year" in questions and "catalogued" in questions  # the demo's own task asks all three attributes


def test_synthetic_text_doctests() -> None:
    """The passage forms and the attribute a question names, as their docstrings show them."""
    import doctest

    from ragym.data_prep import synthetic_text

    result = doctest.testmod(synthetic_text)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize("name", ["demo_slots", "demo_k7_slots", "demo_weak_top1_slots"])
def test_answer_task_presets_hold_out_whole_entities(tmp_path: Path, name: str) -> None:
    """The answer task's held-out questions ask about entities no training question asks about (so answering them
    is copying from the passage, not recalling a trained answer); every row lands on one side, ~20% in test."""
    preset = replace(PRESETS[name], num_entities=60, num_rows=120)
    kb = build_kb(tmp_path / name, preset, seed=0)
    train, test = gold_entities(kb, "train"), gold_entities(kb, "test")
    assert not set(train) & set(test)
    indices = all_rows(kb)["extra_info"].map(lambda e: e["index"]).tolist()
    assert len(train) + len(test) == 120 and indices == list(range(120))
    assert 24 <= len(test) <= 24 + max(map(test.count, test))  # 20% of 120, the last entity's rows past it


def test_the_verify_tasks_demo_split_is_each_row_alone_as_before(tmp_path: Path) -> None:
    """The ``demo`` preset (the verify task's: its recorded figures) keeps its row-by-row split: a row is test where
    the old split's draw, ``default_rng(seed + 1).random(num_rows) < test_fraction``, put it. At full size that is
    117 of the 600 rows, 104 of them about an entity a training row asks about too."""
    preset = replace(PRESETS["demo"], num_entities=60, num_rows=40)
    kb = build_kb(tmp_path / "demo", preset, seed=3)
    rows = all_rows(kb)["extra_info"]
    old_split = np.random.default_rng(3 + 1).random(40) < preset.test_fraction
    assert [e["split"] == "test" for e in rows] == old_split.tolist()
    gold = synthetic_kb.generate(PRESETS["demo"], 0).gold
    is_test = held_out_rows(gold, PRESETS["demo"].split, PRESETS["demo"].test_fraction, 0)
    assert is_test.tolist() == (np.random.default_rng(1).random(600) < 0.2).tolist() and is_test.sum() == 117
    train = {g[0] for g, t in zip(gold, is_test, strict=True) if not t}
    assert sum(g[0] in train for g, t in zip(gold, is_test, strict=True) if t) == 104


def test_an_entity_disjoint_split_needs_single_image_rows_and_a_known_split_name() -> None:
    with pytest.raises(ValueError, match="entity_disjoint needs single-image rows"):
        replace(PRESETS["tiny"], split="entity_disjoint")
    with pytest.raises(ValueError, match="split must be one of"):
        replace(PRESETS["demo"], split="entities")


def test_synthetic_kb_io_doctests() -> None:
    """The entity-disjoint split's example."""
    import doctest

    from ragym.data_prep import synthetic_kb_io

    result = doctest.testmod(synthetic_kb_io)
    assert result.failed == 0 and result.attempted > 0
