"""A new environment is one folder: a package outside ragym, with its hooks, its reward recipe and its recipe, is
picked up by every command with no edit to ragym.

The test writes the package into a temporary folder with an installed-distribution record (``*.dist-info``) that
names it in the ``ragym.envs`` entry-point group, as ``pip install`` of the user's package would, and puts the
folder on ``PYTHONPATH``. Then ``check_env``, ``ragym rollout --policy expert``, ``ragym budget``, the local
engine's 2 steps and ``ragym train --engine verl --toy`` all run on it (docs/environments.md walks through the
same files).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.launch.test_verl_trainer import RUN_TIMEOUT_S

pytestmark = pytest.mark.ray

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "lookup_env"
ENV_ID = "Lookup-v0"
TABLE = {"k0": "amber", "k1": "basalt", "k2": "cobalt", "k3": "dune", "k4": "ember", "k5": "fern"}

FILES = {
    "__init__.py": f'''
        """A lookup task: the prompt names a key, <lookup>KEY</lookup> shows its value, <answer>VALUE</answer> ends."""
        from {PACKAGE} import events, metrics, rewards  # noqa: F401  (importing them registers them)
        from ragym.envs.registry import register_env

        register_env("{ENV_ID}", "{PACKAGE}.env:LookupEnv", hooks="{PACKAGE}.hooks:HOOKS")
    ''',
    "actions.py": """
        import re
        from dataclasses import dataclass

        STOP_STRINGS = ("</lookup>", "</answer>")
        _TURN = re.compile(r"\\s*<(lookup|answer)>([^<>]*)</\\1>\\s*")


        @dataclass(frozen=True)
        class Lookup:
            key: str


        @dataclass(frozen=True)
        class Answer:
            text: str


        Action = Lookup | Answer


        def parse_action(text):
            m = _TURN.fullmatch(text)
            if m is None or not m.group(2).strip():
                return None
            return Lookup(m.group(2).strip()) if m.group(1) == "lookup" else Answer(m.group(2).strip())


        def format_action(action):
            if isinstance(action, Lookup):
                return f"<lookup>{action.key}</lookup>"
            return f"<answer>{action.text}</answer>"
    """,
    "events.py": """
        from ragym.envs.events import make_event, register_event_kinds, str_field

        register_event_kinds("lookup")


        def lookup(turn, key):
            return make_event("lookup", turn, key=str_field("lookup", "key", key))
    """,
    "metrics.py": f"""
        from ragym.envs.events import events_of
        from ragym.envs.metrics import register_metrics


        @register_metrics("{ENV_ID}", action_kinds=("lookup", "answer", "invalid"))
        def lookup_metrics(events):
            return {{"lookups": float(len(events_of(events, "lookup")))}}
    """,
    "rewards.py": f"""
        from ragym.envs.events import events_of
        from ragym.rewards.registry import register_reward

        TABLE = {TABLE!r}


        @register_reward("lookup_asked_key")
        def lookup_asked_key(episode):
            \"\"\"1 when the episode looked up the key whose value is the answer (the ground truth).\"\"\"
            keys = [e["key"] for e in events_of(episode.events, "lookup")]
            return float(any(TABLE.get(key) == episode.ground_truth[0] for key in keys))
    """,
    "env.py": f"""
        import gymnasium
        from ragym.envs import events as ev
        from ragym.envs.spaces import FreeText, text_image_space
        from {PACKAGE}.actions import STOP_STRINGS, Answer, Lookup, parse_action
        from {PACKAGE}.events import lookup

        TABLE = {TABLE!r}


        class LookupEnv(gymnasium.Env):
            system_prompt = "Answer with <lookup>KEY</lookup> or <answer>VALUE</answer>."
            stop_strings = STOP_STRINGS

            def __init__(self, max_turns: int = 4):
                self.max_turns = max_turns
                self.observation_space = text_image_space(512, 1, 64)
                self.action_space = FreeText(512)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                self.key = (options or {{}}).get("key") or sorted(TABLE)[int(self.np_random.integers(len(TABLE)))]
                self.turn, self.events = 0, []
                return {{"text": f"What is the value of {{self.key}}?", "images": ()}}, {{"events": []}}

            def step(self, action):
                turn, self.turn = self.turn, self.turn + 1
                parsed = parse_action(action)
                kind = {{Lookup: "lookup", Answer: "answer"}}.get(type(parsed), "invalid")
                self.events.append(ev.action(turn, kind, parsed is not None))
                done = isinstance(parsed, Answer)
                if isinstance(parsed, Lookup):
                    self.events.append(lookup(turn, parsed.key))
                    text = f"{{parsed.key}} = {{TABLE.get(parsed.key, 'no such key')}}"
                elif done:
                    self.events.append(ev.answer(turn, parsed.text))
                    text = "done"
                else:
                    text = "Write <lookup>KEY</lookup> or <answer>VALUE</answer>."
                truncated = not done and self.turn >= self.max_turns
                obs = {{"text": text, "images": ()}}
                return obs, 0.0, done, truncated, {{"events": list(self.events)}}
    """,
    "hooks.py": f"""
        from pathlib import Path

        from ragym.envs.hooks import EnvHooks
        from ragym.envs.scripted import run_episode
        from ragym.data_prep.toy_data import toy_row, write_splits
        from {PACKAGE}.actions import Answer, Lookup, format_action, parse_action
        from {PACKAGE}.env import TABLE

        RECIPE = str(Path(__file__).resolve().parents[1] / "recipes" / "lookup_tiny.yaml")


        class Expert:
            def __init__(self, env):
                self.env = env

            def reset(self, obs):
                self.key = obs["text"].split()[-1].rstrip("?")

            def act(self, obs_text):
                if " = " in obs_text:
                    return format_action(Answer(obs_text.split(" = ")[1]))
                return format_action(Lookup(self.key))


        def toy_rows(out):
            def row(index, split):
                key = sorted(TABLE)[index % len(TABLE)]
                truth = [TABLE[key]]
                return toy_row("{ENV_ID}", index, split, "generic", truth, {{"key": key}})

            write_splits(out / "data", {{"train": [row(i, "train") for i in range(8)],
                                        "test": [row(i, "test") for i in range(4)]}})


        def longest_episode(env, options, seed):
            run_episode(env, Expert(env), seed, options)


        HOOKS = EnvHooks(
            name="lookup",
            format_action=format_action,
            parse_action=parse_action,
            example_actions=(Lookup("k1"), Answer("basalt")),
            expert=lambda env, seed: Expert(env),
            toy_rows=toy_rows,
            longest_episode=longest_episode,
            paper_recipe=RECIPE,
        )
    """,
}

RECIPE = """
# The lookup env on ragym's KB-VQA base (recipes/base/kbvqa.yaml), scored by the package's own reward recipe.
hydra:
  searchpath:
    - pkg://verl.trainer.config
    - file://{recipes}

defaults:
  - ppo_trainer
  - base/kbvqa
  - _self_

reward:
  custom_reward_function:
    reward_kwargs:
      # The lookup package's reward recipe, kept in its folder.
      recipe_path: {reward}

trainer:
  # W&B run name and checkpoint subfolder.
  experiment_name: lookup_tiny
"""

REWARD_RECIPE = """
name: lookup
description: the answer's exact match, the grammar, and looking up the asked key
terms:
  outcome:
    weight: 1.0
  format:
    weight: 0.2
  asked_key:
    reward: lookup_asked_key
    weight: 0.5
"""


@pytest.fixture(scope="module")
def user_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's folder: the package (its reward recipe included), its dist-info (the entry point) and a recipe."""
    root = tmp_path_factory.mktemp("user")
    (root / PACKAGE).mkdir()
    for name, text in FILES.items():
        (root / PACKAGE / name).write_text(textwrap.dedent(text).lstrip())
    dist = root / f"{PACKAGE}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[ragym.envs]\nlookup = {PACKAGE}\n")
    # The reward recipe sits in the package's folder; outside it are only the package import (the dist-info, as
    # pip writes it from the package's entry point) and the recipe, which composes on ragym's KB-VQA base.
    (root / PACKAGE / "reward.yaml").write_text(REWARD_RECIPE.lstrip())
    (root / "recipes").mkdir()
    recipe = RECIPE.lstrip().format(recipes=REPO / "recipes", reward=root / PACKAGE / "reward.yaml")
    (root / "recipes" / "lookup_tiny.yaml").write_text(recipe)
    return root


def run(user_folder: Path, *args: str, timeout: float = RUN_TIMEOUT_S) -> str:
    """``ragym ARGS`` from the user's folder, the package importable only through ``PYTHONPATH``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(user_folder), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "ragym.rl.cli", *args],
        cwd=user_folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, f"ragym {' '.join(args[:3])} failed ({done.returncode}):\n{log[-6000:]}"
    return log


def test_the_package_registers_and_passes_gymnasiums_checker(user_folder: Path) -> None:
    probe = f"""
import json, gymnasium
from gymnasium.utils.env_checker import check_env
from ragym.envs.hooks import env_hooks
from ragym.envs.registry import make_env
from ragym.rewards.registry import registered_rewards
env = make_env("{ENV_ID}")
check_env(env, skip_render_check=True)
hooks = env_hooks("{ENV_ID}")
trips = [hooks.parse_action(hooks.format_action(a)) == a for a in hooks.example_actions]
print(json.dumps({{"name": hooks.name, "trips": trips, "reward": "lookup_asked_key" in registered_rewards()}}))
"""
    env = {**os.environ, "PYTHONPATH": str(user_folder)}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=user_folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "name": "lookup",
        "trips": [True, True],
        "reward": True,
    }


def test_rollout_budget_local_engine_and_verl_pick_it_up(user_folder: Path) -> None:
    toy = user_folder / "toy"
    # verl's own trainer at toy size: toy rows from the hooks, a policy warm-started on the hooks' expert.
    log = run(
        user_folder,
        "train",
        "--engine",
        "verl",
        "--recipe",
        str(user_folder / "recipes" / "lookup_tiny.yaml"),
        "--toy",
        str(toy),
        "--network",
        "private",
        "trainer.total_training_steps=1",
    )
    from tests.launch.test_verl_trainer import logged_steps

    steps = logged_steps(toy / "checkpoints" / "lookup_tiny", set(), log)
    assert 1 in steps, log[-4000:]
    # the package's own reward term and episode metric, through verl's workers
    assert {"reward/asked_key", "reward/outcome", "episode/lookups"} <= set(steps[1]), sorted(steps[1])
    rows = toy / ENV_ID / "data"
    assert (rows / "train.parquet").is_file() and (toy / "policy" / ENV_ID).is_dir()

    # The hooks' expert plays every row: it looks the key up, then answers it.
    out = run(
        user_folder, "rollout", "--data", str(rows / "test.parquet"), "--policy", "expert", "--episodes", "4"
    )
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["episodes"] == 4 and summary["answer_acc"] == 1.0 and summary["lookups"] == 1.0

    # ragym budget plays the hooks' longest episode (two turns here) on every row.
    budget = run(
        user_folder,
        "budget",
        "--recipe",
        str(user_folder / "recipes" / "lookup_tiny.yaml"),
        "--rows",
        str(rows / "test.parquet"),
        "--estimate-text",
        "--json",
        str(user_folder / "budget.json"),
    )
    assert "text ESTIMATED" in budget
    summary = json.loads((user_folder / "budget.json").read_text())["summary"]
    assert summary["envs"] == {ENV_ID: 4} and summary["tokens"]["turns"]["max"] == 2

    # The local engine: 2 GRPO steps on the toy rows and the warm-started policy, at toy size (the engine section
    # a local recipe carries, and a micro-batch count where the cluster recipe packs by tokens).
    local = run(
        user_folder,
        "train",
        "--recipe",
        str(user_folder / "recipes" / "lookup_tiny.yaml"),
        f"data.train_files={rows / 'train.parquet'}",
        f"data.val_files={rows / 'test.parquet'}",
        f"actor_rollout_ref.model.path={toy / 'policy' / ENV_ID}",
        "actor_rollout_ref.rollout.name=hf",
        "data.train_batch_size=4",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "data.max_prompt_length=1024",
        "data.max_response_length=1024",
        "trainer.total_training_steps=2",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={user_folder / 'local'}",
        "trainer.logger=[console]",
        "+ragym.engine.batch_wait_s=1.0",
        "+ragym.engine.num_threads=1",
        "+ragym.engine.trace_groups_per_step=0",
        "+ragym.engine.async_rollouts=false",
    )
    assert "step 2 " in local and "reward/asked_key=" in local, local[-4000:]
    assert (user_folder / "local" / "global_step_2").is_dir()
