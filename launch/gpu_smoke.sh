#!/usr/bin/env bash
# One-GPU smoke test of the cluster path, end to end, in ~10 minutes: the run the CPU tests make
# (tests/launch/test_verl_trainer.py; with vLLM's CPU backend, `ragym train --engine verl --rollout vllm`) on a
# real GPU, where the recipe runs as written: verl's vLLM rollout on CUDA (sleep mode, CUDA-IPC weight sync),
# FSDP, flash-attn and NCCL:
#   toy rows + a warm-started tiny policy -> 2 verl GRPO steps (`ragym train --engine verl --toy`, ragym_env agent
#   loop, rewards/verl.py) -> `ragym export` -> `ragym eval` of the export (resume: the CPU tests).
# --rollout hf: the same without vLLM or flash-attn (recipes/platforms/gpu_hf.yaml): verl's trainer, FSDP on NCCL
#   in bf16, ragym's hf rollout. It needs only torch, transformers, peft, verl and Ray (and ragym's own
#   requirements, installed with `pip install -e .`), not the GPU lock: the smallest set that proves the trainer
#   path on a GPU, and the fallback where vLLM has no wheel yet (a new CUDA, an aarch64 node).
# --cpu: the CPU twin, through ragym's plugin with the hf rollout, in a private network where the kernel allows it
#   (tests/launch/test_verl_trainer.py runs it).
# Needs (default, vLLM): one CUDA GPU and the GPU install in $RAGYM_VENV (launch/cluster.env; `make gpu-install`),
# checked against launch/gpu-requirements.lock before training.
# Usage: bash launch/gpu_smoke.sh [--rollout vllm|hf] [--cpu] [extra Hydra overrides for the smoke recipe...]
set -euo pipefail
cd "$(dirname "$0")/.."
source launch/cluster.env
OUT="${RAGYM_SMOKE_DIR:-$PWD/runs/gpu_smoke}"
RECIPE=kbvqa_single_gpu_smoke
ROLLOUT=vllm
DEVICE=gpu
export WANDB_MODE="${WANDB_MODE:-disabled}" HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" RAY_USAGE_STATS_ENABLED=0
log() { printf '\n=== %s: %s\n' "$(date +%H:%M:%S)" "$*"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --rollout) ROLLOUT="${2:?--rollout needs vllm or hf}"; shift 2 ;;
        --cpu) DEVICE=cpu; shift ;;
        *) break ;;
    esac
done
case "$ROLLOUT" in vllm|hf) ;; *) echo "gpu_smoke: --rollout $ROLLOUT: choose vllm or hf" >&2; exit 2 ;; esac
[ "$DEVICE/$ROLLOUT" != cpu/vllm ] || { echo "gpu_smoke: --cpu runs the hf rollout (--rollout hf)" >&2; exit 2; }

log "environment ($DEVICE, $ROLLOUT rollout)"
[ "$DEVICE/$ROLLOUT" != gpu/vllm ] || bash launch/install_gpu.sh --check
source "$RAGYM_VENV/bin/activate"
if [ "$DEVICE" = gpu ]; then
    if ! python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
        echo "gpu_smoke: no GPU is present (torch.cuda.is_available() is False); the CPU run of the same path is" \
             "bash launch/gpu_smoke.sh --cpu --rollout hf" >&2
        exit 1
    fi
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
fi
if [ "$ROLLOUT" = vllm ]; then
    python -c "import torch, vllm, verl, flash_attn; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'| vllm', vllm.__version__, '| verl', verl.__version__, '| flash-attn', flash_attn.__version__)"
    NETWORK=host
else
    python -c "import torch, transformers, peft, verl, ray; print('torch', torch.__version__, 'cuda',
torch.version.cuda, '| transformers', transformers.__version__, '| peft', peft.__version__, '| verl',
verl.__version__, '| ray', ray.__version__)"
    NETWORK=$([ "$DEVICE" = cpu ] && echo auto || echo host)
fi

log "verl GRPO: 2 steps (recipes/$RECIPE.yaml at toy size, $ROLLOUT rollout)"
rm -rf "$OUT/checkpoints/$RECIPE"
mkdir -p "$OUT"  # tee opens its log before ragym creates the folder
ragym train --engine verl --recipe "$RECIPE" --toy "$OUT" --rollout "$ROLLOUT" --network "$NETWORK" "$@" 2>&1 \
    | tee "$OUT/train.log"
log "export the last checkpoint"
rm -rf "$OUT/export/$RECIPE"
ragym export "$OUT/checkpoints/$RECIPE" --out "$OUT/export/$RECIPE"
cat "$OUT/export/$RECIPE/README.md"

log "evaluate the export"
# The recipe named: verl's legacy trainer (use_v1 false) leaves no recipe snapshot in its checkpoint.
ragym eval --model "$OUT/export/$RECIPE" --recipe "$RECIPE" --data "$OUT/KBVQA-v0/data/test.parquet" \
    --out "$OUT/eval/$RECIPE" --limit 16
cat "$OUT/eval/$RECIPE/metrics.md"
log "done: $OUT"
