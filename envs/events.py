"""The event vocabulary every environment shares, the field checks every event constructor uses, and the
registry of event kinds; rewards and metrics read nothing but events.

Every event is a JSON-serialisable dict with at least ``type`` and ``turn`` (0-based index of the policy
turn that caused it; events emitted by ``reset`` carry ``turn`` -1). Events travel from the env through
verl's ``extra_fields`` to the reward, and are saved in episode jsonl files, so they hold only plain data
(str, int, float, bool, None, list, dict).

Each event kind has one constructor; it checks the field types and returns the plain dict, so the schema is
checked in one place. The kinds every env records (actions, format errors, truncation, answers, ...) are made
here; an env's own kinds are made in its package's ``events`` module (``ragym.envs.kbvqa.events``, ...), which
declares them with ``register_event_kinds``. Environments, synthetic fixtures and tests build events only
through these constructors.
"""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral, Real
from typing import Any, Literal, overload

Event = dict[str, Any]
"""One event: plain JSON data with ``type`` and ``turn``."""

_KINDS: set[str] = set()


def register_event_kinds(*kinds: str) -> None:
    """Declare the event ``type`` values an env's constructors make; a kind declared twice is an error."""
    taken = sorted(set(kinds) & _KINDS)
    if taken:
        raise ValueError(f"event kinds {taken} are already registered")
    _KINDS.update(kinds)


def registered_event_kinds() -> frozenset[str]:
    """Every event ``type`` some registered constructor makes."""
    return frozenset(_KINDS)


def events_of(events: list[Event], kind: str) -> list[Event]:
    """The events of one type, in order."""
    return [e for e in events if e["type"] == kind]


# ----- field checks (a bad field is an env bug: the error names the event and the field) ---------------
def int_field(kind: str, name: str, value: Any, minimum: int | None = None) -> int:
    """``value`` as a plain int (numpy ints included, bools refused), at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{kind} event: {name} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{kind} event: {name} must be >= {minimum}, got {value}")
    return int(value)


def float_field(kind: str, name: str, value: Any) -> float:
    """``value`` as a plain float (any real number but a bool)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{kind} event: {name} must be a number, got {value!r}")
    return float(value)


@overload
def str_field(kind: str, name: str, value: Any, optional: Literal[False] = False) -> str: ...


@overload
def str_field(kind: str, name: str, value: Any, optional: bool) -> str | None: ...


def str_field(kind: str, name: str, value: Any, optional: bool = False) -> str | None:
    """``value``, a string (or None when ``optional``)."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise TypeError(
            f"{kind} event: {name} must be a string{' or None' if optional else ''}, got {value!r}"
        )
    return value


def bool_field(kind: str, name: str, value: Any) -> bool:
    """``value``, a bool (no truthy stand-ins)."""
    if not isinstance(value, bool):
        raise TypeError(f"{kind} event: {name} must be a bool, got {value!r}")
    return value


def str_list(kind: str, name: str, values: Sequence[Any], optional: bool = False) -> list[str | None]:
    """``values`` as a list of strings (None allowed when ``optional``)."""
    return [
        str_field(kind, f"{name}[{i}]", v, optional) for i, v in enumerate(list_field(kind, name, values))
    ]


def int_list(kind: str, name: str, values: Sequence[Any]) -> list[int]:
    """``values`` as a list of plain ints."""
    return [int_field(kind, f"{name}[{i}]", v) for i, v in enumerate(list_field(kind, name, values))]


def float_list(kind: str, name: str, values: Sequence[Any]) -> list[float]:
    """``values`` as a list of plain floats."""
    return [float_field(kind, f"{name}[{i}]", v) for i, v in enumerate(list_field(kind, name, values))]


def list_field(kind: str, name: str, values: Any) -> Sequence[Any]:
    """``values``, a sized sequence that is not a string, bytes or dict (what the list checks walk)."""
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__"):
        raise TypeError(f"{kind} event: {name} must be a list, got {values!r}")
    return values


def make_event(event_type: str, turn: int, /, **fields: Any) -> Event:
    """The event dict of ``event_type`` at ``turn`` (-1: emitted by ``reset``) with its checked ``fields``."""
    return {"type": event_type, "turn": int_field(event_type, "turn", turn, minimum=-1), **fields}


# ===== Shared kinds (every env) =========================================================================
register_event_kinds(
    "action",
    "format_error",
    "protocol_violation",
    "truncated",
    "answer",
    "retrieval_error",
    "episode_error",
    "observation_cut",
)


def action(turn: int, kind: str, well_formed: bool) -> Event:
    """One per policy turn: the parsed action's ``kind`` (env-specific, ``invalid`` when unparsable)."""
    return make_event(
        "action",
        turn,
        kind=str_field("action", "kind", kind),
        well_formed=bool_field("action", "well_formed", well_formed),
    )


def format_error(turn: int, reason: str) -> Event:
    """The turn could not be parsed; ``reason`` is a short machine-readable code (the parser's)."""
    return make_event("format_error", turn, reason=str_field("format_error", "reason", reason))


def protocol_violation(turn: int, reason: str, **where: Any) -> Event:
    """A well-formed action the protocol forbids (it changes no state); ``where`` says where it applied.

    KB-VQA's ``where`` keys: ``image``, ``batch_id``, ``entity``, ``decision``; DocMemo's: ``pages``.
    """
    checks = {
        "image": int_field,
        "batch_id": int_field,
        "entity": _optional_str,
        "decision": str_field,
        "pages": int_list,
    }
    unknown = set(where) - set(checks)
    if unknown:
        raise TypeError(f"protocol_violation event: unknown fields {sorted(unknown)}")
    fields = {k: checks[k]("protocol_violation", k, v) for k, v in where.items()}
    reason = str_field("protocol_violation", "reason", reason)
    return make_event("protocol_violation", turn, reason=reason, **fields)


def _optional_str(kind: str, name: str, value: Any) -> str | None:
    return str_field(kind, name, value, optional=True)


def truncated(
    turn: int, reason: str, observation_tokens: int | None = None, visual_tokens: int | None = None
) -> Event:
    """A budget ended the episode (``max_turns``, ``max_response_length``, ``generated_vision_token``, ...).

    When an observation the env served did not fit the response length, the agent loop records its size:
    ``observation_tokens`` (text and images) and ``visual_tokens`` (its images' share, set by the recipe's image
    budget), so a truncation the budget caused is told apart from the policy's own (``None`` otherwise).
    """
    fields: dict[str, Any] = {}
    if observation_tokens is not None:
        fields["observation_tokens"] = int_field("truncated", "observation_tokens", observation_tokens, 0)
        fields["visual_tokens"] = int_field("truncated", "visual_tokens", visual_tokens or 0, 0)
    return make_event("truncated", turn, reason=str_field("truncated", "reason", reason), **fields)


def answer(turn: int, text: str, forced: bool = False) -> Event:
    """The final answer; ``forced`` when the truncation rule produced it (KB-VQA: the empty string)."""
    return make_event(
        "answer", turn, text=str_field("answer", "text", text), forced=bool_field("answer", "forced", forced)
    )


def retrieval_error(turn: int, retriever: str, reason: str, detail: str) -> Event:
    """A search got no answer from the retrieval service (the policy was told retrieval is unavailable).

    ``reason``: ``timeout``, ``connection``, ``server_error`` or ``circuit_open`` (``ragym.envs.retrieval.service.client``).
    """
    return make_event(
        "retrieval_error",
        turn,
        retriever=str_field("retrieval_error", "retriever", retriever),
        reason=str_field("retrieval_error", "reason", reason),
        detail=str_field("retrieval_error", "detail", detail),
    )


def episode_error(turn: int, stage: str, error: str) -> Event:
    """The env raised and the episode ended there (a missing file, a dead service): recorded, not fatal.

    ``stage``: ``reset`` (the env could not be built or reset; ``turn`` -1) or ``step`` (``turn`` is the policy
    turn the env could not take); ``error``: the exception's type and first line. The agent loop records it.
    """
    if stage not in ("reset", "step"):
        raise ValueError(f"episode_error event: stage must be reset or step, got {stage!r}")
    return make_event("episode_error", turn, stage=stage, error=str_field("episode_error", "error", error))


OBSERVATION_PARTS = ("tail", "memory", "documents", "passages")
"""What an ``observation_cut`` shortened: ``tail`` the text's end (any env), ``memory`` DocMemo's episodic memory,
``documents`` MEMORA's candidate texts, ``passages`` KB-VQA's SearchText passages."""


def observation_cut(turn: int, part: str, num_chars: int, rounds: Sequence[int] = ()) -> Event:
    """An observation shortened to fit ``max_obs_chars`` (``ragym.envs.observations``): which ``part``
    (``OBSERVATION_PARTS``; DocMemo's ``memory`` names the 0-based ``rounds`` of episodic memory it shortened),
    ``num_chars`` characters shorter than built."""
    if part not in OBSERVATION_PARTS:
        raise ValueError(f"observation_cut event: part must be one of {OBSERVATION_PARTS}, got {part!r}")
    if (part == "memory") != bool(rounds):
        raise ValueError(
            "observation_cut event: a memory cut, and only a memory cut, names the rounds it shortened"
        )
    return make_event(
        "observation_cut",
        turn,
        part=part,
        num_chars=int_field("observation_cut", "num_chars", num_chars, minimum=1),
        rounds=int_list("observation_cut", "rounds", rounds),
    )
