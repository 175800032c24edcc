"""A real Ray job on CPU: ``ray start --head`` on loopback, ``ragym submit`` of the local engine, success, stop.

Everything runs inside private network, PID and mount namespaces (``unshare``): Ray can only listen on
the namespace's loopback, ``ray stop`` sees only this cluster's processes, and the kernel kills whatever
is left when the namespace's first process exits, so no Ray process outlives the test.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragym.data_prep.synthetic_kb import main as build_kb
from ragym.rl.recipe.compose import RECIPES_DIR
from ragym.rl.tiny.policy import build_tiny_policy

pytestmark = pytest.mark.ray

REPO = RECIPES_DIR.parent
UNSHARE = ["unshare", "--kill-child", "--net", "--pid", "--mount-proc"]
JOB_TIMEOUT_S = 300
"""Longest wait for the job (a hang guard: it took 160 s beside a verl run and three other jobs' training); the
whole script gets a minute more for Ray to start and stop."""


def _unshare_refusal() -> str | None:
    """Why private namespaces are unavailable here, or None when they work."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip (util-linux, iproute2) is not installed"
    probe = subprocess.run(
        [*UNSHARE, "ip", "link", "set", "lo", "up"], capture_output=True, text=True, check=False
    )
    return None if probe.returncode == 0 else f"unshare is not permitted here: {probe.stderr.strip()[:200]}"


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A short path under /tmp: Ray's socket paths must stay under 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="ragym-ray-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _script(
    workdir: Path,
    overrides: list[str],
    recipe: str = "kbvqa_tiny_cpu",
    flags: tuple[str, ...] = (),
    resources: str = "--num-cpus 2 --num-gpus 0",
    timeout_s: int = JOB_TIMEOUT_S,
) -> str:
    """The bash program run inside the namespaces: start Ray, submit and follow the job, always stop Ray."""
    bin_dir = Path(sys.executable).parent
    address = "http://127.0.0.1:8265"
    submit = [
        "python",
        "-m",
        "ragym.rl.cli",
        "submit",
        recipe,
        "--address",
        address,
        "--follow",
        "--timeout",
        str(timeout_s),
        "--submission-id",
        "ragym-ray-test",
        *flags,
        "--env",
        "WANDB_MODE=disabled",
        "--env",
        "HF_HUB_OFFLINE=1",
        *overrides,
    ]
    return f"""
set -u
export PATH={bin_dir}:$PATH RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0
ip link set lo up
trap 'ray stop --force >/dev/null 2>&1' EXIT
ray start --head --node-ip-address 127.0.0.1 --port 6380 --dashboard-host 127.0.0.1 --dashboard-port 8265 \\
    {resources} --temp-dir {workdir}/ray --disable-usage-stats || exit 90
{" ".join(submit)}
rc=$?
python -m ragym.rl.cli jobs --address {address} list
exit $rc
"""


def test_local_engine_job_succeeds_on_a_loopback_ray_cluster(workdir: Path) -> None:
    refusal = _unshare_refusal()
    if refusal:
        pytest.skip(refusal)
    assert build_kb(["--out", str(workdir / "kb"), "--preset", "tiny"]) == 0
    build_tiny_policy("qwen2_5_vl", workdir / "policy", seed=0)
    out = workdir / "grpo"
    overrides = [
        f"data.train_files={workdir}/kb/data/train.parquet",
        f"data.val_files={workdir}/kb/data/test.parquet",
        f"actor_rollout_ref.model.path={workdir}/policy",
        f"trainer.default_local_dir={out}",
        "trainer.total_training_steps=1",
        "trainer.logger=[console]",
        "data.train_batch_size=2",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        # A random tiny policy never stops on its own: short turns keep the step to seconds.
        "data.max_response_length=96",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        "ragym.engine.batch_wait_s=0.5",
    ]
    result = subprocess.run(
        ["timeout", str(JOB_TIMEOUT_S + 60), *UNSHARE, "bash", "-c", _script(workdir, overrides)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    log = f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"
    assert result.returncode == 0, log
    assert "ragym: job ragym-ray-test SUCCEEDED" in result.stdout, log
    assert "step 1" in result.stdout, log  # the engine's metrics line, streamed from the job's logs
    assert "ragym-ray-test" in result.stdout.split("SUBMISSION_ID", 1)[-1], log  # `ragym jobs list`
    assert (out / "global_step_1" / "model.safetensors").is_file(), log


VERL_JOB_TIMEOUT_S = 1200
"""Longest wait for the verl job, a hang guard: two toy steps take about 1.5 min on 2 idle cores, and the whole test
took 623 s beside ``make test``'s other worker and three other jobs' training (load ~10)."""


def test_verl_job_on_a_cluster_of_cpu_nodes(workdir: Path, toy: Path) -> None:
    """`ragym submit RECIPE --cpu` on a Ray cluster started with a logical GPU: verl's trainer through the plugin, on
    the session's toy rows and warm-started policy (``toy``, which the verl trainer tests share). It is also the
    sync trainer mode's full-weight run on the hf rollout (``test_verl_trainer.VERL_RUN_OF_ENV``): 2 steps whose
    rollout served the trainer's weights each step (``check_two_sync_steps``, export and eval), and the run with a
    reference policy (``use_kl_loss``), which the CPU plugin loads unpinned and the CPU platform runs in float32."""
    from ragym.rl.recipe.compose import resolve_recipe_path
    from ragym.rl.recipe.platforms import cluster_overrides, merge_overrides, platform_overrides
    from ragym.rl.verl_plugin.verl_local import toy_overrides
    from tests.launch.test_verl_trainer import check_two_sync_steps, export_and_eval, logged_steps

    refusal = _unshare_refusal()
    if refusal:
        pytest.skip(refusal)
    recipe = "kbvqa_qwen2_5_vl_7b"
    base = merge_overrides(cluster_overrides("cpu"), platform_overrides("toy"))
    toy_set = toy_overrides(resolve_recipe_path(recipe), toy, base)
    out = workdir / "verl"
    overrides = merge_overrides(
        platform_overrides("toy"),
        toy_set,
        [
            f"trainer.default_local_dir={out}",
            "trainer.total_training_steps=2",
            "actor_rollout_ref.actor.use_kl_loss=true",
        ],
    )
    script = _script(workdir, overrides, recipe, ("--cpu",), "--num-cpus 16 --num-gpus 1", VERL_JOB_TIMEOUT_S)
    result = subprocess.run(
        ["timeout", str(VERL_JOB_TIMEOUT_S + 60), *UNSHARE, "bash", "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    log = f"stdout:\n{result.stdout[-6000:]}\nstderr:\n{result.stderr[-4000:]}"
    assert result.returncode == 0, log
    assert "ragym: job ragym-ray-test SUCCEEDED" in result.stdout, log
    # verl's metrics and ragym's in the run's metrics.jsonl, its steps the ones the job's streamed logs showed: the
    # checks of every sync run
    steps = logged_steps(out, set(), result.stdout)
    check_two_sync_steps(steps, toy, out, "KBVQA-v0")
    # The reference is the starting policy computed as the actor computes it: no KL before the first update (a bf16
    # reference gave 2.4e-5 there from rounding alone, 500 times the 4.6e-8 one update made), some after it.
    assert steps[1]["actor/kl_loss"] < 1e-7 and steps[2]["actor/kl_loss"] > 0, steps
    export_and_eval(toy, out, "ray_job", "KBVQA-v0")
