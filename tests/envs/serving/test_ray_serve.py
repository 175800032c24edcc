"""The retrieval service as a Ray Serve app (2 replicas + a 2-shard index) answers a KB-VQA rollout, and an encoder
swap posted through Serve's proxy (to one replica) reaches both replicas.

Runs inside private network, PID and mount namespaces (as ``tests/launch/test_ray_job.py``): Ray and the
Serve proxy listen only on the namespace's loopback, and nothing outlives the test.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.launch.test_ray_job import UNSHARE, _unshare_refusal

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
TIMEOUT_S = 240

CHECK = """
import http.client
import json
import sys
import time
import numpy as np
from ragym import envs
from ragym.envs.kbvqa.kb import load_kb
from ragym.envs.retrieval.service.client import ServiceRetriever
from ragym.envs.retrieval.service.wire import encode_query
from ragym.envs.kbvqa.policies import SignaturePolicy
from ragym.envs.scripted import run_episode

kb_dir, url, encoder_dir = sys.argv[1], sys.argv[2], sys.argv[3]
runs = []
for retrieval_url in ("", url):
    env = envs.make_env("KBVQA-v0", kb_dir=kb_dir, candidate_source="live", retrieval_url=retrieval_url)
    runs.append([run_episode(env, SignaturePolicy(env), seed) for seed in range(3)])
assert runs[0] == runs[1], "rollout over Ray Serve differs from the in-process one"
assert not any(e["type"] == "retrieval_error" for ep in runs[1] for e in ep["events"])
kb = load_kb(kb_dir)
queries = list(kb.query_embeddings[:4])
local = kb.image_retriever().batch_search(queries, 7)
sharded = ServiceRetriever(url, "image_shards").batch_search(queries, 7)
assert [[h.docid for h in x] for x in sharded] == [[h.docid for h in x] for x in local], "shard merge"
print("RAY_SERVE_ROLLOUT_OK", len(runs[1]), "episodes")

# The proxy hands POST /encoder to one replica; it answers once every running replica holds the version.
started = time.monotonic()
swap = ServiceRetriever(url, "image").swap_encoder(encoder_dir)
assert swap["version"] == "ray-check" and swap["replicas"]["holding"] == swap["replicas"]["live"] == 2, swap
conn = http.client.HTTPConnection("127.0.0.1", int(url.rsplit(":", 1)[1]), timeout=30)
answered, versions = set(), set()
for i in range(40):  # bounded; Serve spreads them over both replicas
    body = json.dumps({"retriever": "image", "query": encode_query(queries[i % len(queries)]), "k": 3})
    conn.request("POST", "/search", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    hits = json.loads(response.read())["hits"]
    assert response.status == 200, hits
    answered.add(response.getheader("x-ragym-replica"))
    versions.update(hit["payload"].get("retriever_version") for hit in hits)
assert versions == {"ray-check"}, f"searches after the swap reported versions {versions}"
assert len(answered) == 2 and None not in answered, f"replicas that answered: {answered}"
print("RAY_SERVE_SWAP_OK", sorted(versions), len(answered), "replicas", f"({time.monotonic() - started:.1f} s)")
"""


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A short path under /tmp: Ray's socket paths must stay under 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="ragym-serve-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_ray_serve_deployment_answers_a_rollout(workdir: Path) -> None:
    refusal = _unshare_refusal()
    if refusal:
        pytest.skip(refusal)
    from ragym.data_prep.synthetic_kb import main as build_kb
    from ragym.envs.kbvqa.kb import load_kb
    from ragym.envs.retrieval.service.shards import split_into_shards
    from ragym.envs.retrieval.versions import identity_encoder, save_query_encoder

    assert build_kb(["--out", str(workdir / "kb"), "--preset", "tiny"]) == 0
    kb = load_kb(workdir / "kb")
    manifest = split_into_shards(
        kb.entity_embeddings, kb.entities["entity_id"].tolist(), 2, workdir / "shards"
    )
    encoder = save_query_encoder(
        identity_encoder(kb.entity_embeddings.shape[1], "ray-check"), workdir / "encoder"
    )
    (workdir / "check.py").write_text(CHECK)
    bin_dir = Path(sys.executable).parent
    script = f"""
set -u
export PATH={bin_dir}:$PATH RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0
ip link set lo up
trap 'ray stop --force >/dev/null 2>&1' EXIT
ray start --head --node-ip-address 127.0.0.1 --port 6381 --dashboard-host 127.0.0.1 --include-dashboard false \\
    --num-cpus 2 --num-gpus 0 --temp-dir {workdir}/ray --disable-usage-stats || exit 90
python -m ragym.envs.serving.ray_serve --kb-dir {workdir}/kb --shards image_shards={manifest} --replicas 2 \\
    --cpus-per-replica 0 --port 8011 --swap-wait-s 20 || exit 91
python -c "
import time, urllib.request
for _ in range(240):
    try:
        if urllib.request.urlopen('http://127.0.0.1:8011/ready', timeout=2).status == 200: break
    except OSError: time.sleep(0.5)
" 
python {workdir}/check.py {workdir}/kb http://127.0.0.1:8011 {encoder}
"""
    result = subprocess.run(
        ["timeout", str(TIMEOUT_S), *UNSHARE, "bash", "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    log = f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"
    assert result.returncode == 0, log
    assert "RAY_SERVE_ROLLOUT_OK 3 episodes" in result.stdout, log
    assert "RAY_SERVE_SWAP_OK ['ray-check'] 2 replicas" in result.stdout, log
