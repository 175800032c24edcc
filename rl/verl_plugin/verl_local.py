"""``ragym train --engine verl``: verl's own trainer (``main_ppo``) on this machine, on a Ray instance it starts
and stops itself, exactly as a cluster job runs it.

On a machine without a GPU the recipe gets ``recipes/platforms/cpu.yaml`` (ragym's verl plugin: CPU platform,
hf rollout, FSDP2 on gloo, SDPA); with a GPU it runs as written (vLLM, FSDP). ``--toy DIR`` trains any shipped
recipe at toy size: synthetic rows of the recipe's environment and a tiny, briefly warm-started policy, built
in DIR once, plus ``recipes/platforms/toy.yaml``. ``--network private`` (the default where the kernel allows
it) runs the trainer and its Ray instance in a private network namespace with only loopback, so none of Ray's
servers is reachable from outside; ``--network host`` keeps the host's network (a retrieval service or W&B
elsewhere), where Ray listens where its defaults say.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ragym.rl.core.checkpoints import latest_step
from ragym.rl.errors import UsageError
from ragym.rl.guards import GUARDS_FILE, GuardStop
from ragym.rl.lora import verl_lora_overrides
from ragym.rl.recipe.check import check_recipe
from ragym.rl.recipe.compose import PACKAGE_ROOT, REWARD_KWARGS, load_recipe, resolve_recipe_path
from ragym.rl.recipe.modes import MODE_KEY
from ragym.rl.recipe.platforms import merge_overrides, platform_overrides

logger = logging.getLogger(__name__)

AGENT_LOOP_KEY = "actor_rollout_ref.rollout.agent.agent_loop_config_path"
"""The recipe key naming the agent-loop registry file (relative to the repository in shipped recipes)."""
WORKER_NICENESS_ENV = "RAY_worker_niceness"
"""Niceness of the workers of a Ray instance the trainer starts (read by its raylet): Ray's default, 15, leaves
every worker (the FSDP worker, the rollout server, agent-loop and reward workers) about 1/30 of the CPU share of
any other job on the machine (a one-step toy run beside two busy processes took 21 min, 13 of them starting up;
4 min at 0). 0 shares the machine fairly. One already in the environment wins."""
NO_PRESTART = {"RAY_enable_worker_prestart": "0", "RAY_prestart_worker_first_driver": "0"}
"""Raylet settings for a Ray instance the trainer starts itself: no Python workers started ahead of need. verl
gives each of its actors a process of its own, so the idle workers Ray prestarts when the driver connects and
when tasks queue sat idle to the end of a toy run (3 of them, each importing Ray: about 4 s of CPU a run on 2
cores). Ones already in the environment win."""
PRIVATE_NETWORK = ["unshare", "--net", "--pid", "--kill-child", "--mount-proc"]
"""A private network (loopback only) and PID namespace: Ray's servers are unreachable from outside, and every
process the run started dies with it."""
TOY_LOCK = ".build.{env_id}.lock"
"""The file in a ``--toy`` folder that runs sharing the folder lock while one of them builds ``env_id``'s toy: one per
env, so a run of another env goes on (one lock for the folder held ``make test``'s other worker idle for the
whole of a 1.5-min KB-VQA warm start, its own toy long built)."""


def in_private_network(command: list[str], name: str) -> list[str]:
    """``command`` run in a new :data:`PRIVATE_NETWORK` namespace with its loopback up (``name``: the shell's
    ``$0``, shown by ``ps``)."""
    return [*PRIVATE_NETWORK, "sh", "-c", 'ip link set lo up && exec "$@"', name, *command]


def gpu_present() -> bool:
    """Whether this machine has a CUDA GPU (then verl runs as on a cluster: vLLM, FSDP, NCCL)."""
    import torch

    return torch.cuda.is_available()


def private_network_refusal() -> str | None:
    """Why a private network namespace cannot be made here, or None when it can."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip (util-linux, iproute2) is not installed"
    probe = subprocess.run(
        [*PRIVATE_NETWORK, "ip", "link", "set", "lo", "up"], capture_output=True, text=True, check=False
    )
    return None if probe.returncode == 0 else f"unshare is not permitted: {probe.stderr.strip()[:200]}"


def toy_policy(recipe: Path, toy_dir: Path) -> Path:
    """The folder of the tiny policy ``toy_overrides`` builds for ``recipe``'s environment in ``toy_dir``."""
    from ragym.data_prep.toy_data import toy_env

    try:
        return toy_dir / "policy" / toy_env(recipe)
    except ValueError as err:
        raise UsageError(f"--toy: {err}") from None


def toy_built(recipe: Path, toy_dir: Path) -> bool:
    """Whether ``toy_dir`` already holds ``recipe``'s toy policy (then a run skips the build and its checks)."""
    return (toy_policy(recipe, toy_dir) / "config.json").is_file()


def toy_platform(env_id: str) -> list[str]:
    """``recipes/platforms/toy.yaml``'s overrides for ``env_id``'s toy runs: its prompt length raised where the env's
    toy prompts are longer (``EnvHooks.toy_prompt_length``), ``max_model_len`` with it."""
    from ragym.envs.hooks import env_hooks

    overrides = platform_overrides("toy")
    length = env_hooks(env_id).toy_prompt_length
    if length is None:
        return overrides
    settings = dict(item.split("=", 1) for item in overrides)
    response = int(settings["data.max_response_length"])
    raised = {"data.max_prompt_length": length, "actor_rollout_ref.rollout.max_model_len": length + response}
    return merge_overrides(overrides, [f"{key}={value}" for key, value in raised.items()])


def toy_overrides(recipe: Path, toy_dir: Path, overrides: list[str]) -> list[str]:
    """Rows of the recipe's environment and a warm-started tiny policy in ``toy_dir`` (built once from the recipe
    and the platform ``overrides``), as overrides. ``verl_command`` checks the whole run's settings first."""
    from ragym.data_prep.toy_data import toy_rows

    policy = toy_policy(recipe, toy_dir)
    env_id = policy.name
    # A built toy skips the composition (seconds of CPU in every run's CLI): the run's own check follows either way.
    config = None
    if not (policy / "config.json").is_file():
        config = check_recipe(recipe, overrides, validate=False)
    toy_dir.mkdir(parents=True, exist_ok=True)
    with (toy_dir / TOY_LOCK.format(env_id=env_id)).open("w") as lock:
        # Runs may share a toy folder (make test's two workers do): one builds an env's rows and policy while
        # the others of that env wait, then they reuse them, instead of all writing the same files at once.
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = toy_rows(env_id, toy_dir / env_id)
        if not (policy / "config.json").is_file():
            # Only a build imports the policy's model classes (seconds of CPU).
            from ragym.rl.tiny.policy import build_tiny_policy
            from ragym.rl.tiny.warm import warm_start

            config = config or check_recipe(recipe, overrides, validate=False)
            import pandas as pd

            rows = pd.read_parquet(data / "train.parquet").to_dict("records")
            # The random policy the warm start begins from, the env's own: another env's build may run meanwhile.
            with tempfile.TemporaryDirectory(prefix=f".random-{env_id}-", dir=toy_dir) as scratch:
                random_policy = build_tiny_policy("qwen2_5_vl", Path(scratch), seed=0)
                warm_start(random_policy, rows, config, policy)
    return [
        f"data.train_files={data / 'train.parquet'}",
        f"data.val_files={data / 'test.parquet'}",
        f"actor_rollout_ref.model.path={policy}",
        f"trainer.default_local_dir={toy_dir / 'checkpoints' / recipe.stem}",
    ]


def absolute_paths(config: DictConfig, recipe: Path) -> list[str]:
    """Overrides that make the recipe's repository-relative paths absolute, so the run works from any folder
    (``main_ppo`` resolves them against its working directory)."""
    out = []
    loops = OmegaConf.select(config, AGENT_LOOP_KEY)
    if loops and not Path(loops).is_absolute() and (PACKAGE_ROOT / loops).is_file():
        out.append(f"{AGENT_LOOP_KEY}={PACKAGE_ROOT / loops}")
    reward = OmegaConf.select(config, f"{REWARD_KWARGS}.recipe_path")
    if reward:  # load_recipe already resolved it against the recipe's folder and the repository
        out.append(f"{REWARD_KWARGS}.recipe_path={reward}")
    return out


ROLLOUTS = ("hf", "vllm")
"""Rollouts ``--rollout`` chooses between: without a GPU ragym's hf replica (the default) or vLLM's CPU backend; with
one the recipe's (vLLM, the default) or the hf replica (``recipes/platforms/gpu_hf.yaml``: no vLLM, no flash-attn)."""


CPU_PLATFORM_OF_MODE = {"ragym_separate_async": "cpu_separate_async"}
"""Trainer modes (``trainer.v1.trainer_mode``) that need more than ``cpu.yaml`` on a machine without a GPU, and the
platform file (``recipes/platforms/``) the command adds for them, so the mode stays one line there too."""


def trainer_mode(recipe: Path, overrides: list[str]) -> str:
    """The ``trainer.v1.trainer_mode`` of ``recipe`` composed with ``overrides``."""
    return str(OmegaConf.select(load_recipe(recipe, overrides), MODE_KEY))


def mode_platform(
    recipe: Path, groups: list[list[str]], overrides: list[str], on_cpu: bool
) -> list[list[str]]:
    """The platform file a trainer mode needs on a machine without a GPU (``CPU_PLATFORM_OF_MODE``: a rollout pool
    and a weight sync for ragym_separate_async), as a group of overrides after ``groups``; none with a GPU."""
    if not on_cpu:
        return []
    name = CPU_PLATFORM_OF_MODE.get(trainer_mode(recipe, merge_overrides(*groups, overrides)))
    return [platform_overrides(name)] if name else []


def vllm_cpu_platform() -> list[str]:
    """The overrides that serve the policy with vLLM's CPU backend (on top of ``cpu.yaml`` and ``toy.yaml``)."""
    from ragym.rl.verl_plugin.vllm_cpu import vllm_cpu_refusal

    refusal = vllm_cpu_refusal()
    if refusal:
        raise UsageError(f"--rollout vllm: {refusal}")
    return platform_overrides("vllm_cpu")


def verl_command(
    recipe: str, overrides: list[str], toy: Path | None, rollout: str | None = None
) -> tuple[list[str], DictConfig]:
    """The ``main_ppo`` command line for ``recipe`` with the platform's, the toy's and the user's overrides;
    ``rollout`` (``ROLLOUTS``; None: hf without a GPU, the recipe's with one)."""
    if rollout is not None and rollout not in ROLLOUTS:
        raise UsageError(f"--rollout {rollout}: choose one of {', '.join(ROLLOUTS)}")
    path = resolve_recipe_path(recipe)
    on_cpu = not gpu_present()
    groups = (
        [platform_overrides("cpu")] if on_cpu else [platform_overrides("gpu_hf")] if rollout == "hf" else []
    )
    # Last: what vLLM's CPU backend needs wins over the toy's settings.
    late = [vllm_cpu_platform()] if on_cpu and rollout == "vllm" else []
    if toy is not None:
        toy_settings = toy_platform(toy_policy(path, toy.resolve()).name)
        if not toy_built(path, toy.resolve()):
            # The run's settings as they will be but for the toy's files: a recipe or override error (a misspelt
            # key, a trainer mode the rollout cannot run) is refused before minutes of building, not after.
            planned = [*groups, toy_settings, *late]
            check_recipe(
                path,
                merge_overrides(*planned, *mode_platform(path, planned, overrides, on_cpu), overrides),
                validate=False,
            )
        groups += [toy_settings, toy_overrides(path, toy.resolve(), merge_overrides(*groups))]
    groups += late
    groups += mode_platform(path, groups, overrides, on_cpu)
    merged = merge_overrides(*groups, overrides)
    config = check_recipe(path, merged)
    merged = merge_overrides(merged, absolute_paths(config, path), verl_lora_overrides(config))
    command = [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        "--config-path",
        str(path.parent),
        "--config-name",
        path.stem,
        *merged,
    ]
    return command, config


RAY_INIT_KEYS = "ray_kwargs.ray_init."
"""Overrides for a Ray instance the trainer starts itself, which ``ray.init`` refuses when it joins one
(``RAY_ADDRESS``)."""


def run_verl(
    recipe: str,
    overrides: list[str],
    *,
    toy: Path | None = None,
    network: str = "auto",
    rollout: str | None = None,
) -> int:
    """Run verl's trainer to the end of the recipe; returns its exit status."""
    command, config = verl_command(recipe, overrides, toy, rollout)
    joining = bool(os.environ.get("RAY_ADDRESS"))
    if joining:  # ray.init refuses its start-up arguments (the CPU platform's num_cpus, ...) when it joins
        command = [arg for arg in command if not arg.lstrip("+").startswith(RAY_INIT_KEYS)]
    if network == "auto":
        network = "host" if joining or private_network_refusal() else "private"
    if network == "private":
        if joining:
            raise UsageError(
                "--network private starts its own Ray instance; unset RAY_ADDRESS or use --network host"
            )
        refusal = private_network_refusal()
        if refusal:
            raise UsageError(f"--network private: {refusal}; use --network host")
        command = in_private_network(command, "ragym-verl")
    elif not joining:
        logger.warning(
            "the trainer starts Ray on the host network: Ray's servers listen where its defaults say"
        )
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    if not joining:
        env = {WORKER_NICENESS_ENV: "0", **NO_PRESTART, **env}  # the user's values win
    if network == "private":
        env.setdefault("RAY_AUTH_MODE", "disabled")  # nothing outside the namespace can reach the cluster
    if rollout == "vllm" and not gpu_present():
        from ragym.rl.verl_plugin.vllm_cpu import vllm_cpu_environment

        env = vllm_cpu_environment(env)
    logger.info(
        "verl trainer (%s network, %s): %s",
        network,
        "GPU" if gpu_present() else "CPU plugin",
        " ".join(command[-len(command) + command.index("verl.trainer.main_ppo") - 1 :]),
    )
    out_dir = OmegaConf.select(config, "trainer.default_local_dir")
    logger.info("checkpoints: %s", out_dir)
    firings = Path(out_dir) / GUARDS_FILE
    seen = firings.stat().st_size if firings.exists() else 0
    # verl resumes from the marker only in its auto mode; checked here, a broken one is refused before start-up.
    resumed_at = latest_step(out_dir) if OmegaConf.select(config, "trainer.resume_mode") == "auto" else None
    code = subprocess.run(command, env=env, check=False).returncode
    stop = guard_stop(firings, seen)
    if code == 0 and stop is not None:
        raise GuardStop(stop)  # verl's loop ended early and cleanly; the run did not finish
    if code == 0 and resumed_at is not None:  # a failed run's exit status is what the caller needs
        stalled = stalled_resume(config, resumed_at, latest_step(out_dir))
        if stalled is not None:
            raise UsageError(stalled)
    return code


def stalled_resume(config: DictConfig, before: int | None, after: int | None) -> str | None:
    """Why a run that resumed from the checkpoint of step ``before`` trained no step although the recipe asks for
    more (verl exits 0 with nothing done when its data loader is used up: ``trainer.total_epochs`` epochs of the
    rows hold fewer batches than ``trainer.total_training_steps``); None when it moved on, did not resume, or
    writes no marker to tell by (no checkpoints, or verl's background saves).

    >>> from omegaconf import OmegaConf
    >>> config = OmegaConf.create({"trainer": {"total_training_steps": 3, "save_freq": 1, "resume_mode": "auto"}})
    >>> stalled_resume(config, 2, 2)[:46]
    'verl resumed from step 2 of 3 and trained no s'
    >>> stalled_resume(config, 2, 3) is None and stalled_resume(config, None, 2) is None
    True
    """
    total = OmegaConf.select(config, "trainer.total_training_steps")
    save_freq = OmegaConf.select(config, "trainer.save_freq") or 0
    if OmegaConf.select(config, "trainer.resume_mode") == "disable" or before is None or not total:
        return None
    if OmegaConf.select(config, "actor_rollout_ref.actor.checkpoint.async_save"):
        return None  # verl writes the marker elsewhere (a callback) when it saves in the background
    if save_freq <= 0 or before >= total or (after is not None and after > before):
        return None
    return (
        f"verl resumed from step {before} of {total} and trained no step: its data ran out (trainer.total_epochs "
        f"{OmegaConf.select(config, 'trainer.total_epochs')} epochs of the training rows hold fewer batches than "
        "trainer.total_training_steps); raise trainer.total_epochs or lower the steps"
    )


def guard_stop(firings: Path, offset: int = 0) -> str | None:
    """The line of a ``stop`` guard that fired in this run (recorded after ``offset`` in ``guards.jsonl``)."""
    if not firings.exists():
        return None
    with firings.open("rb") as f:
        f.seek(offset)
        lines = f.read().decode().splitlines()
    stops = [json.loads(line) for line in lines if line.strip()]
    stops = [s for s in stops if s.get("action") == "stop"]
    return stops[0]["message"] if stops else None


CONSOLE_STEP = re.compile(r"^(?:\x1b\[[0-9;]*m)*(?:\([^)]*\))?(?:\x1b\[[0-9;]*m)*\s*step:(\d+) - (.*)$")
"""verl's console line of a step's metrics, from the trainer's own stdout or as Ray forwards it from an actor
(``(TaskRunner pid=N) step:3 - ...``): the line starts with the step."""


def console_step_metrics(log: str) -> dict[int, dict[str, float]]:
    """verl's console metrics per step (``step:N - key:value - ...``), numeric values only; best effort.

    Ray forwards an actor's output line by line as its log monitor reads the file, and can read a long line while
    it is being written: the line arrives in two, and the numbers after the cut are not in the step's dict (the
    last one before it may be cut short). Only a line that starts with the step counts, so the second part (which
    may hold ``training/global_step:3 - ...``) never stands in for the step. ``metrics.jsonl`` in the run's folder
    (``ragym.rl.core.metrics.METRICS_FILE``) holds every step whole.
    """
    steps: dict[int, dict[str, float]] = {}
    for line in log.splitlines():
        match = CONSOLE_STEP.match(line)
        if not match:
            continue
        values = {}
        for item in match.group(2).split(" - "):
            key, _, value = item.partition(":")
            number = re.sub(r"^np\.\w+\((.*)\)$", r"\1", value.strip())
            try:
                values[key.strip()] = float(number)
            except ValueError:
                continue
        steps[int(match.group(1))] = values
    return steps
