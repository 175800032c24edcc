#!/usr/bin/env bash
# Join this node to the cluster: `bash launch/start_worker.sh` on every non-head node.
set -euo pipefail
source "$(dirname "$0")/cluster.env"
source "$RAGYM_VENV/bin/activate"
ray start --address "$HEAD_IP:$RAY_PORT" --num-gpus "$GPUS_PER_NODE" --disable-usage-stats
