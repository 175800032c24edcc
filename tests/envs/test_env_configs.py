"""Env settings that make no sense (KB-VQA, DocMemo) are refused at construction, naming the field."""

from __future__ import annotations

import pytest

from ragym.envs.kbvqa.env import KBVQAConfig
from ragym.envs.registry import registered_envs


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("candidates_per_batch", 0),
        ("max_turns", 0),
        ("max_rejections", -1),
        ("text_top_k", 0),
        ("max_text_queries", 0),
        ("max_turns", 2.5),
    ],
)
def test_nonsense_settings_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"KBVQAConfig.{field} must be"):
        KBVQAConfig(**{field: value})


@pytest.mark.parametrize(
    ("config", "field", "value"),
    [("KBVQAConfig", "candidates_per_batch", 33), ("R3GConfig", "pool_size", 33)],
)
def test_a_batch_of_more_images_than_an_observation_holds_is_refused(config, field, value):
    """A batch (KB-VQA) or pool (R3G) of 33 images would be an observation outside the env's space (32 images)."""
    from ragym.envs.r3g.env import R3GConfig

    cls = {"KBVQAConfig": KBVQAConfig, "R3GConfig": R3GConfig}[config]
    with pytest.raises(ValueError, match=f"{config}.{field}"):
        cls(**{field: value})
    cls(**{field: value, "max_images_per_obs": value})


def test_the_papers_settings_and_the_least_ones_are_accepted():
    KBVQAConfig()
    KBVQAConfig(candidates_per_batch=1, max_rejections=0, max_turns=1, text_top_k=1, max_text_queries=1)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("num_candidates", 0),
        ("num_evidence", 0),
        ("max_rounds", 0),
        ("max_turns", 0),
        ("radius", -1),
        ("kappa", -1.0),
        ("eta", float("nan")),
        # lambda_t weighs similarity against the belief draw: above 1 the draw's weight 1 - lambda_t turns
        # negative (pages believed relevant sink), so lambda_0 and eta lie in [0, 1]; decay > 1 failed at reset
        ("lambda_0", 1.5),
        ("eta", 2.0),
        ("decay", 1.5),
        ("encoder", "audio"),
    ],
)
def test_docmemo_nonsense_settings_name_the_field(field, value):
    from ragym.envs.docmemo.env import DocMemoConfig

    with pytest.raises(ValueError, match=f"DocMemoConfig.{field} must be"):
        DocMemoConfig(**{field: value})
    DocMemoConfig()


def test_docmemo_visual_encoder_without_a_model_is_refused_naming_the_path():
    from ragym.envs.docmemo.env import DocMemoConfig

    # Before, the config took it and the env failed later inside huggingface_hub with "Repo id must use ...".
    with pytest.raises(ValueError, match="DocMemoConfig.visual_model_path must be"):
        DocMemoConfig(encoder="visual")
    DocMemoConfig(encoder="visual", visual_model_path="/models/clip")


@pytest.mark.parametrize("env_id", sorted(registered_envs()))
def test_an_unknown_setting_is_refused_naming_it_and_the_settings_there_are(env_id):
    from ragym.envs import make_env
    from ragym.envs.core import UnknownSetting
    from ragym.rl.cli import user_error

    with pytest.raises(
        UnknownSetting, match=r"unknown config fields \['nosuchkey'\] \(its settings: .*max_turns"
    ) as err:
        make_env(env_id, nosuchkey=3)
    assert user_error(err.value) == str(err.value)  # a command prints it as one line, no traceback


@pytest.mark.parametrize(
    ("env_id", "setting", "message"),
    [
        (
            "KBVQA-v0",
            {"max_rejections": -1},
            "KBVQAEnv: KBVQAConfig.max_rejections must be an int >= 0, got -1",
        ),
        ("DocMemo-v0", {"max_turns": 0}, "DocMemoEnv: DocMemoConfig.max_turns must be an int >= 1, got 0"),
        ("R3G-v0", {"max_turns": "abc"}, "R3GEnv: R3GConfig.max_turns must be an int >= 2, got 'abc'"),
        # Accepted until the config checked them: a turn bound of 0 or a word, a turn no text fits.
        (
            "MEMORA-v0",
            {"max_turns": "abc"},
            "MemoraEnv: MemoraConfig.max_turns must be an int >= 1, got 'abc'",
        ),
        (
            "MEMORA-v0",
            {"max_turn_chars": 0},
            "MemoraEnv: MemoraConfig.max_turn_chars must be an int >= 1, got 0",
        ),
        ("MEMORA-v0", {"k_min": 3, "k_max": 2}, "MemoraEnv: MemoraConfig: need k_min <= k_max and k <= kc"),
        # R3G's text space raised its own ValueError outside the config.
        ("R3G-v0", {"max_turn_chars": 0}, "R3GEnv: R3GConfig.max_turn_chars must be an int >= 1, got 0"),
    ],
)
def test_a_value_the_config_refuses_is_one_line_of_a_command(env_id, setting, message):
    """``ragym rollout max_rejections=-1`` was the config's ValueError with a traceback."""
    from ragym.envs import make_env
    from ragym.envs.core import BadSetting
    from ragym.rl.cli import user_error

    with pytest.raises(BadSetting) as err:
        make_env(env_id, **setting)
    assert str(err.value).startswith(message)
    assert user_error(err.value) == str(err.value)
