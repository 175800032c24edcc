"""The recipe's image budget: read once, checked against verl's and vLLM's processor keys, passed to every env
that shows images, sized so each shipped recipe's paper episode fits its token lengths."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from ragym.envs import image_cache
from ragym.envs.docmemo.env import DocMemoConfig
from ragym.envs.kbvqa.env import KBVQAConfig
from ragym.envs.r3g.env import R3GConfig
from ragym.envs.registry import registered_envs
from ragym.rl.errors import UsageError
from ragym.rl.recipe.check import check_recipe
from ragym.rl.recipe.compose import RECIPES_DIR
from ragym.rl.recipe.images import (
    apply_recipe_images,
    recipe_images,
    recipe_processor_kwargs,
    with_image_budget,
)

BUDGETED = (
    "kbvqa_qwen2_5_vl_7b",
    "kbvqa_qwen3_vl_8b",
    "r3g_qwen2_5_vl_7b",
    "memora_qwen2_5_vl_7b",
    "docmemo_qwen2_5_vl_7b",
)
VISION_MARKERS = 2
"""<|vision_start|> and <|vision_end|> around each image's pad tokens."""
TEXT_TOKENS_PER_TURN = 512
"""Allowance per policy turn for generated text plus the observation's text (docs/scale.md, "Image budgets")."""
SYSTEM_PROMPT_TOKENS = 1024
"""Allowance for the system prompt and question (each env's is well under 3,500 characters)."""


def composed(name: str, overrides: list[str] | None = None):
    return check_recipe(RECIPES_DIR / f"{name}.yaml", overrides or [], validate=False)


@pytest.mark.parametrize("name", BUDGETED)
def test_shipped_recipes_set_one_budget_everywhere(name: str) -> None:
    config = composed(name)
    images = recipe_images(config)
    assert images is not None
    largest = max(images.budget.query_max_pixels, images.budget.candidate_max_pixels)
    expected = {"min_pixels": images.budget.image_min_pixels, "max_pixels": largest}
    assert recipe_processor_kwargs(config) == expected
    assert (
        OmegaConf.to_container(config.actor_rollout_ref.rollout.engine_kwargs.vllm, resolve=True)[
            "mm_processor_kwargs"
        ]
        == expected
    )


def _paper_episode(name: str) -> tuple[int, int, int]:
    """(query images in the prompt, candidate images in the response, policy turns) of the paper's episode
    at its settings: KB-VQA with N = 2 query images (comparison rows), each paged Rej_max + 1 batches of K;
    R3G's pool P and evidence k; MEMORA's one query image; DocMemo's E evidence pages in each of T rounds."""
    if name.startswith("kbvqa"):
        kb = KBVQAConfig()
        return 2, 2 * (kb.max_rejections + 1) * kb.candidates_per_batch, kb.max_turns
    if name.startswith("r3g"):
        r3g = R3GConfig()
        return 1, r3g.pool_size + r3g.top_k, r3g.max_turns
    if name.startswith("docmemo"):
        docmemo = DocMemoConfig()
        return 0, docmemo.num_evidence * docmemo.max_rounds, docmemo.max_turns
    return 1, 0, 0


@pytest.mark.parametrize("name", BUDGETED)
def test_the_papers_episode_fits_the_recipes_lengths(name: str) -> None:
    config = composed(name)
    budget = recipe_images(config).budget
    num_query, num_candidates, num_turns = _paper_episode(name)
    prompt = num_query * (budget.max_tokens("query") + VISION_MARKERS) + SYSTEM_PROMPT_TOKENS
    response = (
        num_candidates * (budget.max_tokens("candidate") + VISION_MARKERS) + num_turns * TEXT_TOKENS_PER_TURN
    )
    assert prompt <= config.data.max_prompt_length
    assert response <= config.data.max_response_length
    # Without the budget (the processor's default cap), one 3000 x 2000 candidate alone costs ~7,600 tokens.
    assert num_candidates * 7_600 > config.data.max_response_length or num_candidates == 0


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("data.mm_processor_kwargs.max_pixels=12845056", "data.mm_processor_kwargs must be"),
        ("actor_rollout_ref.rollout.engine_kwargs.vllm.mm_processor_kwargs={}", "vllm.mm_processor_kwargs"),
        ("ragym.images.candidate_max_pixels=10", "candidate_max_pixels"),
        ("ragym.images.cache_bytes=-1", "cache_bytes"),
    ],
)
def test_keys_that_disagree_are_an_error_naming_them(override: str, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        recipe_images(composed("kbvqa_qwen2_5_vl_7b", [override]))


def test_a_budget_with_a_number_for_a_key_is_a_usage_error() -> None:
    """A YAML key such as ``1:`` beside the named ones is reported, not a TypeError from sorting int with str."""
    config = OmegaConf.create({"ragym": {"images": {1: 2, "factor": 28}}})
    with pytest.raises(UsageError, match=r"must have exactly the keys .*got \[1, 'factor'\]"):
        recipe_images(config)


def test_a_recipe_without_a_budget_changes_nothing() -> None:
    config = OmegaConf.create({"data": {}, "actor_rollout_ref": {"rollout": {"name": "hf"}}})
    assert recipe_images(config) is None and recipe_processor_kwargs(config) == {}
    assert with_image_budget("KBVQA-v0", {"preset": "tiny"}, None) == {"preset": "tiny"}


def test_the_budget_reaches_every_env_that_shows_images() -> None:
    images = recipe_images(composed("kbvqa_qwen3_vl_8b"))
    expected = {
        "query_max_pixels": 1024 * 32 * 32,
        "candidate_max_pixels": 256 * 32 * 32,
        "image_min_pixels": 65536,
        "image_factor": 32,
    }
    for env_id in registered_envs():
        assert with_image_budget(env_id, {"x": 1}, images) == {"x": 1, **expected}


def test_a_row_that_sets_another_budget_is_an_error() -> None:
    images = recipe_images(composed("kbvqa_qwen2_5_vl_7b"))
    same = with_image_budget("KBVQA-v0", {"image_factor": 28}, images)
    assert same["image_factor"] == 28
    with pytest.raises(ValueError, match="image_factor"):
        with_image_budget("KBVQA-v0", {"image_factor": 32}, images)


def test_applying_the_recipe_sizes_the_process_image_cache() -> None:
    before = image_cache.IMAGE_CACHE.max_bytes
    try:
        apply_recipe_images(composed("kbvqa_qwen2_5_vl_7b", ["ragym.images.cache_bytes=12345678"]))
        assert image_cache.IMAGE_CACHE.max_bytes == 12_345_678
    finally:
        image_cache.IMAGE_CACHE.resize(before)
