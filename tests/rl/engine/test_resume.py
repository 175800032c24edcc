"""verl's three resume modes on the local engine: never two runs in one folder, changed settings refused."""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig, OmegaConf
from safetensors.torch import save_file

from ragym.envs import files
from ragym.rl.core.metrics import drop_metrics_after, read_metrics
from ragym.rl.engine.resume import LATEST, MODEL_KEY, REWARD_KEY, check_same_run, resume_point, run_contents
from ragym.rl.errors import UsageError
from ragym.rl.train import build_trainer
from tests.rl.engine.test_engine_trainer import _overrides, tiny_setup  # noqa: F401 - the module fixture

MODEL_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "processor_config.json",
)


def _fake_run(out: Path, steps: list[int], latest: int, logged: list[int]) -> None:
    for step in steps:
        folder = out / f"global_step_{step}"
        folder.mkdir(parents=True)
        torch.save({"step": step}, folder / "engine_state.pt")
        for name in ("optimizer.pt", *MODEL_FILES):  # stand-ins: resume_point checks that they are there
            (folder / name).write_text("x")
        save_file({}, folder / "model.safetensors")  # whole (weights are checked against their header)
    (out / LATEST).write_text(str(latest))
    (out / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "x": 1.0}) + "\n" for s in logged))


def test_auto_resumes_from_the_latest_marker_or_starts_from_scratch(tmp_path):
    assert resume_point(str(tmp_path / "new"), "auto", None) is None
    _fake_run(tmp_path, [2, 4], latest=4, logged=[1, 2, 3, 4, 5])
    assert resume_point(str(tmp_path), "auto", None) == tmp_path / "global_step_4"


def test_disable_into_a_folder_with_a_run_is_refused(tmp_path):
    assert resume_point(str(tmp_path / "empty"), "disable", None) is None
    _fake_run(tmp_path, [2], latest=2, logged=[1, 2])
    with pytest.raises(UsageError, match="already holds a run"):
        resume_point(str(tmp_path), "disable", None)


def test_resume_path_continues_from_the_named_step_and_never_branches_in_place(tmp_path):
    run = tmp_path / "run"
    _fake_run(run, [2, 4], latest=4, logged=[1, 2, 3, 4])
    other = tmp_path / "branch"
    assert resume_point(str(other), "resume_path", str(run / "global_step_2")) == run / "global_step_2"
    assert resume_point(str(run), "resume_path", str(run / "global_step_4")) == run / "global_step_4"
    with pytest.raises(UsageError, match="global_step_4..4"):
        resume_point(str(run), "resume_path", str(run / "global_step_2"))
    with pytest.raises(UsageError, match="resume_from_path"):
        resume_point(str(other), "resume_path", None)
    with pytest.raises(UsageError, match="not a local-engine checkpoint"):
        resume_point(str(other), "resume_path", str(tmp_path / "global_step_9"))
    elsewhere = tmp_path / "elsewhere"
    _fake_run(elsewhere, [1], latest=1, logged=[1])
    with pytest.raises(UsageError, match="already holds another run"):
        resume_point(str(run), "resume_path", str(elsewhere / "global_step_1"))
    with pytest.raises(UsageError, match="not one of"):
        resume_point(str(run), "sometimes", None)


def _whole_step(policy: Path, out: Path, step: int) -> Path:
    """A ``global_step_N`` folder with every file the engine saves: the policy's, optimizer and engine state."""
    folder = out / f"global_step_{step}"
    shutil.copytree(policy, folder)
    torch.save({"step": step}, folder / "engine_state.pt")
    torch.save({"optimizer": {}}, folder / "optimizer.pt")
    (out / LATEST).write_text(str(step))
    return folder


@pytest.mark.parametrize(
    "lost", ["model.safetensors", "tokenizer.json", "optimizer.pt", "processor_config.json"]
)
def test_a_checkpoint_missing_a_file_is_refused_naming_it(tiny_policy_dir, tmp_path, lost):
    folder = _whole_step(tiny_policy_dir("qwen2_5_vl"), tmp_path, step=1)
    assert resume_point(str(tmp_path), "auto", None) == folder
    (folder / lost).unlink()
    with pytest.raises(UsageError, match=rf"global_step_1 is incomplete, it has no {lost}"):
        resume_point(str(tmp_path), "auto", None)
    with pytest.raises(UsageError, match=rf"it has no {lost}"):
        resume_point(str(tmp_path / "branch"), "resume_path", str(folder))


def test_a_damaged_engine_state_is_named(tmp_path):
    from ragym.rl.core.checkpoints import load_state

    torch.save({"step": 1}, tmp_path / "engine_state.pt")
    (tmp_path / "engine_state.pt").write_bytes((tmp_path / "engine_state.pt").read_bytes()[:100])
    with pytest.raises(UsageError, match=r"cannot read .*engine_state\.pt .*damaged"):
        load_state(tmp_path / "engine_state.pt")


def test_metrics_after_the_checkpoint_are_dropped(tmp_path):
    _fake_run(tmp_path, [3], latest=3, logged=[0, 1, 2, 3, 4, 5])
    assert drop_metrics_after(tmp_path, 3) == 2
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 1, 2, 3]


def test_a_metrics_line_a_kill_cut_short_is_dropped_with_the_unsaved_steps(tmp_path):
    _fake_run(tmp_path, [1], latest=1, logged=[1, 2])
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "reward/total": 0.')  # killed while appending step 3's row
    assert drop_metrics_after(tmp_path, 1) == 2
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1, "x": 1.0}\n'


def _finish_after_read(monkeypatch, path: Path, rest: str, after: int) -> None:
    """The killed run's writer appends ``rest`` (the end of its last row) right after the ``after``-th read of
    ``path``: the row is cut short for the reads before and whole for the reads after."""
    real_open, reads = io.open, []

    def tracked(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        if not isinstance(file, str | os.PathLike) or Path(file) != path or "r" not in mode:
            return handle
        reads.append(mode)
        if len(reads) != after:
            return handle
        with handle:
            content = handle.read()
        with real_open(path, "a") as f:
            f.write(rest)
        return io.BytesIO(content) if "b" in mode else io.StringIO(content)

    monkeypatch.setattr(io, "open", tracked)  # pathlib's reads
    monkeypatch.setattr(files, "open", tracked, raising=False)  # read_jsonl's


@pytest.mark.parametrize("after", [1, 2, 3])
def test_a_row_the_killed_run_finishes_while_the_resume_reads_the_metrics_is_dropped(
    tmp_path, monkeypatch, after
):
    """The resume reads ``metrics.jsonl`` once: read in several passes, the row a killed run was still appending
    read cut short in one pass and whole in the next, and the resume failed on a line that is "not JSON"."""
    _fake_run(tmp_path, [1], latest=1, logged=[1, 2])
    path = tmp_path / "metrics.jsonl"
    with path.open("a") as f:
        f.write('{"step": 3, "reward/total": 0.')
    _finish_after_read(monkeypatch, path, "5}\n", after)
    assert drop_metrics_after(tmp_path, 1) == 2
    assert path.read_text() == '{"step": 1, "x": 1.0}\n'


def test_a_changed_setting_is_refused_by_name():
    saved = {
        "data": {"seed": 0, "train_files": "a.parquet"},
        "actor_rollout_ref": {"actor": {"optim": {"lr": 1e-3}}},
    }
    now = OmegaConf.create({**saved, "actor_rollout_ref": {"actor": {"optim": {"lr": 5e-3}}}})
    with pytest.raises(UsageError, match=r"actor_rollout_ref.actor.optim.lr=0.001, this run sets 0.005"):
        check_same_run(json.dumps(saved), now, "abc", "abc", Path("ckpt"))
    with pytest.raises(UsageError, match="training rows differ"):
        check_same_run(json.dumps(saved), OmegaConf.create(saved), "abc", "abd", Path("ckpt"))
    check_same_run(json.dumps(saved), OmegaConf.create(saved), "abc", "abc", Path("ckpt"))


def _files_run(root: Path, weights: bytes = b"w" * 100) -> DictConfig:
    """A config whose model folder and reward recipe lie under ``root``."""
    (root / "model").mkdir(parents=True)
    (root / "model" / "config.json").write_text('{"hidden_size": 8}')
    (root / "model" / "model.safetensors").write_bytes(weights)
    (root / "reward.yaml").write_text("terms:\n  outcome:\n    weight: 1.0\n")
    reward = {"recipe": None, "recipe_path": str(root / "reward.yaml"), "overrides": None}
    return OmegaConf.create(
        {
            "actor_rollout_ref": {"model": {"path": str(root / "model")}},
            "reward": {"custom_reward_function": {"reward_kwargs": reward}},
            "data": {"train_files": str(root / "train.parquet")},
        }
    )


def test_a_run_resumes_from_a_moved_checkout_and_refuses_files_changed_in_place(tmp_path):
    """The settings that name files compare what they hold: the same model folder and reward recipe at new paths
    (another checkout, a copied run) resume, which their recorded absolute paths refused; a reward recipe edited in
    place or a model folder overwritten, which the paths let through, are refused."""
    saved_config = _files_run(tmp_path / "a")
    saved = json.dumps(OmegaConf.to_container(saved_config))
    contents = run_contents(saved_config)
    assert None not in contents.values()
    moved = _files_run(tmp_path / "b")  # the same files elsewhere
    check_same_run(saved, moved, "abc", "abc", Path("ckpt"), contents)
    with pytest.raises(UsageError, match=MODEL_KEY.replace(".", r"\.")):
        check_same_run(saved, moved, "abc", "abc", Path("ckpt"))  # a checkpoint from before: paths compared
    (tmp_path / "a" / "reward.yaml").write_text("terms:\n  outcome:\n    weight: 2.0\n")
    with pytest.raises(UsageError, match=REWARD_KEY.replace(".", r"\.") + ".*differs"):
        check_same_run(saved, saved_config, "abc", "abc", Path("ckpt"), contents)
    retrained = _files_run(tmp_path / "c", weights=b"v" * 100)
    with pytest.raises(UsageError, match=MODEL_KEY.replace(".", r"\.") + ".*differs"):
        check_same_run(saved, retrained, "abc", "abc", Path("ckpt"), contents)


def test_resumed_run_refuses_a_new_seed_and_drops_unsaved_metrics(tiny_setup, tmp_path):  # noqa: F811
    overrides = [*_overrides(tiny_setup, tmp_path, steps=2), "trainer.save_freq=-1"]
    trainer = build_trainer("kbvqa_tiny_cpu", overrides)
    trainer.fit(max_steps=1)
    trainer.save()
    trainer.fit(max_steps=1)  # step 2 is logged; the final save is what a kill would lose
    trainer.close()
    (tmp_path / LATEST).write_text("1")
    # The checkpoint records what its model folder and reward recipe hold.
    assert torch.load(tmp_path / "global_step_1" / "engine_state.pt", weights_only=False)[
        "contents"
    ].keys() == {
        MODEL_KEY,
        REWARD_KEY,
    }
    with pytest.raises(UsageError, match="data.seed=0, this run sets 1"):
        build_trainer("kbvqa_tiny_cpu", [*overrides, "data.seed=1"])
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]
    resumed = build_trainer("kbvqa_tiny_cpu", overrides)
    assert resumed.step == 1
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1]
    resumed.close()


def test_a_run_killed_while_appending_metrics_and_traces_resumes(tiny_setup, tmp_path):  # noqa: F811
    overrides = [*_overrides(tiny_setup, tmp_path, steps=2), "trainer.save_freq=-1"]
    trainer = build_trainer("kbvqa_tiny_cpu", overrides)
    trainer.fit(max_steps=1)
    trainer.save()
    trainer.fit(max_steps=1)
    trainer.close()
    (tmp_path / LATEST).write_text("1")  # killed before step 2's checkpoint, in the middle of its last lines
    for log in (tmp_path / "metrics.jsonl", tmp_path / "traces" / "episodes.jsonl"):
        log.write_bytes(log.read_bytes()[:-50])
    resumed = build_trainer("kbvqa_tiny_cpu", overrides)
    assert resumed.step == 1
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1]
    traced = [json.loads(line)["step"] for line in (tmp_path / "traces" / "episodes.jsonl").open()]
    assert traced and set(traced) == {1}
    resumed.fit()
    resumed.close()
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]


def test_a_run_on_data_with_bad_rows_resumes(tiny_setup, tmp_path):  # noqa: F811
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb
    from tests.rl.data.bad_rows import with_bad_rows

    # A KB of its own: the missing-image row deletes an image, which the module's KB must keep.
    kb = build_kb(tmp_path / "kb", PRESETS["demo"], seed=0, name="synthetic-demo")
    data = tmp_path / "rows.parquet"
    with_bad_rows(kb / "data" / "train.parquet", data, num_good=4)
    overrides = [*_overrides(tiny_setup, tmp_path / "run", steps=2), f"data.train_files={data}"]
    trainer = build_trainer("kbvqa_tiny_cpu", overrides)
    assert len(trainer.train_rows) == 4 and len(trainer.train_set.bad) == 3
    trainer.fit(max_steps=1)
    trainer.close()
    resumed = build_trainer("kbvqa_tiny_cpu", overrides)
    assert resumed.step == 1
    resumed.fit()
    resumed.close()
    assert [r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")] == [1, 2]
