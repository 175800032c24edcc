"""The encoding step on Ray Data writes the same shards as the local path (a loopback Ray cluster).

Ray runs inside private network, PID and mount namespaces as in ``tests/launch/test_ray_job.py``: it can
only listen on the namespace's loopback and nothing outlives the test.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragym.data_prep.encoding import EncodeConfig, EncoderSpec, Item, encode_items, write_items
from ragym.data_prep.encoding.tiny import build_tiny_text_encoder
from tests.launch.test_ray_job import UNSHARE, _unshare_refusal

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
LAYOUT = ["--shard-size", "8", "--batch-size", "4", "--quiet"]


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A short path under /tmp: Ray's socket paths must stay under 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="ragym-enc-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _inputs(workdir: Path) -> tuple[list[Item], Path]:
    texts = [Item(f"P{i}", f"passage {i} " + "about the museum " * (i % 5)) for i in range(27)]
    return texts, build_tiny_text_encoder(workdir / "tiny")


def _cluster_script(workdir: Path, runs: list[list[str]]) -> str:
    bin_dir = Path(sys.executable).parent
    commands = "\n".join(f"python -m ragym.data_prep.encoding {shlex.join(args)} || exit 91" for args in runs)
    return f"""
set -u
export PATH={bin_dir}:$PATH RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0
ip link set lo up
trap 'ray stop --force >/dev/null 2>&1' EXIT
ray start --head --node-ip-address 127.0.0.1 --port 6381 --include-dashboard false \\
    --num-cpus 2 --num-gpus 0 --temp-dir {workdir}/ray --disable-usage-stats || exit 90
{commands}
"""


def test_ray_data_actors_write_the_local_shards(workdir: Path) -> None:
    refusal = _unshare_refusal()
    if refusal:
        pytest.skip(refusal)
    texts, tiny = _inputs(workdir)
    write_items(workdir / "texts.jsonl", texts)
    # The torch path (tokenise on the prefetch thread, forward on the actor) of a tiny BERT built from config.
    spec = EncoderSpec("sentence", kwargs={"model_path": str(tiny)})
    run = [
        "encode",
        "--items",
        f"{workdir}/texts.jsonl",
        "--out",
        f"{workdir}/ray",
        "--encoder",
        "sentence",
        "--encoder-kwargs",
        json.dumps(spec.kwargs),
        *LAYOUT,
        "--ray",
        "127.0.0.1:6381",
        "--num-actors",
        "2",
    ]
    result = subprocess.run(
        ["timeout", "240", *UNSHARE, "bash", "-c", _cluster_script(workdir, [run])],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}"
    assert "on 2 Ray Data actors" in result.stderr
    encode_items(texts, spec, workdir / "local", EncodeConfig(shard_size=8, batch_size=4, progress=False))
    ray_files = sorted(p.name for p in (workdir / "ray" / "shards").iterdir())
    assert ray_files == [f"{i:05d}.{ext}" for i in range(4) for ext in ("ids", "npy")]
    for name in ray_files:
        local = (workdir / "local" / "shards" / name).read_bytes()
        assert (workdir / "ray" / "shards" / name).read_bytes() == local, name
    assert (workdir / "ray" / "manifest.json").read_bytes() == (
        workdir / "local" / "manifest.json"
    ).read_bytes()
