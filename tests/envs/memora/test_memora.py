"""MEMORA-v0: reset view, the factor-aware score by hand, budgets and violations, memory write/read/freeze."""

from __future__ import annotations

import json
import re
import tempfile
import time
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from PIL import Image

from ragym import envs
from ragym.envs.events import events_of
from ragym.envs.image_cache import UnreadableImageError
from ragym.envs.memora.actions import Judge, parse_action
from ragym.envs.memora.env import MemoraEnv
from ragym.envs.retrieval.hits import Hit, NamedRetrievers
from tests.envs.fakes import write_corpus

TEXTS = {"a": "alpha one", "b": "beta two", "c": "gamma three", "d": "delta four", "e": "epsilon five"}


class FakeRetriever:
    """First stage a > b > c > d; a query containing 'sub' returns e, a; one containing 'diagram' d, c."""

    def search(self, query: str, k: int) -> list[Hit]:
        order = ["e", "a"] if "sub" in query else ["d", "c"] if "diagram" in query else ["a", "b", "c", "d"]
        return [Hit(d, 10.0 - i) for i, d in enumerate(order)][:k]

    def batch_search(self, queries: list[str], k: int) -> list[list[Hit]]:
        return [self.search(q, k) for q in queries]


_FOLDER = tempfile.TemporaryDirectory()  # removed when the module is
CORPUS = write_corpus(TEXTS, Path(_FOLDER.name))


def small_env(**overrides) -> MemoraEnv:
    config = {"k0": 4, "kc": 4, "k": 2, "max_pool": 8, "k_min": 1, "corpus_path": CORPUS, **overrides}
    return MemoraEnv(retriever=NamedRetrievers({"first_stage": FakeRetriever()}), **config)


def turn(action: str) -> str:
    return f"<reason>r</reason>{action}"


OPTIONS = {"query": "q", "query_id": "q1", "domain": "toy", "qrels": {"c": 1}}


def test_check_env_and_registration() -> None:
    assert "MEMORA-v0" in envs.registered_envs()
    check_env(gymnasium.make("MEMORA-v0").unwrapped, skip_render_check=True)


def test_seeded_reset_is_deterministic() -> None:
    one, two = MemoraEnv(), MemoraEnv()
    assert one.reset(seed=5)[0]["text"] == two.reset(seed=5)[0]["text"]


def test_score_by_hand() -> None:
    """Two factors, evidence on c; with the paper's lambdas the scores below are computed by hand."""
    env = small_env()
    env.reset(options=OPTIONS)
    env.step(turn("<decompose><factor p=3>gamma</factor><factor p=1>three</factor></decompose>"))
    env.step(turn("<extract f=1><e d=3 s=10>gamma</e><e d=2 s=5>b</e></extract>"))
    _, _, terminated, _, info = env.step(turn("<stop></stop>"))
    assert terminated
    final = events_of(info["events"], "final_ranking")[0]
    # priorities 0.75 / 0.25; R = 1 - rank/4 -> a 1.0, b 0.75, c 0.5, d 0.25
    # c: U = 0.75*1.0, C = 1/2 (only f1 >= 0.5); S = 0.9*(0.4*0.75 + 0.3*0.5 + 0.1*0.5) = 0.45
    # b: U = 0.75*0.5, C = 1/2; S = 0.9*(0.4*0.375 + 0.3*0.5 + 0.1*0.75) = 0.3375
    # a: S = 0.9*0.1*1.0 = 0.09; d: 0.9*0.1*0.25 = 0.0225
    assert final["ranking"] == ["c", "b", "a", "d"]
    assert final["scores"] == pytest.approx([0.45, 0.3375, 0.09, 0.0225])
    assert not final["forced"]


def test_judge_subquery_and_numbers_stay_stable() -> None:
    env = small_env()
    env.reset(options=OPTIONS)
    env.step(turn("<decompose><factor p=1>x</factor></decompose>"))
    _, _, _, _, info = env.step(turn("<subquery f=1>sub e</subquery>"))
    sub = events_of(info["events"], "subquery")[0]
    assert sub["retrieved"] == ["e", "a"] and sub["added"] == ["e"] and sub["pool_size"] == 5
    assert any(c["number"] == 5 and c["docid"] == "e" for c in info["view"]["candidates"])
    _, _, _, _, info = env.step(turn("<judge>4 > 5</judge>"))
    assert events_of(info["events"], "verdict")[0]["order"] == ["d", "e"]
    _, _, _, _, info = env.step(turn("<stop></stop>"))
    # d: V = 1 -> 0.9*(0.2 + 0.1*0.25) = 0.2025; e (subquery rank 0): 0.9*(0.2*0.5 + 0.1) = 0.18
    assert events_of(info["events"], "final_ranking")[0]["ranking"][:2] == ["d", "e"]


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        ("<extract f=1><e d=1 s=3>x</e></extract>", "no_factors"),
        ("<subquery f=1>x</subquery>", "no_factors"),
        ("<judge>9</judge>", "bad_candidate"),
        ("<decompose>" + "<factor p=1>x</factor>" * 6 + "</decompose>", "factor_count"),
    ],
)
def test_forbidden_actions_change_nothing(action: str, reason: str) -> None:
    env = small_env()
    env.reset(options=OPTIONS)
    before = env.state.view()
    _, _, _, _, info = env.step(turn(action))
    assert events_of(info["events"], "protocol_violation")[-1]["reason"] == reason
    assert env.state.view() == before


LONG = 65_536


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        ("<decompose><factor p=1" + " " * LONG + "</decompose>", "bad_decompose"),
        ("<extract f=1><e d=1 s=1" + " " * LONG + "</extract>", "bad_extract"),
        ("</reason><stop></stop>" * (LONG // 22) + "x", "multiple_actions"),
    ],
)
def test_a_long_malformed_turn_is_refused_in_linear_time(action: str, reason: str) -> None:
    """With max_turn_chars raised, each of these 64 kB turns took 2-12 s to refuse (the item scan and the turn
    pattern backtracked in quadratic time; 100 s at 200 kB); in linear time it takes milliseconds."""
    env = small_env(max_turn_chars=2 * LONG)
    env.reset(options=OPTIONS)
    start = time.perf_counter()
    _, _, _, _, info = env.step(turn(action))
    assert time.perf_counter() - start < 1.0
    assert events_of(info["events"], "format_error")[-1]["reason"] == reason


def test_evidence_checks_and_budgets() -> None:
    env = small_env(max_subqueries=1)
    env.reset(options=OPTIONS)
    env.step(turn("<decompose><factor p=1>x</factor><factor p=1>y</factor></decompose>"))
    for action, reason in [
        ("<extract f=3><e d=1 s=3>x</e></extract>", "bad_factor"),
        ("<extract f=1><e d=1 s=11>x</e></extract>", "bad_score"),
        ("<extract f=1><e d=1 s=1>x</e><e d=1 s=2>y</e></extract>", "duplicate_candidate"),
    ]:
        _, _, _, _, info = env.step(turn(action))
        assert events_of(info["events"], "protocol_violation")[-1]["reason"] == reason
    env.step(turn("<subquery f=1>sub</subquery>"))
    _, _, _, _, info = env.step(turn("<subquery f=2>sub</subquery>"))
    assert events_of(info["events"], "protocol_violation")[-1]["reason"] == "budget_exhausted"
    assert len(events_of(info["events"], "subquery")) == 1


def test_turn_budget_forces_the_final_ranking() -> None:
    env = small_env(max_turns=2)
    env.reset(options=OPTIONS)
    env.step("nonsense")
    _, _, terminated, truncated, info = env.step(turn("<judge>2</judge>"))
    assert truncated and not terminated
    final = events_of(info["events"], "final_ranking")[0]
    assert final["forced"] and final["ranking"][0] == "b"
    assert events_of(info["events"], "format_error")[0]["reason"] == "no_action"
    with pytest.raises(RuntimeError, match="over"):
        env.step(turn("<stop></stop>"))


def test_excluded_ids_and_precomputed_first_stage() -> None:
    env = small_env()
    _, info = env.reset(options={**OPTIONS, "excluded_ids": ["a"]})
    assert events_of(info["events"], "first_stage")[0]["ranking"] == ["b", "c", "d"]
    _, info = env.reset(options={"query": "q", "first_stage": [["d", 3.0], ["c", 2.0]]})
    assert events_of(info["events"], "first_stage")[0]["ranking"] == ["d", "c"]
    with pytest.raises(ValueError, match="not in the collection"):
        env.reset(options={"query": "q", "first_stage": [["zz", 1.0]]})
    with pytest.raises(ValueError, match="unknown keys"):
        env.reset(options={"query": "q", "gold": 1})


def play_factor_episode(env: MemoraEnv, options: dict) -> dict:
    env.reset(options=options)
    env.step(turn("<decompose><factor p=1>gamma three</factor><factor p=1>delta four</factor></decompose>"))
    env.step(turn("<extract f=1><e d=3 s=9>gamma</e></extract>"))
    env.step(turn("<extract f=2><e d=4 s=9>delta</e></extract>"))
    return env.step(turn("<stop></stop>"))[4]


def test_memory_is_written_with_outcomes_persists_and_freezes(tmp_path) -> None:
    env = small_env(memory_dir=str(tmp_path))
    info = play_factor_episode(env, {**OPTIONS, "query": "gamma question"})
    write = events_of(info["events"], "memory_write")[0]
    assert write["written"] and write["outcomes"] == ["helped", "hurt"]  # c is relevant, d is not
    record = json.loads((tmp_path / "toy.jsonl").read_text())
    assert record["top_docs"] == ["c", "d"] and record["ndcg"] == pytest.approx(1.0)
    # A new env instance (as the agent loop builds per episode) reads it back and shows it.
    fresh = small_env(memory_dir=str(tmp_path))
    obs, info = fresh.reset(options={**OPTIONS, "query_id": "q2", "query": "gamma rays from distant quasars"})
    assert "gamma question" in obs["text"] and "+gamma three" in obs["text"] and "-delta four" in obs["text"]
    assert events_of(info["events"], "memory_read")[0]["hits"] == 1
    # The factor prior: the same factors now get (h, l) = (1, 0) and (0, 1), and c's memory prior.
    fresh.step(turn("<decompose><factor p=1>gamma three</factor><factor p=1>delta four</factor></decompose>"))
    assert fresh.state.priors == [(1, 0), (0, 1)]
    assert fresh.state.priorities.tolist() == pytest.approx([0.8, 0.2])
    frozen = small_env(memory_dir=str(tmp_path), memory_frozen=True)
    info = play_factor_episode(frozen, OPTIONS)
    assert events_of(info["events"], "memory_write")[0]["reason"] == "frozen"
    assert len((tmp_path / "toy.jsonl").read_text().splitlines()) == 1


def test_a_query_never_reads_its_own_past_episodes(tmp_path) -> None:
    """A rerun, a later epoch or a GRPO sibling of q1 finds q1's scored episode in the memory file, but is
    never shown it; another query is."""
    play_factor_episode(small_env(memory_dir=str(tmp_path)), {**OPTIONS, "query": "gamma question"})
    for options in (
        {**OPTIONS, "query": "gamma question, asked again"},  # the same id
        {"query": "gamma  Question", "domain": "toy"},  # the same text
        {**OPTIONS, "query_id": "q3", "query": "what is the gamma question?"},  # reworded, another id
    ):
        obs, info = small_env(memory_dir=str(tmp_path)).reset(options=options)
        assert info["view"]["memories"] == [] and "no similar past episode (1 stored)" in obs["text"]
        assert events_of(info["events"], "memory_read")[0]["hits"] == 0
    _, info = small_env(memory_dir=str(tmp_path)).reset(
        options={**OPTIONS, "query_id": "q2", "query": "gamma rays from distant quasars"}
    )
    assert [m["query_id"] for m in info["view"]["memories"]] == ["q1"]


MOTHS = "why do moths fly in circles around street lamps at night yet ignore bright stars high above quiet dark fields"
"""Fifteen content words; two of them edited below keep a content-word cosine of 13 / 15 = 0.867."""


def test_the_own_query_similarity_setting_decides_which_memories_a_query_sees(tmp_path) -> None:
    """Another id's record of nearly the same words: the env's ``own_query_similarity`` decides whether the reading
    query takes it for its own (hidden) or for another query's (shown), in the view and in the memory_read event."""
    from ragym.envs.memora.memory import EpisodicMemory, MemoryRecord

    EpisodicMemory(tmp_path / "toy.jsonl").write(MemoryRecord(MOTHS, (), ("c",), 1.0, "q7"))
    reworded = MOTHS.replace("street", "garden").replace("lamps", "lights")
    shown = {}
    for threshold in (0.6, 0.86, 0.87, 1.0):
        env = small_env(memory_dir=str(tmp_path), own_query_similarity=threshold)
        _, info = env.reset(options={**OPTIONS, "query_id": "q9", "query": reworded})
        shown[threshold] = [m["query_id"] for m in info["view"]["memories"]]
        assert events_of(info["events"], "memory_read")[0]["hits"] == len(shown[threshold])
    assert shown == {0.6: [], 0.86: [], 0.87: ["q7"], 1.0: ["q7"]}


@pytest.mark.parametrize("k", [5, 10])
def test_the_memory_view_names_the_configured_k(tmp_path, k: int) -> None:
    """A memory's outcome is nDCG@K of its final ranking, K the config's ``k``: the view says nDCG@5 at k=5."""
    from ragym.envs.memora.memory import EpisodicMemory, MemoryRecord

    EpisodicMemory(tmp_path / "toy.jsonl").write(MemoryRecord("gamma question", (), ("c",), 1.0, "q7"))
    env = small_env(memory_dir=str(tmp_path), k=k, kc=k, k0=k, max_pool=k)
    obs, _ = env.reset(options={**OPTIONS, "query": "gamma rays from distant quasars"})
    assert re.findall(r"nDCG@\w+ [\d.]+", obs["text"]) == [f"nDCG@{k} 1.00"]


def test_own_memory_gives_a_stop_at_once_policy_nothing() -> None:
    """The leak of issue 30: one earlier scored episode of the same query raised an immediate stop's nDCG@10
    by 0.11 on these 40 queries (its document prior boosted its own relevant documents); now by nothing."""
    from ragym.envs.memora.corpus import synthetic_collection
    from ragym.envs.memora.models import ScriptedModel
    from ragym.envs.memora.pipeline import MemoraPipeline
    from ragym.envs.memora.synthetic import FACETS
    from ragym.rewards.memora import ranking_ndcg

    domain = synthetic_collection(0)[0]
    pipeline = MemoraPipeline(ScriptedModel(facets=FACETS))

    def stop_at_once(env: MemoraEnv, options: dict) -> float:
        env.reset(options=options)
        ranking = events_of(env.step(turn("<stop></stop>"))[4]["events"], "final_ranking")[0]["ranking"]
        return ranking_ndcg(ranking, options["qrels"], set(), 10)

    for q in domain.queries[:40]:
        options = {"query": q["query"], "query_id": q["id"], "qrels": q["qrels"], "domain": "d"}
        empty = stop_at_once(MemoraEnv(), options)
        env = MemoraEnv()
        pipeline.play(env, options)  # a scored episode of this very query, written to memory
        assert len(env.memory("d")) == 1
        assert stop_at_once(env, options) == empty, q["id"]


def test_no_qrels_no_memory_write() -> None:
    env = small_env()
    info = play_factor_episode(env, {"query": "q"})
    assert events_of(info["events"], "memory_write")[0]["reason"] == "no_qrels"
    assert len(env.memory("default")) == 0


def test_observations_never_show_qrels() -> None:
    env = small_env()
    obs, _ = env.reset(options={**OPTIONS, "qrels": {"c": 1, "secret-doc": 1}})
    assert "secret-doc" not in obs["text"] and "qrels" not in obs["text"]


def test_empty_first_stage_still_ends_with_an_empty_ranking() -> None:
    env = small_env()
    obs, info = env.reset(options={"query": "q", "first_stage": []})
    assert "top 0 of 0" in obs["text"]
    _, _, terminated, _, info = env.step(turn("<stop></stop>"))
    assert terminated and events_of(info["events"], "final_ranking")[0]["ranking"] == []


def test_image_description_reaches_the_view_and_the_first_stage() -> None:
    env = small_env()
    obs, info = env.reset(options={"query": "q", "image_description": "a circuit diagram"})
    assert "Query image description: a circuit diagram" in obs["text"] and obs["images"] == ()
    assert events_of(info["events"], "first_stage")[0]["ranking"] == ["d", "c"]
    _, info = small_env(describe_in_first_stage=False).reset(
        options={"query": "q", "image_description": "diagram"}
    )
    assert events_of(info["events"], "first_stage")[0]["ranking"] == ["a", "b", "c", "d"]


@pytest.mark.parametrize("repeat", [False, True])
def test_a_candidates_text_is_shown_once_unless_the_config_repeats_it(repeat: bool) -> None:
    """After the first listing a candidate appears by number, score and id only (its text is in the context);
    a candidate a subquery adds is shown with its text the first time. ``repeat_doc_text`` shows every text
    every time."""
    env = small_env(repeat_doc_text=repeat)
    first = env.reset(options=OPTIONS)[0]["text"]
    assert all(f"{d}: {TEXTS[d]}" in first for d in "abcd")
    env.step(turn("<decompose><factor p=1>x</factor></decompose>"))
    second = env.step(turn("<subquery f=1>sub e</subquery>"))[0]["text"]
    assert f"e: {TEXTS['e']}" in second  # new to the episode
    for d in "abc":  # d left the top K_c = 4 when e joined
        assert (f"{d}: {TEXTS[d]}" in second) is repeat
        assert (f"{d} (text above)" in second) is not repeat
    # A new episode starts afresh.
    assert all(f"{d}: {TEXTS[d]}" in env.reset(options=OPTIONS)[0]["text"] for d in "abcd")


@pytest.mark.parametrize("separator", ["\x1c", "\x1d", "\x1e", "\x1f", "\u2028"])
def test_a_judge_order_spaced_by_any_whitespace_reads_as_with_spaces(separator: str) -> None:
    """The judge grammar takes any whitespace around '>' (regex \\s), as a space (int() alone refused \\x1c-\\x1f)."""
    assert parse_action(f"<reason>r</reason><judge>4{separator}>{separator}1</judge>", 8192) == Judge((4, 1))


@pytest.mark.parametrize("kind", ["bomb", "cut_short", "strip"])
def test_a_query_image_that_cannot_be_shown_is_an_error_naming_its_file(kind, tmp_path, monkeypatch) -> None:
    """MEMORA caught only OSError: PIL's DecompressionBombError (not one) passed through bare, and a strip past the
    ratio the budget accepts named no file. Each is now UnreadableImageError naming the image, which the agent
    loop records as the episode's episode_error event."""
    path = tmp_path / "query.png"
    pixels = np.random.default_rng(0).integers(0, 256, (10, 4000 if kind == "strip" else 64, 3), np.uint8)
    Image.fromarray(pixels).save(path)
    if kind == "bomb":
        monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # 640 pixels: more than twice the limit
    elif kind == "cut_short":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(UnreadableImageError, match=f"^image {re.escape(str(path))}: "):
        small_env().reset(options={"query": "q", "image_path": str(path)})


def test_a_thin_query_image_the_budget_accepts_is_shown(tmp_path) -> None:
    """PIL's thumbnail rounded a 20 x 4,000 strip (ratio 200, which the budget accepts) to 5 x 1,024 (ratio 204.8),
    so the episode failed on an image every other env shows; the shorter side is now ceil(1,024 / 200) = 6."""
    path = tmp_path / "strip.png"
    Image.fromarray(np.full((4000, 20, 3), 90, np.uint8)).save(path)
    obs, _ = small_env().reset(options={"query": "q", "image_path": str(path)})
    height, width = obs["images"][0].shape[:2]
    assert max(height, width) <= 1024 and max(height, width) <= 200 * min(height, width)


def test_a_judge_that_ranks_a_candidate_twice_is_refused_and_changes_nothing() -> None:
    """``3 > 1 > 3`` places candidate 3 both first and third: the parser kept its first place unseen (and scored
    the verdict as a list of 2), while an extract naming a candidate twice was refused. Both are now refused."""
    env = small_env()
    env.reset(options=OPTIONS)
    before = env.state.view()
    _, _, _, _, info = env.step(turn("<judge>3 > 1 > 3</judge>"))
    violation = events_of(info["events"], "protocol_violation")[-1]
    assert violation["reason"] == "duplicate_candidate"
    assert not events_of(info["events"], "verdict") and env.state.view() == before
    assert env.state.calls["judge"] == 0


@pytest.mark.parametrize("source", ["retriever", "precomputed"])
def test_a_first_stage_that_ranks_a_document_twice_is_an_error_naming_it(source: str) -> None:
    """A first stage naming c twice put it in the pool under two numbers, and the final ranking (and its nDCG@K
    top) held it twice; it is now an error at reset, as a document outside the collection is."""

    class Repeating(FakeRetriever):
        def search(self, query: str, k: int) -> list[Hit]:
            return [Hit("c", 3.0), Hit("a", 2.0), Hit("c", 1.0)][:k]

    env = MemoraEnv(
        retriever=NamedRetrievers({"first_stage": Repeating()}), corpus_path=CORPUS, k0=4, kc=4, k=2
    )
    options = (
        {**OPTIONS, "first_stage": [["c", 3.0], ["a", 2.0], ["c", 1.0]]}
        if source == "precomputed"
        else OPTIONS
    )
    with pytest.raises(ValueError, match="ranks documents more than once: \\['c'\\]"):
        env.reset(options=options)


def test_pools_of_one_and_of_500_rank_every_candidate_once_and_judge_ndcg_against_all_qrels(tmp_path) -> None:
    """The pool sizes a policy can meet at the ends: one candidate (nDCG@10 divides by the ideal DCG of both
    relevant documents in the qrels, not of the one shown) and 500 (numbers up to 500 are candidates, 501 is not)."""
    texts = {f"d{i}": f"text {i}" for i in range(500)}
    corpus = write_corpus(texts, tmp_path)
    hits = [Hit(f"d{i}", 1000.0 - i) for i in range(500)]

    class Fixed(FakeRetriever):
        def search(self, query: str, k: int) -> list[Hit]:
            return hits[:k]

    source = NamedRetrievers({"first_stage": Fixed()})
    env = MemoraEnv(retriever=source, corpus_path=corpus)  # K = 10 over a pool of one
    env.reset(options={"query": "q", "qrels": {"d0": 1, "d7": 1}, "first_stage": [["d0", 1.0]]})
    _, _, _, _, info = env.step(turn("<judge>2</judge>"))
    assert events_of(info["events"], "protocol_violation")[-1]["reason"] == "bad_candidate"
    _, _, terminated, _, info = env.step(turn("<stop></stop>"))
    assert terminated and events_of(info["events"], "final_ranking")[0]["ranking"] == ["d0"]
    assert events_of(info["events"], "memory_write")[0]["ndcg"] == pytest.approx(
        1 / (1 + 1 / np.log2(3)), abs=1e-6
    )

    env = MemoraEnv(retriever=source, corpus_path=corpus, k0=500, max_pool=500)
    _, info = env.reset(options={"query": "q", "qrels": {"d499": 1}})
    assert info["view"]["pool_size"] == 500 and len(info["view"]["candidates"]) == 30
    _, _, _, _, info = env.step(turn("<judge>501</judge>"))
    assert events_of(info["events"], "protocol_violation")[-1]["reason"] == "bad_candidate"
    env.step(turn("<judge>500</judge>"))
    _, _, _, _, info = env.step(turn("<stop></stop>"))
    ranking = events_of(info["events"], "final_ranking")[0]["ranking"]
    assert len(ranking) == len(set(ranking)) == 500 and ranking[0] == "d499"
    assert events_of(info["events"], "memory_write")[0]["ndcg"] == 1.0
