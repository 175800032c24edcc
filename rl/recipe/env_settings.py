"""The recipe's env settings (``ragym.env``) and the turn cap checked against each env's own.

A recipe sets, once, the env settings a run trains with, e.g. Rej_max::

    ragym.env: {max_rejections: 2}

The agent loop (verl's workers, the local engine, ``ragym eval``, ``ragym budget``) passes each setting to every
row's env whose config has that field; a row prepped with another value is refused in one line (its episode is an
error episode naming the row's and the recipe's values), never run with a mix of the two.

The recipe's turn cap (``actor_rollout_ref.rollout.multi_turn.max_assistant_turns``) is checked against the
``max_turns`` of every env on the shared turn loop (``ragym.envs.turns.TurnEnv``) as its first episode starts: a
smaller cap cuts episodes before the env's last-turn notice and forced answer, which the agent loop logs once per
env and cap (a warning, not a refusal: the CPU demo's recipe caps KB-VQA's 8 turns at 6, and short test runs cap
at 1 to 4 turns).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ragym.envs.registry import config_fields
from ragym.envs.turns import TurnEnv
from ragym.rl.errors import UsageError

ENV_KEY = "ragym.env"
"""Recipe key of the env settings."""
TURN_CAP_KEY = "actor_rollout_ref.rollout.multi_turn.max_assistant_turns"
"""The agent loop's cap on policy turns per episode (verl's key)."""


@dataclass(frozen=True)
class EnvSettings:
    """Env config fields a recipe sets for every row whose env has them (null: the rows' own values)."""

    max_rejections: int | None = None
    """Rej_max: rejections per query image (KB-VQA's ``max_rejections``; MMAgent-R² trains with 2)."""

    def __post_init__(self) -> None:
        value = self.max_rejections
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{ENV_KEY}.max_rejections must be null or an int >= 0, got {value!r}")

    def env_kwargs(self) -> dict[str, Any]:
        """The settings the recipe gives (the unset ones left out)."""
        return {name: value for name, value in asdict(self).items() if value is not None}


def recipe_env_settings(config: DictConfig) -> EnvSettings:
    """``ragym.env`` of a composed recipe (no settings when absent); an unknown key is a usage error."""
    node = OmegaConf.select(config, ENV_KEY, default=None)
    values = {} if node is None else OmegaConf.to_container(node, resolve=True)
    known = {f.name for f in fields(EnvSettings)}
    if not isinstance(values, dict) or set(values) - known:
        raise UsageError(f"{ENV_KEY} takes only {sorted(known)}, got {values!r}")
    try:
        return EnvSettings(**{str(k): v for k, v in values.items()})
    except ValueError as err:
        raise UsageError(str(err)) from err


def with_env_settings(
    env_id: str, env_kwargs: dict[str, Any], settings: EnvSettings | None
) -> dict[str, Any]:
    """``env_kwargs`` plus the recipe's settings that ``env_id``'s config has; a row that sets one of them to
    another value is an error naming both (rows prepped for another setting are refused, not mixed in)."""
    given = {} if settings is None else settings.env_kwargs()
    own = {k: v for k, v in given.items() if k in config_fields(env_id)}
    clash = {k: env_kwargs[k] for k in own if k in env_kwargs and env_kwargs[k] != own[k]}
    if clash:
        theirs = ", ".join(f"{k}={v!r}" for k, v in clash.items())
        ours = ", ".join(f"{ENV_KEY}.{k}={own[k]!r}" for k in clash)
        raise ValueError(
            f"{env_id} row was prepped with {theirs}, but the recipe sets {ours}: "
            "prep the rows with the recipe's value or change the recipe"
        )
    return {**env_kwargs, **own}


def turn_cap_problem(env_id: str, env: Any, max_assistant_turns: int | None) -> str | None:
    """Why the recipe's turn cap does not fit ``env`` (an env on the shared turn loop), else None: a cap below
    the env's ``max_turns`` cuts episodes before the env's last-turn notice and forced answer."""
    if max_assistant_turns is None or not isinstance(env, TurnEnv):
        return None
    max_turns = env.config.max_turns
    if max_assistant_turns >= max_turns:
        return None
    return (
        f"{TURN_CAP_KEY}={max_assistant_turns} is below {env_id}'s max_turns={max_turns}: episodes longer than "
        f"{max_assistant_turns} turns are cut without the env's last-turn notice and forced answer"
    )
