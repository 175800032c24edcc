"""DocMemo-v0: scripted episodes, grammar errors, protocol, events, determinism, gymnasium's checker."""

from __future__ import annotations

import json

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from ragym import envs  # noqa: F401  (registers DocMemo-v0)
from ragym.envs.core import IMAGE_PLACEHOLDER
from ragym.envs.docmemo.actions import Answer, ParseError, Refine, Select, parse_action
from ragym.envs.docmemo.env import DocMemoConfig, DocMemoEnv
from ragym.envs.docmemo.synthetic import synthetic_questions
from ragym.envs.events import events_of
from ragym.envs.retrieval.hits import Hit
from ragym.envs.retrieval.service.client import RetrievalUnavailable
from tests.envs.fakes import EveryName


class FixedRetriever:
    """Scores page i with ``scores[i]`` whatever the query: candidates depend on beliefs alone."""

    def __init__(self, scores):
        self.scores = scores

    def search(self, query, k):
        order = np.argsort(-np.asarray(self.scores), kind="stable")[:k]
        return [Hit(str(i + 1), float(self.scores[i])) for i in order]

    def batch_search(self, queries, k):
        return [self.search(q, k) for q in queries]


def turn(action: str) -> str:
    return f"<reason>thinking</reason>{action}"


def last(info, kind):
    return events_of(info["events"], kind)[-1]


@pytest.fixture
def env():
    return DocMemoEnv()


def test_make_without_arguments_and_check_env():
    made = gymnasium.make("DocMemo-v0")
    check_env(made.unwrapped)
    assert isinstance(made.unwrapped, DocMemoEnv)
    assert made.unwrapped.stop_strings == ("</select>", "</refine>", "</answer>")


def test_scripted_episode_select_refine_answer(env):
    obs, info = env.reset(seed=1)
    assert obs["images"] == () and "Candidate pages" in obs["text"]
    candidates = last(info, "candidates")["pages"]
    assert len(candidates) == env.config.num_candidates == len(set(candidates))
    obs, _, term, trunc, info = env.step(turn(f"<select>{candidates[0]},{candidates[1]}</select>"))
    assert not (term or trunc)
    shown = last(info, "evidence")["pages"]
    assert set(shown) == {candidates[0], candidates[1]}
    assert len(obs["images"]) == obs["text"].count(IMAGE_PLACEHOLDER) == 2
    assert all(im.dtype == np.uint8 and im.ndim == 3 and im.shape[2] == 3 for im in obs["images"])
    useful, irrelevant = shown[0], shown[1]
    refine = f"<refine><query>shipments</query><note>need totals</note><useful>{useful}</useful>"
    obs, _, term, trunc, info = env.step(turn(refine + f"<irrelevant>{irrelevant}</irrelevant></refine>"))
    assert not (term or trunc)
    feedback = last(info, "feedback")
    assert (feedback["useful"], feedback["irrelevant"], feedback["query"]) == (
        [useful],
        [irrelevant],
        "shipments",
    )
    before, after = events_of(info["events"], "candidates")[0]["means"], last(info, "beliefs")["means"]
    assert after[useful - 1] > before[useful - 1]
    if abs(useful - irrelevant) > env.config.radius:  # else propagation from the useful page also reaches it
        assert after[irrelevant - 1] < before[irrelevant - 1]
    assert last(info, "candidates")["means"] == after
    assert 'query "shipments"; note: need totals' in obs["text"] and last(info, "candidates")["round"] == 1
    obs, _, term, trunc, info = env.step(turn("<answer>1337</answer>"))
    assert term and not trunc
    assert last(info, "answer") == {
        "type": "answer",
        "turn": 2,
        "text": "1337",
        "not_answerable": False,
        "forced": False,
        "round": 1,
    }
    json.dumps(info["events"])  # plain data only
    with pytest.raises(RuntimeError, match="reset"):
        env.step(turn("<answer>again</answer>"))


def test_useful_feedback_raises_posterior_and_neighbours():
    scores = [0.1 * (i % 5) for i in range(20)]
    env = DocMemoEnv(retriever=EveryName(FixedRetriever(scores)), radius=1, decay=0.5)
    _, info = env.reset(seed=0)
    page = last(info, "candidates")["pages"][0]
    env.step(turn(f"<select>{page}</select>"))
    _, _, _, _, info = env.step(turn(f"<refine><query>q</query><useful>{page}</useful></refine>"))
    means_before = np.array(events_of(info["events"], "candidates")[0]["means"])
    means_after = np.array(last(info, "beliefs")["means"])
    changed = np.flatnonzero(~np.isclose(means_before, means_after)) + 1
    assert set(changed) == {p for p in (page - 1, page, page + 1) if 1 <= p <= 20}
    assert np.all(means_after >= means_before - 1e-12)


def test_not_answerable_and_round_limit(env):
    env.reset(seed=2)
    _, _, term, _, info = env.step(turn("<answer>not answerable.</answer>"))
    assert term and last(info, "answer")["not_answerable"] is True
    _, info = env.reset(seed=2)
    for r in range(env.config.max_rounds):
        page = last(info, "candidates")["pages"][0]
        env.step(turn(f"<select>{page}</select>"))
        _, _, term, trunc, info = env.step(turn("<refine><query>more</query></refine>"))
        assert not term and trunc == (r == env.config.max_rounds - 1)
    assert last(info, "truncated")["reason"] == "max_rounds"


BAD_TURNS = [
    ("", "no_action"),
    ("just text", "no_action"),
    ("<select>3</select>", "missing_reason"),
    ("<reason>a</reason><select>3</select> trailing", "text_outside_blocks"),
    ("<reason>a</reason><select>3</select><answer>x</answer>", "multiple_actions"),
    ("<reason>a <answer>x</answer></reason><select>3</select>", "multiple_actions"),
    ("<reason>a <note>x</note></reason><answer>x</answer>", "nested_tags"),
    ("<reason>a</reason><select>three</select>", "bad_pages"),
    ("<reason>a</reason><select></select>", "bad_pages"),
    ("<reason>a</reason><answer>  </answer>", "empty_answer"),
    ("<reason>a</reason><refine><note>n</note></refine>", "bad_refine"),
    ("<reason>a</reason><refine><query> </query></refine>", "empty_query"),
    ("<reason>a</reason><refine><query>q</query><useful>x</useful></refine>", "bad_pages"),
    ("<reason>" + "a" * 9000 + "</reason><answer>1</answer>", "oversized"),
]


@pytest.mark.parametrize("text,reason", BAD_TURNS)
def test_malformed_turns_are_recorded_not_raised(env, text, reason):
    env.reset(seed=0)
    obs, _, term, trunc, info = env.step(text)
    assert not (term or trunc)
    assert last(info, "format_error")["reason"] == reason
    assert last(info, "action") == {"type": "action", "turn": 0, "kind": "invalid", "well_formed": False}
    assert reason in obs["text"] and env.turn == 1


def long_turns(size: int) -> list[tuple[str, Refine | ParseError]]:
    """Turns of about ``size`` characters, most of them runs of tags a parser can backtrack over, and what each is."""

    def fill(unit: str, share: int = 1) -> str:
        return unit * (size // share // len(unit))

    meets = fill("</query><note>", 3) + fill("</note><useful>", 3) + fill("</useful><irrelevant>", 3)
    return [
        # every two consecutive refine blocks meet over and over, and nothing closes the last: no reading
        (turn(f"<refine><query>q{meets}</refine>"), ParseError("bad_refine")),
        (turn(f"<refine><query>q</query><note>{fill('n</query><note>')}</refine>"), ParseError("bad_refine")),
        # the query ends at its first closing tag that a note follows, so the note holds all the other tags
        (turn(f"<refine><query>q{fill('</query><note>')}n</note></refine>"), ParseError("nested_tags")),
        ("<reason>" + fill("</reason><select>1"), ParseError("multiple_actions")),
        (
            turn(
                f"<refine><query>q</query><note>{fill('n ')}</note><useful>2,{fill('1,', 2)}3</useful></refine>"
            ),
            Refine("q", fill("n ").strip(), (2, 1, 3), ()),
        ),
    ]


@pytest.mark.parametrize("size", [2_048, 65_536])
def test_long_malformed_turns(size):
    """Parsed by lazy regex blocks that backtracked within each other, the first turn here took seconds at 2 kB and
    minutes at 8 kB, the second and the select one seconds at 64 kB; each now takes milliseconds, and its result
    is the grammar's at either size."""
    for text, expected in long_turns(size):
        assert len(text) > size / 2 and parse_action(text, 2 * size) == expected


GOOD_TURNS = [
    ("<reason>r</reason> <select> 3, 5,3 </select>", Select((3, 5))),
    ("<reason>r</reason><answer>Not Answerable</answer>", Answer("Not Answerable", True)),
    ('<reason>r</reason><answer>["a", "b"]</answer>', Answer('["a", "b"]', False)),
    (
        "<reason>r</reason><refine><query>q</query><useful>1,2</useful><irrelevant></irrelevant></refine>",
        Refine("q", "", (1, 2), ()),
    ),
    ("<reason>r</reason><refine> <query>q</query> <note>n</note> </refine>", Refine("q", "n", (), ())),
    # whitespace that int() does not take (the separators \x1c-\x1f) before a comma raised a ValueError
    ("<reason>r</reason><select>1\x1f,2</select>", Select((1, 2))),
    (
        "<reason>r</reason><refine><query>q</query><useful>3\x1c ,4</useful></refine>",
        Refine("q", "", (3, 4), ()),
    ),
]


@pytest.mark.parametrize("text,action", GOOD_TURNS)
def test_parse_well_formed_turns(text, action):
    assert parse_action(text, 8192) == action


def test_parse_never_raises_on_non_text():
    assert parse_action(None, 10) == ParseError("not_text")  # type: ignore[arg-type]


def test_protocol_violations(env):
    _, info = env.reset(seed=0)
    candidates = last(info, "candidates")["pages"]
    outside = next(p for p in range(1, 21) if p not in candidates)
    cases = [
        (turn("<refine><query>q</query></refine>"), "wrong_phase", []),
        (turn(f"<select>{outside}</select>"), "not_candidate", [outside]),
    ]
    for text, reason, pages in cases:
        _, _, term, trunc, info = env.step(text)
        assert not (term or trunc) and last(info, "protocol_violation") == {
            "type": "protocol_violation",
            "turn": env.turn - 1,
            "reason": reason,
            "pages": pages,
        }
    env.step(turn(f"<select>{candidates[0]}</select>"))
    for text, reason in [
        (turn(f"<select>{candidates[0]}</select>"), "wrong_phase"),
        (turn(f"<refine><query>q</query><useful>{outside}</useful></refine>"), "unseen_page"),
        (
            turn(
                f"<refine><query>q</query><useful>{candidates[0]}</useful><irrelevant>{candidates[0]}"
                "</irrelevant></refine>"
            ),
            "useful_and_irrelevant",
        ),
    ]:
        _, _, _, _, info = env.step(text)
        assert last(info, "protocol_violation")["reason"] == reason
    assert events_of(info["events"], "beliefs") == []  # rejected feedback never reaches the beliefs


def test_turn_budget_truncates():
    env = DocMemoEnv(max_turns=3)
    env.reset(seed=0)
    results = [env.step("garbage") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    assert last(results[-1][4], "truncated") == {"type": "truncated", "turn": 2, "reason": "max_turns"}


def test_seeded_reset_is_deterministic_across_instances():
    def rollout(seed):
        env = DocMemoEnv()
        obs, info = env.reset(seed=seed)
        page = last(info, "candidates")["pages"][0]
        obs2, *_, info = env.step(turn(f"<select>{page}</select>"))
        return obs["text"], obs2["text"], info["events"]

    assert rollout(7) == rollout(7)
    texts = {rollout(s)[0] for s in range(6)}
    assert len(texts) > 1  # seeds pick different questions or draws


def test_gold_options_are_refused():
    env = DocMemoEnv(store_root="/nonexistent")
    with pytest.raises(ValueError, match="question"):
        env.reset(options={"question": "q", "doc_id": "d.pdf", "evidence_pages": [3]})


def test_dense_page_crops_and_image_switch():
    table_page = 19  # the synthetic report's finance table
    scores = [1.0 if i == table_page - 1 else 0.0 for i in range(20)]
    for crop, show, expected in [(True, True, 3), (False, True, 1), (True, False, 0)]:
        env = DocMemoEnv(retriever=EveryName(FixedRetriever(scores)), crop_dense_pages=crop, show_images=show)
        _, info = env.reset(seed=0)
        assert last(info, "candidates")["pages"][0] == table_page
        obs, *_ = env.step(turn(f"<select>{table_page}</select>"))
        assert len(obs["images"]) == obs["text"].count(IMAGE_PLACEHOLDER) == expected
        assert obs in env.observation_space


def test_config_overrides_are_validated():
    assert DocMemoEnv(kappa=2.0).config == DocMemoConfig(kappa=2.0)
    with pytest.raises(TypeError, match="unknown config fields"):
        DocMemoEnv(kapa=2.0)


def test_synthetic_questions_have_gold_in_range():
    env = DocMemoEnv()
    env.reset(seed=0)
    for q in synthetic_questions():
        assert all(1 <= p <= env.store.num_pages for p in q.evidence_pages)
        assert (q.answer == "Not answerable") == (q.evidence_pages == ())


class FailingOnce(FixedRetriever):
    """``FixedRetriever`` whose ``fail_on``-th search (0-based) finds the retrieval service down."""

    def __init__(self, scores, fail_on):
        super().__init__(scores)
        self.calls, self.fail_on = 0, fail_on

    def search(self, query, k):
        self.calls += 1
        if self.calls - 1 == self.fail_on:
            raise RetrievalUnavailable("connection", "nothing listens")
        return super().search(query, k)


def test_marks_on_a_retried_search_are_recorded():
    """A refine after a failed search (round 1's) updated the beliefs with its marks but recorded no event: the
    beliefs moved where no feedback or beliefs event said, and the rewards never saw those marks."""
    env = DocMemoEnv(retriever=EveryName(FailingOnce([0.1 * (i % 5) for i in range(20)], fail_on=1)))
    _, info = env.reset(seed=0)
    page = last(info, "candidates")["pages"][0]
    env.step(turn(f"<select>{page}</select>"))
    obs, *_, info = env.step(turn("<refine><query>q</query></refine>"))
    assert (
        "Retrieval is unavailable" in obs["text"] and last(info, "retrieval_error")["reason"] == "connection"
    )
    obs, _, term, trunc, info = env.step(
        turn(f"<refine><query>q2</query><irrelevant>{page}</irrelevant></refine>")
    )
    assert not (term or trunc) and "Candidate pages" in obs["text"]
    feedback = last(info, "feedback")
    assert (feedback["round"], feedback["query"], feedback["irrelevant"]) == (1, "q2", [page])
    after = last(info, "beliefs")["means"]
    assert (
        after == last(info, "candidates")["means"]
        and after[page - 1] < events_of(info["events"], "beliefs")[0]["means"][page - 1]
    )
