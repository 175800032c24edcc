"""Where a local-engine run starts: verl's three ``trainer.resume_mode`` values, never two runs in one folder.

As verl's ``RayPPOTrainer._load_checkpoint`` defines them:

- ``auto``: continue from the checkpoint ``latest_checkpointed_iteration.txt`` names in
  ``trainer.default_local_dir``, or start from scratch when there is none;
- ``disable``: start from scratch (here: only into a folder that holds no run, instead of overwriting part
  of one);
- ``resume_path``: continue from ``trainer.resume_from_path``, a ``global_step_N`` folder (relative paths
  start at the working directory).

A resumed run must be the same run: the settings a checkpoint cannot carry over (learning rate, data,
seed, batch shape, reward) are compared with the checkpoint's and a change is refused, naming the setting. The
settings that name files (the model folder, the reward recipe) are compared by what the files hold, so a run
resumes from a moved checkout or model folder, and a reward recipe edited in place is refused.
Metrics rows logged after the checkpoint (steps a killed run did not save) are dropped before continuing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ragym.rl.core.checkpoints import ENGINE_STATE, LATEST, latest_step, missing_model_files
from ragym.rl.core.metrics import METRICS_FILE
from ragym.rl.errors import UsageError
from ragym.rl.lora import is_adapter_dir

RESUME_MODES = ("auto", "disable", "resume_path")
"""verl's ``trainer.resume_mode`` values."""
RUN_SETTINGS = (
    "actor_rollout_ref.model.path",
    "data.train_files",
    "data.seed",
    "data.shuffle",
    "data.train_batch_size",
    "actor_rollout_ref.rollout.n",
    "actor_rollout_ref.actor.optim.lr",
    "actor_rollout_ref.actor.optim.betas",
    "actor_rollout_ref.actor.optim.weight_decay",
    "actor_rollout_ref.actor.optim.lr_warmup_steps",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio",
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    "reward.custom_reward_function.reward_kwargs",
    # LoRA on or off, and its shape: the checkpoint holds adapters of this rank on these modules, or full weights.
    "actor_rollout_ref.model.lora_rank",
    "actor_rollout_ref.model.lora_alpha",
    "actor_rollout_ref.model.target_modules",
    "actor_rollout_ref.model.exclude_modules",
)
"""Settings a resumed run cannot change: the optimizer state, data cursor and rewards belong to them."""
MODEL_KEY = "actor_rollout_ref.model.path"
REWARD_KEY = "reward.custom_reward_function.reward_kwargs"
_WHOLE_FILE_BYTES = 16 << 20
"""Files up to this size count whole in a folder's fingerprint; larger ones (weight shards) by their size and their
first and last MiB, which differ between any two trainings of one architecture."""
_STEP_DIR = re.compile(r"global_step_(\d+)$")


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The last complete checkpoint folder under ``output_dir``, or None."""
    step = latest_step(output_dir)
    return None if step is None else Path(output_dir) / f"global_step_{step}"


def checkpoint_steps(output_dir: str | Path) -> list[int]:
    """Steps of the ``global_step_N`` folders under ``output_dir``, ascending."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    return sorted(int(m.group(1)) for p in root.iterdir() if (m := _STEP_DIR.search(p.name)) and p.is_dir())


def holds_run(output_dir: str | Path) -> bool:
    """True when ``output_dir`` has checkpoints, a latest marker or logged metrics of some run."""
    root = Path(output_dir)
    metrics = root / METRICS_FILE
    has_metrics = metrics.is_file() and metrics.stat().st_size > 0
    return bool(checkpoint_steps(root)) or (root / LATEST).exists() or has_metrics


def resume_point(output_dir: str, mode: str, resume_from_path: str | None) -> Path | None:
    """The checkpoint folder to continue from (None: from scratch); a mode that would mix runs is refused."""
    out = Path(output_dir)
    if mode not in RESUME_MODES:
        raise UsageError(f"trainer.resume_mode={mode!r} is not one of {', '.join(RESUME_MODES)}")
    if mode == "disable":
        if holds_run(out):
            raise UsageError(
                f"trainer.resume_mode=disable starts from scratch, but {out} already holds a run; set "
                "trainer.default_local_dir to a new folder, remove this one, or use trainer.resume_mode=auto"
            )
        return None
    if mode == "auto":
        latest = latest_checkpoint(out)
        return None if latest is None else _complete(latest)
    match = _STEP_DIR.search(resume_from_path.rstrip("/")) if isinstance(resume_from_path, str) else None
    if match is None:
        raise UsageError(
            "trainer.resume_mode=resume_path needs trainer.resume_from_path=.../global_step_N, "
            f"got {resume_from_path!r}"
        )
    path = Path(match.string).absolute()  # the path searched, without its trailing slashes
    if not (path / "engine_state.pt").is_file():
        raise UsageError(
            f"trainer.resume_from_path={path} is not a local-engine checkpoint (no engine_state.pt)"
        )
    step = int(match.group(1))
    if holds_run(out) and path.parent.resolve() != out.resolve():
        raise UsageError(
            f"{out} already holds another run; set trainer.default_local_dir to a new folder to continue "
            f"from {path}"
        )
    later = [s for s in checkpoint_steps(out) if s > step]
    if later:
        raise UsageError(
            f"{out} holds checkpoints after step {step} (global_step_{later[0]}..{later[-1]}) of the run "
            "being resumed; set trainer.default_local_dir to a new folder to branch from it"
        )
    return _complete(path)


def _complete(checkpoint: Path) -> Path:
    """``checkpoint`` when it holds every file a resume loads (checked before the model loads)."""
    missing = [name for name in ENGINE_STATE if not (checkpoint / name).is_file()]
    missing += missing_model_files(checkpoint, is_adapter_dir(checkpoint))
    if missing:
        raise UsageError(
            f"{checkpoint} is incomplete, it has no {', '.join(missing)}: restore the files, or resume from an "
            "earlier complete global_step_N"
        )
    return checkpoint


def run_contents(config: DictConfig) -> dict[str, str | None]:
    """Fingerprints of what the settings that name files hold (None: not a local file, compared as written)."""
    return {
        MODEL_KEY: folder_fingerprint(OmegaConf.select(config, MODEL_KEY)),
        REWARD_KEY: reward_fingerprint(OmegaConf.select(config, REWARD_KEY)),
    }


def folder_fingerprint(path: Any) -> str | None:
    """A hash of a model folder's files (names, and contents as ``_WHOLE_FILE_BYTES`` says), None for no folder."""
    import hashlib

    folder = Path(path) if isinstance(path, str) else None
    if folder is None or not folder.is_dir():
        return None
    digest = hashlib.sha256()
    for file in sorted(f for f in folder.iterdir() if f.is_file() and not f.name.startswith(".")):
        size = file.stat().st_size
        digest.update(f"{file.name}:{size}\n".encode())
        with file.open("rb") as f:
            if size <= _WHOLE_FILE_BYTES:
                digest.update(f.read())
            else:
                digest.update(f.read(1 << 20))
                f.seek(-(1 << 20), 2)
                digest.update(f.read())
    return digest.hexdigest()[:16]


def reward_fingerprint(kwargs: Any) -> str | None:
    """A hash of the reward settings with the reward recipe file's parsed contents in place of its path."""
    import hashlib

    import yaml

    if kwargs is None:
        return None
    plain = _plain(kwargs)
    recipe_path = plain.get("recipe_path") if isinstance(plain, dict) else None
    if recipe_path is None:
        return None
    try:
        recipe = yaml.safe_load(Path(recipe_path).read_text())
    except OSError:
        return None  # the recipe is gone: compared as written
    text = json.dumps({**plain, "recipe_path": recipe}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_same_run(
    saved_config_json: str | None,
    config: DictConfig,
    saved_data: str | None,
    data: str,
    checkpoint: Path,
    saved_contents: dict[str, str | None] | None = None,
    contents: dict[str, str | None] | None = None,
) -> None:
    """Refuse to resume ``checkpoint`` with settings or training rows other than the ones it was trained on
    (``saved_contents``: ``run_contents`` at the run's start, saved with the checkpoint; checkpoints written
    before it compare paths; ``contents``: this run's, computed here when not given)."""
    if saved_config_json is not None:
        saved = OmegaConf.create(json.loads(saved_config_json))
        if saved_contents and contents is None:
            contents = run_contents(config)
        contents = contents or {}
        for key in RUN_SETTINGS:
            before, now = _plain(OmegaConf.select(saved, key)), _plain(OmegaConf.select(config, key))
            if key == "data.train_files" and saved_data is not None:
                continue  # the rows' fingerprint below decides, wherever the files lie
            known = (saved_contents or {}).get(key)
            if known is not None and contents.get(key) is not None:
                if known != contents[key]:
                    raise UsageError(
                        f"{checkpoint} was trained with {key}={_short(before)}; what this run's "
                        f"{_short(now)} holds differs from it (files changed): restore them to resume, or set "
                        "trainer.default_local_dir to a new folder for a new run"
                    )
                continue
            if before != now:
                raise UsageError(
                    f"{checkpoint} was trained with {key}={_short(before)}, this run sets {_short(now)}: "
                    "set it back to resume, or set trainer.default_local_dir to a new folder for a new run"
                )
    if saved_data is not None and saved_data != data:
        raise UsageError(
            f"the training rows differ from the ones {checkpoint} was trained on (data.train_files changed, "
            "or rows in it did): restore them to resume, or set trainer.default_local_dir to a new folder"
        )


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 120 else text[:117] + "..."
