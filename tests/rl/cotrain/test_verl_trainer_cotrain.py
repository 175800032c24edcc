"""Co-training under ragym's verl trainer: ``RagymTrainer._cotrain_step`` harvests, rounds, guards and swaps the
version at the recipe's retrieval service, which the agent-loop workers' searches then go through."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
from omegaconf import OmegaConf

from ragym.envs.events import events_of
from ragym.envs.kbvqa.policies import OraclePolicy
from ragym.envs.registry import make_env, synthetic_data
from ragym.envs.retrieval.service.app import RetrievalApp
from ragym.envs.retrieval.service.client import ServiceRetriever
from ragym.envs.scripted import run_episode
from ragym.envs.serving.catalog import CatalogSpec, load_catalog
from ragym.rl.errors import UsageError
from ragym.rl.recipe.retrieval import URL_KEY
from ragym.rl.verl_plugin.trainer import RagymTrainer, RagymTrainerMixin
from tests.envs.retrieval.service.helpers import running
from tests.rl.cotrain.helpers import options, tiny_rows

ROWS_PER_STEP = 6
EVERY_N_STEPS = 2
"""Step 2 starts the round (inline), step 3 finds it done and decides."""


def _config(tmp_path: Path, url: str | None) -> Any:
    """The trainer's config as verl holds it: data files, output folder, service URL, ``ragym.cotrain``."""
    files = {}
    for split in ("train", "test"):
        files[split] = str(tmp_path / f"{split}.parquet")
        pd.DataFrame(tiny_rows(split)).to_parquet(files[split])
    config = OmegaConf.create(
        {
            "data": {"train_files": [files["train"]], "val_files": files["test"]},  # a list, as verl allows
            "trainer": {"default_local_dir": str(tmp_path / "out")},
            "ragym": {
                "cotrain": {
                    "enable": True,
                    "every_n_steps": EVERY_N_STEPS,
                    "initial_noise_rank": 8,  # a weak initial version, installed at the service at step 1
                    "round_steps": 20,
                    "batch_size": 8,
                    "background": False,
                    "max_recall_drop": 1.0,  # the guard's refusal is test_round's; here the round must swap
                }
            },
        }
    )
    OmegaConf.update(config, URL_KEY, url, force_add=True)
    return config


def _service_version(url: str) -> str | None:
    """The query-encoder version the service's ``image`` retriever serves (its ``/ready`` status)."""
    return ServiceRetriever(url, "image").call("GET", "/ready", None)["retrievers"]["image"]["version"]


def _episodes(url: str, step: int) -> tuple[list[dict], list[dict], set[str | None]]:
    """(extra_fields, extra_info) of a step's oracle episodes searching the service, and the versions they saw."""
    rows = tiny_rows("train")[(step - 1) * ROWS_PER_STEP : step * ROWS_PER_STEP]
    env = make_env(
        "KBVQA-v0", kb_dir=synthetic_data("kbvqa", "tiny"), candidate_source="live", retrieval_url=url
    )
    fields, infos, versions = [], [], set()
    for seed, row in enumerate(rows):
        events = run_episode(env, OraclePolicy(env), seed, options(row))["events"]
        versions.update(e["retriever_version"] for e in events_of(events, "search_image"))
        fields.append({"events": events})
        infos.append(row["extra_info"])
    return fields, infos, versions


@pytest.fixture
def kb_service(tmp_path: Path):
    """The service on a copy of the tiny KB: its query-encoder slot is not the trainer process's (the KB loader
    caches per path), so only ``POST /encoder`` changes what it serves, as with a service in another process."""
    copy = shutil.copytree(synthetic_data("kbvqa", "tiny"), tmp_path / "served-kb")
    app = RetrievalApp(lambda: load_catalog(CatalogSpec(folders=(("kb-dir", str(copy)),))))
    with running(app) as url:
        deadline = time.monotonic() + 30
        while not ServiceRetriever(url, "image").ready():
            assert time.monotonic() < deadline, "service never became ready"
            time.sleep(0.05)
        yield url


def _close(trainer: SimpleNamespace) -> None:
    """End a trainer's co-training; the trainer's in-process slot is this process's KB's: leave it clean."""
    cotrain = getattr(trainer, "_ragym_cotrain", None)
    if cotrain is not None:
        cotrain.close()
        cotrain.retriever.swap(None)


def test_the_verl_step_hook_harvests_rounds_and_swaps_at_the_service(tmp_path: Path, kb_service: str) -> None:
    trainer = SimpleNamespace(config=_config(tmp_path, kb_service))
    metrics, seen = {}, {}
    try:
        for step in (1, 2, 3):
            extra_fields, extra_info, seen[step] = _episodes(kb_service, step)
            metrics[step] = RagymTrainer._cotrain_step(trainer, step, extra_info, extra_fields)
        _, _, seen["after"] = _episodes(kb_service, 4)
    finally:
        _close(trainer)
    # every step's oracle episodes are harvested and counted
    for step in (1, 2, 3):
        assert metrics[step]["cotrain/positives"] > 0, metrics[step]
        assert metrics[step]["cotrain/unverified"] == 0 and metrics[step]["cotrain/heldout_refused"] == 0
    assert metrics[3]["cotrain/buffer_labels"] > metrics[1]["cotrain/buffer_labels"]
    # step 1 built the co-training and installed the weak initial version at the service
    assert seen[1] == {None} and seen[2] == seen[3] == {"initial-noise"}
    # the round started at step 2 was decided at step 3, logged, and (the guard permissive) swapped
    assert metrics[2]["cotrain/rounds"] == 1 and metrics[3]["cotrain/swaps"] == 1
    [decision] = [
        json.loads(line) for line in (tmp_path / "out" / "cotrain" / "swaps.jsonl").read_text().splitlines()
    ]
    version = f"cotrain-s{EVERY_N_STEPS:06d}"
    assert (decision["step"], decision["version"], decision["decision"]) == (3, version, "swapped")
    assert "cotrain/new_recall@1" in metrics[3] and metrics[3]["cotrain/serving_step"] == EVERY_N_STEPS
    # the service serves the new version: its status says so and the next searches record it
    assert _service_version(kb_service) == version and seen["after"] == {version}
    # a run resumed from step 2's checkpoint (its first step 3) serves at the service what step 2 served
    resumed = SimpleNamespace(config=trainer.config)
    try:
        again = RagymTrainer._cotrain_step(resumed, 3, [], [])
    finally:
        _close(resumed)
    assert _service_version(kb_service) == "initial-noise" and again["cotrain/serving_step"] == 0


def test_the_verl_path_without_a_retrieval_url_is_refused_in_one_line(tmp_path: Path) -> None:
    trainer = SimpleNamespace(config=_config(tmp_path, None))
    extra_fields, extra_info = [{"events": []}], [tiny_rows("train")[0]["extra_info"]]
    with pytest.raises(UsageError, match=f"set {URL_KEY}") as error:
        RagymTrainer._cotrain_step(trainer, 1, extra_info, extra_fields)
    assert "\n" not in str(error.value)


class _VerlLoop:
    """verl's trainer as the mixin sees it: a ``fit`` that ends or fails."""

    def __init__(self, error: Exception | None, out: Path) -> None:
        self.error = error
        self.config = OmegaConf.create(
            {"trainer": {"default_local_dir": str(out), "val_before_train": False}}
        )
        self.global_steps = 0

    def fit(self, agent_loop_manager: Any) -> str:
        if self.error is not None:
            raise self.error
        return "done"


class _Trainer(RagymTrainerMixin, _VerlLoop):
    pass


class _Rounds:
    """A co-training whose ``close`` is counted (a round would still be running)."""

    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


@pytest.mark.parametrize("error", [None, RuntimeError("the step failed")])
def test_the_verl_trainer_stops_a_running_round_when_its_loop_ends(
    error: Exception | None, tmp_path: Path
) -> None:
    trainer = _Trainer(error, tmp_path)
    trainer._ragym_cotrain = rounds = _Rounds()  # pyright: ignore[reportAttributeAccessIssue]
    if error is None:
        assert trainer.fit(None) == "done"
    else:
        with pytest.raises(RuntimeError, match="the step failed"):
            trainer.fit(None)
    assert rounds.closed == 1
    assert _Trainer(None, tmp_path).fit(None) == "done"  # co-training off (never started): nothing to stop
