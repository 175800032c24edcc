"""Image budgets: Qwen-VL's fitting rule, one resize at most, tokens under budget, caches bounded in bytes."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

from ragym.envs import image_cache
from ragym.envs.byte_cache import ByteLRU
from ragym.envs.image_budget import ImageBudget, fit_image, fit_size, visual_tokens
from tests.photos import photo, write_photo

QWEN25 = {"factor": 28, "min_pixels": 56 * 56}
QWEN3 = {"factor": 32, "min_pixels": 256 * 256}
SIZES = [
    (2000, 3000),
    (3000, 4000),
    (4032, 3024),
    (1, 150),
    (10, 1000),
    (27, 27),
    (448, 448),
    (447, 449),
    (5000, 120),
    (56, 56),
    (801, 1003),
    (6000, 8000),
]


@pytest.mark.parametrize("processor", [QWEN25, QWEN3], ids=["qwen2_5_vl", "qwen3_vl"])
@pytest.mark.parametrize("max_pixels", [200_704, 802_816, 12_845_056])
@pytest.mark.parametrize(("height", "width"), SIZES)
def test_fit_size_is_the_processors_resize(height, width, max_pixels, processor) -> None:
    expected = smart_resize(height, width, processor["factor"], processor["min_pixels"], max_pixels)
    assert fit_size(height, width, max_pixels, processor["min_pixels"], processor["factor"]) == expected


def test_an_aspect_ratio_the_processor_refuses_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="aspect ratio 200"):
        fit_size(10, 2500, 200_704, 3136, 28)


@pytest.mark.parametrize("processor", [QWEN25, QWEN3], ids=["qwen2_5_vl", "qwen3_vl"])
@pytest.mark.parametrize("max_pixels", [200_704, 802_816])
@pytest.mark.parametrize(("height", "width"), [(100, 20_000), (20_000, 120)])
def test_a_thin_image_is_fitted_to_a_ratio_the_processor_accepts(
    height, width, max_pixels, processor
) -> None:
    """Rounding a thin image's shorter side up to one block gave a fitted size past the ratio 200 (28 x 6,328 for
    100 x 20,000 at 256 tokens), which the processor refused, or past max_pixels (32 x 6,304: 197 tokens counted,
    the processor resized it again to 196)."""
    factor, least = processor["factor"], processor["min_pixels"]
    fitted = fit_image(np.zeros((height, width, 3), np.uint8), max_pixels, least, factor)
    fitted_h, fitted_w = fitted.shape[:2]
    assert (fitted_h, fitted_w) != (height, width)  # the budget resized it
    assert smart_resize(fitted_h, fitted_w, factor, least, max_pixels) == (fitted_h, fitted_w)
    assert visual_tokens(fitted_h, fitted_w, factor) <= max_pixels // factor**2


@pytest.mark.parametrize(
    ("processor", "tokens"), [(QWEN25, 256), (QWEN25, 1024), (QWEN3, 256), (QWEN3, 1024)]
)
def test_a_multi_megapixel_photo_is_fitted_under_its_token_budget(processor, tokens) -> None:
    factor, least = processor["factor"], processor["min_pixels"]
    image = photo(4000, 3000)
    fitted = fit_image(image, tokens * factor**2, least, factor)
    height, width = fitted.shape[:2]
    assert height % factor == 0 and width % factor == 0
    assert visual_tokens(height, width, factor) <= tokens
    # No second resize: the processor, given the budget as max_pixels, keeps the fitted size.
    assert smart_resize(height, width, factor, least, tokens * factor**2) == (height, width)
    # The unbounded processor would spend 15,000+ tokens on it.
    assert visual_tokens(*smart_resize(3000, 4000, factor, least, 16384 * factor**2), factor) > 10_000


def test_an_image_within_budget_is_returned_unresized() -> None:
    image = photo(300, 200)  # the processor's own rounding sizes it: fitting here would resample twice
    assert fit_image(image, 200_704, 3136, 28) is image


def test_an_image_whose_rounding_would_pass_the_budget_is_fitted() -> None:
    # 27 x 27 blocks of 28 round up to 28 x 28 = 784 tokens > 729: the budget, not rounding, decides.
    budget_tokens = 27 * 27
    image = np.zeros((27 * 28 + 14, 27 * 28 + 14, 3), np.uint8)
    fitted = fit_image(image, budget_tokens * 784, 3136, 28)
    assert visual_tokens(*fitted.shape[:2], 28) <= budget_tokens


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"query_max_pixels": 0}, "query_max_pixels must be a positive int"),
        ({"image_factor": 28.0}, "image_factor must be a positive int"),
        ({"candidate_max_pixels": 1000}, "must be >= image_min_pixels"),
        ({"image_min_pixels": 65536, "candidate_max_pixels": 50_000}, "must be >= image_min_pixels"),
    ],
)
def test_a_budget_no_image_fits_is_refused(fields, match) -> None:
    with pytest.raises(ValueError, match=match):
        ImageBudget(**fields)


def test_budget_tokens_per_role() -> None:
    budget = ImageBudget(query_max_pixels=1024 * 1024, candidate_max_pixels=256 * 1024, image_factor=32)
    assert (budget.max_tokens("query"), budget.max_tokens("candidate")) == (1024, 256)
    with pytest.raises(ValueError, match="role"):
        budget.max_tokens("evidence")


# ----- the byte-bounded cache ----------------------------------------------------------------------------------
def test_byte_lru_evicts_least_recently_used_first() -> None:
    cache: ByteLRU[bytes] = ByteLRU(max_bytes=100)
    for key in "abc":
        cache.get_or_compute(key, lambda: b"x" * 40, len)
    # a (40) + b (40) + c (40) > 100: a went; touching b makes c the oldest
    assert cache.num_entries == 2 and cache.num_bytes == 80 and cache.num_evictions == 1
    cache.get_or_compute("b", lambda: pytest.fail("b is cached"), len)
    cache.get_or_compute("d", lambda: b"y" * 40, len)
    assert cache.get_or_compute("b", lambda: b"recomputed", len) == b"x" * 40
    assert cache.get_or_compute("c", lambda: b"recomputed", len) == b"recomputed"


def test_byte_lru_never_holds_a_value_larger_than_its_budget() -> None:
    cache: ByteLRU[bytes] = ByteLRU(max_bytes=10)
    assert cache.get_or_compute("big", lambda: b"z" * 11, len) == b"z" * 11
    assert cache.num_entries == 0 and cache.num_bytes == 0


def test_byte_lru_resize_evicts_down_to_the_new_budget() -> None:
    cache: ByteLRU[bytes] = ByteLRU(max_bytes=100)
    for key in "abcd":
        cache.get_or_compute(key, lambda: b"x" * 25, len)
    cache.resize(50)
    assert cache.num_bytes == 50 and cache.num_entries == 2
    with pytest.raises(ValueError, match="max_bytes"):
        cache.resize(-1)


@pytest.fixture
def small_image_cache():
    """The process's image cache, emptied and set to 8 MB for the test, restored after."""
    cache = image_cache.IMAGE_CACHE
    before = cache.max_bytes
    cache.clear()
    image_cache.configure_image_cache(8_000_000)
    yield cache
    cache.clear()
    cache.resize(before)


def test_decoded_images_are_cached_fitted_and_bounded_in_bytes(tmp_path: Path, small_image_cache) -> None:
    budget = ImageBudget()
    paths = [write_photo(tmp_path / f"p{i}.jpg", 3000, 2000, i) for i in range(12)]
    for path in paths:
        image = image_cache.read_image(path, budget, "candidate")
        assert visual_tokens(*image.shape[:2], 28) <= 256 and not image.flags.writeable
        assert small_image_cache.num_bytes <= 8_000_000
    # 12 fitted candidates (~0.6 MB each) fit in 8 MB: all are cached, and served again without a decode.
    assert small_image_cache.num_entries == 12
    again = image_cache.read_image(paths[0], budget, "candidate")
    assert again is image_cache.read_image(paths[0], budget, "candidate")
    # Full-size decodes (18 MB each) exceed the budget: returned, never cached, and nothing is held beyond it.
    full = image_cache.read_image(paths[1])
    assert full.shape == (2000, 3000, 3) and small_image_cache.num_bytes <= 8_000_000
    assert small_image_cache.num_entries == 12


@pytest.mark.parametrize(("height", "width"), [(1200, 1600), (2000, 3000), (300, 9000)])
def test_a_budget_near_min_pixels_never_leaves_an_image_the_processor_would_enlarge(height, width) -> None:
    # Qwen3-VL: min 65,536 pixels; a 64-token budget is min_pixels itself, where rounding down falls below it.
    fitted = fit_image(np.zeros((height, width, 3), np.uint8), 64 * 1024, 65536, 32)
    fitted_h, fitted_w = fitted.shape[:2]
    assert smart_resize(fitted_h, fitted_w, 32, 65536, 1024 * 1024) == (fitted_h, fitted_w)
    assert fitted_h * fitted_w >= 65536


@pytest.mark.parametrize("kind", ["cut_short", "strip"])
def test_an_image_that_cannot_be_shown_is_an_error_naming_its_file(kind: str, tmp_path: Path) -> None:
    """PIL's "image file is truncated" and the budget's aspect ratio named no file: an episode's error event or a
    bad row's line did not say which image (of a row's, or of a batch of candidates) it was."""
    path = tmp_path / "picture.jpg"
    if kind == "cut_short":
        write_photo(path, 640, 480)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        Image.fromarray(np.zeros((40, 10_000, 3), np.uint8)).save(path, format="PNG")
    with pytest.raises(image_cache.UnreadableImageError, match=f"^image {re.escape(str(path))}: "):
        image_cache.read_image(path, ImageBudget(), "candidate")
    with pytest.raises(FileNotFoundError, match="absent.jpg"):  # its own message names the file
        image_cache.read_image(tmp_path / "absent.jpg", ImageBudget(), "candidate")


def write_sideways_jpeg(path: Path) -> Path:
    """A 40x20 JPEG, black left half and white right half, tagged EXIF orientation 6 (shown turned 90° clockwise:
    20 wide, 40 high, black on top), as a phone writes a portrait photo."""
    pixels = np.zeros((20, 40, 3), np.uint8)
    pixels[:, 20:] = 255
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90° clockwise to display
    Image.fromarray(pixels).save(path, format="JPEG", quality=95, exif=exif)
    return path


@pytest.mark.parametrize(
    ("values", "fmt"),
    [
        (np.array([[0, 257 * 100, 65535]], np.uint16), "PNG"),  # a 16-bit grayscale PNG (PIL mode I;16)
        (np.array([[0, 257 * 100, 65535]], np.int32), "TIFF"),  # mode I (a 16-bit PNG on older PIL)
        (np.array([[0.0, 100 / 255, 1.0]], np.float32), "TIFF"),  # mode F
    ],
    ids=["uint16", "int32", "float32"],
)
def test_a_high_bit_depth_image_is_scaled_to_eight_bits_not_clipped_white(
    tmp_path: Path, values, fmt
) -> None:
    """convert("RGB") clipped every 16-bit value over 255 to 255: a 16-bit grayscale PNG turned white."""
    path = tmp_path / f"gray.{fmt.lower()}"
    Image.fromarray(values).save(path, format=fmt)
    image = image_cache.read_image(path)
    assert image.shape == (1, 3, 3)
    assert image[0, :, 0].tolist() == [0, 100, 255] and (image == image[..., :1]).all()


def test_an_image_of_another_range_is_scaled_from_its_own() -> None:
    gray = image_cache.rgb_pixels(Image.fromarray(np.array([[-1.0, 0.0, 3.0]], np.float32)))
    assert gray[0, :, 0].tolist() == [0, 64, 255]  # (v + 1) * 255 / 4, rounded


def test_a_photo_tagged_sideways_is_shown_upright(tmp_path: Path) -> None:
    image = image_cache.read_image(write_sideways_jpeg(tmp_path / "portrait.jpg"))
    assert image.shape == (40, 20, 3)
    assert image[:18].max() < 40 and image[22:].min() > 215  # black on top, white below (JPEG blurs the edge)


def test_every_decoder_shows_the_same_pixels(tmp_path: Path) -> None:
    """Prep (the image pack), encoding (items) and each env decode through one conversion: a 16-bit PNG or a JPEG
    tagged sideways gives every path the pixels read_image gives."""
    from ragym.data_prep.encoding.items import Item, load_image
    from ragym.envs.docmemo.store import DocStore
    from ragym.envs.image_pack import _decoded
    from ragym.envs.memora.env import MemoraEnv
    from ragym.envs.r3g.corpus import read_rgb
    from tests.envs.memora.test_memora import small_env

    gray = tmp_path / "gray.png"
    Image.fromarray(np.arange(64 * 64, dtype=np.uint16).reshape(64, 64) * 16).save(gray)
    for path in (gray, write_sideways_jpeg(tmp_path / "portrait.jpg")):
        expected = image_cache.read_image(path)
        store = DocStore(
            "d", ("t",), ("s",), ("text",), np.ones((1, 1), np.float32), "fake", image_paths=(str(path),)
        )
        env: MemoraEnv = small_env()
        obs, _ = env.reset(options={"query": "q", "image_path": str(path)})
        for decoded in (
            _decoded(path, None),
            read_rgb(path),
            load_image(Item("x", None, str(path))),
            store.page_image(0),
        ):
            np.testing.assert_array_equal(decoded, expected)
        np.testing.assert_array_equal(
            obs["images"][0], image_cache.read_image(path, env.image_budget, "query")
        )
