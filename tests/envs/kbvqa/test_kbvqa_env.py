"""KB-VQA env: scripted episodes for every action, paging, Rej_max, the boundary prompt, T_max, multi-image."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium
import numpy as np
import pandas as pd
import pytest
from gymnasium.utils.env_checker import check_env

from ragym import envs
from ragym.envs.events import events_of
from ragym.envs.kbvqa.actions import Answer, Reject, Rerank, SearchImage, SearchText, format_action
from ragym.envs.kbvqa.env import KBVQAEnv
from ragym.envs.kbvqa.kb import load_kb
from ragym.envs.kbvqa.prompts import LAST_TURN_NOTICE, REJECT_LINE
from ragym.envs.metrics import episode_metrics

SEARCH1 = format_action(SearchImage(1))
REJECT = format_action(Reject())


def rows(kb: Path, kind: str) -> list[dict]:
    """Env options of the KB's rows of one question type."""
    frame = pd.concat([pd.read_parquet(kb / "data" / f"{s}.parquet") for s in ("train", "test")])
    options = [json.loads(e["env_options"]) for e in frame["extra_info"]]
    return [o for o in options if o["question_type"] == kind]


def env_for(kb: Path, **kwargs) -> KBVQAEnv:
    return envs.make_env("KBVQA-v0", kb_dir=str(kb), **kwargs)


def names_in(text: str) -> list[str]:
    return [
        line.split("<image> ", 1)[1].split(" (signature")[0]
        for line in text.splitlines()
        if "<image> " in line
    ]


def test_check_env_passes(tiny_kb: Path) -> None:
    check_env(gymnasium.make("KBVQA-v0", kb_dir=str(tiny_kb)).unwrapped, skip_render_check=True)


def test_make_with_no_arguments_builds_the_builtin_kb() -> None:
    env = gymnasium.make("KBVQA-v0")
    obs, info = env.reset(seed=0)
    assert obs["text"].count("<image>") == len(obs["images"]) >= 1
    assert env.unwrapped.stop_strings == ("</search_call>", "</rerank>", "</answer>")
    assert "SearchImage(j)" in env.unwrapped.system_prompt
    # reset records only the task: the image count and the limits the episode runs with.
    [task] = info["events"]
    assert task["type"] == "task" and task["turn"] == -1 and task["num_images"] == len(obs["images"])
    assert (task["max_rejections"], task["candidates_per_batch"], task["max_turns"]) == (2, 5, 8)


def test_seeded_reset_and_scripted_rollouts_are_deterministic(tiny_kb: Path) -> None:
    def rollout(seed: int) -> list:
        env = env_for(tiny_kb)
        obs, _ = env.reset(seed=seed)
        out = [obs["text"], [im.tobytes() for im in obs["images"]]]
        for turn in (
            SEARCH1,
            REJECT,
            format_action(SearchText(("first recorded",))),
            format_action(Answer("x")),
        ):
            obs, *_, info = env.step(turn)
            out.append(obs["text"])
        return out + [info["events"]]

    assert rollout(5) == rollout(5)
    assert any(rollout(5)[0] != rollout(s)[0] for s in range(6, 12))


def test_paging_is_exact_and_capped_at_rej_max_plus_one_batches(tiny_kb: Path) -> None:
    option = rows(tiny_kb, "single")[0]
    env = env_for(tiny_kb)
    env.reset(options=option)
    ranking = list(load_kb(tiny_kb).candidate_retriever().rankings[str(tiny_kb / option["query_images"][0])])
    served = []
    for page_no in range(3):
        obs, *_, info = env.step(SEARCH1)
        batch = events_of(info["events"], "search_image")[-1]
        assert batch["offset"] == 5 * page_no and len(obs["images"]) == 5
        served += batch["candidates"]
    assert served == ranking[:15]  # non-overlapping, no gaps, in ranking order
    obs, *_, info = env.step(SEARCH1)
    # Three batches served without one Reject: the prompt states the real count, not Rej_max.
    assert "Rejection limit reached for Image 1 (0 rejections, 3 batches served)" in obs["text"]
    assert obs["images"] == ()
    assert events_of(info["events"], "boundary")[-1] == {
        "type": "boundary",
        "turn": 3,
        "image": 1,
        "rejections": 0,
    }


@pytest.mark.parametrize("max_rejections", [0, 1, 2, 3])
def test_reject_serves_next_batch_until_rej_max_then_boundary(tiny_kb: Path, max_rejections: int) -> None:
    """Algorithm S1, lines 14-20: below the limit a Reject serves a batch and counts; at RejCount = Rej_max it
    brings the boundary prompt and does not count (Table 7: 0 rejections at Rej_max = 0)."""
    env = env_for(tiny_kb, max_rejections=max_rejections, max_turns=10)
    env.reset(options=rows(tiny_kb, "single")[1])
    env.step(SEARCH1)
    for counted in range(1, max_rejections + 1):  # below the limit
        obs, *_, info = env.step(REJECT)
        assert obs["text"].startswith("Candidates for Image 1")
        assert env.state.rejections[1] == counted
        assert events_of(info["events"], "verification")[-1]["at_limit"] is False
    obs, *_, info = env.step(REJECT)  # at the limit
    assert env.state.rejections[1] == max_rejections
    expected = (
        f"Rejection limit reached for Image 1 ({max_rejections} rejections, {max_rejections + 1} batches"
    )
    assert obs["text"].startswith(expected) and obs["images"] == ()
    assert len(events_of(info["events"], "search_image")) == max_rejections + 1
    decisions = events_of(info["events"], "verification")
    assert [d["decision"] for d in decisions] == ["reject"] * (max_rejections + 1)
    assert [d["at_limit"] for d in decisions] == [False] * max_rejections + [True]
    assert [d["correct"] for d in decisions] == [not d["gold_in_batch"] for d in decisions]
    assert events_of(info["events"], "boundary") == [
        {"type": "boundary", "turn": max_rejections + 1, "image": 1, "rejections": max_rejections}
    ]
    metrics = episode_metrics("KBVQA-v0", info["events"])
    assert (metrics["rejections"], metrics["rejects_at_limit"]) == (max_rejections, 1.0)
    # The last batch had its decision: another Reject changes nothing and is never counted.
    obs, *_, info = env.step(REJECT)
    assert obs["text"].startswith("Invalid action") and env.state.rejections[1] == max_rejections
    assert episode_metrics("KBVQA-v0", info["events"])["rejections"] == max_rejections


def test_a_reject_after_batches_paged_by_search_image_is_a_normal_rejection(tiny_kb: Path) -> None:
    """Algorithm S1 checks RejCount alone: three SearchImage calls (the Rej_max + 1 = 3 batches the cap allows)
    and no Reject leave RejCount at 0, so the Reject of the third batch is counted and paid; with the batch cap
    reached it brings the boundary prompt. Until issue #46 it was treated as at the limit, unpaid."""
    from ragym.rewards import Episode, get_reward

    env = env_for(tiny_kb, max_rejections=2)
    option = rows(tiny_kb, "single")[0]
    env.reset(options=option)
    for _ in range(3):
        env.step(SEARCH1)
    obs, *_, info = env.step(REJECT)
    assert obs["text"].startswith("Rejection limit reached for Image 1 (1 rejections, 3 batches served)")
    decision = events_of(info["events"], "verification")[-1]
    assert (decision["at_limit"], decision["batch_id"], env.state.rejections[1]) == (False, 2, 1)
    assert len(events_of(info["events"], "search_image")) == 3  # the cap still bounds what is served
    metrics = episode_metrics("KBVQA-v0", info["events"])
    assert (metrics["rejections"], metrics["rejects_at_limit"]) == (1.0, 0.0)
    # The gold entity is not in the third batch (candidates 11-15), so the Reject is correct and pays delta.
    assert not decision["gold_in_batch"]
    episode = Episode("kbvqa", [SEARCH1] * 3 + [REJECT], info["events"], ["x"])
    assert get_reward("verification")(episode, delta=0.2) == pytest.approx(0.2)
    # A second Reject of the image (RejCount 1 < 2, no batch left to decide on) is not a decision at all.
    obs, *_, info = env.step(REJECT)
    assert obs["text"].startswith("Invalid action") and env.state.rejections[1] == 1


def test_rejects_count_towards_rej_max_whether_or_not_search_image_paged_in_between(tiny_kb: Path) -> None:
    """Rej_max = 2: SearchImage, Reject (counted, batch 2), SearchImage (batch 3), Reject (counted: RejCount 1
    < 2, cap reached so the boundary prompt)."""
    env = env_for(tiny_kb, max_rejections=2)
    env.reset(options=rows(tiny_kb, "single")[1])
    env.step(SEARCH1)
    obs, *_ = env.step(REJECT)
    assert obs["text"].startswith("Candidates for Image 1")
    env.step(SEARCH1)
    obs, *_, info = env.step(REJECT)
    assert obs["text"].startswith("Rejection limit reached for Image 1 (2 rejections, 3 batches served)")
    assert [d["at_limit"] for d in events_of(info["events"], "verification")] == [False, False]
    assert episode_metrics("KBVQA-v0", info["events"])["rejections"] == 2.0


def test_a_search_of_an_exhausted_image_changes_nothing(tiny_kb: Path) -> None:
    """SearchImage(2) when image 2's candidate list is used up is an invalid action that executes nothing: image 1,
    searched last, stays active, so the next Rerank is a decision on image 1's batch, not on image 2's."""
    option = rows(tiny_kb, "comparison")[0]
    env = env_for(
        tiny_kb, candidates_per_batch=50, max_images_per_obs=50
    )  # the tiny KB stores 50 candidates per query image
    env.reset(options=option)
    env.step(format_action(SearchImage(2)))
    first, *_ = env.step(SEARCH1)
    obs, *_, info = env.step(format_action(SearchImage(2)))
    assert obs["text"].startswith("Invalid action") and "no more candidates" in obs["text"]
    assert events_of(info["events"], "protocol_violation")[-1]["reason"] == "no_more_candidates"
    obs, *_, info = env.step(format_action(Rerank(names_in(first["text"])[0])))
    assert obs["text"].startswith("Confirmed: the entity in Image 1")
    assert [v["image"] for v in events_of(info["events"], "verification")] == [1]


def test_a_reject_when_no_candidate_is_left_is_a_counted_rejection_with_the_boundary_prompt(
    tiny_kb: Path,
) -> None:
    """A Reject of the last candidates an image has (below Rej_max) is a decision and a counted rejection, as
    Algorithm S1 counts it; no batch is left to serve, so the boundary prompt says so. It is no invalid action."""
    env = env_for(tiny_kb, candidates_per_batch=50, max_images_per_obs=50)
    env.reset(options=rows(tiny_kb, "single")[0])
    env.step(SEARCH1)
    obs, *_, info = env.step(REJECT)
    assert not obs["text"].startswith("Invalid action") and obs["images"] == ()
    assert "No more candidates exist for Image 1 (1 rejections, 1 batches served)" in obs["text"]
    assert events_of(info["events"], "protocol_violation") == []
    assert events_of(info["events"], "boundary") == [
        {"type": "boundary", "turn": 1, "image": 1, "rejections": 1}
    ]
    assert [d["at_limit"] for d in events_of(info["events"], "verification")] == [False]
    assert env.state.rejections[1] == 1
    assert episode_metrics("KBVQA-v0", info["events"])["rejections"] == 1.0


def test_without_the_reject_action_the_prompt_parser_and_task_agree(tiny_kb: Path) -> None:
    """Table 5's "w/o Reject": allow_reject=False lists no Reject, and ``Reject()`` is a format error."""
    with_reject, without = (
        env_for(tiny_kb, max_rejections=0),
        env_for(tiny_kb, max_rejections=0, allow_reject=False),
    )
    assert "Reject()" in with_reject.system_prompt and "Reject()" not in without.system_prompt
    assert without.system_prompt == with_reject.system_prompt.replace(REJECT_LINE, "")  # only that line goes
    _, info = without.reset(options=rows(tiny_kb, "single")[0])
    assert info["events"][0]["allow_reject"] is False
    without.step(SEARCH1)
    obs, *_, info = without.step(REJECT)
    assert obs["text"].startswith("Invalid action: there is no Reject()")
    assert events_of(info["events"], "action")[-1] == {
        "type": "action",
        "turn": 1,
        "kind": "invalid",
        "well_formed": False,
    }
    assert events_of(info["events"], "format_error")[-1]["reason"] == "reject_not_allowed"
    assert events_of(info["events"], "verification") == [] and events_of(info["events"], "boundary") == []
    # The batch still admits its Rerank.
    obs, *_ = without.step(format_action(Rerank(without.state.active_batch().names[0])))
    assert obs["text"].startswith("Confirmed: the entity in Image 1 is")


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"allow_reject": False}, "allow_reject=False .* needs max_rejections=0, got 2"),
        ({"allow_reject": False, "max_rejections": 1}, "needs max_rejections=0, got 1"),
        ({"allow_reject": "no", "max_rejections": 0}, "allow_reject must be true or false"),
    ],
)
def test_allow_reject_settings_that_make_no_sense_are_refused(
    tiny_kb: Path, kwargs: dict, error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        env_for(tiny_kb, **kwargs)


def _gold_name(env: KBVQAEnv) -> str | None:
    batch = env.state.active_batch()
    return batch.name_of(batch.gold_entity) if batch.gold_in_batch else None


def test_rerank_is_recorded_echoed_and_only_the_first_decision_counts(tiny_kb: Path) -> None:
    env = env_for(tiny_kb, max_rejections=5, max_turns=20)
    env.reset(options=rows(tiny_kb, "single")[2])
    obs, *_ = env.step(SEARCH1)
    while _gold_name(env) is None:
        obs, *_ = env.step(REJECT)
    gold = _gold_name(env)
    obs, *_, info = env.step(format_action(Rerank(gold)))
    assert obs["text"] == f"Confirmed: the entity in Image 1 is {gold}."
    for repeat in (format_action(Rerank(gold)), REJECT, format_action(Rerank(gold.upper()))):
        obs, *_, info = env.step(repeat)
        assert obs["text"].startswith("Invalid action")
    verifications = events_of(info["events"], "verification")
    assert len(verifications) == 1 + len([v for v in verifications if v["decision"] == "reject"])
    assert verifications[-1]["decision"] == "rerank" and verifications[-1]["correct"] is True
    violations = events_of(info["events"], "protocol_violation")
    assert [v["reason"] for v in violations] == ["second_decision_on_batch"] * 3


def test_rerank_of_a_wrong_candidate_is_incorrect(tiny_kb: Path) -> None:
    env = env_for(tiny_kb)
    env.reset(options=rows(tiny_kb, "single")[0])
    obs, *_ = env.step(SEARCH1)
    gold = _gold_name(env)
    wrong = next(n for n in names_in(obs["text"]) if n != gold)
    *_, info = env.step(format_action(Rerank(wrong)))
    decision = events_of(info["events"], "verification")[0]
    assert decision["decision"] == "rerank" and decision["correct"] is False
    assert decision["entity"] in decision["candidates"]


@pytest.mark.parametrize(
    ("turns", "reason"),
    [
        ([format_action(Rerank("Anything"))], "no_active_batch"),
        ([REJECT], "no_active_batch"),
        ([SEARCH1, format_action(Rerank("Not A Candidate"))], "unknown_entity"),
        ([format_action(SearchImage(0))], "image_out_of_range"),
        ([format_action(SearchImage(2))], "image_out_of_range"),
        ([format_action(SearchText(tuple(f"q{i}" for i in range(6))))], "too_many_queries"),
    ],
)
def test_forbidden_actions_are_violations_that_use_a_turn(
    tiny_kb: Path, turns: list[str], reason: str
) -> None:
    env = env_for(tiny_kb)
    env.reset(options=rows(tiny_kb, "single")[0])
    for turn in turns:
        obs, reward, terminated, truncated, info = env.step(turn)
    assert obs["text"].startswith("Invalid action") and not terminated and not truncated
    assert events_of(info["events"], "protocol_violation")[-1]["reason"] == reason
    assert info["turn"] == len(turns)


def test_search_text_returns_top_k_passages_per_query(tiny_kb: Path) -> None:
    env = env_for(tiny_kb, text_top_k=2)
    env.reset(seed=0)
    obs, *_, info = env.step(format_action(SearchText(("first recorded", "catalogued by"))))
    event = events_of(info["events"], "search_text")[0]
    assert event["queries"] == ["first recorded", "catalogued by"] and event["num_passages"] == 4
    assert obs["text"].count("Results for") == 2 and obs["images"] == ()


def test_answer_terminates(tiny_kb: Path) -> None:
    env = env_for(tiny_kb)
    env.reset(seed=1)
    obs, _, terminated, truncated, info = env.step(format_action(Answer("Paris")))
    assert terminated and not truncated
    assert events_of(info["events"], "answer") == [
        {"type": "answer", "turn": 0, "text": "Paris", "forced": False}
    ]
    with pytest.raises(RuntimeError):
        env.step(SEARCH1)


@pytest.mark.parametrize("max_turns", [1, 3, 8])
def test_turn_limit_truncates_with_the_forced_answer_rule(tiny_kb: Path, max_turns: int) -> None:
    env = env_for(tiny_kb, max_turns=max_turns)
    env.reset(seed=2)
    for turn in range(max_turns):
        obs, _, terminated, truncated, info = env.step("not an action")
        assert not terminated
        assert truncated == (turn == max_turns - 1)
        assert (LAST_TURN_NOTICE in obs["text"]) == (turn == max_turns - 2)
    assert events_of(info["events"], "truncated") == [
        {"type": "truncated", "turn": max_turns - 1, "reason": "max_turns"}
    ]
    assert events_of(info["events"], "answer") == [
        {"type": "answer", "turn": max_turns - 1, "text": "", "forced": True}
    ]
    assert len(events_of(info["events"], "format_error")) == max_turns


def test_with_one_turn_the_first_observation_asks_for_the_answer(tiny_kb: Path) -> None:
    """T_max = 1: the task is the observation before the last turn, so it carries the last-turn notice."""
    obs, _ = env_for(tiny_kb, max_turns=1).reset(seed=2)
    assert obs["text"].endswith(LAST_TURN_NOTICE)
    obs, _ = env_for(tiny_kb, max_turns=1, last_turn_notice=False).reset(seed=2)
    assert LAST_TURN_NOTICE not in obs["text"]
    obs, _ = env_for(tiny_kb, max_turns=2).reset(seed=2)
    assert LAST_TURN_NOTICE not in obs["text"]


def test_multi_image_questions_page_and_verify_per_image(tiny_kb: Path) -> None:
    option = rows(tiny_kb, "comparison")[0]
    env = env_for(tiny_kb)
    obs, _ = env.reset(options=option)
    assert len(obs["images"]) == 2 and "Image 2: <image>" in obs["text"]
    env.step(SEARCH1)
    obs, *_ = env.step(format_action(SearchImage(2)))
    assert obs["text"].startswith("Candidates for Image 2")
    *_, info = env.step(REJECT)  # applies to image 2, the active one
    obs, *_, info = env.step(SEARCH1)  # image 1 continues where it stopped
    batches = events_of(info["events"], "search_image")
    assert [(b["image"], b["offset"]) for b in batches] == [(1, 0), (2, 0), (2, 5), (1, 5)]
    assert [b["gold_entity"] for b in batches] == [option["gold_entities"][i - 1] for i in (1, 2, 2, 1)]
    assert events_of(info["events"], "verification")[0]["image"] == 2


def test_gold_data_never_reaches_observations(tiny_kb: Path) -> None:
    env = env_for(tiny_kb, max_turns=6)
    for option in rows(tiny_kb, "single")[:5] + rows(tiny_kb, "comparison")[:3]:
        obs, _ = env.reset(options=option)
        texts = [obs["text"]]
        for turn in (SEARCH1, REJECT, REJECT, format_action(SearchText(("recorded",)))):
            texts.append(env.step(turn)[0]["text"])
        assert not any("E0" in t for t in texts)  # entity ids (gold or not) are never shown
        assert not any(a in texts[0] for a in option["answers"])


def test_live_flat_search_serves_the_precomputed_lists(tiny_kb: Path) -> None:
    option = rows(tiny_kb, "single")[3]
    served = {}
    for source in ("precomputed", "live"):
        env = env_for(tiny_kb, candidate_source=source)
        env.reset(options=option)
        env.step(SEARCH1)
        *_, info = env.step(SEARCH1)
        served[source] = [b["candidates"] for b in events_of(info["events"], "search_image")]
    assert served["live"] == served["precomputed"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"query_images": ["queries/000/Q000000.png"]}, "lack"),
        ({"question": "q", "query_images": []}, "at least one"),
        (
            {"question": "q", "query_images": ["queries/000/Q000000.png"], "gold_entities": ["a", "b"]},
            "gold_entities",
        ),
        ({"question": "q", "query_images": ["nowhere.png"]}, "precomputed candidate list"),
    ],
)
def test_bad_options_are_clear_errors(tiny_kb: Path, options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        env_for(tiny_kb).reset(options=options)


def test_observations_are_fresh_arrays(tiny_kb: Path) -> None:
    env = env_for(tiny_kb)
    obs, _ = env.reset(seed=0)
    again, _ = env.reset(seed=0)
    assert not np.shares_memory(obs["images"][0], again["images"][0])
    obs["images"][0][:] = 0  # the caller may write to what it receives
    assert env.reset(seed=0)[0]["images"][0].any()


def test_rerank_by_index_is_off_by_default(tiny_kb: Path) -> None:
    env = env_for(tiny_kb, candidates_per_batch=3)
    env.reset(options=rows(tiny_kb, "single")[0])
    env.step(SEARCH1)
    _, *_, info = env.step("<reason>r</reason><rerank>1</rerank>")
    assert events_of(info["events"], "protocol_violation")[-1]["reason"] == "unknown_entity"


def test_the_paper_env_takes_no_demo_aids(tiny_kb: Path) -> None:
    with pytest.raises(TypeError, match="visual_check"):
        env_for(tiny_kb, visual_check=True)
    env = env_for(tiny_kb, candidates_per_batch=3)
    obs, _ = env.reset(options=rows(tiny_kb, "single")[0])
    batch, *_ = env.step(SEARCH1)
    assert "signature" not in obs["text"] + batch["text"] and "Visual check" not in batch["text"]
