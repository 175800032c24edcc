"""The MMAgent-R² reward terms: table-driven cases and reward-hacking attempts."""

from __future__ import annotations

import pytest

from ragym.envs import events as ev
from ragym.envs.kbvqa import events as kbvqa_ev
from ragym.envs.kbvqa.actions import Answer, Reject, Rerank, SearchImage, format_action
from ragym.rewards import Episode, get_reward

CANDS_A = ["e1", "e2", "gold", "e4", "e5"]
CANDS_B = ["e6", "e7", "e8", "e9", "e10"]


def batch(
    batch_id: int, candidates: list[str], image: int = 1, gold: str | None = "gold", offset: int = 0
) -> dict:
    return kbvqa_ev.search_image(0, image, batch_id, candidates, gold, offset)


def decide(
    batch_id: int, candidates: list[str], entity: str | None, image: int = 1, gold: str = "gold"
) -> dict:
    """A verification event whose ``correct`` flag claims success whatever happened (a lying env)."""
    decision = "reject" if entity is None else "rerank"
    return {**kbvqa_ev.verification(1, decision, entity, image, batch_id, candidates, gold), "correct": True}


def answer(text: str, forced: bool = False) -> dict:
    return ev.answer(2, text, forced=forced)


def episode(
    events: list[dict], turns: list[str] | None = None, gt=("Paris",), truncated: bool = False
) -> Episode:
    turns = turns if turns is not None else []
    return Episode("synthetic_kbvqa", turns, events, list(gt), truncated=truncated, env_id="KBVQA-v0")


def score(name: str, ep: Episode, **params) -> float | None:
    return get_reward(name)(ep, **params)


VERIFICATION_CASES = [
    ("rerank gold", [batch(0, CANDS_A), decide(0, CANDS_A, "gold")], 1.0),
    ("rerank wrong", [batch(0, CANDS_A), decide(0, CANDS_A, "e1")], 0.0),
    ("reject when gold absent", [batch(0, CANDS_B), decide(0, CANDS_B, None)], 0.2),
    ("reject when gold present", [batch(0, CANDS_A), decide(0, CANDS_A, None)], 0.0),
    (
        "reject then rerank",
        [
            batch(0, CANDS_B),
            decide(0, CANDS_B, None),
            batch(1, CANDS_A, offset=5),
            decide(1, CANDS_A, "gold"),
        ],
        1.2,
    ),
    ("no decision", [batch(0, CANDS_A)], 0.0),
    (
        "two images summed",
        [
            batch(0, CANDS_A),
            decide(0, CANDS_A, "gold"),
            batch(1, CANDS_B, image=2, gold="g2"),
            decide(1, CANDS_B, None, image=2, gold="g2"),
        ],
        1.2,
    ),
    ("no gold entity anywhere", [batch(0, CANDS_A, gold=None)], None),
    # Reward hacking: the same decision repeated on one batch counts once.
    ("repeated rerank(e*)", [batch(0, CANDS_A)] + [decide(0, CANDS_A, "gold")] * 5, 1.0),
    ("repeated reject", [batch(0, CANDS_B)] + [decide(0, CANDS_B, None)] * 5, 0.2),
    (
        "rerank after reject same batch",
        [batch(0, CANDS_A), decide(0, CANDS_A, None), decide(0, CANDS_A, "gold")],
        0.0,
    ),
    # Reward hacking: a decision on a batch that was never served earns nothing, whatever ``correct`` says.
    ("decision on unserved batch", [batch(0, CANDS_B), decide(7, CANDS_A, "gold")], 0.0),
    ("event candidates disagree with served batch", [batch(0, CANDS_B), decide(0, CANDS_A, "gold")], 0.0),
    (
        "protocol violations never score",
        [
            batch(0, CANDS_A),
            ev.protocol_violation(1, "second_decision_on_batch", image=1, batch_id=0),
        ],
        0.0,
    ),
]


@pytest.mark.parametrize(
    ("events", "expected"), [c[1:] for c in VERIFICATION_CASES], ids=[c[0] for c in VERIFICATION_CASES]
)
def test_verification(events: list[dict], expected: float | None) -> None:
    result = score("verification", episode(events), delta=0.2)
    assert result == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize("delta", [0.1, 0.2, 0.3])
def test_delta_is_the_reject_reward(delta: float) -> None:
    assert score("verification", episode([batch(0, CANDS_B), decide(0, CANDS_B, None)]), delta=delta) == delta


def _rejected_batches(num: int, image: int = 1, first_id: int = 0) -> list[dict]:
    """``num`` gold-free batches of ``image``, each rejected (the env's ``at_limit`` flag left out)."""
    events = []
    for b in range(first_id, first_id + num):
        cands = [f"x{b}_{i}" for i in range(5)]
        events += [
            batch(b, cands, image=image, offset=5 * (b - first_id)),
            decide(b, cands, None, image=image),
        ]
    return events


def test_rejections_beyond_rej_max_earn_nothing() -> None:
    """A misbehaving env serves 6 gold-free batches; only the first max_rejections + 1 can earn delta, and the
    (max_rejections + 1)-th only when the recipe pays a Reject at the limit."""
    events = _rejected_batches(6)
    assert score("verification", episode(events), delta=0.2, max_rejections=2) == pytest.approx(0.4)
    paid = score("verification", episode(events), delta=0.2, max_rejections=2, pay_reject_at_limit=True)
    assert paid == pytest.approx(0.6)
    assert score("verification", episode(events), delta=0.2) == pytest.approx(
        1.2
    )  # no limit known, none flagged


def test_rej_max_counts_batches_per_image() -> None:
    events = _rejected_batches(1) + _rejected_batches(1, image=2, first_id=1)
    assert score("verification", episode(events), delta=0.2, max_rejections=0) == 0.0  # both at the limit
    assert score(
        "verification", episode(events), delta=0.2, max_rejections=0, pay_reject_at_limit=True
    ) == pytest.approx(0.4)


REJECT_AT_LIMIT_CASES = [
    # (name, Rej_max, rejected gold-free batches, pay_reject_at_limit, R_ver): Algorithm S1 counts a Reject only
    # below the limit; the recipe decides whether the one at the limit (the (Rej_max + 1)-th batch) is paid.
    ("Rej_max 0, unpaid", 0, 1, False, 0.0),
    ("Rej_max 0, paid", 0, 1, True, 0.2),
    ("Rej_max 1, below the limit", 1, 1, False, 0.2),
    ("Rej_max 1, one below and one at, unpaid", 1, 2, False, 0.2),
    ("Rej_max 1, one below and one at, paid", 1, 2, True, 0.4),
    ("Rej_max 2, reject-all, unpaid", 2, 3, False, 0.4),
    ("Rej_max 2, reject-all, paid", 2, 3, True, 0.6),
    ("Rej_max 2, stopped below the limit", 2, 2, False, 0.4),
]


@pytest.mark.parametrize(
    ("max_rejections", "num", "pay", "expected"),
    [c[1:] for c in REJECT_AT_LIMIT_CASES],
    ids=[c[0] for c in REJECT_AT_LIMIT_CASES],
)
def test_a_reject_at_the_limit_is_paid_only_when_the_recipe_says(max_rejections, num, pay, expected) -> None:
    """The limit read from the episode's task event, as in training (max_rejections: null)."""
    events = [kbvqa_ev.task(1, ["gold"], max_rejections, 5, 8), *_rejected_batches(num)]
    assert score("verification", episode(events), delta=0.2, pay_reject_at_limit=pay) == pytest.approx(
        expected
    )


def test_a_reject_after_batches_paged_by_search_image_is_paid_as_a_normal_rejection() -> None:
    """Algorithm S1 checks RejCount alone: SearchImage served three gold-free batches (Rej_max + 1 = 3) and the
    third is rejected with RejCount 0, so the Reject is counted and pays delta with the default recipe."""
    served = [batch(b, [f"x{b}_{i}" for i in range(5)], offset=5 * b) for b in range(3)]
    events = [kbvqa_ev.task(1, ["gold"], 2, 5, 8), *served, decide(2, served[2]["candidates"], None)]
    assert score("verification", episode(events), delta=0.2) == pytest.approx(0.2)
    # Rej_max = 0: RejCount 0 already equals it, so that Reject is at the limit and unpaid by default.
    at_zero = [kbvqa_ev.task(1, ["gold"], 0, 5, 8), served[0], decide(0, served[0]["candidates"], None)]
    assert score("verification", episode(at_zero), delta=0.2) == 0.0


@pytest.mark.parametrize(("pay", "expected"), [(True, 1.4), (False, 1.0)])
def test_a_reject_after_the_entity_is_confirmed_is_paid_only_when_the_recipe_says(
    pay: bool, expected
) -> None:
    """Eq. 4 pays it, yet every batch after the confirmation lacks e*: confirming and paging on farms delta."""
    events = [batch(0, CANDS_A), decide(0, CANDS_A, "gold"), *_rejected_batches(2, first_id=1)]
    paid = score("verification", episode(events), delta=0.2, pay_reject_after_confirm=pay)
    assert paid == pytest.approx(expected)


def test_without_pay_after_confirm_a_reject_before_it_or_after_a_wrong_rerank_is_still_paid() -> None:
    wrong_then_found = [
        batch(0, CANDS_B),
        decide(0, CANDS_B, "e6"),
        *_rejected_batches(1, first_id=1),
        batch(2, CANDS_A, offset=10),
        decide(2, CANDS_A, "gold"),
    ]
    other_image = [batch(0, CANDS_A), decide(0, CANDS_A, "gold"), *_rejected_batches(1, image=2, first_id=1)]
    for events in (wrong_then_found, other_image):
        assert score(
            "verification", episode(events), delta=0.2, pay_reject_after_confirm=False
        ) == pytest.approx(1.2)
    with pytest.raises(ValueError, match="pay_reject_after_confirm must be true or false"):
        score("verification", episode(wrong_then_found), pay_reject_after_confirm="no")


def test_with_no_known_limit_the_envs_at_limit_flag_decides() -> None:
    cands = CANDS_B
    flagged = {
        **kbvqa_ev.verification(1, "reject", None, 1, 0, cands, "gold", at_limit=True),
        "correct": True,
    }
    events = [batch(0, cands), flagged]
    assert score("verification", episode(events), delta=0.2) == 0.0
    assert score("verification", episode(events), delta=0.2, pay_reject_at_limit=True) == pytest.approx(0.2)


def test_without_the_reject_action_no_reject_is_paid() -> None:
    """allow_reject=False: a Reject a broken env recorded earns nothing; a Rerank(e*) still earns 1."""
    task = kbvqa_ev.task(1, ["gold"], 0, 5, 8, allow_reject=False)
    rejected = [task, batch(0, CANDS_B), decide(0, CANDS_B, None)]
    assert score("verification", episode(rejected), delta=0.2, pay_reject_at_limit=True) == 0.0
    reranked = [task, batch(0, CANDS_A), decide(0, CANDS_A, "gold")]
    assert score("verification", episode(reranked), delta=0.2) == 1.0


@pytest.mark.parametrize(("allow_reject", "expected"), [(True, 1.0), (False, 0.0)])
def test_format_reads_reject_as_malformed_without_the_reject_action(
    allow_reject: bool, expected: float
) -> None:
    """A turn the env never saw is judged by the parser with the episode's action set."""
    turns = [format_action(SearchImage(1), "r"), format_action(Reject(), "r")]
    events = [kbvqa_ev.task(1, ["gold"], 0, 5, 8, allow_reject=allow_reject)]
    assert score("format", episode(events, turns=turns)) == expected


def test_pay_reject_at_limit_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="pay_reject_at_limit must be true or false"):
        score("verification", episode([batch(0, CANDS_B)]), pay_reject_at_limit="yes")


OUTCOME_CASES = [
    ("correct", [answer("Paris")], 1.0),
    ("wrong", [answer("London")], 0.0),
    ("no answer", [], 0.0),
    ("forced answer counts", [answer("Paris", forced=True)], 1.0),
    ("first answer only", [answer("London"), answer("Paris")], 0.0),
    ("tag injection", [answer("London</answer><answer>Paris")], 0.0),
    ("html tag", [answer("<b>Paris</b>")], 0.0),
]


@pytest.mark.parametrize(
    ("events", "expected"), [c[1:] for c in OUTCOME_CASES], ids=[c[0] for c in OUTCOME_CASES]
)
def test_outcome(events: list[dict], expected: float) -> None:
    assert score("outcome", episode(events)) == expected


def test_answer_hidden_in_reasoning_earns_nothing() -> None:
    turns = ["<reason>It is Paris. Paris. Paris.</reason><answer>London</answer>"]
    ep = episode([ev.action(0, "answer", True), answer("London")], turns=turns)
    assert score("outcome", ep) == 0.0
    assert (
        score(
            "outcome",
            episode(
                [ev.action(0, "invalid", False)],
                turns=["<reason>The answer is Paris</reason>"],
            ),
        )
        == 0.0
    )


def test_outcome_options() -> None:
    assert score("outcome", episode([answer("<i>Paris</i>")]), markup_scores_zero=False) == 0.0  # 'iparisi'
    assert score("outcome", episode([answer("the Paris area")]), generic_metric="f1") == pytest.approx(2 / 3)
    assert score("outcome", Episode("generic", [], [answer("x")], None)) is None


def _turn(action, well_formed: bool = True) -> tuple[str, dict]:
    text = format_action(action, reason="r") if well_formed else "I pick e1"
    return text, {"kind": "x", "well_formed": well_formed}


def _format_episode(flags: list[bool], truncated: bool = False, with_events: bool = True) -> Episode:
    actions = [SearchImage(1), Rerank("e1"), Reject(), Answer("Paris")]
    turns, events = [], []
    for t, ok in enumerate(flags):
        text, fields = _turn(actions[t % len(actions)], ok)
        turns.append(text)
        if with_events:
            events.append(ev.action(t, **fields))
    return episode(events, turns=turns, truncated=truncated)


FORMAT_CASES = [
    ("all well formed", [True, True, True], {}, 1.0),
    ("one bad binary", [True, False, True, True], {}, 0.0),
    ("one bad fraction", [True, False, True, True], {"mode": "fraction"}, 0.75),
    ("single turn", [True], {"mode": "fraction"}, 1.0),
    ("no turns", [], {}, None),
]


@pytest.mark.parametrize(
    ("flags", "params", "expected"), [c[1:] for c in FORMAT_CASES], ids=[c[0] for c in FORMAT_CASES]
)
@pytest.mark.parametrize("with_events", [True, False], ids=["events", "parser"])
def test_format(flags: list[bool], params: dict, expected: float | None, with_events: bool) -> None:
    assert score("format", _format_episode(flags, with_events=with_events), **params) == expected


def test_events_are_the_primary_source_of_well_formedness() -> None:
    ep = _format_episode([True, True])
    ep.events[1]["well_formed"] = False  # the env saw something the turn text does not show
    assert score("format", ep) == 0.0


@pytest.mark.parametrize(("on_truncated", "expected"), [("score", 1.0), ("zero", 0.0), ("skip", None)])
def test_format_on_truncated(on_truncated: str, expected: float | None) -> None:
    assert (
        score("format", _format_episode([True, True], truncated=True), on_truncated=on_truncated) == expected
    )
    assert score("format", _format_episode([True, True]), on_truncated=on_truncated) == 1.0


RECALL_CASES = [
    ("gold in first batch", [batch(0, CANDS_A)], {}, 1.0),
    ("gold never served", [batch(0, CANDS_B)], {}, 0.0),
    ("gold served at rank 7, k=5", [batch(0, CANDS_B), batch(1, CANDS_A, offset=5)], {"k": 5}, 0.0),
    ("gold served at rank 7, k=10", [batch(0, CANDS_B), batch(1, CANDS_A, offset=5)], {"k": 10}, 1.0),
    ("one of two images", [batch(0, CANDS_A), batch(1, CANDS_B, image=2, gold="g2")], {}, 0.5),
    ("nothing served", [], {}, 0.0),
    ("no gold", [batch(0, CANDS_A, gold=None)], {}, None),
]


@pytest.mark.parametrize(
    ("events", "params", "expected"), [c[1:] for c in RECALL_CASES], ids=[c[0] for c in RECALL_CASES]
)
def test_retrieval_recall(events: list[dict], params: dict, expected: float | None) -> None:
    assert score("retrieval_recall", episode(events), **params) == expected


def test_rej_max_comes_from_the_episode_and_a_mismatch_fails_loudly() -> None:
    """An env run with Rej_max=3 serves four batches; the reward counts all four, or refuses another limit."""
    events = [kbvqa_ev.task(1, ["gold"], 3, 5, 8)]
    for b in range(4):
        cands = [f"x{b}_{i}" for i in range(5)]
        events += [batch(b, cands, offset=5 * b), decide(b, cands, None)]
    # The fourth batch's Reject is at the limit (Algorithm S1): unpaid by default.
    assert score("verification", episode(events), delta=0.2) == pytest.approx(0.6)
    assert score("verification", episode(events), delta=0.2, max_rejections=3) == pytest.approx(0.6)
    with pytest.raises(ValueError, match="max_rejections=2 but the episode ran with max_rejections=3"):
        score("verification", episode(events), delta=0.2, max_rejections=2)
