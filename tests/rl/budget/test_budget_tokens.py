"""The report's visual tokens are the processor's: Qwen2.5-VL's and Qwen3-VL's real processor settings on tiny
policies, multi-megapixel photos raw and fitted by the envs, and a KB-VQA row's query images end to end."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from omegaconf import OmegaConf
from PIL import Image

from ragym.envs.registry import make_env
from ragym.rl.agent_loop.observations import EpisodeSpec
from ragym.rl.budget.cli import load_config, main
from ragym.rl.budget.tokens import VISION_MARKERS, TextCounter, pixel_rule
from ragym.rl.errors import UsageError
from ragym.rl.recipe.images import recipe_images, recipe_processor_kwargs, with_image_budget
from tests.photos import photo
from tests.rl.conftest import REAL_SETTINGS


def pads(processor, image: Image.Image, kwargs: dict) -> int:
    """Image pad tokens verl's processor expands ``image`` to with ``kwargs``."""
    out = processor(text=[processor.image_token], images=[image], return_tensors="pt", **kwargs)
    return int((out["input_ids"] == processor.image_token_id).sum())


@pytest.mark.parametrize("arch", list(REAL_SETTINGS))
def test_visual_tokens_are_the_processors_for_raw_and_fitted_photos(arch, real_policy) -> None:
    folder, processor = real_policy(arch)
    config = load_config(REAL_SETTINGS[arch][2], [])
    rule, budget, kwargs = (
        pixel_rule(config, folder),
        recipe_images(config).budget,
        recipe_processor_kwargs(config),
    )
    for image in (
        photo(4000, 3000),
        budget.fit(photo(3000, 2000, 1), "query"),
        budget.fit(photo(1800, 2400), "candidate"),
    ):
        height, width = image.shape[:2]
        assert rule.tokens(height, width) == pads(processor, Image.fromarray(image), kwargs)
    # Without a recipe budget: the model folder's own range (its processor config), ~15,000 tokens.
    bare = pixel_rule(OmegaConf.create({"data": {}}), folder)
    assert bare.source.endswith("processor_config.json") and bare.max_pixels == REAL_SETTINGS[arch][1]
    assert bare.tokens(3000, 4000) == pads(processor, Image.fromarray(photo(4000, 3000)), {}) > 10_000


def test_a_processor_config_without_a_pixel_range_is_a_usage_error(tmp_path) -> None:
    """Neither min/max_pixels nor size's edges: an error naming the file, not int(None)'s TypeError."""
    (tmp_path / "preprocessor_config.json").write_text(
        json.dumps({"patch_size": 14, "merge_size": 2, "size": {}})
    )
    with pytest.raises(UsageError, match=r"preprocessor_config.json gives no pixel range"):
        pixel_rule(OmegaConf.create({"data": {}}), tmp_path)


def test_a_kbvqa_rows_prompt_visual_tokens_are_what_the_processor_expands(
    paper_rows, real_policy, tmp_path
) -> None:
    folder, processor = real_policy("qwen2_5_vl")
    recipe = REAL_SETTINGS["qwen2_5_vl"][2]
    rows, out = paper_rows("kbvqa"), tmp_path / "report.json"
    assert (
        main(["--recipe", recipe, "--rows", str(rows), "--tokenizer", str(folder), "--json", str(out)]) == 0
    )
    report = json.loads(out.read_text())
    config = load_config(recipe, [])
    for row, episode in zip(pd.read_parquet(rows)["extra_info"], report["episodes"], strict=True):
        kwargs = with_image_budget(row["env_id"], json.loads(row["env_kwargs"]), recipe_images(config))
        obs, _ = make_env(row["env_id"], **kwargs).reset(
            seed=int(row["index"]), options=json.loads(row["env_options"])
        )
        expected = [
            pads(processor, Image.fromarray(im), recipe_processor_kwargs(config)) for im in obs["images"]
        ]
        assert episode["prompt_visual"] == sum(expected) + VISION_MARKERS * len(expected)


def test_text_tokens_come_from_the_chat_template_without_the_vision_tokens(real_policy) -> None:
    folder, processor = real_policy("qwen2_5_vl")
    counter = TextCounter(processor.tokenizer)
    with_image = [{"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image"}]}]
    without = [{"role": "user", "content": [{"type": "text", "text": "look"}]}]
    assert counter.conversation(with_image, True) == counter.conversation(without, True)
    rendered = processor.tokenizer.apply_chat_template(without, tokenize=False, add_generation_prompt=True)
    assert counter.conversation(without, True) == len(processor.tokenizer(rendered)["input_ids"])
    assert TextCounter(None).text("x" * 35) == 10  # the estimate: characters / 3.5


def test_the_counts_are_the_agent_loops_own_for_the_same_turns(paper_rows, real_policy, tmp_path) -> None:
    import asyncio

    from ragym.rl.agent_loop.loop import make_agent_loop
    from ragym.rl.budget.episodes import play_longest
    from ragym.rl.budget.report import RowEpisodes
    from tests.rl.fakes import ScriptedServer, rollout_config

    folder, processor = real_policy("qwen2_5_vl")
    recipe = REAL_SETTINGS["qwen2_5_vl"][2]
    rows, out = paper_rows("kbvqa"), tmp_path / "report.json"
    assert (
        main(
            [
                "--recipe",
                recipe,
                "--rows",
                str(rows),
                "--tokenizer",
                str(folder),
                "--action-tokens",
                "0",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    counted = json.loads(out.read_text())["episodes"][0]  # the comparison row: 8 turns, 30 candidates
    recipe_config = load_config(recipe, [])
    row = pd.read_parquet(rows)["extra_info"].iloc[0]
    env = RowEpisodes(recipe_config).env(EpisodeSpec.from_extra_info(dict(row)))
    turns = play_longest(row["env_id"], env, json.loads(row["env_options"]), int(row["index"]), 8).turns
    # The agent loop, fed the same turns by a scripted server, with the recipe's budget and processor range.
    config = rollout_config(response_length=100_000, max_assistant_turns=8)
    config.actor_rollout_ref.rollout.prompt_length = 100_000
    config.data.mm_processor_kwargs = recipe_processor_kwargs(recipe_config)
    config.ragym = {"images": OmegaConf.to_container(recipe_config.ragym.images, resolve=True)}
    loop = make_agent_loop(config, ScriptedServer(processor.tokenizer, turns), processor.tokenizer, processor)
    output = asyncio.run(loop.run({"logprobs": False}, extra_info=dict(row)))
    assert output.extra_fields["turns"] == turns and len(output.multi_modal_data["images"]) == 32
    assert len(output.prompt_ids) == counted["prompt_text"] + counted["prompt_visual"]
    assert len(output.response_ids) == counted["response"]
    assert sum(output.response_mask) == counted["response_actions"]
