"""A new environment is one package: importing it registers its env id, event kinds, metrics and anchors.

The package below is written by the test into a temporary folder, outside ragym; nothing in ragym is edited,
and the shared entry points (``make_env``, ``episode_metrics``, ``turn_anchors``, the kind registry) use it.
"""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from pathlib import Path

import gymnasium
import pytest

from ragym.envs import anchors, events, metrics, registry

PACKAGE = "probe_env_package"
ENV_ID = "Probe-v0"

FILES = {
    "__init__.py": f'''
        from {PACKAGE} import anchors, events, metrics  # noqa: F401
        from ragym.envs.registry import register_env

        register_env("{ENV_ID}", "{PACKAGE}.env:ProbeEnv")
    ''',
    "events.py": """
        from ragym.envs.events import int_field, make_event, register_event_kinds

        register_event_kinds("probe")

        def probe(turn, depth):
            return make_event("probe", turn, depth=int_field("probe", "depth", depth, minimum=0))
    """,
    "metrics.py": f"""
        from ragym.envs.events import events_of
        from ragym.envs.metrics import register_metrics

        @register_metrics("{ENV_ID}", action_kinds=("probe", "answer", "invalid"))
        def probe_metrics(events):
            return {{"max_depth": float(max((e["depth"] for e in events_of(events, "probe")), default=0))}}
    """,
    "anchors.py": f"""
        from ragym.envs.anchors import anchor_key, register_anchors
        from ragym.envs.events import events_of

        @register_anchors("{ENV_ID}")
        def probe_anchors(events):
            return {{e["turn"] + 1: anchor_key("depth", e["depth"]) for e in events_of(events, "probe")}}
    """,
    "env.py": f"""
        import gymnasium
        from ragym.envs import events as ev
        from {PACKAGE}.events import probe

        class ProbeEnv(gymnasium.Env):
            observation_space = gymnasium.spaces.Text(64)
            action_space = gymnasium.spaces.Text(64)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                self.events, self.turn = [], 0
                return "probe or answer", {{"events": []}}

            def step(self, action):
                turn, self.turn = self.turn, self.turn + 1
                done = action == "answer"
                self.events.append(ev.action(turn, "answer" if done else "probe", True))
                self.events.append(ev.answer(turn, "x") if done else probe(turn, 2 * turn))
                return "ok", 0.0, done, False, {{"events": list(self.events)}}
    """,
}


@pytest.fixture
def probe_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The probe package on ``sys.path``, imported into copies of the registries (restored afterwards)."""
    for name, text in FILES.items():
        (tmp_path / PACKAGE).mkdir(exist_ok=True)
        (tmp_path / PACKAGE / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_ENVS", dict(registry._ENVS))
    monkeypatch.setattr(metrics, "_REGISTRY", dict(metrics._REGISTRY))
    monkeypatch.setattr(anchors, "_ANCHORS", dict(anchors._ANCHORS))
    monkeypatch.setattr(events, "_KINDS", set(events._KINDS))
    yield importlib.import_module(PACKAGE)
    gymnasium.registry.pop(ENV_ID, None)
    for module in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
        del sys.modules[module]


def test_an_env_package_imported_from_outside_ragym_is_built_measured_and_anchored(probe_package) -> None:
    assert ENV_ID in registry.registered_envs() and "probe" in events.registered_event_kinds()
    env = registry.make_env(ENV_ID)
    env.reset(seed=0)
    for action in ("probe", "probe", "answer"):
        *_, info = env.step(action)
    episode = info["events"]
    measured = metrics.episode_metrics(ENV_ID, episode)
    assert measured["max_depth"] == 2.0  # the package's own metric: probes at depths 0 and 2
    assert (measured["turns"], measured["actions/probe"], measured["answered"]) == (3.0, 2.0, 1.0)
    found = {turn: json.loads(a) for turn, a in anchors.turn_anchors(ENV_ID, episode).items()}
    assert found == {1: ["depth", 0], 2: ["depth", 2]}


def test_the_probe_registrations_do_not_outlive_the_test() -> None:
    assert ENV_ID not in registry.registered_envs() and ENV_ID not in metrics.registered_metrics()
    assert "probe" not in events.registered_event_kinds()
