#!/usr/bin/env bash
# One-GPU smoke test of the cluster path, end to end, in ~10 minutes:
#   synthetic KB -> policy -> a few verl GRPO steps (vLLM rollout, FSDP, ragym_env agent loop, rewards/verl.py)
#   -> `ragym export` of the last checkpoint -> `ragym eval` of the export (vLLM backend).
# Needs: one CUDA GPU and ragym installed with the GPU extras (`pip install -e '.[gpu]'`).
# Policy: RAGYM_SMOKE_MODEL (e.g. a local Qwen2.5-VL-3B-Instruct); unset builds a tiny random Qwen2.5-VL.
# Usage: bash launch/gpu_smoke.sh [extra Hydra overrides for the smoke recipe...]
set -euo pipefail
cd "$(dirname "$0")/.."
export RAGYM_SMOKE_DIR="${RAGYM_SMOKE_DIR:-$PWD/runs/gpu_smoke}"
export WANDB_MODE="${WANDB_MODE:-disabled}" HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" RAY_USAGE_STATS_ENABLED=0
log() { printf '\n=== %s: %s\n' "$(date +%H:%M:%S)" "$*"; }

log "environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python -c "import torch, vllm, verl; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), '| vllm', vllm.__version__, '| verl', verl.__version__)"

log "synthetic KB and rows"
[ -f "$RAGYM_SMOKE_DIR/kb/data/train.parquet" ] || ragym build-kb --out "$RAGYM_SMOKE_DIR/kb" --preset tiny
if [ -z "${RAGYM_SMOKE_MODEL:-}" ]; then
    export RAGYM_SMOKE_MODEL="$RAGYM_SMOKE_DIR/policy"
    [ -f "$RAGYM_SMOKE_MODEL/config.json" ] || ragym tiny-policy --arch qwen2_5_vl --out "$RAGYM_SMOKE_MODEL"
fi
echo "policy: $RAGYM_SMOKE_MODEL"

log "verl GRPO (recipes/kbvqa_single_gpu_smoke.yaml: 3 steps, checkpoint at the end)"
rm -rf "$RAGYM_SMOKE_DIR/checkpoints"
# Same entry point `ragym submit` runs on a cluster; verl starts a local Ray instance itself.
python -m verl.trainer.main_ppo --config-path "$PWD/recipes" --config-name kbvqa_single_gpu_smoke "$@" \
    2>&1 | tee "$RAGYM_SMOKE_DIR/train.log"

log "export the last checkpoint"
rm -rf "$RAGYM_SMOKE_DIR/export"
ragym export "$RAGYM_SMOKE_DIR/checkpoints" --out "$RAGYM_SMOKE_DIR/export"
cat "$RAGYM_SMOKE_DIR/export/README.md"

log "evaluate the export"
ragym eval --model "$RAGYM_SMOKE_DIR/export" --data "$RAGYM_SMOKE_DIR/kb/data/test.parquet" \
    --out "$RAGYM_SMOKE_DIR/eval" --limit 16
cat "$RAGYM_SMOKE_DIR/eval/metrics.md"
log "done: $RAGYM_SMOKE_DIR"
