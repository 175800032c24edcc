"""The encoding step: shards on disk, kill-and-resume byte identity, bad input, the envs encoders behind it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from ragym.data_prep.encoding import (
    EncodeConfig,
    EncoderSpec,
    EncodingError,
    Item,
    cli,
    encode_items,
    load_encoded,
    shards,
)
from ragym.envs.retrieval.encoders import PixelImageEncoder
from tests.data_prep.encoding_fakes import DIM, HashEncoder, items

REPO = Path(__file__).resolve().parents[2]
SMALL = EncodeConfig(shard_size=8, batch_size=4, progress=False)


def _files(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "shards").iterdir())}


def test_shards_hold_every_item_in_order_with_a_short_last_shard(tmp_path: Path) -> None:
    manifest = encode_items(items(21), HashEncoder(), tmp_path / "enc", SMALL)
    assert [s["count"] for s in manifest["shards"]] == [8, 8, 5]
    assert manifest["num_items"] == 21 and manifest["dim"] == DIM
    ids, vectors = load_encoded(tmp_path / "enc")
    assert ids == [f"doc-{i}" for i in range(21)]
    expected = HashEncoder().forward(HashEncoder().preprocess(items(21)))
    np.testing.assert_array_equal(vectors, expected)
    assert sorted(_files(tmp_path / "enc")) == [f"{i:05d}.{ext}" for i in range(3) for ext in ("ids", "npy")]


def test_killed_run_resumes_at_the_first_unfinished_shard_byte_identical(tmp_path: Path) -> None:
    num = 64  # 8 shards; 0.3 s per batch of 4 -> about 5 s uninterrupted, time enough to kill it midway
    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.data_prep.encoding_fakes", str(killed), str(num), "0.3"], cwd=REPO
    )
    deadline = time.monotonic() + 120  # imports on a loaded machine
    while not (killed / "shards" / "00002.npy").exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the subprocess ended before shard 2"
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    finished = {p.name for p in (killed / "shards").glob("*.npy")}
    assert 3 <= len(finished) < 8 and not (killed / "manifest.json").exists()
    mtimes = {name: (killed / "shards" / name).stat().st_mtime_ns for name in finished}

    class Counting(HashEncoder):
        seen: list[str] = []

        def preprocess(self, batch: list[Item]) -> list[bytes]:
            self.seen.extend(i.id for i in batch)
            return super().preprocess(batch)

    resumed = Counting()
    encode_items(items(num), resumed, killed, SMALL)
    # Finished shards were neither re-encoded nor rewritten; the rest were.
    assert resumed.seen == [f"doc-{i}" for i in range(8 * len(finished), num)]
    assert all((killed / "shards" / n).stat().st_mtime_ns == t for n, t in mtimes.items())
    encode_items(items(num), HashEncoder(), tmp_path / "whole", SMALL)
    assert _files(killed) == _files(tmp_path / "whole")
    assert (killed / "manifest.json").read_bytes() == (tmp_path / "whole" / "manifest.json").read_bytes()


def test_a_shard_whose_vectors_are_missing_is_encoded_again(tmp_path: Path) -> None:
    # A kill between write_shard's two renames leaves shard 1's ids without its vectors: only the vectors
    # file marks a shard finished, so the resumed run encodes shard 1 again, and nothing else.
    root = tmp_path / "enc"
    encode_items(items(24), HashEncoder(), root, SMALL)
    whole, manifest = _files(root), (root / "manifest.json").read_bytes()
    (root / "manifest.json").unlink()
    ids_path, vectors_path = shards.shard_paths(root, 1)
    vectors_path.unlink()
    assert ids_path.exists()

    class Counting(HashEncoder):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[str] = []

        def preprocess(self, batch: list[Item]) -> list[bytes]:
            self.seen.extend(i.id for i in batch)
            return super().preprocess(batch)

    resumed = Counting()
    encode_items(items(24), resumed, root, SMALL)
    assert resumed.seen == [f"doc-{i}" for i in range(8, 16)]
    assert _files(root) == whole and (root / "manifest.json").read_bytes() == manifest


def test_a_rerun_of_a_finished_folder_encodes_nothing(tmp_path: Path) -> None:
    encode_items(items(16), HashEncoder(), tmp_path / "enc", SMALL)

    class Refusing(HashEncoder):
        def preprocess(self, batch: list[Item]) -> list[bytes]:
            raise AssertionError("a finished shard was encoded again")

    assert encode_items(items(16), Refusing(), tmp_path / "enc", SMALL)["num_items"] == 16


def test_changed_input_or_layout_is_refused(tmp_path: Path) -> None:
    encode_items(items(16), HashEncoder(), tmp_path / "enc", SMALL)
    changed = [Item(f"other-{i}", "x") for i in range(16)]
    with pytest.raises(EncodingError, match="other ids than the stream"):
        encode_items(changed, HashEncoder(), tmp_path / "enc", SMALL)
    with pytest.raises(EncodingError, match="another configuration"):
        encode_items(items(16), HashEncoder(), tmp_path / "enc", EncodeConfig(shard_size=16, batch_size=4))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (Item("doc-3", "again"), "occurs twice"),
        (Item("empty"), "neither text nor image"),
        (Item("two\nlines", "x"), "one-line"),
    ],
)
def test_bad_items_are_errors_naming_the_item(tmp_path: Path, bad: Item, message: str) -> None:
    with pytest.raises(EncodingError, match=message):
        encode_items([*items(5), bad], HashEncoder(), tmp_path / "enc", SMALL)


def test_empty_stream_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(EncodingError, match="empty"):
        encode_items([], HashEncoder(), tmp_path / "enc", SMALL)


def test_encoder_failure_surfaces_and_leaves_no_manifest(tmp_path: Path) -> None:
    class Broken(HashEncoder):
        def preprocess(self, batch: list[Item]) -> list[bytes]:
            if any(i.id == "doc-13" for i in batch):
                raise EncodingError("item 'doc-13': cannot read")
            return super().preprocess(batch)

    with pytest.raises(EncodingError, match="doc-13"):
        encode_items(items(24), Broken(), tmp_path / "enc", SMALL)
    assert shards.is_finished(tmp_path / "enc", 0) and not shards.is_finished(tmp_path / "enc", 1)
    with pytest.raises(EncodingError, match="did not finish"):
        load_encoded(tmp_path / "enc")


def _image_items(root: Path, num: int) -> tuple[list[Item], np.ndarray]:
    pixels = np.random.default_rng(0).integers(0, 256, (num, 24, 24, 3), dtype=np.uint8)
    for i, array in enumerate(pixels):
        Image.fromarray(array).save(root / f"{i}.png")
    return [Item(f"E{i}", f"title {i}", str(root / f"{i}.png")) for i in range(num)], pixels


def test_pixel_entities_equal_the_envs_encoder_and_a_missing_image_names_its_item(tmp_path: Path) -> None:
    entity_items, pixels = _image_items(tmp_path, 10)
    encode_items(entity_items, EncoderSpec("pixel", "entities"), tmp_path / "enc", SMALL)
    _, vectors = load_encoded(tmp_path / "enc")
    np.testing.assert_array_equal(vectors, PixelImageEncoder().encode_entities(list(pixels), []))
    missing = [*entity_items, Item("E99", "t", str(tmp_path / "absent.png"))]
    with pytest.raises(EncodingError, match="E99"):
        encode_items(missing, EncoderSpec("pixel", "entities"), tmp_path / "enc2", SMALL)


def test_cli_encodes_an_item_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entity_items, pixels = _image_items(tmp_path, 6)
    lines = [json.dumps({"id": i.id, "text": i.text, "image": Path(i.image).name}) for i in entity_items]
    (tmp_path / "items.jsonl").write_text("\n".join(lines) + "\n")
    argv = [
        "encode",
        "--items",
        str(tmp_path / "items.jsonl"),
        "--out",
        str(tmp_path / "enc"),
        "--encoder",
        "pixel",
        "--role",
        "entities",
        "--shard-size",
        "4",
        "--batch-size",
        "2",
        "--quiet",
    ]
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["num_items"] == 6
    ids, vectors = load_encoded(tmp_path / "enc")
    assert ids == [f"E{i}" for i in range(6)]
    np.testing.assert_array_equal(vectors, PixelImageEncoder().encode_entities(list(pixels), []))
