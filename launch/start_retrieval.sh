#!/usr/bin/env bash
# Deploy the retrieval service on the running cluster (Ray Serve, detached), then print the URL every env uses.
#   bash launch/start_retrieval.sh KB_DIR [--shards NAME=shards.json ...] [other ragym.envs.serving.ray_serve flags]
# Sizes come from cluster.env (RETRIEVAL_PORT, RETRIEVAL_REPLICAS, RETRIEVAL_GPUS_PER_REPLICA).
# Jobs then need RAGYM_RETRIEVAL_URL: `ragym submit RECIPE --env RAGYM_RETRIEVAL_URL=http://127.0.0.1:$RETRIEVAL_PORT`.
set -euo pipefail
source "$(dirname "$0")/cluster.env"
source "$RAGYM_VENV/bin/activate"
KB_DIR="${1:?usage: start_retrieval.sh KB_DIR [flags...]}"
shift
cd "$(dirname "$0")/.."
python -m ragym.envs.serving.ray_serve --kb-dir "$KB_DIR" --port "$RETRIEVAL_PORT" --replicas "$RETRIEVAL_REPLICAS" \
    --gpus-per-replica "$RETRIEVAL_GPUS_PER_REPLICA" "$@"
