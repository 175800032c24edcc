"""The image pack serves the same pixels as decoding the entity images, without opening them."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from ragym.envs.image_budget import MAX_ASPECT_RATIO, ImageBudget
from ragym.envs.image_cache import read_image
from ragym.envs.image_pack import PACK_INDEX, ImagePack, main, write_image_pack
from ragym.envs.kbvqa.kb import load_kb


@pytest.fixture
def kb_copy(tiny_kb: Path, tmp_path: Path) -> Path:
    """A private copy (load_kb caches per path; the pack changes what a load sees)."""
    return Path(shutil.copytree(tiny_kb, tmp_path / "kb"))


def test_pack_pixels_equal_decoded_images(kb_copy: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([str(kb_copy)]) == 0
    assert capsys.readouterr().out.strip() == "entities in=60 images packed=60 rejected=0"
    kb = load_kb(kb_copy)
    assert kb.image_pack is not None and len(kb.image_pack) == len(kb.entities)
    for row in (0, 17, 59):
        entity, path = kb.entities["entity_id"].iloc[row], str(kb_copy / kb.entities["image"].iloc[row])
        packed = kb.entity_image(entity, path)
        np.testing.assert_array_equal(packed, read_image(path))
        assert packed.dtype == np.uint8 and not packed.flags.writeable


def test_without_a_pack_images_are_decoded(tiny_kb: Path) -> None:
    kb = load_kb(tiny_kb)
    path = str(tiny_kb / kb.entities["image"].iloc[3])
    assert kb.image_pack is None
    np.testing.assert_array_equal(kb.entity_image(kb.entities["entity_id"].iloc[3], path), read_image(path))


def test_max_side_shrinks_and_a_stale_pack_is_refused(kb_copy: Path) -> None:
    write_image_pack(kb_copy, max_side=20)
    pack = ImagePack.load(kb_copy)
    assert max(pack.image(0).shape[:2]) == 20
    np.save(kb_copy / PACK_INDEX, np.load(kb_copy / PACK_INDEX)[:-1])  # as if entities were added since
    with pytest.raises(ValueError, match="59 images for 60 entities"):
        load_kb(kb_copy)


def test_a_missing_image_fails_naming_it(kb_copy: Path) -> None:
    kb_rows = load_kb(kb_copy).entities
    (kb_copy / kb_rows["image"].iloc[5]).unlink()
    with pytest.raises(FileNotFoundError, match=kb_rows["image"].iloc[5].split("/")[-1]):
        write_image_pack(kb_copy)


@pytest.mark.parametrize(("height", "width"), [(10_000, 50), (50, 10_000)])
def test_max_side_keeps_a_thin_image_within_the_ratio_the_budget_accepts(
    tmp_path: Path, height, width
) -> None:
    """--max-side rounded the shorter side down: a 50 x 10,000 strip (ratio 200) at 448 became 2 x 448 (ratio 224),
    which the budget then refused for that entity in every episode; its shorter side is now ceil(448 / 200) = 3."""
    Image.fromarray(np.full((height, width, 3), 90, np.uint8)).save(tmp_path / "strip.png")
    pd.DataFrame({"image": ["strip.png"]}).to_parquet(tmp_path / "entities.parquet")
    (tmp_path / "index").mkdir()
    write_image_pack(tmp_path, max_side=448)
    packed = ImagePack.load(tmp_path).image(0)
    assert packed.shape == ((448, 3, 3) if height > width else (3, 448, 3))
    fitted = ImageBudget().fit(packed, "candidate")  # raised: the ratio 224 past MAX_ASPECT_RATIO
    assert max(fitted.shape[:2]) <= MAX_ASPECT_RATIO * min(fitted.shape[:2])


def test_a_broken_image_is_one_line_naming_it_and_no_pack_is_written(
    kb_copy: Path, capsys: pytest.CaptureFixture
) -> None:
    """It opened files itself: an image cut short ended in PIL's traceback naming no file."""
    rel = load_kb(kb_copy).entities["image"].iloc[7]
    path = kb_copy / rel
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert main([str(kb_copy)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ragym prep image-pack: image {path}: ") and err.count("\n") == 1, err
    assert ImagePack.load(kb_copy) is None


@pytest.mark.parametrize("max_side", ["0", "-448"])
def test_a_max_side_below_one_pixel_is_refused(kb_copy: Path, max_side: str, capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main([str(kb_copy), "--max-side", max_side])
    assert (
        exited.value.code == 2
        and f"--max-side takes a number of pixels >= 1, not {max_side}" in capsys.readouterr().err
    )
