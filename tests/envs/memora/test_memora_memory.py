"""EpisodicMemory and the memory priors: two writers on one file, partial lines, bad lines, values by hand."""

from __future__ import annotations

import pytest

from ragym.envs.memora.memory import EpisodicMemory, FactorOutcome, MemoryRecord, document_prior, factor_prior


def record(query: str, ndcg: float = 1.0, docs: tuple[str, ...] = ("d1",), **outcomes: str) -> MemoryRecord:
    factors = tuple(FactorOutcome(text.replace("_", " "), 0.5, o) for text, o in outcomes.items())
    return MemoryRecord(query, factors, docs, ndcg)


def test_two_writers_on_one_file_see_each_other(tmp_path) -> None:
    path = tmp_path / "bio.jsonl"
    a, b = EpisodicMemory(path), EpisodicMemory(path)
    a.write(record("moths circle lamps"))
    b.write(record("birds sing at dawn"))
    a.write(record("moths and light"))
    a.refresh(), b.refresh()
    assert [r.query for r in a.records] == [r.query for r in b.records] == [
        "moths circle lamps", "birds sing at dawn", "moths and light",
    ]  # fmt: skip
    assert [r.query for r, _ in EpisodicMemory(path).nearest("why do moths like light", 2)] == [
        "moths and light", "moths circle lamps",
    ]  # fmt: skip


def test_a_line_being_written_waits_and_a_bad_line_names_the_file(tmp_path) -> None:
    path = tmp_path / "m.jsonl"
    memory = EpisodicMemory(path)
    line = record("half written").to_json()
    path.write_text(line[:10])
    memory.refresh()
    assert len(memory) == 0
    path.write_text(line + "\n")
    memory.refresh()
    assert [r.query for r in memory.records] == ["half written"]
    path.write_text(line + "\n" + '{"query": "x"}\n')
    with pytest.raises(ValueError, match="m.jsonl:2: bad memory record"):
        memory.refresh()


def test_frozen_memory_reads_but_never_writes(tmp_path) -> None:
    path = tmp_path / "m.jsonl"
    EpisodicMemory(path).write(record("q one"))
    frozen = EpisodicMemory(path, frozen=True)
    assert not frozen.write(record("q two")) and len(frozen) == 1
    assert len(path.read_text().splitlines()) == 1


def test_nearest_never_returns_the_query_own_records(tmp_path) -> None:
    path = tmp_path / "m.jsonl"
    memory = EpisodicMemory(path)
    memory.write(MemoryRecord("moths circle lamps", (), ("d1",), 1.0, "7"))
    memory.write(MemoryRecord("moths circle street lamps", (), ("d2",), 0.5, "8"))
    path.open("a").write('{"query": "why moths", "factors": [], "top_docs": [], "ndcg": 1.0}\n')  # no id
    memory.refresh()
    assert memory.records[0].query_id == "7" and memory.records[2].query_id is None
    assert [r.query_id for r, _ in memory.nearest("moths lamps", 4)] == ["7", "8", None]
    assert [r.query_id for r, _ in memory.nearest("moths lamps", 4, query_id="7")] == ["8", None]
    # Same text is the same query even under another id; so is the id-less record's text.
    assert [r.query_id for r, _ in memory.nearest("Moths circle  lamps", 4, "9")] == ["8", None]
    assert [r.query_id for r, _ in memory.nearest("why moths", 4, "9")] == ["7", "8"]


def test_priors_by_hand() -> None:
    near = [
        (record("q", 1.0, ("d1", "d2"), ice_melt="helped", cost="hurt"), 0.9),
        (record("q", 0.5, ("d1",), ice_melt_rate="helped", cost="neutral"), 0.4),
    ]
    # "ice melt" vs "ice melt rate": cosine 2 / (sqrt 2 sqrt 3) = 0.816 >= 0.5; "cost" matches itself only.
    assert factor_prior("ice melt", near, 0.5) == (2, 0)
    assert factor_prior("cost", near, 0.5) == (0, 1)
    assert factor_prior("ice melt", near, 0.9) == (1, 0)
    assert document_prior(near) == {
        "d1": pytest.approx(0.75),
        "d2": pytest.approx(0.5),
    }  # (1 + 0.5) / 2, 1 / 2
    assert document_prior([]) == {}


def test_outcomes_are_checked() -> None:
    with pytest.raises(ValueError, match="outcome"):
        FactorOutcome("f", 0.5, "great")


@pytest.mark.parametrize("module", ["ragym.envs.memora.memory", "ragym.envs.memora.scoring"])
def test_doctests(module: str) -> None:
    import doctest
    import importlib

    assert doctest.testmod(importlib.import_module(module)).failed == 0


LONG = "why do moths fly in circles around street lamps at night yet ignore bright stars high above quiet dark fields"
"""Twenty distinct words: one word edited keeps a cosine of 19 / 20 = 0.95 with it, two words 18 / 20."""
ONE_EDIT = LONG.replace("street", "garden")
TWO_EDITS = ONE_EDIT.replace("lamps", "lights")
OWN_CASES = [
    # (name, reading query, its id, shown?) against one record of LONG with id "7"
    ("another query", "birds sing at dawn near lamps", "9", True),
    ("the same id, reworded", "how do birds sing", "7", False),
    ("the same words, a trailing ? and case", LONG.capitalize() + "?", "9", False),
    ("the same words, punctuation and spacing, no id", LONG.replace(" fly ", " -- fly,  "), None, False),
    ("one word edited: cosine 0.95", ONE_EDIT, "9", False),
    ("two words edited: cosine 0.9", TWO_EDITS, "9", True),
]


@pytest.mark.parametrize(
    ("query", "query_id", "shown"), [c[1:] for c in OWN_CASES], ids=[c[0] for c in OWN_CASES]
)
def test_near_identical_queries_are_the_query_own(query: str, query_id: str | None, shown: bool) -> None:
    memory = EpisodicMemory()
    memory.write(MemoryRecord(LONG, (), ("d1",), 1.0, "7"))
    assert [r.query_id for r, _ in memory.nearest(query, 4, query_id)] == (["7"] if shown else [])


def test_the_own_query_threshold_is_a_setting() -> None:
    memory = EpisodicMemory()
    memory.write(MemoryRecord(LONG, (), ("d1",), 1.0, "7"))
    assert memory.nearest(TWO_EDITS, 4, "9", own_similarity=0.9) == []
    assert [r.query_id for r, _ in memory.nearest(TWO_EDITS, 4, "9", own_similarity=0.91)] == ["7"]


def test_nearest_shows_one_record_per_query_its_latest(tmp_path) -> None:
    """GRPO writes a record per rollout: four rollouts of q8 must not fill the K_m = 2 nearest."""
    memory = EpisodicMemory(tmp_path / "m.jsonl")
    for rollout in range(4):
        memory.write(MemoryRecord("moths circle street lamps", (), (f"d{rollout}",), 0.1 * rollout, "8"))
    memory.write(MemoryRecord("moths near lamps at night", (), ("e",), 1.0, "5"))
    memory.write(MemoryRecord("Moths circle street lamps!", (), ("d9",), 0.9, None))  # q8 again, no id
    nearest = memory.nearest("do moths circle lamps", 2, "1")
    assert [(r.query_id, r.top_docs) for r, _ in nearest] == [(None, ("d9",)), ("5", ("e",))]
    assert len(memory) == 6  # every record stays stored; only the read picks one per query
