"""Visual tokens of multi-megapixel photos under Qwen2.5-VL's and Qwen3-VL's real processor settings (tiny
models built from config): the recipe's pixel range bounds them in verl's processor, in the local engine's
``ImageInputs`` and in the agent loop, and images the envs fitted are not resized again."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf
from PIL import Image

from ragym.data_prep.synthetic_kb import PRESETS, build_kb
from ragym.envs import image_cache
from ragym.envs.image_budget import ImageBudget, visual_tokens
from ragym.envs.kbvqa import kb as kb_module
from ragym.rl.agent_loop.loop import make_agent_loop
from ragym.rl.core.vision import ImageInputs
from ragym.rl.errors import UsageError
from ragym.rl.recipe.check import check_recipe
from ragym.rl.recipe.compose import RECIPES_DIR
from ragym.rl.recipe.images import check_processor_factor, recipe_images, recipe_processor_kwargs
from tests.photos import photo, write_photo
from tests.rl.conftest import REAL_SETTINGS
from tests.rl.fakes import ScriptedServer, rollout_config


def recipe(arch: str):
    return check_recipe(RECIPES_DIR / f"{REAL_SETTINGS[arch][2]}.yaml", [], validate=False)


def placeholder_count(processor, image: Image.Image, kwargs: dict) -> int:
    """Image pad tokens verl's processor expands one image to, with ``kwargs`` (what verl passes)."""
    out = processor(text=[processor.image_token], images=[image], return_tensors="pt", **kwargs)
    return int((out["input_ids"] == processor.image_token_id).sum())


@pytest.mark.parametrize("arch", list(REAL_SETTINGS))
def test_the_recipe_bounds_a_raw_photo_in_verls_processor_and_the_local_engine(arch, real_policy) -> None:
    _, processor = real_policy(arch)
    config = recipe(arch)
    budget, kwargs = recipe_images(config).budget, recipe_processor_kwargs(config)
    raw = Image.fromarray(photo(4000, 3000))
    assert placeholder_count(processor, raw, {}) > 10_000  # the model's own cap: ~15,000 tokens
    tokens = placeholder_count(processor, raw, kwargs)
    assert tokens <= budget.max_tokens("query")
    # The local engine's features agree with the placeholders: same grid, so same token count.
    grid = ImageInputs(processor.image_processor, kwargs).encode([raw])["image_grid_thw"]
    assert int(grid.prod()) // 4 == tokens
    unbounded = ImageInputs(processor.image_processor).encode([raw])["image_grid_thw"]
    assert int(unbounded.prod()) // 4 > tokens


@pytest.mark.parametrize("arch", list(REAL_SETTINGS))
@pytest.mark.parametrize("role", ["query", "candidate"])
def test_an_env_fitted_photo_is_not_resized_again(arch, role, real_policy) -> None:
    _, processor = real_policy(arch)
    config = recipe(arch)
    budget, kwargs = recipe_images(config).budget, recipe_processor_kwargs(config)
    fitted = budget.fit(photo(3000, 2000, 1), role)
    height, width = fitted.shape[:2]
    out = processor.image_processor(
        images=[Image.fromarray(fitted)],
        return_tensors="pt",
        **ImageInputs(processor.image_processor, kwargs).kwargs,
    )
    patch = processor.image_processor.patch_size
    _, grid_h, grid_w = (int(x) for x in out["image_grid_thw"][0])
    assert (grid_h * patch, grid_w * patch) == (height, width)
    tokens = placeholder_count(processor, Image.fromarray(fitted), kwargs)
    assert tokens == visual_tokens(height, width, budget.image_factor) <= budget.max_tokens(role)


def test_a_factor_that_is_not_the_policys_is_an_error(real_policy) -> None:
    _, processor = real_policy("qwen3_vl")
    check_processor_factor(recipe_images(recipe("qwen3_vl")), processor)
    with pytest.raises(UsageError, match="factor is 28 but the policy's processor has patch size 16"):
        check_processor_factor(recipe_images(recipe("qwen2_5_vl")), processor)


SCRIPT = [
    "<reason>find it</reason><search_call>SearchImage(1)</search_call>",
    "<reason>none match</reason><rerank>Reject()</rerank>",
    "<reason>enough</reason><answer>unknown</answer>",
]


@pytest.fixture(scope="module")
def photo_kb(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A small synthetic KB whose first row's query image and first two candidate batches are photos."""
    root = build_kb(tmp_path_factory.mktemp("kb") / "kb", PRESETS["tiny"], seed=5)
    frame = pd.read_parquet(root / "data" / "train.parquet")
    options = next(
        o for o in (json.loads(e["env_options"]) for e in frame["extra_info"]) if len(o["query_images"]) == 1
    )
    kb = kb_module.load_kb(root)
    query = kb.resolve(options["query_images"][0])
    write_photo(Path(query), 3000, 2000, 0)
    for i, hit in enumerate(kb.candidate_retriever().search(query, 10)):
        write_photo(Path(hit.payload["image"]), 1600, 1200 + 40 * i, i + 1)
    return root, options


@pytest.mark.parametrize("arch", list(REAL_SETTINGS))
def test_agent_loop_episodes_spend_at_most_the_recipes_tokens_per_image(arch, real_policy, photo_kb) -> None:
    _, processor = real_policy(arch)
    root, options = photo_kb
    images_node = OmegaConf.to_container(recipe(arch).ragym.images, resolve=True)
    images_node["candidate_max_pixels"] = 96 * images_node["factor"] ** 2  # not the env default: injected
    config = rollout_config(response_length=8192)
    config.data.mm_processor_kwargs = {
        "min_pixels": images_node["min_pixels"],
        "max_pixels": images_node["query_max_pixels"],
    }
    config.actor_rollout_ref.rollout.prompt_length = 4096
    config.ragym = {"images": images_node}
    image_cache.clear_image_cache()
    server = ScriptedServer(processor.tokenizer, SCRIPT)
    loop = make_agent_loop(config, server, processor.tokenizer, processor)
    row = {
        "index": 0,
        "env_id": "KBVQA-v0",
        "env_kwargs": json.dumps({"kb_dir": str(root)}),
        "env_options": json.dumps(options),
    }
    out = asyncio.run(loop.run({"logprobs": False}, extra_info=row))
    budget = ImageBudget(
        images_node["query_max_pixels"],
        images_node["candidate_max_pixels"],
        images_node["min_pixels"],
        images_node["factor"],
    )
    images = out.multi_modal_data["images"]
    assert len(images) == 11  # the query photo and two batches of five candidate photos
    tokens = [visual_tokens(image.height, image.width, budget.image_factor) for image in images]
    assert tokens[0] <= budget.max_tokens("query") and max(tokens[1:]) <= 96
    num_pads = sum(1 for t in out.prompt_ids + out.response_ids if t == processor.image_token_id)
    assert num_pads == sum(tokens)  # placeholders = what the processor expands these sizes to
    assert image_cache.IMAGE_CACHE.max_bytes == images_node["cache_bytes"]
