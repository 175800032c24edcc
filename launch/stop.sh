#!/usr/bin/env bash
# Stop Ray on this node (run on every node to take the cluster down).
set -euo pipefail
source "$(dirname "$0")/cluster.env"
source "$RAGYM_VENV/bin/activate"
ray stop
