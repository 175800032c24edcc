"""``ragym.retrieval.url``: the recipe names the service once and every env that searches gets it."""

from __future__ import annotations

import asyncio

import pytest

from ragym.envs.registry import searches_service
from ragym.rl.agent_loop.loop import make_agent_loop
from ragym.rl.engine.config import RecipeReader, read_engine_config
from ragym.rl.errors import UsageError
from ragym.rl.models import load_processor
from ragym.rl.recipe.compose import load_recipe
from ragym.rl.recipe.retrieval import recipe_retrieval_url, with_retrieval_url
from ragym.rl.train import check_keys
from tests.envs.retrieval.service.helpers import free_port
from tests.rl.fakes import ScriptedServer

URL = "http://127.0.0.1:9"


def test_envs_that_search_get_the_address_and_a_rows_own_address_wins() -> None:
    assert [e for e in ("KBVQA-v0", "KBVQA-Demo-v0", "DocMemo-v0") if searches_service(e)] == [
        "KBVQA-v0",
        "KBVQA-Demo-v0",
        "DocMemo-v0",
    ]
    assert with_retrieval_url("DocMemo-v0", {"max_rounds": 2}, URL) == {"max_rounds": 2, "retrieval_url": URL}
    assert with_retrieval_url("KBVQA-v0", {"retrieval_url": "http://other:1"}, URL)["retrieval_url"] != URL
    assert with_retrieval_url("R3G-v0", {}, URL) == {}  # R3G searches no service
    assert with_retrieval_url("KBVQA-v0", {}, None) == {}


def test_a_bad_address_is_an_error_naming_the_key() -> None:
    config = load_recipe("kbvqa_tiny_cpu", ["ragym.retrieval.url=localhost:8000"])
    with pytest.raises(UsageError, match=r"ragym.retrieval.url must be null or an http://host:port URL"):
        recipe_retrieval_url(config)
    assert recipe_retrieval_url(load_recipe("kbvqa_tiny_cpu")) is None


def test_the_recipes_address_reaches_the_env_on_the_local_engine_path(tiny_policy_dir) -> None:
    port = free_port()  # nothing listens there: the env's search must go to it and fail there
    policy = tiny_policy_dir("qwen2_5_vl")
    overrides = [f"ragym.retrieval.url=http://127.0.0.1:{port}", f"actor_rollout_ref.model.path={policy}"]
    config = load_recipe("kbvqa_tiny_cpu", overrides)
    reader = RecipeReader(config)
    read_engine_config(reader)
    assert "ragym.retrieval.url" not in check_keys("kbvqa_tiny_cpu", overrides, reader)  # read, not unused
    processor = load_processor(policy)
    script = [
        "<reason>look</reason><search_call>SearchImage(1)</search_call>",
        "<reason>enough</reason><answer>unknown</answer>",
    ]
    server = ScriptedServer(processor.tokenizer, script)
    loop = make_agent_loop(config, server, processor.tokenizer, processor)
    row = {
        "index": 0,
        "env_id": "KBVQA-v0",
        "env_kwargs": '{"retrieval_timeout_s": 0.5}',
        "env_options": "null",
    }
    out = asyncio.run(loop.run({}, extra_info=row, priority=0))
    [error] = [e for e in out.extra_fields["events"] if e["type"] == "retrieval_error"]
    assert error["reason"] in ("connection", "circuit_open") and f":{port}" in error["detail"]
    assert out.extra_fields["episode_metrics"]["retrieval_errors"] == 1.0
