#!/usr/bin/env bash
# The GPU install (`make gpu-install`): ragym with verl 0.9.1's tested versions into $RAGYM_VENV (cluster.env;
# default .venv), on Linux x86-64 (glibc 2.31+) with Python 3.11 and an NVIDIA driver for CUDA 13.0 (580+):
#   1. launch/gpu-requirements.lock, every package pinned (setup.py's gpu extra as uv resolved it for this
#      platform; `make gpu-lock` regenerates it): verl's `vllm` extra (vllm 0.24.0, torch 2.11.0, torchvision
#      0.26.0, transformers 5.9.0), faiss-cpu as the only faiss (one CUDA major: see the lock's note), DeepSpeed;
#   2. flash-attn (launch/gpu-flash-attn.txt), after torch and without build isolation;
#   3. ragym itself, editable, without dependencies; then `pip check` and --check.
# Usage: bash launch/install_gpu.sh           install (creates the venv with $PYTHON, default python3.11)
#        bash launch/install_gpu.sh --check   check that $RAGYM_VENV holds exactly this install, and one CUDA
#                                             major (launch/cuda_majors.py prints the majors it finds)
#        bash launch/install_gpu.sh --lock    regenerate the lock (uv, in a throwaway venv; --upgrade passes on)
# RAGYM_FLASH_ATTN replaces step 2's requirement, e.g. flash-attn==2.8.3 to build it from source.
set -euo pipefail
cd "$(dirname "$0")/.."
source launch/cluster.env
LOCK=launch/gpu-requirements.lock
FLASH_ATTN="${RAGYM_FLASH_ATTN:-$(grep -v '^#' launch/gpu-flash-attn.txt)}"
PYTHON="${PYTHON:-python3.11}"
UV_VERSION=0.13.9
say() { printf '\n=== install_gpu: %s\n' "$*"; }
die() { echo "install_gpu: $*" >&2; exit 1; }

lock() {
    # glibc 2.31: llguidance (vLLM's) has no Linux x86-64 wheel for older; CPython 3.11.
    local tool
    tool="$(mktemp -d)"
    trap "rm -rf '$tool'" EXIT
    "$PYTHON" -m venv "$tool" && "$tool/bin/pip" install --quiet "uv==$UV_VERSION"
    "$tool/bin/uv" pip compile setup.py --extra gpu --python-version 3.11 \
        --python-platform x86_64-manylinux_2_31 --annotation-style line \
        --custom-compile-command "make gpu-lock" --output-file "$LOCK" "$@"
    # uv writes its own header; the note on faiss goes under it, and the lock must hold one CUDA major.
    { head -n 2 "$LOCK"; cat <<'NOTE'; tail -n +3 "$LOCK"; } > "$tool/lock" && cp "$tool/lock" "$LOCK"
# One CUDA major, 13: torch 2.11.0 and vllm 0.24.0 are CUDA 13.0 builds. faiss is faiss-cpu: PyPI's faiss GPU
# wheels pull CUDA 12 (faiss-gpu, faiss-gpu-cu12: nvidia-cublas-cu12, nvidia-cuda-runtime-cu12) or want a CUDA
# 13 runtime newer than torch pins (faiss-gpu-cuvs 1.15: nvidia-cuda-runtime>=13.2 against 13.0.96). A flat
# index searched on a GPU runs as exact search on torch (ragym.envs.retrieval.torch_flat); IVF and HNSW search
# on the CPU. launch/cuda_majors.py --lock checks this file; install_gpu.sh --check checks the install.
NOTE
    "$tool/bin/python" launch/cuda_majors.py --lock "$LOCK" || die "$LOCK holds more than one CUDA major (above)"
}

check() {
    # Every locked version, flash-attn as step 2 names it, no other faiss beside faiss-cpu, one CUDA major.
    [ -x "$RAGYM_VENV/bin/python" ] || die "no venv at $RAGYM_VENV; run: make gpu-install"
    "$RAGYM_VENV/bin/python" - "$LOCK" "$FLASH_ATTN" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, distributions, version
from pathlib import PurePosixPath
from urllib.parse import unquote, urlparse

try:
    from packaging.requirements import Requirement
    from packaging.utils import parse_wheel_filename
except ImportError:
    sys.exit("  packaging: missing (the lock installs it)")

lock, flash_attn = sys.argv[1:]
wanted = [Requirement(line.split("#")[0]) for line in open(lock) if line.split("#")[0].strip()]
flash = Requirement(flash_attn)
if flash.url:  # a wheel: its own version, local label included (2.8.3+cu130torch2.11)
    wheel = PurePosixPath(unquote(urlparse(flash.url).path)).name
    flash = Requirement(f"flash-attn=={parse_wheel_filename(wheel)[1]}")
problems = []
for req in [*wanted, flash]:
    try:
        have = version(req.name)
    except PackageNotFoundError:
        problems.append(f"{req.name}: missing (want {req.specifier})")
        continue
    if not req.specifier.contains(have, prereleases=True):
        problems.append(f"{req.name}: {have} installed, want {req.specifier}")
problems += [f"{dist.metadata['Name']} {dist.version} beside faiss-cpu (both write faiss): uninstall both, reinstall"
             for dist in distributions()
             if (dist.metadata["Name"] or "").lower().replace("_", "-").startswith("faiss-")
             and (dist.metadata["Name"] or "").lower().replace("_", "-") != "faiss-cpu"]
for problem in problems[:20]:
    print(f"  {problem}", file=sys.stderr)
if len(problems) > 20:
    print(f"  ... {len(problems) - 20} more", file=sys.stderr)
sys.exit(1 if problems else 0)
PY
    local locked=$?
    "$RAGYM_VENV/bin/python" launch/cuda_majors.py || return 1
    return "$locked"
}

case "${1:-}" in
    --lock) shift; lock "$@"; exit ;;
    --check)
        check || die "$RAGYM_VENV is not the GPU install of $LOCK (above); run: make gpu-install"
        echo "install_gpu: $RAGYM_VENV holds the GPU install of $LOCK"
        exit ;;
    "") ;;
    *) die "unknown option $1 (--check, --lock or none)" ;;
esac

[ "$(uname -sm)" = "Linux x86_64" ] || die "the lock is for Linux x86-64; this is $(uname -sm)"
[ ! -e "$RAGYM_VENV/.installed" ] || die "$RAGYM_VENV is the CPU install (make venv); remove it or set RAGYM_VENV"
if ! nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | awk -F. '$1 < 580 {exit 1}'; then
    echo "install_gpu: warning: no NVIDIA driver 580+ found; PyPI's torch 2.11.0 and vLLM 0.24.0 are CUDA 13.0" \
         "builds and need one to run (installing anyway)" >&2
fi
[ -x "$RAGYM_VENV/bin/python" ] || "$PYTHON" -m venv "$RAGYM_VENV"
PY="$RAGYM_VENV/bin/python"
"$PY" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
    || die "$RAGYM_VENV has $("$PY" -V 2>&1); the lock is for Python 3.11 (PYTHON=python3.11)"
"$PY" -c 'import os, sys; sys.exit([int(n) for n in os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")] < [2, 31])' \
    || die "$(ldd --version | head -1) is older than the lock's glibc 2.31"

say "pip"
"$PY" -m pip install --quiet --upgrade pip
say "the lock: $(grep -c '==' "$LOCK") packages (several GB)"
"$PY" -m pip install --no-deps -r "$LOCK"
say "flash-attn, after torch: $FLASH_ATTN"
# A source build runs flash-attn's setup.py in this venv: it imports torch, packaging and wheel.
[[ "$FLASH_ATTN" == *.whl ]] || "$PY" -m pip install --quiet wheel
"$PY" -m pip install --no-deps --no-build-isolation "$FLASH_ATTN"
say "ragym"
"$PY" -m pip install --no-deps -e .
"$PY" -m pip check
check || die "the install does not match $LOCK (above)"
touch "$RAGYM_VENV/.gpu-installed"
say "done: source $RAGYM_VENV/bin/activate; bash launch/gpu_smoke.sh runs 2 GRPO steps on one GPU"
