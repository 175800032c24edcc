"""``ragym submit`` and ``ragym jobs``: run a recipe as a Ray job and follow it.

``ragym submit RECIPE [overrides...]`` checks the recipe locally (verl's schema and validation, so a typo
fails here and not after the upload; for verl jobs, the sizes verl and vLLM would refuse on the cluster's GPUs:
``ragym.rl.cluster.sizes``, every problem one line), then submits the job that ``ray job submit`` would: the repository
as the job's working directory with ragym's code beside it as the ``ragym`` package (Ray's ``py_modules``: every
node imports ``ragym.envs``, ``ragym.rl``... from the submitted copy, whatever is installed there), the ragym
environment variables of the submitting shell, optional pip packages, and the entry point: verl's
``main_ppo`` on the recipe, or the local engine (``ragym train``) for recipes with a ``ragym.engine``
section. ``--with-retrieval KB_DIR`` first deploys the retrieval service on the cluster as a Ray Serve
app (``ragym.envs.serving.ray_serve``) and fills in the recipe's ``ragym.retrieval.url`` with its address; a
recipe's address reaches every env of the job (the agent loop's ``retrieval_url``, ``$RAGYM_RETRIEVAL_URL``).
``ragym jobs list|logs|stop`` wraps Ray's job client.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import logging
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ragym.rl.budget.prompts import LongestPrompt, longest_prompt, recipe_data_files
from ragym.rl.cluster.sizes import check_sizes
from ragym.rl.errors import UsageError
from ragym.rl.lora import verl_lora_overrides
from ragym.rl.recipe.check import check_recipe
from ragym.rl.recipe.compose import resolve_recipe_path, validate_recipe
from ragym.rl.recipe.counts import (
    LOCAL_ENGINE_COUNTS,
    LOCAL_ENGINE_OPTIONAL_COUNTS,
    LOCAL_ENGINE_STEPS,
    count_problems,
)
from ragym.rl.recipe.platforms import cluster_overrides, merge_overrides
from ragym.rl.recipe.retrieval import URL_KEY, recipe_retrieval_url

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The repository: shipped as the job's working directory."""

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
"""Ray dashboard (job server) address when neither --address nor RAY_API_SERVER_ADDRESS/RAY_ADDRESS is set."""

FORWARDED_ENV = (
    "RAGYM_DATA_DIR",
    "RAGYM_MODELS_DIR",
    "RAGYM_CKPT_DIR",
    "RAGYM_SMOKE_DIR",
    "RAGYM_SMOKE_MODEL",
    "WANDB_API_KEY",
    "WANDB_ENTITY",
    "WANDB_MODE",
    "WANDB_BASE_URL",
    "HF_HOME",
    "HF_TOKEN",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
)
"""Variables copied from the submitting shell into the job when set (recipes read the RAGYM_* ones)."""

SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
"""Variables whose names contain these are masked when a command is printed."""

WORKING_DIR_EXCLUDES = (
    ".git",
    ".venv",
    "runs",
    "checkpoints",
    "outputs",
    "wandb",
    "*.egg-info",
    "__pycache__",
    # The links that let static tools resolve ragym.* (docs/development.md): the code travels in py_modules.
    "/ragym/",
)
"""Never uploaded with the working directory: environments, outputs, caches and the ``ragym/`` links (Ray also
honours .gitignore)."""

CODE_FOLDERS = ("envs", "rewards", "rl", "data_prep")
"""The repository's code folders: they travel as the ``ragym`` package (``py_modules``), not in the working dir."""

TERMINAL_STATUSES = ("SUCCEEDED", "FAILED", "STOPPED")
"""Ray job statuses after which nothing changes."""


@dataclass(frozen=True)
class RetrievalService:
    """The retrieval service a job deploys before it trains (``--with-retrieval``)."""

    kb_dir: str
    """KB folder as the cluster's nodes see it (shared storage)."""
    replicas: int = 1
    """Ray Serve replicas of the app."""
    port: int = 8000
    """Port of Serve's HTTP proxy on every node (127.0.0.1: each worker reaches its own node's proxy)."""

    def deploy_command(self) -> str:
        """The shell command that deploys the app (detached) from the job's driver."""
        return shlex.join(
            [
                "python",
                "-m",
                "ragym.envs.serving.ray_serve",
                "--kb-dir",
                self.kb_dir,
                "--replicas",
                str(self.replicas),
                "--port",
                str(self.port),
            ]
        )

    @property
    def url(self) -> str:
        """What ``make_env`` resolves from ``$RAGYM_RETRIEVAL_URL`` for the job's envs that search the service."""
        return f"http://127.0.0.1:{self.port}"


@dataclass(frozen=True)
class Submission:
    """One Ray job: what runs, where it runs from, and under which id."""

    submission_id: str
    """Ray's job id (``ragym-<recipe>-<time>`` unless given)."""
    engine: str
    """``verl`` (main_ppo on the cluster) or ``local`` (the in-process engine, one node)."""
    entrypoint: str
    """Shell command Ray runs in the unpacked working directory."""
    runtime_env: dict[str, Any]
    """Ray runtime environment: working_dir, py_modules (the staged ``ragym`` package), excludes, env_vars, optional pip."""

    def ray_command(self, address: str) -> list[str]:
        """The equivalent ``ray job submit`` command line, secrets masked (for --dry-run and logs)."""
        shown = dict(self.runtime_env)
        shown["env_vars"] = {k: _mask(k, v) for k, v in self.runtime_env.get("env_vars", {}).items()}
        return [
            "ray",
            "job",
            "submit",
            "--address",
            address,
            "--submission-id",
            self.submission_id,
            "--runtime-env-json",
            json.dumps(shown),
            "--no-wait",
            "--",
            self.entrypoint,
        ]


def _mask(name: str, value: str) -> str:
    return "***" if any(marker in name.upper() for marker in SECRET_MARKERS) else value


def _relative_to_repo(path: Path, repo_root: Path) -> Path:
    """The recipe's path inside the repository; only the repository travels to the cluster."""
    try:
        return path.relative_to(repo_root)
    except ValueError:
        raise UsageError(
            f"recipe {path} is outside the repository {repo_root}; only the repository is "
            "shipped to the cluster, so copy the recipe under recipes/"
        ) from None


def stage_package(repo_root: Path, into: Path | None = None) -> Path:
    """ragym's code laid out as the installed package (``<dir>/ragym/envs``, ``<dir>/ragym/rl``...), for Ray's
    ``py_modules``; a fresh temporary folder (removed when this process exits) unless ``into`` is given."""
    if into is None:
        into = Path(tempfile.mkdtemp(prefix="ragym-job-"))
        atexit.register(shutil.rmtree, into, ignore_errors=True)
    package = into / "ragym"
    for folder in CODE_FOLDERS:
        shutil.copytree(
            repo_root / folder, package / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    return package


def build_submission(
    recipe: str | Path,
    overrides: list[str],
    *,
    engine: str = "auto",
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    env: dict[str, str] | None = None,
    pip: list[str] | None = None,
    submission_id: str | None = None,
    repo_root: Path = REPO_ROOT,
    retrieval: RetrievalService | None = None,
    cpu: bool = False,
) -> Submission:
    """Check the recipe with its overrides and build the job that runs it (``cpu``: verl on CPU nodes, with
    ``recipes/platforms/cpu.yaml`` applied before the user's overrides)."""
    path = resolve_recipe_path(recipe)
    relative = _relative_to_repo(path, repo_root)
    cluster = [f"trainer.nnodes={nodes}"] if nodes is not None else []
    cluster += [f"trainer.n_gpus_per_node={gpus_per_node}"] if gpus_per_node is not None else []
    overrides = [*cluster, *overrides]
    if cpu:
        if engine == "local":
            raise UsageError(
                "--cpu runs verl's trainer on CPU nodes; the local engine needs no platform settings"
            )
        engine = "verl"
        overrides = merge_overrides(cluster_overrides("cpu"), overrides)
    if retrieval is not None:  # the deployed service is the recipe's address (++: set or add the key)
        overrides.append(f"++{URL_KEY}={retrieval.url}")

    def sizes(config: Any) -> None:  # every size the job would refuse on the cluster, at once, before it goes
        if _engine(config, engine) == "verl":
            at = check_sizes(config, recipe_prompt(config, repo_root))
            logger.info("sizes checked for %s (data-parallel %d)", at.describe(), at.data_parallel)
        else:
            counts = count_problems(
                config, LOCAL_ENGINE_COUNTS, LOCAL_ENGINE_OPTIONAL_COUNTS, LOCAL_ENGINE_STEPS
            )
            if counts:
                raise UsageError(f"recipe {recipe}: " + "\n".join(counts))

    config = check_recipe(path, overrides, validate=False, before_verl=sizes)
    url = recipe_retrieval_url(config)
    engine = _engine(config, engine)
    if engine == "local":
        if cluster:
            raise UsageError(
                "--nodes/--gpus-per-node apply to verl jobs; the local engine runs in one process"
            )
        command = ["python", "-m", "ragym.rl.cli", "train", "--recipe", str(relative), *overrides]
        entrypoint = shlex.join(command)
    elif engine == "verl":
        validate_recipe(config)
        overrides = [*overrides, *verl_lora_overrides(config)]  # LoRA's vision-tower default, as verl_command
        # Hydra resolves --config-path against verl's package unless it is absolute, and the absolute path
        # exists only on the cluster: Ray runs the entry point through a shell inside the unpacked working dir.
        config_dir = f'"$PWD"/{shlex.quote(str(relative.parent))}'
        command = ["python", "-m", "verl.trainer.main_ppo", "--config-name", relative.stem, *overrides]
        entrypoint = f"{shlex.join(command[:3])} --config-path {config_dir} {shlex.join(command[3:])}"
    else:
        raise UsageError(f"unknown engine {engine!r}; expected auto, verl or local")
    env_vars = {name: os.environ[name] for name in FORWARDED_ENV if name in os.environ}
    env_vars.update({"PYTHONUNBUFFERED": "1", **(env or {})})
    if url is not None:  # every process of the job, for envs built outside the agent loop too
        env_vars["RAGYM_RETRIEVAL_URL"] = url
    if retrieval is not None:
        entrypoint = f"{retrieval.deploy_command()} && {entrypoint}"
    runtime_env: dict[str, Any] = {
        "working_dir": str(repo_root),
        "py_modules": [str(stage_package(REPO_ROOT))],  # the code running this, wherever the recipe lives
        "excludes": [*WORKING_DIR_EXCLUDES, *(f"/{folder}/" for folder in CODE_FOLDERS)],
        "env_vars": env_vars,
    }
    if pip:
        runtime_env["pip"] = list(pip)
    job_id = submission_id or f"ragym-{path.stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    return Submission(job_id, engine, entrypoint, runtime_env)


def _engine(config: Any, engine: str) -> str:
    """``auto``: the local engine for a recipe with a ``ragym.engine`` section, else verl."""
    if engine != "auto":
        return engine
    return "local" if OmegaConf.select(config, "ragym.engine") is not None else "verl"


def recipe_prompt(config: Any, repo_root: Path) -> LongestPrompt | None:
    """The longest prompt of the recipe's data files that are here (relative ones under the working dir the job
    runs in), counted as ``ragym budget`` counts it; None when none is here (the checks then rely on the cap)."""
    files = recipe_data_files(config, repo_root)
    present = [path for path in files if path.is_file()]
    if not present:
        logger.info(
            "prompts not counted: the recipe's data files are not here (%s); the checks take prompts at "
            "data.max_prompt_length",
            ", ".join(map(str, files)) or "none set",
        )
        return None
    return longest_prompt(config, present)


def _client(address: str) -> Any:
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(address)


def _default_address() -> str:
    return os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS") or DEFAULT_ADDRESS


def follow(client: Any, job_id: str, timeout_s: float | None = None) -> str:
    """Stream the job's logs to stdout until it ends (or ``timeout_s`` passes); return its status."""

    async def _tail() -> None:
        async for chunk in client.tail_job_logs(job_id):
            print(chunk, end="", flush=True)

    try:
        asyncio.run(asyncio.wait_for(_tail(), timeout=timeout_s))
    except TimeoutError:
        print(f"\nragym: stopped following {job_id} after {timeout_s:.0f} s", file=sys.stderr)
    # The log stream can close a moment before the status is final.
    deadline = time.monotonic() + 30
    status = str(client.get_job_status(job_id).value)
    while status not in TERMINAL_STATUSES and time.monotonic() < deadline and timeout_s is None:
        time.sleep(1)
        status = str(client.get_job_status(job_id).value)
    return status


def _parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--env expects NAME=VALUE, got {pair!r}")
        env[name] = value
    return env


def submit_main(argv: list[str]) -> int:
    """``ragym submit``: check, submit, optionally follow."""
    parser = argparse.ArgumentParser(prog="ragym submit", description="Submit a recipe as a Ray job.")
    parser.add_argument("recipe", help="recipe path or name under recipes/")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. trainer.total_epochs=1")
    parser.add_argument("--address", default=_default_address(), help="Ray dashboard address (job server)")
    parser.add_argument(
        "--engine",
        default="auto",
        choices=("auto", "verl", "local"),
        help="auto: local when the recipe has a ragym.engine section, else verl",
    )
    parser.add_argument(
        "--nodes", type=int, help="trainer.nnodes (cluster size; launch/cluster.env NUM_NODES)"
    )
    parser.add_argument("--gpus-per-node", type=int, help="trainer.n_gpus_per_node (launch/cluster.env)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="extra job variable")
    parser.add_argument("--pip", action="append", default=[], metavar="PKG", help="pip package for the job")
    parser.add_argument("--submission-id", help="job id (default ragym-<recipe>-<time>)")
    parser.add_argument("--follow", action="store_true", help="stream logs; exit 0 only if the job succeeds")
    parser.add_argument("--timeout", type=float, help="with --follow: stop following after this many seconds")
    parser.add_argument("--dry-run", action="store_true", help="print the ray job submit command and exit")
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="verl's trainer on CPU nodes (ragym's CPU plugin; start the nodes with --num-gpus 1): applies "
        "recipes/platforms/cpu.yaml",
    )
    parser.add_argument(
        "--with-retrieval",
        metavar="KB_DIR",
        help="deploy the retrieval service for this KB on Ray Serve first; envs search through it",
    )
    parser.add_argument(
        "--retrieval-replicas", type=int, default=1, help="with --with-retrieval: Serve replicas"
    )
    parser.add_argument(
        "--retrieval-port", type=int, default=8000, help="with --with-retrieval: Serve's HTTP port"
    )
    args = parser.parse_intermixed_args(argv)
    retrieval = (
        RetrievalService(args.with_retrieval, args.retrieval_replicas, args.retrieval_port)
        if args.with_retrieval
        else None
    )
    submission = build_submission(
        args.recipe,
        args.overrides,
        engine=args.engine,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        env=_parse_env(args.env),
        pip=args.pip,
        submission_id=args.submission_id,
        retrieval=retrieval,
        cpu=args.cpu,
    )
    if args.dry_run:
        print(shlex.join(submission.ray_command(args.address)))
        return 0
    client = _client(args.address)
    job_id = client.submit_job(
        entrypoint=submission.entrypoint,
        submission_id=submission.submission_id,
        runtime_env=submission.runtime_env,
    )
    print(
        f"submitted {job_id} ({submission.engine}) to {args.address}\n  follow: ragym jobs logs {job_id} --follow"
    )
    if not args.follow:
        return 0
    status = follow(client, job_id, args.timeout)
    print(f"ragym: job {job_id} {status}")
    return 0 if status == "SUCCEEDED" else 1


def jobs_main(argv: list[str]) -> int:
    """``ragym jobs list|logs ID [--follow]|stop ID``."""
    parser = argparse.ArgumentParser(prog="ragym jobs", description="List, tail or stop Ray jobs.")
    parser.add_argument("--address", default=_default_address(), help="Ray dashboard address (job server)")
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("list", help="every job with its status")
    logs = sub.add_parser("logs", help="print (or --follow) a job's logs")
    logs.add_argument("job_id")
    logs.add_argument("--follow", action="store_true", help="stream until the job ends")
    stop = sub.add_parser("stop", help="stop a running job")
    stop.add_argument("job_id")
    args = parser.parse_args(argv)
    client = _client(args.address)
    if args.action == "list":
        print(format_jobs(client.list_jobs()))
    elif args.action == "logs" and args.follow:
        status = follow(client, args.job_id)
        print(f"ragym: job {args.job_id} {status}")
        return 0 if status == "SUCCEEDED" else 1
    elif args.action == "logs":
        print(client.get_job_logs(args.job_id), end="")
    else:
        stopped = client.stop_job(args.job_id)
        print(f"{args.job_id}: {'stop requested' if stopped else 'not running'}")
    return 0


def format_jobs(jobs: list[Any]) -> str:
    """A table of jobs, newest first: id, status, start time, entry point."""
    rows = [("SUBMISSION_ID", "STATUS", "STARTED", "ENTRYPOINT")]
    for job in sorted(jobs, key=lambda j: j.start_time or 0, reverse=True):
        started = (
            time.strftime("%Y-%m-%d %H:%M", time.localtime(job.start_time / 1000)) if job.start_time else "-"
        )
        entry = job.entrypoint if len(job.entrypoint) <= 80 else job.entrypoint[:77] + "..."
        rows.append((job.submission_id or job.job_id or "-", str(job.status.value), started, entry))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(
        "  ".join([*(c.ljust(w) for c, w in zip(row[:3], widths, strict=True)), row[3]]) for row in rows
    )
