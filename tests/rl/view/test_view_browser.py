"""The viewer page in a real headless Chromium: a tiny GRPO run, its episode list, filters, one episode, tokens."""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from verl.workers.rollout.replica import TokenOutput

from ragym.rl.core.hf_server import ServerStats
from ragym.rl.engine.trainer import read_rows
from ragym.rl.eval.backends import Backend
from ragym.rl.view.cli import serve_in_thread
from ragym.rl.view.data import load
from ragym.rl.view.site import Site
from ragym.rl.view.trace import TraceConfig, TraceWriter

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,  # a two-step GRPO run and an eval are built first (~40 s on 2 cores)
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)",
    ),
]


def every_image_loaded(page, selector: str = ".obs img") -> bool:
    """Wait until each image matched by ``selector`` has finished (loaded or failed), then say whether all decoded.

    ``complete`` turns true for a broken image too, so the wait cannot hide one; it only stops the check from
    racing the browser's fetches of images that appear after a click.
    """
    page.wait_for_function(
        "sel => [...document.querySelectorAll(sel)].every(i => i.complete)", arg=selector, timeout=30_000
    )
    return page.locator(selector).evaluate_all("imgs => imgs.every(i => i.complete && i.naturalWidth > 0)")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """Two GRPO steps and an evaluation of a tiny policy on the demo KB, traced (the demo's layout: grpo/)."""
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb
    from ragym.rl.tiny.policy import build_tiny_policy
    from ragym.rl.train import build_trainer

    os.environ.setdefault("WANDB_MODE", "disabled")
    root = tmp_path_factory.mktemp("demo_like")
    kb = build_kb(root / "kb", PRESETS["demo"], seed=0, name="synthetic-demo")
    policy = build_tiny_policy("qwen2_5_vl", root / "policy", seed=0)
    trainer = build_trainer(
        "kbvqa_tiny_cpu",
        [
            f"actor_rollout_ref.model.path={policy}",
            f"data.train_files={kb}/data/train.parquet",
            f"data.val_files={kb}/data/test.parquet",
            f"trainer.default_local_dir={root / 'grpo'}",
            "trainer.total_training_steps=2",
            "trainer.logger=[console]",
            "trainer.save_freq=-1",
            "data.train_batch_size=2",
            "data.val_max_samples=2",
            "data.max_response_length=256",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
        ],
    )
    trainer.evaluate()
    trainer.fit()
    trainer.close()
    return root


class TurnScriptedServer:
    """verl's ``generate`` replaying one of two scripts turn by turn (the turn read from the conversation),
    chosen by the parity of the episode's first image (so some questions take each path)."""

    def __init__(self, tokenizer: Any, scripts: tuple[list[str], list[str]]) -> None:
        self.tokenizer, self.scripts = tokenizer, scripts
        self.stats = ServerStats()

    def track_episodes(self, num_episodes: int) -> None:
        pass

    def episode_done(self) -> None:
        pass

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: list[Any] | None = None,
        **kwargs: Any,
    ) -> TokenOutput:
        # System, user and the generation prompt open 3 messages; each earlier turn adds an assistant and a user.
        turn = (prompt_ids.count(self.tokenizer.convert_tokens_to_ids("<|im_start|>")) - 3) // 2
        script = self.scripts[zlib.crc32(np.asarray(image_data[0]).tobytes()) % 2]
        text = script[min(turn, len(script) - 1)]
        return TokenOutput(token_ids=self.tokenizer.encode(text, add_special_tokens=False))


@pytest.fixture(scope="module")
def eval_dir(tmp_path_factory, tiny_policy_dir) -> Path:
    """A traced ``ragym eval``: half the questions search and reject twice (some rejected batches hold the gold)."""
    from ragym.data_prep.synthetic_kb import PRESETS, build_kb
    from ragym.envs.kbvqa.actions import Answer, Reject, SearchImage, format_action
    from ragym.rl.eval.args import EvalConfig
    from ragym.rl.eval.evaluate import run_eval
    from ragym.rl.models import load_processor
    from ragym.rl.recipe.compose import load_recipe

    root = tmp_path_factory.mktemp("eval")
    kb = build_kb(root / "kb", PRESETS["tiny"], seed=0, name="synthetic-tiny")
    policy = tiny_policy_dir("qwen2_5_vl")
    processor = load_processor(policy)
    rejects = [
        format_action(a, "r") for a in (SearchImage(1), Reject(), SearchImage(1), Reject(), Answer("1900"))
    ]
    answers = [format_action(a, "r") for a in (SearchImage(1), Answer("1900"))]
    server = TurnScriptedServer(processor.tokenizer, (rejects, answers))
    backend = Backend(server, processor.tokenizer, processor, "scripted")
    config = load_recipe(
        "kbvqa_tiny_cpu", [f"actor_rollout_ref.model.path={policy}", "data.max_response_length=4096"]
    )
    rows = read_rows(str(kb / "data" / "test.parquet"))
    trace = TraceWriter(root / "out" / "traces", processor.tokenizer, TraceConfig(max_groups_per_step=100))
    run_eval(rows, backend, config, EvalConfig(batch_size=4), trace=trace)
    return root / "out"


@pytest.fixture(scope="module")
def browser(run_dir, eval_dir):
    """Chromium under Playwright's sync API, started after the runs it shows: its event loop occupies this
    thread, and the engine's rollouts need their own."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def page(run_dir, browser):
    server, url = serve_in_thread(Site(load(run_dir)))
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(url)
    page.wait_for_selector("#episodes tr.ep")
    yield page, errors, url
    page.close()
    server.shutdown()
    server.server_close()


def test_list_filters_and_sorts_episodes(page, run_dir):
    page, errors, _ = page
    lines = [json.loads(x) for x in (run_dir / "grpo" / "traces" / "episodes.jsonl").read_text().splitlines()]
    assert page.locator("#episodes tr.ep").count() == len(lines)
    page.select_option("#f-phase", "val")
    assert page.locator("#episodes tr.ep").count() == sum(r["phase"] == "val" for r in lines)
    page.select_option("#f-phase", "")
    page.select_option("#f-step", "2")
    assert page.locator("#episodes tr.ep").count() == sum(r["step"] == 2 for r in lines)
    page.select_option("#f-step", "")
    page.click("th[data-key=reward]")
    page.click("th[data-key=reward]")  # descending
    shown = [float(t) for t in page.locator("#episodes tr.ep td:nth-child(6)").all_inner_texts()]
    assert shown == sorted(shown, reverse=True)
    # Event filters: format errors, and a tag from the events' categorical fields.
    page.select_option("#f-format_errors", "yes")
    assert page.locator("#episodes tr.ep").count() == sum(
        any(e["type"] == "format_error" for e in r["events"]) for r in lines
    )
    page.select_option("#f-format_errors", "")
    page.select_option("#f-tag", "truncated reason=max_response_length")
    expected = sum(any(e.get("reason") == "max_response_length" for e in r["events"]) for r in lines)
    assert page.locator("#episodes tr.ep").count() == expected
    page.select_option("#f-tag", "")
    assert not errors


def test_episode_shows_turns_images_events_terms_and_tokens(page, run_dir, tmp_path):
    page, errors, _ = page
    page.goto(page.url.split("#")[0] + "#/")
    page.wait_for_selector("#episodes tr.ep")
    page.select_option("#f-phase", "train")
    first = page.locator("#episodes tr.ep").first
    episode_id = first.get_attribute("data-id")
    first.click()
    page.wait_for_selector("#terms")
    episode = load(run_dir).by_id(episode_id)
    assert page.locator(".turn").count() == len(episode["turns"]) + 1  # the task card, then one per turn
    for turn, text in enumerate(episode["turns"]):
        assert page.locator(f".turn[data-turn='{turn}'] pre.policy").inner_text() == text
    terms = page.locator("#terms tr[data-term]").evaluate_all("rows => rows.map(r => r.dataset.term)")
    assert terms == list(episode["terms"]) and "verification" in terms
    # Every image of the episode is shown, and each one actually loaded.
    images = page.locator(".obs img")
    assert images.count() == len(episode["images"]) > 0
    assert every_image_loaded(page)
    assert page.locator(".event[data-type=action]").count() == len(episode["turns"])
    # Gold values are marked wherever an event names them (here: the task event's gold entities).
    golds = [
        v for e in episode["events"] for k, v in e.items() if k.startswith("gold_") and isinstance(v, list)
    ]
    assert page.locator(".event .gold").count() >= sum(map(len, golds)) > 0
    # Token view: mask-1 spans, image placeholder spans (one per image, none with mask 1), advantages.
    assert page.locator("#tokens .imgspan").count() == len(episode["images"])
    assert page.locator("#tokens .imgspan.bad").count() == 0
    generated = page.locator("#tokens .tok.gen").count()
    assert generated == sum(episode["response_mask"])
    titles = page.locator("#tokens .tok.gen").evaluate_all("ts => ts.map(t => t.title)")
    assert all(" adv " in t for t in titles)
    shot = Path(os.environ.get("RAGYM_VIEW_SCREENSHOT", tmp_path / "episode.png"))
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    page.click("#question-link")
    page.wait_for_selector("#steps")
    assert page.locator("#steps a.mini").count() == sum(
        1 for e in load(run_dir).episodes if e["row_index"] == episode["row_index"]
    )
    assert not errors


def test_exported_folder_opens_from_disk(run_dir, browser, tmp_path):
    index = Site(load(run_dir)).export(tmp_path / "view")
    page = browser.new_page()
    page.goto(index.as_uri() + "#/ep/e0")
    page.wait_for_selector("#terms")
    images = page.locator(".obs img")
    assert images.count() > 0
    assert every_image_loaded(page)
    page.close()


REJECTED_GOLD = "verification at_limit=false correct=false decision=reject gold_in_batch=true"
"""The filter tag of a counted Reject (not one at the rejection limit) of a batch that held the gold entity."""


def test_rejected_gold_batches_are_two_clicks_away(eval_dir, browser, tmp_path):
    episodes = load(eval_dir).episodes
    expected = [
        e["id"]
        for e in episodes
        if any(
            v["type"] == "verification"
            and v["decision"] == "reject"
            and v["gold_in_batch"]
            and not v["at_limit"]
            for v in e["events"]
        )
    ]
    assert 0 < len(expected) < len(episodes)  # the filter separates something
    server, url = serve_in_thread(Site(load(eval_dir)))
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(url)
        page.select_option("#f-tag", REJECTED_GOLD)  # click the "has event" list, click the tag
        rows = page.locator("#episodes tr.ep")
        assert sorted(rows.evaluate_all("rs => rs.map(r => r.dataset.id)")) == sorted(expected)
        rows.first.click()
        page.wait_for_selector(".event[data-type=verification]")
        # The gold entity is marked among the rejected batch's candidates.
        rejected = page.locator(".event[data-type=verification]").first
        assert rejected.locator(".gold").count() >= 2  # in ``candidates`` and as ``gold_entity``
        assert page.locator(".obs img").count() > 0
        assert every_image_loaded(page)
        page.screenshot(
            path=os.environ.get("RAGYM_VIEW_SCREENSHOT_EVAL", str(tmp_path / "eval.png")), full_page=True
        )
    finally:
        page.close()
        server.shutdown()
        server.server_close()
