"""Shared vocabulary of every ragym environment: the image marker, the turn-length bound and the config fields
every env shares (``EnvConfig``)."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, TypeVar

from ragym.envs.image_budget import ImageBudget

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

C = TypeVar("C", bound="DataclassInstance")

MAX_TURN_CHARS = 8192
"""Default upper bound on one policy turn's length in every env (``max_turn_chars``); longer text is an
``oversized`` format error."""
IMAGE_PLACEHOLDER = "<image>"
"""Marks, in an observation's text, where the next image of ``obs["images"]`` goes (one per image, in order)."""


def defuse(text: str) -> str:
    """Text from data or from the policy with any literal image marker defused: an observation's markers are the
    env's own, one per image (a literal ``<image>`` in a document, question or echoed query would make the agent
    loop's image count wrong and end the episode in error)."""
    return text.replace(IMAGE_PLACEHOLDER, "(image)")


@dataclass(frozen=True)
class EnvConfig:
    """The fields every env's config shares (each env's config extends it and may change a default): the turn
    bound and the image budget, which the recipe's ``ragym.images`` fills in every env (``BUDGET_FIELDS``)."""

    max_turn_chars: int = MAX_TURN_CHARS
    """Longer turns are an ``oversized`` format error."""
    query_max_pixels: int = ImageBudget.query_max_pixels
    """Most pixels of a shown query image (fitted once, as the processor would: docs/scale.md)."""
    candidate_max_pixels: int = ImageBudget.candidate_max_pixels
    """Most pixels of a shown candidate image (a retrieved image, a page)."""
    image_min_pixels: int = ImageBudget.image_min_pixels
    """Fewest pixels of a fitted image (the processor's ``min_pixels``)."""
    image_factor: int = ImageBudget.image_factor
    """Patch size x merge size of the policy (28 Qwen2.5-VL, 32 Qwen3-VL): one visual token per factor**2 px."""


def check_least(config: object, least: dict[str, int]) -> None:
    """Refuse ``config`` where a field of ``least`` (field -> minimum) is not an int at least its minimum, naming the
    field: settings that make no episode possible, refused when the config is built, before any work starts."""
    for name, minimum in least.items():
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{type(config).__name__}.{name} must be an int >= {minimum}, got {value!r}")


class UnknownSetting(TypeError):
    """An env keyword that is not a field of the env's config (the message lists the fields there are)."""


class BadSetting(ValueError):
    """An env setting whose value the env's config refuses (the message names the env, the field and what it takes):
    a user's error, which ``ragym`` commands say in one line."""


def env_config(env: str, cls: type[C], config: C | None, overrides: dict[str, Any]) -> C:
    """The config of env class ``env``: ``config`` (else ``cls``'s defaults) with ``overrides`` applied; a
    keyword that is not a field of ``cls`` is an ``UnknownSetting`` naming it and listing the fields, a value the
    config refuses (``max_rejections=-1``) a ``BadSetting``."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise UnknownSetting(
            f"{env}: unknown config fields {unknown} (its settings: {', '.join(sorted(names))})"
        )
    # The config's own checks (``__post_init__``) refuse a value, or fail on its type.
    try:
        if config is None:
            return cls(**overrides)
        return replace(config, **overrides) if overrides else config
    except (ValueError, TypeError) as err:
        raise BadSetting(f"{env}: {err}") from err
