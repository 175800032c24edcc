#!/usr/bin/env bash
# Every shipped GPU recipe's update step on one GPU, measured beside `ragym budget memory`'s prediction, with its
# step time, tokens/s and MFU (ragym.rl.budget.gpu_check): one command for a GPU session.
# Runs on a machine with only torch, transformers and peft (no vLLM, verl, Ray or flash-attn; not even ragym
# installed): it reads benchmarks/gpu_check_plans.json, the plans `ragym budget gpu-check --all --write-plans`
# made from the recipes (tests/rl/budget/test_gpu_check.py keeps the file equal to them). About 3 minutes on one
# H200 by the plans' sizes (two recipes fit one GPU; each full fine-tuning recipe prints one line: it needs FSDP
# over its 8 GPUs); exit 1 when any recipe does not fit one GPU, as the full fine-tuning ones do not.
# Usage: bash benchmarks/gpu_check_all.sh [--recipe R ...] [--peak-tflops X]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
"$PYTHON" -c 'import torch, transformers, peft; print("torch", torch.__version__, "| transformers",
transformers.__version__, "| peft", peft.__version__, "| cuda", torch.version.cuda)'
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$PYTHON" -m ragym.rl.budget.gpu_check \
    --plans benchmarks/gpu_check_plans.json "$@"
