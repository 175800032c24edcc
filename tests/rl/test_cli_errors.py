"""Every user error is one line on stderr and a non-zero exit; ``--debug`` raises with the traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragym.rl.cli import main

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


def _one_line(capsys, argv: list[str], *expected: str) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ragym {argv[0]}: "), lines
    assert all(text in lines[0] for text in expected), lines[0]
    return lines[0]


def test_recipe_errors_are_one_line(capsys, tmp_path):
    _one_line(capsys, ["train", "--recipe", "no_such_recipe"], "no_such_recipe", "not found")
    bad = tmp_path / "broken.yaml"
    bad.write_text("defaults: [ppo_trainer, _self_]\ndata: {train_files: [unclosed\n")
    _one_line(capsys, ["train", "--recipe", str(bad)])
    _one_line(
        capsys,
        ["train", "--recipe", "kbvqa_tiny_cpu", "actor_rollout_ref.rollout.temprature=0.5"],
        "override actor_rollout_ref.rollout.temprature: kbvqa_tiny_cpu.yaml has no such key",
    )
    bad_delta = [
        "~reward.custom_reward_function.reward_kwargs.recipe_path",
        "+reward.custom_reward_function.reward_kwargs.recipe={terms:{verification:{weight:1.0,"
        "params:{delta:-1}}}}",
    ]
    _one_line(
        capsys,
        ["submit", "kbvqa_qwen2_5_vl_7b", "--dry-run", *bad_delta],
        "delta must be a finite number >= 0",
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        # A negative batch failed mid-step with a traceback; --max-steps 0 trained nothing and exited 0. (0 total
        # steps is the 0-step baseline: the warm start and the evaluation before training, no GRPO step.)
        (["data.train_batch_size=-4"], "data.train_batch_size -4 is not a whole number of at least 1"),
        (
            ["trainer.total_training_steps=-1"],
            "trainer.total_training_steps -1 is not a whole number of at least 0",
        ),
        (
            ["actor_rollout_ref.rollout.n=abc"],
            "actor_rollout_ref.rollout.n 'abc' is not a whole number of at least 1",
        ),
        (["--max-steps", "0"], "--max-steps must be >= 1, got 0"),
        # One episode a group: verl's GRPO took its raw reward as the advantage (REINFORCE without a baseline).
        (
            ["actor_rollout_ref.rollout.n=1"],
            "actor_rollout_ref.rollout.n 1 is one episode per group, but algorithm.adv_estimator=grpo",
        ),
    ],
)
def test_a_count_the_local_engine_cannot_train_with_is_one_line(
    capsys, argv: list[str], expected: str
) -> None:
    _one_line(capsys, ["train", "--recipe", "kbvqa_tiny_cpu", *argv], expected)


@pytest.mark.parametrize(
    "key",
    [
        "algorithm.filter_groups.enable",
        "data.shuffle",
        "trainer.val_before_train",
    ],
)
def test_a_word_for_a_switch_is_one_line(capsys, key: str) -> None:
    """Hydra keeps ``no`` from the command line as the string "no", which the engine read as true (in a YAML file
    ``no`` is false, so only overrides bit): ``filter_groups.enable=no`` switched dynamic sampling on."""
    _one_line(
        capsys,
        ["train", "--recipe", "kbvqa_tiny_cpu", f"{key}=no"],
        f"{key} 'no' is not true or false; set {key}=true or {key}=false",
    )


def test_model_folder_errors_are_one_line(capsys, tmp_path, tiny_policy_dir):
    _one_line(
        capsys,
        ["eval", "--model", str(tmp_path / "absent"), "--data", "x.parquet", "--out", str(tmp_path)],
        "absent",
        "not a Hugging Face model folder",
    )
    _one_line(
        capsys,
        [
            "eval",
            "--model",
            str(tiny_policy_dir("qwen2_5_vl")),
            "--data",
            "x.parquet",
            "--out",
            str(tmp_path / "o"),
        ],
        "records no recipe",
        "--recipe",
    )
    _one_line(capsys, ["export", str(tmp_path), "--out", str(tmp_path / "e")], "not a verl FSDP checkpoint")
    _one_line(capsys, ["tiny-policy", "--arch", "qwen2_5_vl", "--out", str(RECIPES)], "not empty")


def test_a_folder_or_file_the_viewer_cannot_read_is_one_line(capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    _one_line(capsys, ["view", str(tmp_path / "empty")], "empty holds no trace folder")
    traces = tmp_path / "run" / "traces"
    traces.mkdir(parents=True)
    (traces / "trace.json").write_text('{"version": 1}')
    (traces / "episodes.jsonl").write_bytes(
        b'{"step": 1, "turns": ["\xff"]}\n{"step": 2}\n'
    )  # a damaged byte
    _one_line(capsys, ["view", str(tmp_path / "run")], "episodes.jsonl:1: not JSON")


def test_debug_shows_the_traceback(tmp_path):
    with pytest.raises(FileNotFoundError):
        main(["--debug", "train", "--recipe", "no_such_recipe"])
