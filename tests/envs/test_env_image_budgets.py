"""Every env fits the images it shows to the budget: multi-megapixel photos (made at test time) cost at most the
budget's tokens, in multiples of the policy's factor, under Qwen2.5-VL's and Qwen3-VL's settings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ragym import envs
from ragym.envs import image_cache
from ragym.envs.docmemo import views as docmemo_views
from ragym.envs.docmemo.env import DocMemoConfig
from ragym.envs.image_budget import BUDGET_FIELDS, ImageBudget, budget_of, visual_tokens
from ragym.envs.kbvqa import kb as kb_module
from ragym.envs.kbvqa.actions import SearchImage, format_action
from ragym.envs.memora.env import MemoraEnv
from ragym.envs.r3g.env import R3GEnv
from tests.photos import photo, write_photo

QWEN25 = ImageBudget()  # 1,024 tokens per query image, 256 per candidate, factor 28
QWEN3 = ImageBudget(1024 * 32 * 32, 256 * 32 * 32, 256 * 256, 32)
BUDGETS = pytest.mark.parametrize("budget", [QWEN25, QWEN3], ids=["qwen2_5_vl", "qwen3_vl"])


def budget_kwargs(budget: ImageBudget) -> dict[str, int]:
    return {name: getattr(budget, name) for name in BUDGET_FIELDS}


def assert_within(images: tuple[np.ndarray, ...], budget: ImageBudget, role: str) -> None:
    """Each image is at a size the processor keeps (multiples of the factor) and costs <= the role's tokens."""
    factor = budget.image_factor
    for image in images:
        height, width = image.shape[:2]
        assert height % factor == 0 and width % factor == 0, image.shape
        assert visual_tokens(height, width, factor) <= budget.max_tokens(role)


@pytest.fixture(autouse=True)
def _fresh_image_cache():
    image_cache.clear_image_cache()
    yield
    image_cache.clear_image_cache()


@pytest.fixture(scope="module")
def photo_kb(tmp_path_factory: pytest.TempPathFactory, tiny_kb: Path) -> tuple[Path, dict]:
    """The tiny KB with one row's query image and its first candidate batch replaced by 2400 x 1800 photos."""
    root = tmp_path_factory.mktemp("photo_kb") / "kb"
    shutil.copytree(tiny_kb, root)
    frame = pd.read_parquet(root / "data" / "train.parquet")
    options = next(
        o for o in (json.loads(e["env_options"]) for e in frame["extra_info"]) if len(o["query_images"]) == 1
    )
    kb = kb_module.load_kb(root)
    candidates = kb.candidate_retriever().search(kb.resolve(options["query_images"][0]), 5)
    write_photo(Path(kb.resolve(options["query_images"][0])), 2400, 1800, 0)
    for i, hit in enumerate(candidates):
        write_photo(Path(hit.payload["image"]), 1800 + 100 * i, 2400, i + 1)
    return root, options


@BUDGETS
def test_kbvqa_query_and_candidate_photos_are_fitted(photo_kb, budget: ImageBudget) -> None:
    root, options = photo_kb
    env = envs.make_env("KBVQA-v0", kb_dir=str(root), **budget_kwargs(budget))
    obs, _ = env.reset(options=options)
    assert len(obs["images"]) == 1 and obs["images"][0].shape[0] < 1800
    assert_within(obs["images"], budget, "query")
    obs, *_ = env.step(format_action(SearchImage(1)))
    assert len(obs["images"]) == 5 and all(image.shape[0] < 2400 for image in obs["images"])
    assert_within(obs["images"], budget, "candidate")


def test_kbvqa_defaults_bound_images_without_a_recipe(photo_kb) -> None:
    root, options = photo_kb
    env = envs.make_env("KBVQA-v0", kb_dir=str(root))
    obs, _ = env.reset(options=options)
    assert_within(obs["images"], ImageBudget(), "query")


def test_kbvqa_refuses_a_budget_no_image_fits(tiny_kb: Path) -> None:
    with pytest.raises(ValueError, match="candidate_max_pixels"):
        envs.make_env("KBVQA-v0", kb_dir=str(tiny_kb), candidate_max_pixels=100)


class FirstPixelEncoder:
    """A fake encoder: an image's feature is its top-left pixel."""

    def encode_queries(self, images: list[np.ndarray]) -> np.ndarray:
        return np.stack([im[0, 0].astype(np.float32) for im in images])


def photo_task(root: Path) -> Path:
    """An R3G task of three 2000 x 1500 corpus photos and a 3000 x 2000 query photo."""
    ids = ["a", "b", "c"]
    for i, name in enumerate(ids):
        write_photo(root / "corpus" / f"{name}.jpg", 2000, 1500, i)
    write_photo(root / "query.jpg", 3000, 2000, 3)
    pd.DataFrame({"image_id": ids, "path": [f"corpus/{n}.jpg" for n in ids], "caption": [""] * 3}).to_parquet(
        root / "corpus" / "corpus.parquet"
    )
    np.save(root / "corpus" / "embeddings.npy", np.eye(3, dtype=np.float32))
    (root / "corpus" / "manifest.json").write_text(json.dumps({"image_encoder": {"name": "none"}}))
    return root


@BUDGETS
def test_r3g_query_and_evidence_photos_are_fitted(tmp_path: Path, budget: ImageBudget) -> None:
    env = R3GEnv(
        task_dir=str(photo_task(tmp_path)),
        encoder=FirstPixelEncoder(),
        use_plan=False,
        rerank="none",
        pool_size=3,
        top_k=3,
        **budget_kwargs(budget),
    )
    obs, _ = env.reset(options={"question": "q", "query_image": "query.jpg", "gold_images": ["a"]})
    assert_within(obs["images"], budget, "query")
    obs, *_ = env.step("<retrieve></retrieve>")
    assert len(obs["images"]) == 3
    assert_within(obs["images"], budget, "candidate")


@BUDGETS
def test_memora_query_photo_is_fitted(tmp_path: Path, budget: ImageBudget) -> None:
    path = write_photo(tmp_path / "query.jpg", 4000, 3000, 2)
    env = MemoraEnv(image_max_side=4096, **budget_kwargs(budget))
    obs, _ = env.reset(options={"query": "what is shown?", "image_path": str(path)})
    assert len(obs["images"]) == 1
    assert_within(obs["images"], budget, "query")


@BUDGETS
def test_docmemo_pages_and_crops_are_fitted_to_the_page_budget(budget: ImageBudget) -> None:
    page = photo(1700, 2200)  # a letter page at 200 dpi
    pages = ImageBudget(
        budget.query_max_pixels, 512 * budget.image_factor**2, budget.image_min_pixels, budget.image_factor
    )
    fitted = docmemo_views.fit(page, 1024, pages)
    assert fitted.shape[0] < 1024 and fitted.shape[0] > fitted.shape[1]  # fitted once, aspect kept
    assert visual_tokens(*fitted.shape[:2], budget.image_factor) > 0.9 * pages.max_tokens("candidate")
    assert_within((fitted, *docmemo_views.dense_crops(page, 1024, pages)), pages, "candidate")


def test_a_dense_letter_page_costs_what_docs_docmemo_says() -> None:
    """docs/docmemo.md's cost of dense-page crops: at the DocMemo recipe's page budget (1,024 tokens, factor 28), a
    letter page at 144 dpi costs 1,008 visual tokens and each of its two half-page crops 828."""
    page = photo(1224, 1584)  # 8.5 x 11 in at 144 dpi, ragym prep mmlongbench-doc's default
    recipe = ImageBudget(1024 * 28 * 28, 1024 * 28 * 28)
    images = (docmemo_views.fit(page, 1024, recipe), *docmemo_views.dense_crops(page, 1024, recipe))
    assert [visual_tokens(*image.shape[:2], 28) for image in images] == [1008, 828, 828]


def test_docmemo_pages_keep_image_max_side_when_the_budget_does_not_bind() -> None:
    page = photo(1700, 2200)
    default = budget_of(DocMemoConfig())  # no recipe: Qwen2.5-VL's own max_pixels, looser than 1024 px
    assert np.array_equal(docmemo_views.fit(page, 1024, default), docmemo_views.fit(page, 1024))
    assert docmemo_views.fit(page, 1024, default).shape == (1024, 791, 3)  # as before budgets: the thumbnail


def test_docmemo_refuses_a_page_budget_no_page_fits() -> None:
    with pytest.raises(ValueError, match="candidate_max_pixels"):
        DocMemoConfig(candidate_max_pixels=100)
