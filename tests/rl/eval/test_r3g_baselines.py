"""R3G baselines on R3G-v0: MRAG (the benchmark's own retrieval), MRAG's plain top-k, the paper's ablation
rows and the fixed pipeline (scripted judge), and the chat judge against a loopback fake OpenAI-compatible
server (cache, retries, bad replies)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pandas as pd
import pytest

from ragym.data_prep.chat import ChatClient, ChatConfig, ChatError
from ragym.data_prep.mragbench import prepare
from ragym.data_prep.r3g_synthetic import PARTS, Preset, build_task
from ragym.envs.events import events_of
from ragym.envs.r3g.env import R3GEnv
from ragym.envs.r3g.report import EpisodeScore
from ragym.rewards import Rubric
from ragym.rl.eval.r3g_baselines import (
    BASELINES,
    ChatModel,
    ScriptedModel,
    evaluate_baseline,
    main,
    run_fixed,
)
from tests.data_prep.mragbench_fixture import write_fixture
from tests.loopback import loopback_server

RUBRIC = Rubric.from_recipe({"terms": {"outcome": {"weight": 1.0}}})


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_task(tmp_path_factory.mktemp("r3g") / "task", Preset(num_classes=16), seed=2)


def all_rows(task: Path) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(task / "data" / f"{s}.parquet") for s in ("train", "test")])


def selected_gold(score: EpisodeScore) -> bool:
    chosen = events_of(score.events, "evidence_selected")[0]
    return chosen["selected"][0] in score.events[0]["gold_images"]


def test_fixed_pipeline_beats_the_no_module_ablation_on_the_synthetic_task(
    task: Path, tmp_path: Path
) -> None:
    rows = all_rows(task)
    fixed = evaluate_baseline(rows, "r3g_fixed", ScriptedModel(), RUBRIC)
    ablation = evaluate_baseline(rows, "no_modules", ScriptedModel(), RUBRIC)
    # The scripted judge reads the cue from captions: the gold image is always first. The no-module ablation
    # takes the most similar look-alike: right about 1 time in 5 (5 images per class).
    assert all(selected_gold(s) for s in fixed) and sum(s.correct for s in fixed) == len(rows)
    assert sum(selected_gold(s) for s in ablation) < len(rows) / 2
    assert not events_of(ablation[0].events, "plan") and not events_of(ablation[0].events, "judge_error")
    assert main(["--data", str(task / "data" / "test.parquet"), "--out", str(tmp_path)]) == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["r3g_fixed"]["all"]["recall@1"] == 1.0 > metrics["no_modules"]["all"]["recall@1"]
    assert set(metrics["no_modules"]["by_scenario"]) <= set(PARTS)
    # Synthetic rows carry no benchmark list: MRAG is skipped, and says why, instead of silently missing.
    assert "mrag" not in metrics and "retrieved_images" in metrics["skipped"]["mrag"]
    assert set(metrics) == set(BASELINES) - {"mrag"} | {"skipped"}
    assert "Skipped mrag:" in (tmp_path / "metrics.md").read_text()


def test_mrag_feeds_the_benchmarks_retrieved_images_unranked(tmp_path: Path) -> None:
    """MRAG on MRAG-Bench rows: every retrieved image, in the benchmark's order, no plan, no judge."""
    raw = write_fixture(tmp_path / "raw")
    prepare(raw, tmp_path / "task", limit=8, test_fraction=0.5)
    rows = all_rows(tmp_path / "task")
    for score, extra in zip(
        evaluate_baseline(rows, "mrag", ScriptedModel(), RUBRIC), rows["extra_info"], strict=True
    ):
        given = json.loads(extra["env_options"])["retrieved_images"]
        chosen = events_of(score.events, "evidence_selected")[0]
        assert chosen["selected"] == chosen["ranking"] == given and chosen["rerank"] == "none"
        assert not events_of(score.events, "plan") and score.events[0]["pool_source"] == "benchmark"
    assert (
        main(
            [
                "--data",
                str(tmp_path / "task" / "data" / "test.parquet"),
                "--out",
                str(tmp_path / "m"),
                "--baselines",
                "mrag,no_modules",
            ]
        )
        == 0
    )
    metrics = json.loads((tmp_path / "m" / "metrics.json").read_text())
    # The fixture's lists start with a gt crop: the benchmark's own top-1 is always a hit.
    assert metrics["mrag"]["all"]["recall@1"] == 1.0 and metrics["skipped"] == {}
    assert set(metrics) == {"mrag", "no_modules", "skipped"}


def test_mrag_topk_is_the_plain_top_five_and_shares_the_ablations_top_one(task: Path) -> None:
    rows = all_rows(task).head(12)
    topk = evaluate_baseline(rows, "mrag_topk", ScriptedModel(), RUBRIC)
    ablation = evaluate_baseline(rows, "no_modules", ScriptedModel(), RUBRIC)
    for plain, top1 in zip(topk, ablation, strict=True):
        pool = events_of(plain.events, "coarse_retrieval")[0]["pool"]
        chosen = events_of(plain.events, "evidence_selected")[0]
        assert len(pool) == 5 and chosen["selected"] == chosen["ranking"] == pool  # all fed, retrieval order
        assert events_of(top1.events, "evidence_selected")[0]["selected"] == pool[:1]
    assert sum(map(selected_gold, topk)) == sum(map(selected_gold, ablation))


def test_the_papers_ablation_rows_run_with_their_switches(task: Path) -> None:
    rows = all_rows(task).head(2)
    expected = {  # name -> (use_plan, rerank, judge_guidelines), the paper's ablation table
        "no_modules": (False, "stage1", True),
        "rerank_no_guidelines": (False, "fused", False),
        "rerank": (False, "fused", True),
        "plan_only": (True, "stage1", True),
        "stage2_only": (True, "stage2", True),
        "r3g_fixed": (True, "fused", True),
    }
    for name, switches in expected.items():
        for score in evaluate_baseline(rows, name, ScriptedModel(), RUBRIC):
            task_event = score.events[0]
            assert (task_event["use_plan"], task_event["rerank"], task_event["judge_guidelines"]) == switches
            assert bool(events_of(score.events, "plan")) == switches[0]
    with pytest.raises(SystemExit, match="unknown baselines"):
        main(["--data", str(task / "data" / "test.parquet"), "--out", "unused", "--baselines", "mrag,r3g"])


class FakeChat(BaseHTTPRequestHandler):
    """Fails the first ``fail_first`` requests with 503, then replies by what the last instruction asks."""

    fail_first = 0
    requests: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        if len(type(self).requests) <= type(self).fail_first:
            self.send_response(503)
            self.end_headers()
            return
        instruction = body["messages"][-1]["content"][-1]["text"]
        images = sum(p["type"] == "image_url" for p in body["messages"][-1]["content"])
        if instruction.startswith("Judge"):
            text = "\n".join(f"[{i}] r=0.1 t=0.1 a={0.9 if i == 3 else 0.1} looks right" for i in range(1, 6))
            text += "\n[6] r=1 t=1 a=1 </judge> injection"
        elif instruction.startswith("Answer"):
            text = f"B ({images} images seen)"
        else:
            text = "look for the part"
        payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def server() -> Iterator[str]:
    FakeChat.requests, FakeChat.fail_first = [], 0
    with loopback_server(FakeChat) as url:
        yield f"{url}/v1"


def test_chat_model_runs_the_fixed_pipeline_with_cache(task: Path, server: str, tmp_path: Path) -> None:
    row = all_rows(task).iloc[0]
    env = R3GEnv(**json.loads(row["extra_info"]["env_kwargs"]))
    config = ChatConfig(base_url=server, cache_path=str(tmp_path / "cache.jsonl"), backoff_s=0.01)
    model = ChatModel(config, env.system_prompt)
    events = run_fixed(env, json.loads(row["extra_info"]["env_options"]), model)
    chosen = events_of(events, "evidence_selected")[0]
    assert chosen["ranking"][0] == chosen["pool"][2]  # candidate 3 got a = 0.9
    assert [(e["candidate"], e["reason"]) for e in events_of(events, "judge_error")] == [
        (6, "unknown_candidate")
    ]
    assert events_of(events, "answer")[0]["text"] == "B (2 images seen)"  # query image + 1 evidence image
    assert events_of(events, "plan")[0]["text"] == "look for the part"
    assert len(FakeChat.requests) == 3 and FakeChat.requests[1]["temperature"] == 0.0
    run_fixed(env, json.loads(row["extra_info"]["env_options"]), ChatModel(config, env.system_prompt))
    assert len(FakeChat.requests) == 3  # the second run is served from the cache


def test_chat_client_retries_then_gives_up(server: str) -> None:
    FakeChat.fail_first = 2
    client = ChatClient(ChatConfig(base_url=server, max_retries=2, backoff_s=0.01))
    message = [{"role": "user", "content": [{"type": "text", "text": "Plan?"}]}]
    assert client.complete(message) == "look for the part" and client.num_requests == 3
    FakeChat.requests, FakeChat.fail_first = [], 10
    with pytest.raises(ChatError, match="no reply after 2 attempts"):
        ChatClient(ChatConfig(base_url=server, max_retries=1, backoff_s=0.01)).complete(message)
    assert len(FakeChat.requests) == 2


def test_unreachable_endpoint_is_a_clear_error() -> None:
    client = ChatClient(ChatConfig(base_url="http://127.0.0.1:9/v1", max_retries=0, timeout_s=2))
    with pytest.raises(ChatError, match="127.0.0.1:9"):
        client.complete([{"role": "user", "content": "x"}])
