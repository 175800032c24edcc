"""Every committed training recipe composes on verl's config, passes verl's validation and documents its knobs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from ragym.rewards.answers import PAPER_TIME_YEAR_TOLERANCE
from ragym.rewards.rubric import Rubric
from ragym.rl.eval.args import EvalConfig
from ragym.rl.recipe.check import check_recipe, uncommented_knobs, unknown_keys
from ragym.rl.recipe.compose import RECIPES_DIR, compose_recipe, recipe_files, recipe_settings
from tests.recipes.composed import leaves

# Sub-folders that hold other kinds of YAML, each tested where it is used (the bases: below and in test_composed).
NOT_TRAINING_RECIPES = ("rewards", "retriever", "agent_loops", "platforms", "base")
TRAINING_RECIPES = sorted(
    path
    for path in RECIPES_DIR.rglob("*.yaml")
    if path.relative_to(RECIPES_DIR).parts[0] not in NOT_TRAINING_RECIPES
)
PAPER_RECIPES = ("kbvqa_qwen2_5_vl_7b.yaml", "kbvqa_qwen3_vl_8b.yaml")
BASES = sorted((RECIPES_DIR / "base").glob("*.yaml"))


def _id(path: Path) -> str:
    return str(path.relative_to(RECIPES_DIR))


def test_the_issue_recipes_are_committed() -> None:
    names = {path.name for path in TRAINING_RECIPES}
    assert {*PAPER_RECIPES, "kbvqa_single_gpu_smoke.yaml"} <= names


def _local_engine(path: Path) -> bool:
    """Recipes with a ``ragym.engine`` section run on the local engine (``ragym submit`` picks it too)."""
    return (recipe_settings(path).get("ragym") or {}).get("engine") is not None


@pytest.mark.parametrize("path", TRAINING_RECIPES, ids=_id)
def test_recipe_composes_and_passes_verl_validation(path: Path) -> None:
    """Every recipe composes on verl's schema and converts into verl's config dataclasses; verl's
    ``validate_config`` (GPU-count and micro-batch rules of its trainer) runs on the recipes verl runs,
    exactly as ``ragym submit`` does."""
    config = check_recipe(path, validate=not _local_engine(path))
    # The reward recipe (inline, or a file relative to the job's working dir, the repository) must build a
    # rubric: unknown terms or params fail here, not on the cluster.
    reward_kwargs = config.reward.custom_reward_function.reward_kwargs
    if "recipe_path" in reward_kwargs:
        Rubric.from_recipe(RECIPES_DIR.parent / reward_kwargs.recipe_path)
    else:
        Rubric.from_recipe(reward_kwargs.recipe)
    assert config.algorithm.adv_estimator == "grpo"


@pytest.mark.parametrize("path", TRAINING_RECIPES + BASES, ids=_id)
def test_every_knob_has_a_comment_above_it(path: Path) -> None:
    assert uncommented_knobs(path.read_text()) == []


@pytest.mark.parametrize("path", TRAINING_RECIPES, ids=_id)
def test_recipe_composes_on_ppo_trainer_and_the_bases(path: Path) -> None:
    """verl's config first, then bases from ``recipes/base/`` (found next to the recipe, where both engines look),
    the recipe's own keys last; verl's config is on the search path the recipe names (``main_ppo`` reads it)."""
    raw = yaml.safe_load(path.read_text())
    first, *bases, last = raw["defaults"]
    assert (first, last) == ("ppo_trainer", "_self_")
    assert bases and all(
        base.startswith("base/") and (RECIPES_DIR / f"{base}.yaml").is_file() for base in bases
    )
    assert raw["hydra"]["searchpath"] == ["pkg://verl.trainer.config"]


@pytest.mark.parametrize("path", BASES, ids=_id)
def test_bases_merge_at_the_top_and_name_their_bases_from_the_recipes_folder(path: Path) -> None:
    """Without ``@package _global_`` Hydra would nest a base's keys under ``base.``; a base's own bases are named
    absolutely (``/base/x``), as from any recipe that composes it."""
    assert path.read_text().startswith("# @package _global_\n")
    raw = yaml.safe_load(path.read_text()) or {}
    assert "hydra" not in raw
    for entry in raw.get("defaults") or []:
        assert entry == "_self_" or (
            entry.startswith("/base/") and (RECIPES_DIR / f"{entry[1:]}.yaml").is_file()
        )


@pytest.mark.parametrize("path", TRAINING_RECIPES, ids=_id)
def test_what_the_files_set_is_what_the_recipe_composes_to(path: Path) -> None:
    """``recipe_files`` lists the bases in Hydra's merge order: every key the files set (the last file's value for a
    key set twice) is the composed config's, so the checks of unknown and unused keys see what verl sees."""
    composed = dict(leaves(_container(path)))
    assert {key: value for key, value in leaves(recipe_settings(path)) if composed[key] != value} == {}
    assert recipe_files(path)[-1] == path.resolve()


def _container(path: Path) -> dict:
    from omegaconf import OmegaConf

    container = OmegaConf.to_container(compose_recipe(path), resolve=False)
    assert isinstance(container, dict)
    return container


@pytest.mark.parametrize("path", TRAINING_RECIPES, ids=_id)
def test_a_recipe_holds_only_what_differs_from_its_bases(path: Path) -> None:
    """A variant is its differences: no key of the recipe's own file repeats the value its bases give it."""
    bases: dict = {}
    for base in recipe_files(path)[:-1]:
        bases.update(
            leaves({k: v for k, v in (yaml.safe_load(base.read_text()) or {}).items() if k != "defaults"})
        )
    own = dict(
        leaves({k: v for k, v in yaml.safe_load(path.read_text()).items() if k not in {"hydra", "defaults"}})
    )
    assert {key: value for key, value in own.items() if key in bases and bases[key] == value} == {}


@pytest.mark.parametrize("name", PAPER_RECIPES)
def test_paper_recipes_hold_the_papers_settings(name: str) -> None:
    """MMAgent-R² section 4.1.2: G=8, lr 1e-6, 1024 trajectories per update, 2 epochs, T_max=8, no KL, delta=0.2."""
    config = check_recipe(RECIPES_DIR / name)
    actor, rollout = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    assert rollout.n == 8
    assert actor.optim.lr == pytest.approx(1e-6)
    assert config.data.train_batch_size * rollout.n == 1024
    assert actor.ppo_mini_batch_size == config.data.train_batch_size
    assert config.trainer.total_epochs == 2
    assert rollout.multi_turn.max_assistant_turns == 8
    assert not actor.use_kl_loss and not config.algorithm.use_kl_in_reward
    assert rollout.name == "vllm" and actor.strategy.startswith("fsdp")
    assert rollout.agent.default_agent_loop == "ragym_env"
    assert "wandb" in config.trainer.logger
    # One reward recipe for every KB-VQA recipe: the file, read as the verl seam reads it.
    reward_recipe = Path(config.reward.custom_reward_function.reward_kwargs.recipe_path)
    assert reward_recipe.resolve() == (RECIPES_DIR / "rewards" / "mmagent_r2.yaml").resolve()


def test_the_paper_reward_recipe_scores_time_like_eval_and_reads_rej_max_from_episodes() -> None:
    terms = yaml.safe_load((RECIPES_DIR / "rewards" / "mmagent_r2.yaml").read_text())["terms"]
    assert terms["outcome"]["params"]["time_year_tolerance"] == PAPER_TIME_YEAR_TOLERANCE == 1
    assert EvalConfig().time_year_tolerance == PAPER_TIME_YEAR_TOLERANCE
    assert terms["verification"]["params"] == {
        "delta": 0.2,
        "max_rejections": None,
        "pay_reject_at_limit": False,
        "pay_reject_after_confirm": True,
    }
    # Numerical answers without a number: the training reward pays nothing, eval scores as the official scorers.
    assert terms["outcome"]["params"]["no_number_as_zero"] is False and EvalConfig().no_number_as_zero is True


def test_cluster_recipes_point_at_files_that_exist_in_the_repository() -> None:
    """verl resolves these from the job's working directory, the repository root (local-engine recipes,
    the ones with a ``ragym.engine`` section, build their agent loop in-process and need no registry file)."""
    repo = RECIPES_DIR.parent
    for path in TRAINING_RECIPES:
        if _local_engine(path):
            continue
        config = check_recipe(path)
        loops = repo / config.actor_rollout_ref.rollout.agent.agent_loop_config_path
        entries = yaml.safe_load(loops.read_text())
        assert {"name": "ragym_env", "_target_": "ragym.rl.agent_loop.loop.RagymEnvAgentLoop"} in entries
        reward_path = config.reward.custom_reward_function.path
        assert reward_path == "pkg://ragym.rewards.verl"


def test_reward_module_loads_through_verls_loader() -> None:
    from verl.utils.import_utils import load_extern_object

    from ragym.rewards.verl import compute_score

    assert load_extern_object("pkg://ragym.rewards.verl", "compute_score") is compute_score


def test_unknown_key_is_reported(tmp_path: Path) -> None:
    text = (RECIPES_DIR / "kbvqa_single_gpu_smoke.yaml").read_text()
    typo = text.replace(
        "    # Prompt + response.\n", "    # Misspelled.\n    temprature: 0.5\n    # Prompt + response.\n"
    )
    assert typo != text
    shutil.copytree(RECIPES_DIR / "base", tmp_path / "base")
    bad = tmp_path / "typo.yaml"
    bad.write_text(typo)
    assert unknown_keys(bad) == ["actor_rollout_ref.rollout.temprature"]
    with pytest.raises(ValueError, match="temprature"):
        check_recipe(bad)


def test_unknown_key_in_a_base_is_reported(tmp_path: Path) -> None:
    """The check reads the bases a recipe composes, not only its own file."""
    shutil.copytree(RECIPES_DIR / "base", tmp_path / "base")
    shutil.copy(RECIPES_DIR / "kbvqa_single_gpu_smoke.yaml", tmp_path / "smoke.yaml")
    verl = tmp_path / "base" / "verl.yaml"
    verl.write_text(
        verl.read_text().replace("  bad_rows: skip\n", "  bad_rows: skip\n  # Misspelled.\n  shufle: true\n")
    )
    assert unknown_keys(tmp_path / "smoke.yaml") == ["data.shufle"]


def test_free_form_maps_accept_new_keys(tmp_path: Path) -> None:
    recipe = tmp_path / "open.yaml"
    recipe.write_text(
        "defaults: [ppo_trainer, _self_]\n"
        "actor_rollout_ref:\n  rollout:\n    engine_kwargs:\n      vllm:\n        # x\n        swap_space: 4\n"
        "  model:\n    override_config:\n      # x\n      attn_implementation: sdpa\n"
        "ragym:\n  engine:\n    # x\n    num_threads: 2\n"
    )
    assert unknown_keys(recipe) == []


@pytest.mark.parametrize(
    ("overrides", "error", "match"),
    [
        (["actor_rollout_ref.actor.loss_agg_mode=per-banana"], Exception, "loss_agg_mode"),
        (
            [
                "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
                "actor_rollout_ref.rollout.temperature=0",
            ],
            AssertionError,
            "temperature",
        ),
        (
            [
                "actor_rollout_ref.actor.use_dynamic_bsz=false",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
                "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
                "trainer.n_gpus_per_node=7",
            ],
            AssertionError,
            "real_train_batch_size",
        ),
    ],
)
def test_verl_validation_failure_surfaces(overrides: list[str], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        check_recipe(RECIPES_DIR / "kbvqa_qwen2_5_vl_7b.yaml", overrides)


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        ("# ok\na: 1\n", []),
        ("a: 1\n", ["line 1: a"]),
        ("s:\n  # ok\n  b: 1\n  c: [1, 2]\n", ["line 4: s.c"]),
        ("s:\n  # a block list is a knob too\n  b:\n    - 1\nd:\n  - 2\n", ["line 5: d"]),
        ("defaults:\n  - ppo_trainer\nhydra:\n  searchpath: [x]\n", []),
        ("# flow mapping is one knob\nt: {w: 1}\n", []),
        ("# the blank line does not break the link\n\nk: 2\n", []),
    ],
)
def test_uncommented_knobs_table(text: str, missing: list[str]) -> None:
    assert uncommented_knobs(text) == missing


def test_agent_loop_registry_file_loads_the_way_verls_worker_loads_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """AgentLoopWorker: resolve the path against the working dir, load the list, instantiate ``_target_``."""
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    from verl.utils.import_utils import resolve_config_path

    from ragym.rl.agent_loop.loop import RagymEnvAgentLoop

    monkeypatch.chdir(RECIPES_DIR.parent)  # a Ray job's working directory is the repository
    config = check_recipe(RECIPES_DIR / "kbvqa_qwen2_5_vl_7b.yaml")
    entries = OmegaConf.load(
        resolve_config_path(config.actor_rollout_ref.rollout.agent.agent_loop_config_path)
    )
    (entry,) = [e for e in entries if e.name == config.actor_rollout_ref.rollout.agent.default_agent_loop]
    assert hydra.utils.get_class(entry._target_) is RagymEnvAgentLoop
    # The @register decorator agrees with the file.
    assert _agent_loop_registry["ragym_env"]["_target_"] == entry._target_


def test_a_recipe_outside_recipes_composes_ragyms_bases_through_its_searchpath(tmp_path: Path) -> None:
    """A user's recipe elsewhere (an env package's folder) names ragym's recipes folder on its search path; the
    key checks then read the bases it composes from there."""
    recipe = tmp_path / "mine.yaml"
    recipe.write_text(
        f"hydra:\n  searchpath:\n    - pkg://verl.trainer.config\n    - file://{RECIPES_DIR}\n"
        "defaults:\n  - ppo_trainer\n  - base/kbvqa\n  - _self_\n"
        "trainer:\n  # Mine.\n  experiment_name: kbvqa_qwen2_5_vl_7b\n"
    )
    assert recipe_files(recipe) == [*recipe_files(RECIPES_DIR / "kbvqa_qwen2_5_vl_7b.yaml")[:-1], recipe]
    assert _container(recipe) == _container(RECIPES_DIR / "kbvqa_qwen2_5_vl_7b.yaml")
    assert unknown_keys(recipe, ["+data.shufle=1"]) == ["data.shufle"]
