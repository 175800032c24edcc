#!/usr/bin/env bash
# Block until NUM_NODES nodes with GPUS_PER_NODE GPUs each have joined and every node sees the shared
# paths a job needs (data, models, checkpoints). Times out after WAIT_S seconds (default 600).
set -euo pipefail
source "$(dirname "$0")/cluster.env"
source "$RAGYM_VENV/bin/activate"
python - "$HEAD_IP:$RAY_PORT" "$NUM_NODES" "$GPUS_PER_NODE" "${WAIT_S:-600}" <<'PY'
import os, sys, time
import ray

address, nodes, gpus, wait_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
ray.init(address=address, logging_level="ERROR")
deadline = time.monotonic() + wait_s
while True:
    alive = [n for n in ray.nodes() if n["Alive"]]
    total = sum(int(n["Resources"].get("GPU", 0)) for n in alive)
    print(f"{len(alive)}/{nodes} nodes, {total}/{nodes * gpus} GPUs", flush=True)
    if len(alive) >= nodes and total >= nodes * gpus:
        break
    if time.monotonic() > deadline:
        sys.exit(f"cluster incomplete after {wait_s:.0f} s")
    time.sleep(5)

paths = [os.environ[k] for k in ("RAGYM_DATA_DIR", "RAGYM_MODELS_DIR", "RAGYM_CKPT_DIR")]

@ray.remote(num_cpus=0)
def missing_paths(paths):
    import socket
    return socket.gethostname(), [p for p in paths if not os.path.isdir(p)]

checks = [missing_paths.options(scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
    n["NodeID"], soft=False)).remote(paths) for n in alive]
problems = [(host, miss) for host, miss in ray.get(checks) if miss]
for host, miss in problems:
    print(f"{host}: missing shared paths {miss}")
sys.exit(1 if problems else 0)
PY
