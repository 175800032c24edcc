"""MEMORA's OpenAI-compatible client (``ragym.rl.eval.memora_llm``) against a loopback fake: retries, the cache,
errors, and the fixed pipeline played on it (the pipeline's own tests: tests/envs/memora/test_memora_pipeline.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from ragym.data_prep.chat import ChatConfig, ChatError
from ragym.envs.events import events_of
from ragym.envs.memora.env import MemoraEnv
from ragym.envs.memora.pipeline import MemoraPipeline, PipelineConfig
from ragym.rl.eval.memora_llm import LLMConfig, OpenAIChatModel
from tests.loopback import loopback_server


class FakeOpenAI(BaseHTTPRequestHandler):
    """Answers chat completions from a script of (status, content) replies, recording the requests."""

    replies: list[tuple[int, str]] = []
    requests: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(
            {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
        )
        status, content = type(self).replies.pop(0) if type(self).replies else (500, "")
        payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def fake_server() -> Iterator[str]:
    FakeOpenAI.replies, FakeOpenAI.requests = [], []
    with loopback_server(FakeOpenAI) as url:
        yield f"{url}/v1"


def model(url: str, tmp_path, **kw) -> OpenAIChatModel:
    return OpenAIChatModel(
        LLMConfig(
            ChatConfig(
                base_url=url, backoff_s=0.0, cache_path=str(tmp_path / "cache.jsonl"), api_key="k", **kw
            )
        )
    )


def test_client_retries_then_caches_on_disk(fake_server: str, tmp_path) -> None:
    good = json.dumps({"factors": [{"text": "ice", "priority": 0.7}, {"text": "heat", "priority": 0.3}]})
    FakeOpenAI.replies = [(503, ""), (200, "not json"), (200, good)]
    llm = model(fake_server, tmp_path)
    assert llm.decompose("why ice", [], 2) == [("ice", 0.7), ("heat", 0.3)]
    assert len(FakeOpenAI.requests) == 3 and FakeOpenAI.requests[0]["path"] == "/v1/chat/completions"
    assert (
        FakeOpenAI.requests[0]["auth"] == "Bearer k" and FakeOpenAI.requests[0]["body"]["temperature"] == 0.0
    )
    assert model(fake_server, tmp_path).decompose("why ice", [], 2) == [("ice", 0.7), ("heat", 0.3)]
    assert len(FakeOpenAI.requests) == 3  # a new client read the answer from the disk cache


def test_client_gives_up_with_a_clear_error(fake_server: str, tmp_path) -> None:
    FakeOpenAI.replies = [(200, json.dumps({"evidence": "none"}))] * 3
    with pytest.raises(ChatError, match="3 attempts"):
        model(fake_server, tmp_path, max_retries=2).extract("q", "f", [{"number": 1, "text": "t"}])
    FakeOpenAI.replies = [(401, "")]
    with pytest.raises(ChatError, match="HTTP 401"):
        model(fake_server, tmp_path).judge("q", [], [{"number": 1, "text": "t"}], [], [])
    assert len(FakeOpenAI.requests) == 4  # 401 is not retried


def test_pipeline_runs_on_the_llm_client(fake_server: str, tmp_path) -> None:
    factors = json.dumps(
        {"factors": [{"text": "cost price", "priority": 0.5}, {"text": "risk", "priority": 0.5}]}
    )
    evidence = json.dumps({"evidence": [{"doc": 1, "score": 8, "snippet": "cost"}, {"doc": 2, "score": 42}]})
    FakeOpenAI.replies = [
        (200, factors),
        (200, json.dumps({"subquery": "tariff price list"})),
        (200, json.dumps({"subquery": "hazard warnings"})),
        (200, evidence),
        (200, evidence),
        (200, json.dumps({"order": [2, 1]})),
    ]
    config = PipelineConfig(num_factors=2, max_expansions=0, stop_threshold=99.0, extract_batch=1000)
    info = MemoraPipeline(model(fake_server, tmp_path), config).play(MemoraEnv(), seed=0)
    kinds = [e["kind"] for e in events_of(info["events"], "action")]
    assert kinds == ["decompose", "subquery", "subquery", "extract", "extract", "judge", "stop"]
    # The subqueries are the LLM's own, not the query's words.
    assert [e["text"] for e in events_of(info["events"], "subquery")] == [
        "tariff price list",
        "hazard warnings",
    ]
    assert events_of(info["events"], "factor_evidence")[0]["weights"] == [0.8, 1.0]  # 42 clipped to the scale
    assert [r["body"]["temperature"] for r in FakeOpenAI.requests] == [0.0, 0.0, 0.0, 0.2, 0.2, 0.0]
    assert info["llm_calls"] == {"decompose": 1, "subquery": 2, "extract": 2, "judge": 1, "total": 6}
    # The judge reads the factor evidence graph and the memory summary (section 3.11).
    judge_prompt = FakeOpenAI.requests[-1]["body"]["messages"][0]["content"]
    assert "f1 0.80 'cost'" in judge_prompt and "f2 1.00" in judge_prompt and "Memory: none" in judge_prompt
