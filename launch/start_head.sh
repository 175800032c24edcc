#!/usr/bin/env bash
# Start the Ray head on this node: `bash launch/start_head.sh` (facts from launch/cluster.env).
set -euo pipefail
source "$(dirname "$0")/cluster.env"
source "$RAGYM_VENV/bin/activate"
ray start --head \
    --node-ip-address "$HEAD_IP" --port "$RAY_PORT" \
    --dashboard-host "$DASHBOARD_HOST" --dashboard-port "$DASHBOARD_PORT" \
    --num-gpus "$GPUS_PER_NODE" --disable-usage-stats
echo "head up; start a worker on each of the other $((NUM_NODES - 1)) nodes: bash launch/start_worker.sh"
echo "then: bash launch/wait_for_cluster.sh && bash launch/submit.sh RECIPE [overrides...]"
