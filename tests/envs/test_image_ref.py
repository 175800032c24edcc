"""Images by reference (``ragym.envs.image_ref``): a reference pickles to a few hundred bytes, resolves to the same
pixels through the image cache or the file it was read from, and a referent that is gone is a clear error."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from PIL import Image

from ragym.envs.image_budget import ImageBudget
from ragym.envs.image_cache import clear_image_cache, read_image
from ragym.envs.image_ref import MissingImageError, image_ref, pickled_image_bytes

BUDGET = ImageBudget(query_max_pixels=56 * 56, candidate_max_pixels=28 * 28, image_min_pixels=28 * 28)


def _photo(path, seed: int, size=(90, 60)) -> np.ndarray:
    pixels = np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return pixels


def test_an_image_read_from_a_file_is_referred_to_by_that_file(tmp_path):
    _photo(tmp_path / "a.png", 0)
    fitted = read_image(tmp_path / "a.png", BUDGET, "query")
    ref = image_ref(np.array(fitted))  # the env hands out a copy: the digest finds the file
    assert (ref.path, ref.budget, ref.role) == (str(tmp_path / "a.png"), BUDGET, "query")
    assert (
        (ref.height, ref.width) == fitted.shape[:2] == (56, 28)
    )  # 90 x 60 fitted to 56 x 56 px: 2 x 1 blocks
    clear_image_cache()
    np.testing.assert_array_equal(ref.resolve(), fitted)  # read again from the file, fitted the same way


def test_a_reference_pickles_small_and_carries_no_pixels(tmp_path):
    pixels = _photo(tmp_path / "a.png", 1, size=(448, 448))
    refs = [image_ref(read_image(tmp_path / "a.png")), image_ref(pixels[::2, ::2])]
    total, payload = pickled_image_bytes(refs)
    assert payload == 0 and total < 2 * 400
    assert pickled_image_bytes([Image.fromarray(pixels)])[1] == 448 * 448 * 3
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(refs[0])).resolve(), pixels)


def test_equal_pictures_share_one_reference():
    pixels = np.arange(28 * 28 * 3, dtype=np.uint8).reshape(28, 28, 3)
    assert image_ref(pixels) == image_ref(Image.fromarray(pixels.copy()))
    assert image_ref(pixels) != image_ref(pixels[:, ::-1])


def test_content_only_reference_resolves_from_the_cache_and_is_read_only():
    pixels = np.full((28, 28, 3), 9, dtype=np.uint8)
    ref = image_ref(pixels)
    pixels[:] = 0  # the caller's array may change; the cached copy does not
    resolved = ref.resolve()
    assert ref.path is None and int(resolved.max()) == 9 and not resolved.flags.writeable


def test_evicted_content_only_reference_is_a_clear_error():
    ref = image_ref(np.full((28, 28, 3), 3, dtype=np.uint8))
    clear_image_cache()
    with pytest.raises(MissingImageError, match=rf"image {ref.digest} \(28x28\).*cache_bytes"):
        ref.resolve()


def test_a_reference_not_kept_resolves_nowhere():
    ref = image_ref(np.full((28, 28, 3), 4, dtype=np.uint8), keep=False)
    with pytest.raises(MissingImageError, match=ref.digest):
        ref.resolve()


def test_a_reference_whose_file_is_gone_names_the_file(tmp_path):
    _photo(tmp_path / "a.png", 2)
    ref = image_ref(read_image(tmp_path / "a.png", BUDGET, "candidate"))
    clear_image_cache()
    (tmp_path / "a.png").unlink()
    with pytest.raises(MissingImageError, match=f"its file {tmp_path / 'a.png'} is gone"):
        ref.resolve()


def test_the_same_picture_read_again_from_another_file_is_referred_to_by_the_latest(tmp_path):
    """An old copy of a KB (an earlier run's folder, since deleted) must not leave references naming its file:
    make test's browser tests once resolved a reference into another test's removed toy folder."""
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    pixels = _photo(tmp_path / "old" / "a.png", 4)
    Image.fromarray(pixels).save(tmp_path / "new" / "a.png")
    read_image(tmp_path / "old" / "a.png", BUDGET, "candidate")
    fitted = read_image(tmp_path / "new" / "a.png", BUDGET, "candidate")
    (tmp_path / "old" / "a.png").unlink()
    ref = image_ref(np.array(fitted))
    assert ref.path == str(tmp_path / "new" / "a.png")
    clear_image_cache()
    np.testing.assert_array_equal(ref.resolve(), fitted)
    (tmp_path / "new" / "a.png").unlink()  # no file holds it any more: a reference by content, pixels kept
    by_content = image_ref(np.array(fitted))
    assert by_content.path is None
    np.testing.assert_array_equal(by_content.resolve(), fitted)


def test_a_reference_whose_file_changed_is_an_error_not_other_pixels(tmp_path):
    _photo(tmp_path / "a.png", 3)
    ref = image_ref(read_image(tmp_path / "a.png"))
    clear_image_cache()
    _photo(tmp_path / "a.png", 4)
    for _ in range(2):  # the second time the file's new pixels are cached: still not the referent
        with pytest.raises(MissingImageError, match="pixels changed"):
            ref.resolve()
