"""The shared turn loop (``ragym.envs.turns.TurnEnv``): what it records, where it cuts, what it tells the policy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from ragym.envs import events as ev
from ragym.envs.events import events_of
from ragym.envs.turns import LAST_TURN_NOTICE, Outcome, ParseError, TurnEnv


@dataclass(frozen=True)
class Config:
    max_turns: int = 3
    last_turn_notice: bool = True
    max_obs_chars: int = 1000


@dataclass
class Episode:
    turn: int = 0
    done: bool = False
    events: list[dict[str, Any]] = field(default_factory=list)


class Echo(TurnEnv):
    """``say X`` shows X, ``stop`` ends the episode, anything else does not parse."""

    forced_answer = True

    def __init__(self, **config: Any) -> None:
        self.config = Config(**config)
        self.episode: Episode | None = None
        self.ended: list[tuple[bool, int]] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self.episode = Episode()
        return {"text": "start", "images": ()}, self._info()

    def _episode(self) -> Episode:
        if self.episode is None:
            raise RuntimeError("call reset() first")
        return self.episode

    def _parse(self, action: Any) -> Any:
        if action == "stop":
            return action
        if isinstance(action, str) and action.startswith("say "):
            return action[4:]
        return ParseError("no_action", "say something")

    def _act(self, action: Any, turn: int) -> Outcome:
        if action == "stop":
            self._episode().events.append(ev.answer(turn, "bye"))
            return Outcome("bye", terminated=True)
        return Outcome(action)

    def _action_kind(self, parsed: Any) -> str:
        return "invalid" if isinstance(parsed, ParseError) else "stop" if parsed == "stop" else "say"

    def _malformed(self, error: ParseError, turn: int) -> Outcome:
        return Outcome(f"error: {error.message}")

    def _notices_last_turn(self) -> bool:
        return self.config.last_turn_notice

    def _end(self, outcome: Outcome, turn: int) -> None:
        self.ended.append((outcome.truncated, turn))

    def _info(self) -> dict[str, Any]:
        return {"events": list(self._episode().events)}


def test_each_turn_records_its_action_and_a_malformed_one_its_format_error() -> None:
    env = Echo(max_turns=5)
    env.reset()
    obs, reward, terminated, truncated, info = env.step("say hi")
    assert (obs["text"], reward, terminated, truncated) == ("hi", 0.0, False, False)
    obs, *_, info = env.step("hum")
    assert obs["text"] == "error: say something"
    assert info["events"] == [
        ev.action(0, "say", True),
        ev.action(1, "invalid", False),
        ev.format_error(1, "no_action"),
    ]
    *_, terminated, truncated, info = env.step("stop")
    assert terminated and not truncated and env.ended == [(False, 2)]
    assert info["events"][-2:] == [ev.action(2, "stop", True), ev.answer(2, "bye")]
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step("say more")


def test_the_last_turn_is_announced_and_the_cut_forces_an_empty_answer() -> None:
    env = Echo(max_turns=3)
    env.reset()
    assert LAST_TURN_NOTICE not in env.step("say a")[0]["text"]
    obs, *_ = env.step("say b")  # two turns played, one left
    assert obs["text"] == f"b\n{LAST_TURN_NOTICE}"
    obs, _, terminated, truncated, info = env.step("say c")
    assert truncated and not terminated and obs["text"] == "c" and env.ended == [(True, 2)]
    assert info["events"][-2:] == [ev.truncated(2, "max_turns"), ev.answer(2, "", forced=True)]
    assert len(events_of(info["events"], "action")) == 3


def test_an_env_without_the_notice_or_a_forced_answer_is_only_cut() -> None:
    env = Echo(max_turns=2, last_turn_notice=False)
    env.forced_answer = False
    env.reset()
    assert env.step("say a")[0]["text"] == "a"
    *_, truncated, info = env.step("say b")
    assert truncated and info["events"][-1] == ev.truncated(1, "max_turns")
    assert not events_of(info["events"], "answer")


def test_the_loop_keeps_every_observation_within_max_obs_chars_and_records_the_cut() -> None:
    env = Echo(max_turns=5, max_obs_chars=20)
    env.reset()
    obs, *_, info = env.step("say " + "z" * 30)
    assert obs["text"] == "z" * 13 + "… [cut]"
    assert events_of(info["events"], "observation_cut") == [ev.observation_cut(0, "tail", 10)]
    obs, *_, info = env.step("say " + "z" * 20)  # exactly the bound: unchanged, nothing recorded
    assert obs["text"] == "z" * 20 and len(events_of(info["events"], "observation_cut")) == 1
