"""The one override syntax of every ``ragym`` command: ``key=value`` after the options, as Hydra and verl take.

Recipe-driven commands (``train``, ``eval``, ``submit``, ``budget``, ``demo``, ``ablate``) hand the items to Hydra
as they are; commands whose settings are not a Hydra config (``train-retriever``'s recipe sections, ``rollout``'s
env kwargs) read them here, with values parsed as YAML as Hydra does (``3`` an int, ``true`` a bool, ``[1, 2]`` a
list, ``1e-5`` a float, ``' | '`` a string with spaces).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import yaml

from ragym.rl.errors import UsageError

_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``key=value`` items as ``{key: value}`` in order (a dotted key stays one key: the caller knows its nesting).

    >>> parse_overrides(["max_turns=6", "train.lr=1e-5", "tags=[a, b]", "name=' x '"])
    {'max_turns': 6, 'train.lr': 1e-05, 'tags': ['a', 'b'], 'name': ' x '}
    """
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"override {item!r}: expected key=value (e.g. max_turns=6)")
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError as err:
            raise UsageError(f"override {item!r}: the value is not YAML ({err})") from err
        # YAML 1.1 reads 1e-5 as a string; Hydra, and anyone writing a learning rate, means a float.
        overrides[key.strip()] = (
            float(raw) if isinstance(value, str) and _EXPONENT.fullmatch(raw.strip()) else value
        )
    return overrides
