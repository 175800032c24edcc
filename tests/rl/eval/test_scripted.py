"""``ragym rollout``: each row's env and the policy its hooks name (KB-VQA's policies: tests/envs/kbvqa)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ragym.data_prep.synthetic_kb import PRESETS, build_kb
from ragym.rl.errors import UsageError
from ragym.rl.eval import scripted


@pytest.fixture(scope="module")
def demo_kb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_kb(tmp_path_factory.mktemp("kb") / "demo", replace(PRESETS["demo"], num_rows=60), seed=0)


def test_rollout_command_prints_metrics(demo_kb: Path, capsys: pytest.CaptureFixture) -> None:
    argv = ["--kb-dir", str(demo_kb), "--policy", "signature", "--episodes", "5", "--show-signature"]
    assert scripted.main(argv) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["episodes"] == 5 and 0.0 <= summary["answer_acc"] <= 1.0


def test_rollout_builds_the_env_variant_its_settings_need(demo_kb: Path) -> None:
    """A demo aid among the settings turns a KBVQA-v0 row into KBVQA-Demo-v0 (KB-VQA's ``env_for_kwargs`` hook)."""
    row = {"extra_info": {"env_id": "KBVQA-v0", "env_kwargs": json.dumps({"kb_dir": str(demo_kb)})}}
    plain_id, plain, _ = scripted.RowEnvs("signature", None, {}, traced=False).for_row(row)
    aided_id, aided, policy = scripted.RowEnvs(
        "signature", None, {"rerank_by_index": True}, traced=False
    ).for_row(row)
    assert plain_id == "KBVQA-v0" and type(plain).__name__ == "KBVQAEnv"
    assert aided_id == "KBVQA-Demo-v0" and aided.aids.rerank_by_index and policy.by_index


def test_a_policy_the_env_lacks_is_one_line_naming_the_ones_it_has(demo_kb: Path) -> None:
    with pytest.raises(
        UsageError,
        match=r"^KBVQA-Demo-v0 has no scripted policy 'greedy' \(its policies: oracle, random, "
        r"signature; expert: .*\)$",
    ):
        scripted.main(["--kb-dir", str(demo_kb), "--policy", "greedy", "--episodes", "2"])
    with pytest.raises(
        UsageError, match=r"^DocMemo-v0 has no scripted policy 'signature' \(its policies: none;"
    ):
        scripted.policy_of("DocMemo-v0", None, "signature")


@pytest.mark.parametrize("episodes", ["0", "-1"])
def test_episodes_below_one_is_one_line_usage_error(episodes: str, capsys: pytest.CaptureFixture) -> None:
    """Before, ``--episodes 0`` printed a summary of no episodes (exit 0) and ``-1`` quietly ran every row."""
    from ragym.rl.cli import main as ragym

    assert ragym(["rollout", "--preset", "tiny", "--episodes", episodes]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"ragym rollout: --episodes must be >= 1, got {episodes}")
