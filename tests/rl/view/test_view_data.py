"""The viewer's data layer: traces written from real agent-loop episodes, loaded back, listed, laid out."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import pytest
import torch

import ragym.rl.agent_loop.loop
from ragym.rl.agent_loop.loop import make_agent_loop
from ragym.rl.core.rollout import EpisodeResult
from ragym.rl.models import load_processor
from ragym.rl.view import data, tokens
from ragym.rl.view.cli import serve_in_thread
from ragym.rl.view.site import Site
from ragym.rl.view.trace import TraceConfig, TraceWriter
from tests.rl.fakes import FakeSearchEnv, ScriptedServer, rollout_config

SEARCH = "<reason>look</reason><search>red bird</search>"
ANSWER = "<reason>done</reason><answer>a bird</answer>"


@pytest.fixture(scope="module")
def processor(tiny_policy_dir):
    return load_processor(tiny_policy_dir("qwen2_5_vl"))


def _row(index: int) -> dict:
    extra = {
        "index": index,
        "env_id": "Fake-v0",
        "env_kwargs": "{}",
        "env_options": json.dumps({"question": f"q{index}", "num_images": 1}),
    }
    return {"data_source": "fake", "reward_model": {"ground_truth": '["a bird"]'}, "extra_info": extra}


def _results(processor, rows: list[dict], per_row: int, script: list[str], step: int) -> list[EpisodeResult]:
    """``per_row`` scripted episodes of each row through the real agent loop, scored by hand."""
    server = ScriptedServer(processor.tokenizer, script)
    loop = make_agent_loop(rollout_config(), server, processor.tokenizer, processor)
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
    out = []
    for row in rows:
        for j in range(per_row):
            with (
                pytest.MonkeyPatch.context() as patch
            ):  # rows name ``Fake-v0``: the loop builds FakeSearchEnv
                patch.setattr(
                    ragym.rl.agent_loop.loop, "make_env", lambda env_id, **kwargs: FakeSearchEnv(**kwargs)
                )
                output = asyncio.run(
                    loop.run(params, extra_info=row["extra_info"], raw_prompt=[], priority=j)
                )
            reward = 0.25 * j
            score = {"score": reward, "reward/outcome": reward, "reward/format": -0.1}
            out.append(
                EpisodeResult(
                    row["extra_info"]["index"], f"s{step}-{row['extra_info']['index']}", output, score
                )
            )
    return out


@pytest.fixture(scope="module")
def trace_dir(processor, tmp_path_factory):
    """Two steps of 2 rows x G=2, one group recorded per step; the second step repeats row 7."""
    root = tmp_path_factory.mktemp("run") / "traces"
    writer = TraceWriter(root, processor.tokenizer, TraceConfig(max_groups_per_step=1))
    rows = [_row(3), _row(7)]
    first = _results(processor, rows, 2, [SEARCH, ANSWER], step=0)
    assert writer.record(1, "train", rows, first, torch.full((4, 512), 0.5)) == 2
    rows = [_row(5), _row(3)]  # row 3 was recorded at step 1: it is followed, though listed second
    second = _results(processor, rows, 2, [SEARCH, SEARCH, ANSWER], step=1)
    assert writer.record(2, "train", rows, second, -torch.ones((4, 512))) == 2
    assert writer.record(2, "train", rows, second) == 0  # the step's budget is spent
    return root


def test_trace_records_whole_groups_and_follows_questions(trace_dir):
    lines = [json.loads(line) for line in (trace_dir / "episodes.jsonl").read_text().splitlines()]
    assert [(r["step"], r["row_index"]) for r in lines] == [(1, 3), (1, 3), (2, 3), (2, 3)]
    assert [r["reward"] for r in lines] == [0.0, 0.25, 0.0, 0.25]
    assert lines[0]["terms"] == {"outcome": 0.0, "format": -0.1}
    first = lines[0]
    assert first["turns"] == [SEARCH, ANSWER]
    # The task observation has its query image, the search result its two candidates; the answer's empty
    # observation ends the episode and never enters the context.
    assert [len(o["images"]) for o in first["observations"]] == [1, 2]
    assert first["observations"][1]["text"].count("<image>") == 2
    assert first["images"] == [k for o in first["observations"] for k in o["images"]]
    assert len(first["token_text"]) == len(first["prompt_ids"]) + len(first["response_ids"])
    assert len(first["advantages"]) == len(first["response_ids"]) and set(first["advantages"]) == {0.5}


def test_images_are_stored_once_by_content(trace_dir):
    lines = [json.loads(line) for line in (trace_dir / "episodes.jsonl").read_text().splitlines()]
    keys = {k for r in lines for k in r["images"]}
    # Every episode of row 3 resets with the same seed: the same query image, one file for all four.
    assert len({r["images"][0] for r in lines}) == 1
    assert {p.stem for p in (trace_dir / "images").glob("*.png")} == keys


def test_resumed_writer_keeps_steps_up_to_its_checkpoint(trace_dir, processor, tmp_path):
    copy = tmp_path / "traces"
    copy.mkdir()
    (copy / "episodes.jsonl").write_text((trace_dir / "episodes.jsonl").read_text())
    writer = TraceWriter(copy, processor.tokenizer, TraceConfig(max_groups_per_step=1), keep_steps_up_to=1)
    assert [json.loads(x)["step"] for x in (copy / "episodes.jsonl").read_text().splitlines()] == [1, 1]
    assert writer.followed == {3} and writer.counts == {("train", 1): 1}


def test_a_trace_line_a_kill_cut_short_is_left_out(trace_dir, processor, tmp_path):
    copy = tmp_path / "traces"
    copy.mkdir()
    whole = (trace_dir / "episodes.jsonl").read_bytes()
    (copy / "episodes.jsonl").write_bytes(whole[:-100])  # killed while appending step 2's last episode
    (copy / "trace.json").write_text((trace_dir / "trace.json").read_text())
    assert [e["step"] for e in data.load(tmp_path).episodes] == [1, 1, 2]
    assert [e["step"] for e in data.load(copy / "episodes.jsonl").episodes] == [1, 1, 2]
    TraceWriter(copy, processor.tokenizer, TraceConfig(max_groups_per_step=1), keep_steps_up_to=1)
    assert [json.loads(x)["step"] for x in (copy / "episodes.jsonl").read_text().splitlines()] == [1, 1]


def test_token_spans_show_masks_placeholders_and_advantages(trace_dir):
    corpus = data.load(trace_dir.parent)
    episode = corpus.episodes[0]
    spans = tokens.token_spans(episode)
    generated = [t[0] for s in spans if s["kind"] == "gen" for t in s["tokens"]]
    assert generated == [
        i for i, m in zip(episode["response_ids"], episode["response_mask"], strict=True) if m
    ]
    assert all(t[2] == 0.5 for s in spans if s["kind"] == "gen" for t in s["tokens"])
    images = [s for s in spans if s["kind"] == "image"]
    assert len(images) == len(episode["images"]) == 3 and not any(s["bad"] for s in images)
    assert sum(s["count"] for s in images) == episode["token_text"].count("<|image_pad|>")
    assert tokens.token_issues(episode) == []
    # A placeholder with mask 1 (the bug the view exists to catch) is flagged.
    broken = dict(episode, response_mask=list(episode["response_mask"]))
    pad = next(
        i for i, t in enumerate(episode["token_text"][len(episode["prompt_ids"]) :]) if t == "<|image_pad|>"
    )
    broken["response_mask"][pad] = 1
    assert tokens.token_issues(broken) == ["1 image placeholder runs with mask 1"]


def test_every_token_shows_its_own_positions_advantage(processor, tmp_path):
    rows = [_row(3)]
    results = _results(processor, rows, 2, [SEARCH, ANSWER], step=0)  # episode j has reward 0.25 j
    # advantages[j, r] = 1000 j + r: unique per episode and response position, so a shift of one shows.
    advantages = torch.arange(2.0)[:, None] * 1000 + torch.arange(512.0)[None, :]
    writer = TraceWriter(tmp_path / "run" / "traces", processor.tokenizer, TraceConfig(max_groups_per_step=1))
    assert writer.record(1, "train", rows, results, advantages) == 2
    corpus = data.load(tmp_path / "run")
    assert len(corpus.episodes) == 2
    for episode in corpus.episodes:
        j, num_prompt = round(episode["reward"] / 0.25), len(episode["prompt_ids"])
        expected = [1000 * j + r for r in range(len(episode["response_ids"]))]
        assert episode["advantages"] == expected
        shown = {
            span["start"] + k: token[2]
            for span in tokens.token_spans(episode)
            if span["kind"] != "image"
            for k, token in enumerate(span["tokens"])
        }
        texts = episode["token_text"]
        assert shown == {  # prompt tokens have none; image placeholders are collapsed runs without one
            pos: None if pos < num_prompt else expected[pos - num_prompt]
            for pos in range(len(texts))
            if texts[pos] not in tokens.PLACEHOLDER_TEXTS
        }
        generated = [1000 * j + r for r, m in enumerate(episode["response_mask"]) if m]
        [row] = [r for r in data.index(corpus)["episodes"] if r["id"] == episode["id"]]
        assert row["advantage"] == pytest.approx(sum(generated) / len(generated))


def test_episode_view_lays_out_turns_events_and_observations(trace_dir):
    corpus = data.load(trace_dir.parent)
    view = data.episode_view(corpus, "e0")
    assert [t["text"] for t in view["turns"]] == [SEARCH, ANSWER]
    assert [e["type"] for e in view["turns"][0]["events"]] == ["action", "search_image"]
    assert [list(s) for s in view["turns"][0]["observation"]] == [
        ["text"],
        ["image"],
        ["text"],
        ["image"],
        ["text"],
    ]
    assert view["turns"][1]["observation"] is None
    assert view["task"]["observation"][1] == {"image": corpus.episodes[0]["images"][0]}
    assert view["summary"]["actions"] == ["search_image", "answer"]
    assert view["summary"]["question"] == "fake#3"
    with pytest.raises(KeyError, match="e99"):
        data.episode_view(corpus, "e99")


def test_segments_follow_the_markers_or_put_images_first():
    assert data.segments("a <image> b", ["k"]) == [{"text": "a "}, {"image": "k"}, {"text": " b"}]
    assert data.segments("text only", ["k1", "k2"]) == [
        {"image": "k1"},
        {"image": "k2"},
        {"text": "text only"},
    ]
    with pytest.raises(ValueError, match="2 <image> markers, 1 images"):
        data.segments("<image><image>", ["k"])


def _event_corpus() -> list[dict]:
    verification = {
        "type": "verification",
        "turn": 1,
        "candidates": ["Q1", "Q2"],
        "entity": None,
        "gold_entity": "Q2",
        "gold_in_batch": True,
        "decision": "reject",
        "correct": False,
    }
    other = dict(verification, turn=2, entity="Q9", gold_entity="Q9", decision="rerank", correct=True)
    answer = {"type": "answer", "turn": 3, "text": "The Velmora bridge", "forced": False}
    return [{"events": [verification, other, answer]}, {"events": [dict(answer, text="1900")]}]


def test_filter_tags_come_from_flags_and_codes_only():
    fields = data.categorical_fields(_event_corpus())
    # Entity ids and free answer text are not offered as filters; flags and decision codes are.
    assert fields == {"answer": ["forced"], "verification": ["correct", "decision", "gold_in_batch"]}
    tags = data.event_tags(_event_corpus()[0]["events"][0], fields)
    assert "verification decision=reject gold_in_batch=true" not in tags  # one signature has every field
    assert "verification correct=false decision=reject gold_in_batch=true" in tags
    assert "verification decision=reject" in tags and "verification gold_in_batch=true" in tags


def test_gold_values_exclude_flags():
    verification = _event_corpus()[0]["events"][0]
    assert data.gold_values(verification) == ["Q2"]


def test_eval_rollouts_load_without_tokens(tmp_path):
    episode = {
        "data_source": "fake",
        "turns": [SEARCH],
        "events": _event_corpus()[0]["events"],
        "ground_truth": ["x"],
        "truncated": True,
        "extra": {"index": 4},
    }
    (tmp_path / "rollouts.jsonl").write_text(json.dumps(episode) + "\n")
    (tmp_path / "episodes.jsonl").write_text(json.dumps({"index": 4, "correct": 1.0}) + "\n")
    corpus = data.load(tmp_path)
    row = data.index(corpus)["episodes"][0]
    assert (row["reward"], row["terms"], row["truncated"], row["question"]) == (
        1.0,
        {"outcome": 1.0},
        True,
        "fake#4",
    )
    assert data.episode_view(corpus, "e0")["spans"] is None
    (tmp_path / "episodes.jsonl").write_text("")
    with pytest.raises(ValueError, match="1 episodes, episodes.jsonl beside it 0"):
        data.load(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no trace folder"):
        data.load(tmp_path / "empty")


def test_site_serves_and_exports_the_same_files(trace_dir, tmp_path):
    site = Site(data.load(trace_dir.parent))
    index_js = site.get("/data/index.js")[0].decode()
    assert index_js.startswith("window.RAGYM_INDEX = ")
    rows = json.loads(index_js.removeprefix("window.RAGYM_INDEX = ").rstrip(";\n"))["episodes"]
    assert [r["id"] for r in rows] == ["e0", "e1", "e2", "e3"]
    assert site.get("/data/ep/e9.js") is None and site.get("/../etc/passwd") is None
    out = tmp_path / "export"
    assert site.export(out) == out / "index.html"
    assert {p.name for p in (out / "data" / "ep").iterdir()} == {f"e{i}.js" for i in range(4)}
    assert (out / "data" / "ep" / "e2.js").read_bytes() == site.get("data/ep/e2.js")[0]
    assert {p.name for p in (out / "images").iterdir()} == {p.name for p in (trace_dir / "images").iterdir()}
    site.export(out)  # an earlier export is replaced
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("x")
    with pytest.raises(FileExistsError, match="not a viewer export"):
        site.export(tmp_path / "notes")


def test_server_binds_loopback_and_serves_the_site(trace_dir):
    server, url = serve_in_thread(Site(data.load(trace_dir.parent)))
    try:
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url, timeout=10) as response:
            assert b'<script src="view.js">' in response.read()
        with urllib.request.urlopen(url + "data/ep/e1.js", timeout=10) as response:
            assert response.headers["Content-Type"].startswith("text/javascript")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(url + "nothing", timeout=10)
        assert err.value.code == 404
    finally:
        server.shutdown()
        server.server_close()


def test_questions_without_a_row_index_are_keyed_by_their_task():
    def episode(turn: str) -> dict:
        return {"data_source": "fake", "row_index": None, "observations": [], "turns": [turn]}

    assert (
        data.question_key(episode("a")) == data.question_key(episode("a")) != data.question_key(episode("b"))
    )
    assert data.question_key(episode("a")).startswith("fake:")


@pytest.mark.parametrize("env_id", sorted(__import__("ragym.envs", fromlist=["envs"]).registered_envs()))
def test_every_registered_env_is_shown_from_its_events_and_observations(env_id, processor, tmp_path):
    """No per-env code: any env's episode lays out, lists and tokenizes (two malformed turns, then the budget)."""
    row = {
        "data_source": env_id,
        "reward_model": {"ground_truth": "[]"},
        "extra_info": {"index": 0, "env_id": env_id, "env_kwargs": "{}", "env_options": "null"},
    }
    server = ScriptedServer(processor.tokenizer, ["hello", "<answer>"])
    # Room for every env's first prompt at its default settings (MEMORA's and DocMemo's run past 1024 tokens).
    config = rollout_config(max_assistant_turns=2, prompt_length=16384)
    loop = make_agent_loop(config, server, processor.tokenizer, processor)
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": False}
    output = asyncio.run(loop.run(params, extra_info=row["extra_info"], raw_prompt=[], priority=0))
    result = EpisodeResult(0, "g0", output, {"score": 0.0, "reward/format": 0.0})
    TraceWriter(tmp_path / "traces", processor.tokenizer, TraceConfig()).record(1, "train", [row], [result])
    corpus = data.load(tmp_path)
    summary = data.index(corpus)["episodes"][0]
    assert summary["format_errors"] >= 1 and summary["token_issues"] == []
    view = data.episode_view(corpus, "e0")
    shown = [s["image"] for s in view["task"]["observation"] if "image" in s]
    shown += [s["image"] for t in view["turns"] if t["observation"] for s in t["observation"] if "image" in s]
    assert shown == corpus.episodes[0]["images"]
    assert [t["text"] for t in view["turns"]] == output.extra_fields["turns"]


def test_bad_inputs_are_errors_naming_the_problem(processor, tmp_path):
    from ragym.rl.view.trace import split_observations

    with pytest.raises(ValueError, match="observations hold 1 images, the episode has 2"):
        split_observations([{"text": "<image>", "num_images": 1}], ["a", "b"])
    writer = TraceWriter(tmp_path / "traces", processor.tokenizer, TraceConfig())
    with pytest.raises(ValueError, match="3 episodes do not split evenly over 2 rows"):
        writer.record(1, "train", [_row(1), _row(2)], [object()] * 3)
    (tmp_path / "traces" / "episodes.jsonl").write_text('{"step": 1}\nnot json\n')
    with pytest.raises(ValueError, match=r"episodes.jsonl:2: not JSON"):
        data.load(tmp_path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        data.load(tmp_path / "nowhere")


def test_scripted_rollouts_write_a_trace_without_tokens(tmp_path):
    from ragym.rl.eval.scripted import main as rollout

    assert rollout(["--preset", "tiny", "--episodes", "3", "--policy", "oracle", "--out", str(tmp_path)]) == 0
    corpus = data.load(tmp_path)
    assert len(corpus.episodes) == 3
    for episode in corpus.episodes:
        # The task observation, then one per turn (the last one included: nothing cuts it from a script).
        assert len(episode["observations"]) == len(episode["turns"]) + 1
        assert (
            set(episode["images"]) <= set(corpus.images) and episode["reward"] == 1.0
        )  # the oracle answers right
        view = data.episode_view(corpus, episode["id"])
        assert view["spans"] is None and all(t["observation"] is not None for t in view["turns"])


def test_off_policy_episodes_carry_their_weight_versions_into_the_view(processor, tmp_path):
    """verl's trainer modes add each episode's weight versions and staleness to its trace record; the view lists
    them. The local engine's episodes have neither (None in the list, no field in the record)."""
    rows = [_row(2)]
    results = _results(processor, rows, 2, [ANSWER], step=0)
    results[1].output.extra_fields.update(weight_versions=[1, 2], staleness=1)
    writer = TraceWriter(tmp_path / "run" / "traces", processor.tokenizer, TraceConfig(max_groups_per_step=1))
    assert writer.record(3, "train", rows, results) == 2
    records = [
        json.loads(line) for line in (tmp_path / "run" / "traces" / "episodes.jsonl").read_text().splitlines()
    ]
    assert "staleness" not in records[0] and (records[1]["weight_versions"], records[1]["staleness"]) == (
        [1, 2],
        1,
    )
    summaries = {r["reward"]: r for r in data.index(data.load(tmp_path / "run"))["episodes"]}
    assert (summaries[0.25]["weight_versions"], summaries[0.25]["staleness"]) == ([1, 2], 1)
    assert (summaries[0.0]["weight_versions"], summaries[0.0]["staleness"]) == (None, None)
