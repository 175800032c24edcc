#!/usr/bin/env bash
# One-GPU smoke test of the cluster path, end to end, in ~10 minutes: the same run the CPU tests make
# (tests/launch/test_verl_trainer.py) but with vLLM, FSDP and NCCL on a real GPU:
#   toy rows + a warm-started tiny policy -> 2 verl GRPO steps (`ragym train --engine verl --toy`, vLLM rollout,
#   ragym_env agent loop, rewards/verl.py) -> `ragym export` -> `ragym eval` of the export (resume: the CPU tests).
# Needs: one CUDA GPU and ragym installed with the GPU extras (`pip install -e '.[gpu]'`).
# Usage: bash launch/gpu_smoke.sh [extra Hydra overrides for the smoke recipe...]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${RAGYM_SMOKE_DIR:-$PWD/runs/gpu_smoke}"
RECIPE=kbvqa_single_gpu_smoke
export WANDB_MODE="${WANDB_MODE:-disabled}" HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" RAY_USAGE_STATS_ENABLED=0
log() { printf '\n=== %s: %s\n' "$(date +%H:%M:%S)" "$*"; }

if ! python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_smoke: no GPU is present (torch.cuda.is_available() is False); the CPU run of the same path is" \
         "tests/launch/test_verl_trainer.py" >&2
    exit 1
fi
log "environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python -c "import torch, vllm, verl; print('torch', torch.__version__, '| vllm', vllm.__version__, '| verl', verl.__version__)"

log "verl GRPO: 2 steps (recipes/$RECIPE.yaml at toy size, vLLM rollout)"
rm -rf "$OUT/checkpoints"
ragym train --engine verl --recipe "$RECIPE" --toy "$OUT" --network host "$@" 2>&1 | tee "$OUT/train.log"
log "export the last checkpoint"
rm -rf "$OUT/export"
ragym export "$OUT/checkpoints/$RECIPE" --out "$OUT/export"
cat "$OUT/export/README.md"

log "evaluate the export"
ragym eval --model "$OUT/export" --data "$OUT/KBVQA-v0/data/test.parquet" --out "$OUT/eval" --limit 16
cat "$OUT/eval/metrics.md"
log "done: $OUT"
