"""The turn loop every ragym env shares (``TurnEnv.step``) and the one parse-error type of every env's grammar.

An env writes its actions (``_parse``, ``_act``), its state and its events; the loop records the ``action`` and
``format_error`` events, counts turns, cuts the episode at ``config.max_turns`` with a ``truncated`` event (and a
forced empty answer where the env has one), adds the last-turn notice, and builds the observation within
``config.max_obs_chars`` (``ragym.envs.observations``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol

import gymnasium
import numpy as np

from ragym.envs import events as ev
from ragym.envs.observations import bound_text

LAST_TURN_NOTICE = "This is your last turn: give your answer now with <answer>...</answer>."
"""Added to the observation before the last turn by envs that tell the policy to answer now."""


@dataclass(frozen=True)
class ParseError:
    """Why a turn is not a well-formed action: a machine-readable ``reason`` and a message for the policy."""

    reason: str
    """The ``format_error`` event's reason (``oversized``, ``no_action``, ... per env grammar)."""
    message: str = ""
    """Plain-language explanation an env may show the policy (empty where the env words it from ``reason``)."""


@dataclass(frozen=True)
class Outcome:
    """What one turn did: the next observation's text and images, and whether the episode ended."""

    text: str
    """The observation's text (before the loop adds the last-turn notice)."""
    images: Sequence[Any] = ()
    """The observation's images (arrays)."""
    terminated: bool = False
    """The episode ended by the rules (an answer, a stop)."""
    truncated: bool = False
    """The episode was cut (the env's own bound, e.g. DocMemo's rounds; the loop adds ``max_turns``)."""

    @property
    def ended(self) -> bool:
        """Whether the episode is over after this turn."""
        return self.terminated or self.truncated


class Episode(Protocol):
    """What the loop reads and writes of an episode: its turn count, whether it is over, and its events."""

    turn: int
    done: bool
    events: list[dict[str, Any]]


class TurnEnv(gymnasium.Env):
    """Base of ragym's envs: ``step`` is the shared turn loop; a subclass implements the underscored hooks."""

    action_kinds: ClassVar[Mapping[type, str]] = {}
    """The ``action`` event's ``kind`` per action type (else the type's name in lower case)."""
    forced_answer: ClassVar[bool] = False
    """Record an empty ``answer`` with ``forced=True`` when ``max_turns`` cuts the episode (it scores as none)."""

    config: Any  # the env's frozen config; the loop reads its ``max_turns`` and ``max_obs_chars``

    def step(self, action: str):
        """Parse and execute one policy turn; malformed or forbidden turns are an observation and an event."""
        episode = self._episode()
        if episode.done:
            raise RuntimeError(
                f"{type(self).__name__}: the episode is over or not started; call reset() first"
            )
        turn = episode.turn
        parsed = self._parse(action)
        well_formed = not isinstance(parsed, ParseError)
        episode.events.append(ev.action(turn, self._action_kind(parsed), well_formed))
        if isinstance(parsed, ParseError):
            episode.events.append(ev.format_error(turn, parsed.reason))
            outcome = self._malformed(parsed, turn)
        else:
            outcome = self._act(parsed, turn)
        episode.turn = turn + 1
        max_turns = self.config.max_turns
        if not outcome.ended and episode.turn >= max_turns:
            episode.events.append(ev.truncated(turn, "max_turns"))
            if self.forced_answer:
                episode.events.append(ev.answer(turn, "", forced=True))
            outcome = self._out_of_turns(replace(outcome, truncated=True), turn)
        elif not outcome.ended and (notice := self._notice_after(turn)):
            outcome = replace(outcome, text=outcome.text + notice)
        if outcome.ended:
            self._end(outcome, turn)
        episode.done = outcome.ended
        return self._observation(outcome), 0.0, outcome.terminated, outcome.truncated, self._info()

    # ----- what an env writes ------------------------------------------------------------------------
    def _episode(self) -> Episode:
        """The running episode (an error before ``reset()``)."""
        raise NotImplementedError

    def _parse(self, action: Any) -> Any:
        """The typed action of the policy's turn, else a ``ParseError``."""
        raise NotImplementedError

    def _act(self, action: Any, turn: int) -> Outcome:
        """Execute a well-formed action of turn ``turn``, recording its events."""
        raise NotImplementedError

    def _malformed(self, error: ParseError, turn: int) -> Outcome:
        """The observation after a turn that did not parse (its events are recorded already)."""
        raise NotImplementedError

    def _info(self) -> dict[str, Any]:
        """The step's ``info`` (``events`` at least)."""
        raise NotImplementedError

    # ----- what an env may change --------------------------------------------------------------------
    def _action_kind(self, parsed: Any) -> str:
        """The ``action`` event's ``kind`` of a parsed turn (``invalid`` for a ``ParseError``)."""
        if isinstance(parsed, ParseError):
            return "invalid"
        return self.action_kinds.get(type(parsed), type(parsed).__name__.lower())

    def _notices_last_turn(self) -> bool:
        """Whether the observation before the last turn tells the policy to answer now (no notice by default)."""
        return False

    def _notice_after(self, turn: int) -> str:
        """What the loop adds to the text of turn ``turn`` (-1: reset's) when the episode goes on: the last-turn
        notice where the next turn is the last and the env gives one, else nothing (a view that shortens itself
        to fit ``max_obs_chars`` leaves room for it)."""
        if self._notices_last_turn() and turn + 1 == self.config.max_turns - 1:
            return f"\n{LAST_TURN_NOTICE}"
        return ""

    def _first_text(self, text: str) -> str:
        """The reset observation's ``text``, with the last-turn notice where the first turn is the last one."""
        return text + self._notice_after(-1)

    def _out_of_turns(self, outcome: Outcome, turn: int) -> Outcome:
        """The outcome of a turn that used the last one without ending the episode (events recorded already)."""
        return outcome

    def _end(self, outcome: Outcome, turn: int) -> None:
        """What the env does once the episode is over (e.g. a final ranking); nothing by default."""

    def _observation(self, outcome: Outcome) -> dict[str, Any]:
        """The observation of ``outcome`` (the loop counted its turn already)."""
        return self._bounded(outcome.text, outcome.images, turn=self._episode().turn - 1)

    def _bounded(
        self, text: str, images: Sequence[Any], *, turn: int, remedy: str = "raise max_obs_chars"
    ) -> dict[str, Any]:
        """The observation of ``text`` and ``images`` with the text within ``config.max_obs_chars``: a text still
        over it (the env's views shorten what they can) loses its end, an ``observation_cut`` event of ``turn``
        (-1: reset's); a cut that would drop an image placeholder raises, naming the setting and ``remedy``."""
        limit, events = self.config.max_obs_chars, self._episode().events
        text = bound_text(
            text, len(images), limit, turn=turn, events=events, env=type(self).__name__, remedy=remedy
        )
        return {"text": text, "images": tuple(np.array(im) for im in images)}
