#!/usr/bin/env bash
# Submit a recipe to this cluster: `bash launch/submit.sh recipes/kbvqa_qwen2_5_vl_7b.yaml [overrides...]`.
# Adds only the cluster's size; everything else comes from the recipe and the overrides you pass.
set -euo pipefail
source "$(dirname "$0")/cluster.env"
source "$RAGYM_VENV/bin/activate"
exec ragym submit "$@" --address "$RAY_API_SERVER_ADDRESS" --nodes "$NUM_NODES" --gpus-per-node "$GPUS_PER_NODE"
