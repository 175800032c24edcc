"""Cluster sizes checked at ``ragym submit``: every shipped cluster recipe passes at 1 x 8 and 4 x 8; each size verl
or vLLM would refuse on the cluster is refused here, with its message, all of them at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragym.rl.budget.prompts import LongestPrompt
from ragym.rl.cli import main
from ragym.rl.cluster.sizes import size_problems
from ragym.rl.cluster.submit import build_submission
from ragym.rl.errors import UsageError
from ragym.rl.recipe.compose import RECIPES_DIR, load_recipe, recipe_settings

CLUSTER_RECIPES = (
    "kbvqa_qwen2_5_vl_7b",
    "kbvqa_qwen2_5_vl_7b_lora",
    "kbvqa_qwen3_vl_8b",
    "docmemo_qwen2_5_vl_7b",
    "memora_qwen2_5_vl_7b",
    "r3g_qwen2_5_vl_7b",
)
"""The recipes ``ragym submit`` sends to a GPU cluster (verl's trainer, vLLM, the cluster's size from the flags)."""
SIZES = ((1, 8), (4, 8))
KBVQA = "kbvqa_qwen2_5_vl_7b"


def fixed(micro: int | str = 4, log_prob: int | str = 4, *more: str) -> list[str]:
    """KB-VQA with fixed-size micro-batches instead of token-packed ones (the log-prob side follows the actor's)."""
    return [
        "actor_rollout_ref.actor.use_dynamic_bsz=false",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={log_prob}",
        *more,
    ]


@pytest.fixture(autouse=True)
def _no_local_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recipes' data files resolve to nothing here, whatever the shell exports."""
    monkeypatch.setenv("RAGYM_DATA_DIR", "/nonexistent/ragym-data")


def problems(
    overrides: list[str], nodes: int = 1, gpus: int = 8, prompt: LongestPrompt | None = None
) -> list[str]:
    config = load_recipe(KBVQA, [f"trainer.nnodes={nodes}", f"trainer.n_gpus_per_node={gpus}", *overrides])
    return size_problems(config, prompt)


@pytest.mark.parametrize(("nodes", "gpus"), SIZES)
@pytest.mark.parametrize("recipe", CLUSTER_RECIPES)
def test_every_shipped_cluster_recipe_is_accepted(recipe: str, nodes: int, gpus: int) -> None:
    job = build_submission(recipe, [], nodes=nodes, gpus_per_node=gpus)
    assert f"trainer.nnodes={nodes} trainer.n_gpus_per_node={gpus}" in job.entrypoint
    config = load_recipe(recipe, [f"trainer.nnodes={nodes}", f"trainer.n_gpus_per_node={gpus}"])
    assert size_problems(config) == []
    # Not accepted by accident: the rules read this recipe's numbers (its update's trajectories and context).
    actor, rollout = config.actor_rollout_ref.actor, config.actor_rollout_ref.rollout
    assert actor.ppo_mini_batch_size * rollout.n % (nodes * gpus) == 0
    assert rollout.max_model_len >= rollout.prompt_length + rollout.response_length


def test_the_cluster_recipes_are_every_recipe_that_takes_the_clusters_size() -> None:
    """The others run in one process (``ragym.engine``) or pin their own size (the single-GPU smoke recipe)."""
    others = {path.stem: recipe_settings(path) for path in RECIPES_DIR.glob("*.yaml")}
    for name in CLUSTER_RECIPES:
        assert "engine" not in others.pop(name).get("ragym", {}), name
    for name, raw in others.items():
        assert "engine" in raw.get("ragym", {}) or raw["trainer"]["n_gpus_per_node"] == 1, name


@pytest.mark.parametrize(
    ("overrides", "nodes", "expected"),
    [
        # 12 trajectories per update cannot be split over 8 data-parallel ranks (verl's train_mini_batch).
        (
            ["actor_rollout_ref.actor.ppo_mini_batch_size=12", "actor_rollout_ref.rollout.n=1"],
            1,
            [
                "ppo_mini_batch_size x rollout.n = 12 x 1 = 12 trajectories per update is not a multiple of the "
                "data-parallel size 8 (8 GPUs / Ulysses 1)"
            ],
        ),
        # 6 x 8 = 48 splits over 8 ranks, not over 32.
        (
            ["actor_rollout_ref.actor.ppo_mini_batch_size=6"],
            4,
            ["= 48 trajectories per update is not a multiple of the data-parallel size 32"],
        ),
        (
            ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=3"],
            1,
            ["ulysses_sequence_parallel_size 3 does not divide the 1 x 8 = 8 GPUs"],
        ),
        # Fixed-size batches: verl's validate_config wants whole trajectories per GPU, a batch of 12 on 8 GPUs is not.
        (
            fixed(
                1,
                1,
                "data.train_batch_size=12",
                "actor_rollout_ref.rollout.n=1",
                "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            ),
            1,
            [
                "data.train_batch_size x rollout.n = 12 x 1 = 12 trajectories per step is not a multiple of the 8 GPUs"
            ],
        ),
        (
            fixed(4, 4, "data.train_batch_size=64"),
            1,
            ["data.train_batch_size 64 is below actor_rollout_ref.actor.ppo_mini_batch_size 128"],
        ),
        # 128 x 8 / 8 = 128 trajectories per GPU and update: 3 does not divide them.
        (
            fixed(3),
            1,
            [
                "ppo_micro_batch_size_per_gpu 3 does not divide the 128 trajectories of each GPU's share of an update"
            ],
        ),
        # 1,024 trajectories padded to a multiple of lcm(32, 1024) = 1,024: 32 per GPU, which 3 does not divide.
        (
            fixed(4, 3),
            4,
            [
                "log_prob_micro_batch_size_per_gpu 3 does not divide the 32 trajectories each GPU scores per step"
            ],
        ),
        (
            fixed(4, "null"),
            1,
            [
                "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu is not set, and use_dynamic_bsz is false"
            ],
        ),
        (
            fixed("null", 4, "actor_rollout_ref.actor.ppo_micro_batch_size=32"),
            1,
            ["only the deprecated actor_rollout_ref.actor.ppo_micro_batch_size is set"],
        ),
        (
            fixed(4, 4, "actor_rollout_ref.rollout.log_prob_micro_batch_size=32"),
            1,
            [
                "actor_rollout_ref.rollout.log_prob_micro_batch_size and actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu "
                "are both set"
            ],
        ),
        (
            ["actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=false"],
            1,
            ["log_prob_use_dynamic_bsz is not"],
        ),
        # Packed micro-batches must hold the longest sequence, 4,096 + 12,288 tokens (the log-prob budget follows).
        (
            ["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16383"],
            1,
            [
                "ppo_max_token_len_per_gpu 16383 x Ulysses 1 is below the longest sequence",
                "log_prob_max_token_len_per_gpu 16383 x Ulysses 1 is below the longest sequence",
            ],
        ),
        (
            ["actor_rollout_ref.rollout.tensor_model_parallel_size=3"],
            4,
            [
                "a rollout replica of 3 GPUs (actor_rollout_ref.rollout.tensor_model_parallel_size 3) does not divide the "
                "4 x 8 = 32 GPUs"
            ],
        ),
        (
            ["actor_rollout_ref.rollout.tensor_model_parallel_size=12"],
            4,
            [
                "does not divide the 4 x 8 = 32 GPUs",
                "spans nodes but is not a multiple of the 8 GPUs of a node",
            ],
        ),
        (
            ["actor_rollout_ref.rollout.max_model_len=16383"],
            1,
            ["max_model_len 16383 is below prompt_length + response_length = 4096 + 12288 = 16384"],
        ),
        (
            ["actor_rollout_ref.rollout.max_num_batched_tokens=255"],
            1,
            ["max_num_batched_tokens 255 is below max_num_seqs 256"],
        ),
        # vLLM cannot split an image across steps with chunked multimodal input off: the largest is 1,024 tokens.
        (
            [
                "+actor_rollout_ref.rollout.engine_kwargs.vllm.disable_chunked_mm_input=true",
                "actor_rollout_ref.rollout.max_num_batched_tokens=1023",
            ],
            1,
            ["below the 1024 tokens of the largest image"],
        ),
    ],
)
def test_each_bad_size_is_refused_with_its_message(
    overrides: list[str], nodes: int, expected: list[str]
) -> None:
    found = problems(overrides, nodes)
    assert len(found) == len(expected), found
    for line, text in zip(found, expected, strict=True):
        assert text in line and "; " in line, line  # what is wrong; what to do


@pytest.mark.parametrize(
    ("overrides", "nodes", "gpus"),
    [
        # The boundary of each refusal above, on the side verl accepts.
        (["actor_rollout_ref.actor.ppo_mini_batch_size=6"], 1, 8),
        (["actor_rollout_ref.actor.ppo_mini_batch_size=16", "actor_rollout_ref.rollout.n=1"], 1, 8),
        # Ulysses 2 halves the data-parallel ranks: 2 x 2 trajectories split over 4 of them.
        (
            [
                "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                "actor_rollout_ref.rollout.n=2",
                "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
            ],
            1,
            8,
        ),
        (
            fixed(
                1,
                1,
                "data.train_batch_size=16",
                "actor_rollout_ref.rollout.n=1",
                "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            ),
            1,
            8,
        ),
        (fixed(), 4, 8),
        (["actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384"], 4, 8),
        (["actor_rollout_ref.rollout.tensor_model_parallel_size=2"], 4, 8),
        # A replica of 16 GPUs spans two 8-GPU nodes, which verl supports.
        (["actor_rollout_ref.rollout.tensor_model_parallel_size=16"], 4, 8),
        (["actor_rollout_ref.rollout.max_num_batched_tokens=256"], 1, 8),
        (
            [
                "+actor_rollout_ref.rollout.engine_kwargs.vllm.disable_chunked_mm_input=true",
                "actor_rollout_ref.rollout.max_num_batched_tokens=1024",
            ],
            1,
            8,
        ),
    ],
)
def test_the_accepted_side_of_each_boundary(overrides: list[str], nodes: int, gpus: int) -> None:
    assert problems(overrides, nodes, gpus) == []


def test_a_replica_that_would_straddle_nodes_is_refused() -> None:
    """4 GPUs per replica on 6-GPU nodes: 12 GPUs split into 3 replicas, but the second would take 2 GPUs of each
    node; 6 GPUs per replica on 4-GPU nodes: not a whole number of nodes (verl's RolloutReplica asserts it)."""
    twelve = "actor_rollout_ref.actor.ppo_mini_batch_size=3"  # 3 x 8 trajectories: a multiple of 12 GPUs
    straddle = problems([twelve, "actor_rollout_ref.rollout.tensor_model_parallel_size=4"], nodes=2, gpus=6)
    assert len(straddle) == 1 and "does not divide the 6 GPUs of a node" in straddle[0]
    spans = problems([twelve, "actor_rollout_ref.rollout.tensor_model_parallel_size=6"], nodes=3, gpus=4)
    assert len(spans) == 1 and "not a multiple of the 4 GPUs of a node" in spans[0]
    hf = problems(
        ["actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.tensor_model_parallel_size=2"]
    )
    assert len(hf) == 1 and "hf rollout serves one model per GPU" in hf[0]


def test_a_prompt_longer_than_the_prompt_length_is_refused() -> None:
    def measured(tokens: int) -> LongestPrompt:
        return LongestPrompt(tokens, 7, 64, ("rows.parquet",), "text from the tokenizer")

    assert problems([], prompt=measured(4096)) == []
    (line,) = problems([], prompt=measured(4097))
    assert "the longest prompt ragym budget counts is 4097 tokens (row 7, the longest of 64 rows" in line
    assert "over actor_rollout_ref.rollout.prompt_length 4096" in line


def test_every_problem_is_one_line_of_ragym_submit(capsys: pytest.CaptureFixture) -> None:
    argv = [
        "submit",
        KBVQA,
        "--nodes",
        "4",
        "--gpus-per-node",
        "8",
        "--dry-run",
        "actor_rollout_ref.actor.ppo_mini_batch_size=6",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=3",
        "actor_rollout_ref.rollout.max_model_len=8192",
    ]
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("ragym submit: ") for line in lines), lines
    assert [
        "48 trajectories" in lines[0],
        "replica of 3 GPUs" in lines[1],
        "max_model_len 8192" in lines[2],
    ] == [True] * 3
    assert "ray job submit" not in captured.out
    with pytest.raises(UsageError):
        build_submission(KBVQA, ["actor_rollout_ref.actor.ppo_mini_batch_size=6"], nodes=4, gpus_per_node=8)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # A word was a ValueError traceback, a zero a ZeroDivisionError; a negative, a fraction or zero steps were
        # submitted.
        (["data.train_batch_size=abc"], ["data.train_batch_size 'abc' is not a whole number of at least 1"]),
        (["trainer.nnodes=0"], ["trainer.nnodes 0 is not"]),
        (["trainer.n_gpus_per_node=-1"], ["trainer.n_gpus_per_node -1 is not"]),
        (["actor_rollout_ref.rollout.tensor_model_parallel_size=0"], ["tensor_model_parallel_size 0 is not"]),
        (["actor_rollout_ref.rollout.n=1.5"], ["actor_rollout_ref.rollout.n 1.5 is not"]),
        (
            ["actor_rollout_ref.actor.ppo_mini_batch_size=-8", "trainer.total_training_steps=0"],
            [
                "actor_rollout_ref.actor.ppo_mini_batch_size -8 is not",
                "trainer.total_training_steps 0 is not a whole number of at least 1; set "
                "trainer.total_training_steps=1 or more, or null",
            ],
        ),
    ],
)
def test_a_size_that_is_not_a_count_is_refused_by_name(overrides: list[str], expected: list[str]) -> None:
    found = problems(overrides)
    assert len(found) == len(expected), found
    for line, text in zip(found, expected, strict=True):
        assert text in line, line


def test_a_zero_node_count_is_one_line_of_ragym_submit(capsys: pytest.CaptureFixture) -> None:
    assert main(["submit", KBVQA, "--nodes", "0", "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("ragym submit: trainer.nnodes 0 is not a whole number of at least 1")
    assert "ray job submit" not in captured.out


@pytest.fixture(scope="module")
def kbvqa_rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two KB-VQA rows over 12 MP query photos (``tests.rl.budget.fixtures``): the comparison row shows two."""
    from tests.rl.budget import fixtures

    return fixtures.kbvqa_rows(tmp_path_factory.mktemp("kbvqa"))


def test_the_recipes_own_rows_are_counted_when_they_are_here(kbvqa_rows: Path) -> None:
    """The prompt is counted as ``ragym budget`` counts it (the comparison row's two query images and its text):
    a prompt length one token short of it is refused, that length itself accepted."""
    from ragym.rl.budget.report import budget_report
    from ragym.rl.budget.tokens import TextCounter
    from ragym.rl.data.rows import load_rows

    rows = [f"data.train_files={kbvqa_rows}", f"data.val_files={kbvqa_rows}"]
    config = load_recipe(KBVQA, rows)
    report = budget_report(
        load_rows(str(kbvqa_rows), check_reset=False).rows, config, TextCounter(None), "", 128, "rows"
    )
    longest = report["summary"]["tokens"]["prompt"]["max"]
    assert (
        report["summary"]["tokens"]["prompt_visual"]["max"] > 1024 + 2
    )  # more than one query image's budget
    with pytest.raises(UsageError) as refused:
        build_submission(KBVQA, [*rows, f"data.max_prompt_length={longest - 1}"], nodes=1, gpus_per_node=8)
    (line,) = str(refused.value).splitlines()
    assert f"the longest prompt ragym budget counts is {longest} tokens" in line
    assert f"the longest of 2 rows sampled from {kbvqa_rows};" in line and "ESTIMATED" in line
    build_submission(KBVQA, [*rows, f"data.max_prompt_length={longest}"], nodes=1, gpus_per_node=8)
