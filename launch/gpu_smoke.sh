#!/usr/bin/env bash
# One-GPU smoke test of the cluster path, end to end, in ~10 minutes: the run the CPU tests make
# (tests/launch/test_verl_trainer.py; with vLLM's CPU backend, `ragym train --engine verl --rollout vllm`) on a
# real GPU, where the recipe runs as written: verl's vLLM rollout on CUDA (sleep mode, CUDA-IPC weight sync),
# FSDP, flash-attn and NCCL:
#   toy rows + a warm-started tiny policy -> 2 verl GRPO steps (`ragym train --engine verl --toy`, vLLM rollout,
#   ragym_env agent loop, rewards/verl.py) -> `ragym export` -> `ragym eval` of the export (resume: the CPU tests).
# Needs: one CUDA GPU and the GPU install in $RAGYM_VENV (launch/cluster.env; `make gpu-install`), which it
# checks against launch/gpu-requirements.lock before training.
# Usage: bash launch/gpu_smoke.sh [extra Hydra overrides for the smoke recipe...]
set -euo pipefail
cd "$(dirname "$0")/.."
source launch/cluster.env
OUT="${RAGYM_SMOKE_DIR:-$PWD/runs/gpu_smoke}"
RECIPE=kbvqa_single_gpu_smoke
export WANDB_MODE="${WANDB_MODE:-disabled}" HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" RAY_USAGE_STATS_ENABLED=0
log() { printf '\n=== %s: %s\n' "$(date +%H:%M:%S)" "$*"; }

log "environment"
bash launch/install_gpu.sh --check
source "$RAGYM_VENV/bin/activate"
if ! python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    echo "gpu_smoke: no GPU is present (torch.cuda.is_available() is False); the CPU run of the same path is" \
         "tests/launch/test_verl_trainer.py" >&2
    exit 1
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python -c "import torch, vllm, verl, flash_attn; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'| vllm', vllm.__version__, '| verl', verl.__version__, '| flash-attn', flash_attn.__version__)"

log "verl GRPO: 2 steps (recipes/$RECIPE.yaml at toy size, vLLM rollout)"
rm -rf "$OUT/checkpoints"
mkdir -p "$OUT"  # tee opens its log before ragym creates the folder
ragym train --engine verl --recipe "$RECIPE" --toy "$OUT" --network host "$@" 2>&1 | tee "$OUT/train.log"
log "export the last checkpoint"
rm -rf "$OUT/export"
ragym export "$OUT/checkpoints/$RECIPE" --out "$OUT/export"
cat "$OUT/export/README.md"

log "evaluate the export"
ragym eval --model "$OUT/export" --data "$OUT/KBVQA-v0/data/test.parquet" --out "$OUT/eval" --limit 16
cat "$OUT/eval/metrics.md"
log "done: $OUT"
