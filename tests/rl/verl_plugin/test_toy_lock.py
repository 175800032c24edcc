"""``--toy DIR`` shared by concurrent runs (``make test``'s two workers share one): each env's toy is built once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ragym.rl.errors import UsageError
from ragym.rl.recipe.compose import resolve_recipe_path
from ragym.rl.recipe.platforms import platform_overrides
from ragym.rl.verl_plugin import verl_local


def stub_the_build(monkeypatch: pytest.MonkeyPatch, during_build: Callable[[Path], None]) -> None:
    """The rows are built for real; the recipe check, the random policy and the warm start (which calls
    ``during_build(out)`` and writes the policy's ``config.json``) are not what is under test here."""

    def warm_start(random_policy: Path, rows: list, config: object, out: Path) -> Path:
        during_build(out)
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        return out

    monkeypatch.setattr(verl_local, "check_recipe", lambda *args, **kwargs: None)
    monkeypatch.setattr("ragym.rl.tiny.policy.build_tiny_policy", lambda arch, out, seed: out)
    monkeypatch.setattr("ragym.rl.tiny.warm.warm_start", warm_start)


def test_runs_sharing_a_toy_folder_build_each_env_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds: list[Path] = []

    def during_build(out: Path) -> None:
        builds.append(out)
        time.sleep(0.5)  # the other run asks for the toy meanwhile: it must wait for this one, not build too

    stub_the_build(monkeypatch, during_build)
    recipe = resolve_recipe_path("kbvqa_qwen2_5_vl_7b")
    with ThreadPoolExecutor(2) as pool:  # flock locks an open file, so two threads' opens exclude each other
        runs = list(pool.map(lambda _: verl_local.toy_overrides(recipe, tmp_path, []), range(2)))
    assert builds == [tmp_path / "policy" / "KBVQA-v0"]
    assert runs[0] == runs[1]
    assert (tmp_path / "KBVQA-v0" / "data" / "train.parquet").is_file()
    assert sorted(p.name for p in (tmp_path / "policy").iterdir()) == ["KBVQA-v0"]
    assert not list(tmp_path.glob(".random-*"))  # the random start's scratch folder is gone


def test_a_run_of_another_env_does_not_wait_for_a_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KB-VQA's warm start holds its env's lock only: DocMemo's run, its toy built, gets its overrides meanwhile (one
    lock for the folder held it for the whole build, a worker of make test idle)."""
    building, release = threading.Event(), threading.Event()

    def during_build(out: Path) -> None:
        building.set()
        assert release.wait(60), "the other env's run never came back"

    stub_the_build(monkeypatch, during_build)
    docmemo = resolve_recipe_path("docmemo_qwen2_5_vl_7b")
    (tmp_path / "policy" / "DocMemo-v0").mkdir(parents=True)
    (tmp_path / "policy" / "DocMemo-v0" / "config.json").write_text("{}")
    with ThreadPoolExecutor(2) as pool:
        kbvqa = pool.submit(
            verl_local.toy_overrides, resolve_recipe_path("kbvqa_qwen2_5_vl_7b"), tmp_path, []
        )
        assert building.wait(60)
        other = pool.submit(verl_local.toy_overrides, docmemo, tmp_path, [])
        try:
            overrides = other.result(timeout=60)  # raises TimeoutError where it waits on KB-VQA's build
        finally:
            release.set()
        kbvqa.result(timeout=60)
    assert f"actor_rollout_ref.model.path={tmp_path / 'policy' / 'DocMemo-v0'}" in overrides


def test_a_misspelt_user_override_is_refused_before_the_toy_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[str] = []
    monkeypatch.setattr("ragym.data_prep.toy_data.toy_rows", lambda env_id, out: built.append(env_id))
    with pytest.raises(UsageError, match="data.shufle"):
        verl_local.verl_command("kbvqa_qwen2_5_vl_7b", ["data.shufle=1"], tmp_path)
    assert built == []  # neither the rows nor the policy: the refusal comes first


class ToyBuilt(Exception):
    """Raised by the test's stand-in for the toy's row builder: the command got as far as building."""


def _no_toy_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU, vLLM's CPU platform as shipped (installed or not), and a row builder that stops the command."""

    def toy_rows(env_id: str, out: Path) -> Path:
        raise ToyBuilt(env_id)

    monkeypatch.setattr("ragym.data_prep.toy_data.toy_rows", toy_rows)
    monkeypatch.setattr(verl_local, "gpu_present", lambda: False)
    monkeypatch.setattr(verl_local, "vllm_cpu_platform", lambda: platform_overrides("vllm_cpu"))


def test_a_trainer_mode_the_rollout_cannot_run_is_refused_before_the_toy_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The refusal comes from the vLLM platform and the mode together: both must be in the check before the build.
    _no_toy_build(monkeypatch)
    mode = "trainer.v1.trainer_mode=ragym_colocate_async"
    with pytest.raises(UsageError, match="CPU vLLM rollout: untested there"):
        verl_local.verl_command("kbvqa_qwen2_5_vl_7b", [mode], tmp_path, rollout="vllm")
    with pytest.raises(ToyBuilt):  # the hf rollout runs that mode: the same command goes on to build
        verl_local.verl_command("kbvqa_qwen2_5_vl_7b", [mode], tmp_path, rollout="hf")


def test_the_check_before_the_build_adds_a_modes_own_cpu_platform(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # separate_async is refused without its platform file (a rollout pool, a weight sync): a check that left it out
    # would refuse a run the command can make.
    _no_toy_build(monkeypatch)
    mode = "trainer.v1.trainer_mode=ragym_separate_async"
    with pytest.raises(UsageError):
        verl_local.check_recipe(
            resolve_recipe_path("kbvqa_qwen2_5_vl_7b"),
            [*platform_overrides("cpu"), *platform_overrides("toy"), mode],
            validate=False,
        )
    with pytest.raises(ToyBuilt):
        verl_local.verl_command("kbvqa_qwen2_5_vl_7b", [mode], tmp_path)
