"""``ragym submit``/``ragym jobs``: the job that gets built, the entry point verl runs, the job-client calls."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ragym.rl.cluster import submit
from ragym.rl.cluster.submit import build_submission, format_jobs
from ragym.rl.errors import UsageError
from ragym.rl.recipe.compose import RECIPES_DIR

REPO = RECIPES_DIR.parent
SMOKE = "kbvqa_single_gpu_smoke"


def test_verl_job_runs_main_ppo_on_the_recipe_from_the_working_dir() -> None:
    job = build_submission("kbvqa_qwen2_5_vl_7b", ["trainer.total_epochs=1"], nodes=4, gpus_per_node=8)
    assert job.engine == "verl"
    assert job.entrypoint.startswith('python -m verl.trainer.main_ppo --config-path "$PWD"/recipes ')
    assert "--config-name kbvqa_qwen2_5_vl_7b" in job.entrypoint
    assert job.entrypoint.endswith("trainer.nnodes=4 trainer.n_gpus_per_node=8 trainer.total_epochs=1")
    assert job.runtime_env["working_dir"] == str(REPO)
    assert ".venv" in job.runtime_env["excludes"]
    assert job.submission_id.startswith("ragym-kbvqa_qwen2_5_vl_7b-")


def test_the_job_ships_the_code_as_the_ragym_package_only(tmp_path: Path) -> None:
    """Every node imports ``ragym.*`` from the submitted copy (py_modules); the working dir leaves the folders out,
    so no node can import a top-level ``envs`` or ``rl``."""
    job = build_submission("kbvqa_qwen2_5_vl_7b", [])
    (staged,) = job.runtime_env["py_modules"]
    assert Path(staged).name == "ragym" and {"/envs/", "/rl/", "/rewards/", "/data_prep/", "/ragym/"} <= set(
        job.runtime_env["excludes"]
    )
    assert (Path(staged) / "envs" / "kbvqa" / "env.py").read_text() == (
        REPO / "envs" / "kbvqa" / "env.py"
    ).read_text()
    assert not list(Path(staged).rglob("__pycache__"))
    # -S: no site-packages, so not ragym's editable install either; only the staged copy can answer (found, not
    # imported: importing needs the job's third-party packages).
    probe = (
        "import importlib.machinery as m, importlib.util as u; top = u.find_spec('ragym').submodule_search_locations;"
        " print(m.PathFinder.find_spec('ragym.envs', list(top)).origin)"
    )
    env = {"PYTHONPATH": str(Path(staged).parent), "PATH": "/usr/bin:/bin"}
    found = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    assert found == str(Path(staged) / "envs" / "__init__.py")
    top_level = subprocess.run(
        [sys.executable, "-S", "-c", "import envs"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert top_level.returncode != 0 and "No module named 'envs'" in top_level.stderr


def test_verl_entrypoint_composes_through_verls_own_main(tmp_path: Path) -> None:
    """Run the entry point exactly as Ray would (a shell in the working dir), asking Hydra only to print."""
    job = build_submission(SMOKE, ["trainer.total_training_steps=2"])
    # The interpreter running the tests (the venv's), whatever `python` resolves to on PATH.
    command = job.entrypoint.replace("python ", f"{sys.executable} ", 1)
    result = subprocess.run(
        f"{command} --cfg job", shell=True, cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "total_training_steps: 2" in result.stdout
    assert "path: pkg://ragym.rewards.verl" in result.stdout


def test_cpu_job_applies_the_cpu_platform_before_the_users_overrides() -> None:
    job = build_submission("kbvqa_qwen2_5_vl_7b", ["trainer.n_gpus_per_node=2"], cpu=True)
    assert job.engine == "verl"
    assert "actor_rollout_ref.rollout.name=hf" in job.entrypoint
    assert "actor_rollout_ref.actor.strategy=fsdp2" in job.entrypoint
    # The user's value wins over the platform's; ray.init arguments are left out (the job joins a cluster).
    assert "trainer.n_gpus_per_node=2" in job.entrypoint and "trainer.n_gpus_per_node=1" not in job.entrypoint
    assert "ray_kwargs" not in job.entrypoint
    with pytest.raises(UsageError, match="--cpu"):
        build_submission("kbvqa_tiny_cpu", [], engine="local", cpu=True)


def test_local_engine_recipe_runs_ragym_train(tmp_path: Path) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    shutil.copytree(RECIPES_DIR / "base", recipes / "base")  # the bases it composes, beside it as in recipes/
    text = (RECIPES_DIR / f"{SMOKE}.yaml").read_text()
    (recipes / "local.yaml").write_text(text + "ragym:\n  engine:\n    # knob\n    num_threads: 1\n")
    job = build_submission(recipes / "local.yaml", ["trainer.total_training_steps=1"], repo_root=tmp_path)
    assert job.engine == "local"
    assert (
        job.entrypoint
        == "python -m ragym.rl.cli train --recipe recipes/local.yaml trainer.total_training_steps=1"
    )
    with pytest.raises(ValueError, match="local engine"):
        build_submission(recipes / "local.yaml", [], nodes=2, repo_root=tmp_path)
    forced = build_submission(recipes / "local.yaml", [], engine="verl", repo_root=tmp_path)
    assert "verl.trainer.main_ppo" in forced.entrypoint
    # A count the engine would refuse on the cluster is refused here, before the job goes.
    with pytest.raises(UsageError, match="data.train_batch_size -4 is not a whole number of at least 1"):
        build_submission(recipes / "local.yaml", ["data.train_batch_size=-4"], repo_root=tmp_path)
    with pytest.raises(UsageError, match="rollout.n 1 is one episode per group"):
        build_submission(recipes / "local.yaml", ["actor_rollout_ref.rollout.n=1"], repo_root=tmp_path)
    with pytest.raises(UsageError, match="data.shuffle 'no' is not true or false"):
        build_submission(recipes / "local.yaml", ["data.shuffle=no"], repo_root=tmp_path)


@pytest.mark.parametrize(
    ("recipe", "overrides", "error", "match"),
    [
        ("outside", [], ValueError, "outside the repository"),
        (SMOKE, ["actor_rollout_ref.rollout.temprature=0.5"], Exception, "temprature"),
        (SMOKE, ["actor_rollout_ref.actor.loss_agg_mode=bogus"], Exception, "loss_agg_mode"),
        (SMOKE, ["actor_rollout_ref.rollout.n=1"], UsageError, "rollout.n 1 is one episode per group"),
        # "no" from the command line is a true string to verl's trainer too (bool(filter_groups.get("enable"))).
        (SMOKE, ["algorithm.filter_groups.enable=no"], UsageError, "enable 'no' is not true or false"),
        (SMOKE, ["++ragym.outcome_metric=5"], UsageError, "ragym.outcome_metric: 5 is not a string or null"),
        (SMOKE, ["++ragym.turn_credit.step_weight=abc"], UsageError, "step_weight: 'abc' is not a number"),
    ],
)
def test_bad_recipes_fail_before_anything_is_submitted(
    tmp_path: Path, recipe: str, overrides: list[str], error: type[Exception], match: str
) -> None:
    if recipe == "outside":
        recipe = str(tmp_path / "outside.yaml")
        shutil.copy(RECIPES_DIR / f"{SMOKE}.yaml", recipe)
    with pytest.raises(error, match=match):
        build_submission(recipe, overrides)


def test_environment_is_forwarded_and_secrets_are_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGYM_DATA_DIR", "/shared/data")
    monkeypatch.setenv("WANDB_API_KEY", "s3cret")
    monkeypatch.delenv("RAGYM_CKPT_DIR", raising=False)
    job = build_submission(SMOKE, [], env={"EXTRA": "1"}, pip=["qwen-vl-utils"], submission_id="job-1")
    env = job.runtime_env["env_vars"]
    assert (
        env["RAGYM_DATA_DIR"] == "/shared/data" and env["WANDB_API_KEY"] == "s3cret" and env["EXTRA"] == "1"
    )
    assert "RAGYM_CKPT_DIR" not in env
    assert job.runtime_env["pip"] == ["qwen-vl-utils"]
    shown = " ".join(job.ray_command("http://head:8265"))
    assert "s3cret" not in shown and "/shared/data" in shown and "--submission-id job-1" in shown


class FakeClient:
    """Records what ragym asks of Ray's JobSubmissionClient."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def submit_job(self, **kwargs: object) -> str:
        self.calls.append(("submit", kwargs))
        return str(kwargs["submission_id"])

    def list_jobs(self) -> list[SimpleNamespace]:
        return [_job("old", "SUCCEEDED", 1_000), _job("new", "RUNNING", 2_000_000)]

    def get_job_logs(self, job_id: str) -> str:
        return f"logs of {job_id}\n"

    def stop_job(self, job_id: str) -> bool:
        self.calls.append(("stop", job_id))
        return True


def _job(job_id: str, status: str, start_ms: int) -> SimpleNamespace:
    return SimpleNamespace(
        submission_id=job_id,
        job_id=None,
        status=SimpleNamespace(value=status),
        start_time=start_ms,
        entrypoint="python -m verl.trainer.main_ppo " + "x" * 100,
    )


def test_commands_drive_the_job_client(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    client = FakeClient()
    monkeypatch.setattr(submit, "_client", lambda address: client)
    assert submit.submit_main([SMOKE, "--submission-id", "s1", "trainer.total_training_steps=2"]) == 0
    kind, kwargs = client.calls[0]
    assert kind == "submit" and kwargs["submission_id"] == "s1"
    assert kwargs["entrypoint"].endswith("trainer.total_training_steps=2")
    assert submit.jobs_main(["stop", "s1"]) == 0 and client.calls[-1] == ("stop", "s1")
    assert submit.jobs_main(["logs", "s1"]) == 0
    assert "logs of s1" in capsys.readouterr().out


def test_jobs_table_is_newest_first_and_truncates_entrypoints() -> None:
    lines = format_jobs(FakeClient().list_jobs()).splitlines()
    assert lines[0].split()[:3] == ["SUBMISSION_ID", "STATUS", "STARTED"]
    assert [line.split()[0] for line in lines[1:]] == ["new", "old"]
    assert all(line.endswith("...") for line in lines[1:])


LAUNCH = REPO / "launch"
RECIPE_KNOB = re.compile(r"\b(actor_rollout_ref|data|algorithm|trainer|reward|critic|ragym)\.[\w.]+=")


@pytest.mark.parametrize(
    "script", sorted(LAUNCH.glob("*.sh")) + [LAUNCH / "cluster.env"], ids=lambda p: p.name
)
def test_launch_scripts_are_valid_bash_and_hold_no_recipe_knobs(script: Path) -> None:
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True, check=False).returncode == 0
    assert RECIPE_KNOB.findall(script.read_text()) == []


def test_with_retrieval_deploys_the_service_first_and_points_the_envs_at_it() -> None:
    service = submit.RetrievalService("/shared/ragym/data/evqa/kb", replicas=4, port=8100)
    job = build_submission("kbvqa_qwen2_5_vl_7b", [], retrieval=service)
    deploy, train = job.entrypoint.split(" && ", 1)
    assert deploy == (
        "python -m ragym.envs.serving.ray_serve --kb-dir /shared/ragym/data/evqa/kb --replicas 4 --port 8100"
    )
    assert train.startswith("python -m verl.trainer.main_ppo ")
    assert job.runtime_env["env_vars"]["RAGYM_RETRIEVAL_URL"] == "http://127.0.0.1:8100"
    plain = build_submission("kbvqa_qwen2_5_vl_7b", [])
    assert "RAGYM_RETRIEVAL_URL" not in plain.runtime_env["env_vars"] and "&&" not in plain.entrypoint


def test_with_retrieval_on_the_command_line(capsys: pytest.CaptureFixture) -> None:
    argv = [
        "kbvqa_qwen2_5_vl_7b",
        "--with-retrieval",
        "/kb",
        "--retrieval-replicas",
        "2",
        "--dry-run",
    ]
    assert submit.submit_main(argv) == 0
    printed = capsys.readouterr().out
    assert "ragym.envs.serving.ray_serve --kb-dir /kb --replicas 2 --port 8000 &&" in printed
    assert "http://127.0.0.1:8000" in printed


def test_the_recipes_retrieval_address_reaches_the_jobs_runtime_env(capsys: pytest.CaptureFixture) -> None:
    url = "http://10.0.0.5:8000"
    for name in ("kbvqa_qwen2_5_vl_7b", "docmemo_qwen2_5_vl_7b"):
        job = build_submission(name, [f"ragym.retrieval.url={url}"])
        assert job.runtime_env["env_vars"]["RAGYM_RETRIEVAL_URL"] == url
        assert f"ragym.retrieval.url={url}" in job.entrypoint  # the agent loop reads it from the recipe too
    service = submit.RetrievalService("/kb", port=8100)
    filled = build_submission("kbvqa_qwen2_5_vl_7b", [], retrieval=service)
    assert "++ragym.retrieval.url=http://127.0.0.1:8100" in filled.entrypoint
    with pytest.raises(UsageError, match="ragym.retrieval.url must be null or an http"):
        build_submission("kbvqa_qwen2_5_vl_7b", ["ragym.retrieval.url=10.0.0.5"])
    assert submit.submit_main(["kbvqa_qwen2_5_vl_7b", f"ragym.retrieval.url={url}", "--dry-run"]) == 0
    assert f'"RAGYM_RETRIEVAL_URL": "{url}"' in capsys.readouterr().out
