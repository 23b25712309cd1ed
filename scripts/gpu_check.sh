#!/usr/bin/env bash
# `make gpu-check`: the prepared GPU check (benchmarks/gpu_check.py, docs/performance.md).
# Uses a Python whose torch sees a GPU (GPU_PYTHON, else python3); where none has one, makes
# .venv-gpu with PyPI's CUDA wheels first (a few GB). Writes runs/gpu_check/gpu_check.{json,md}.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${GPU_PYTHON:-python3}
has_cuda() { "$1" -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null; }
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU here (nvidia-smi finds none); nothing installed" >&2
  exit 2
fi
if ! has_cuda "$PY"; then
  python3 -m venv .venv-gpu
  .venv-gpu/bin/pip install -q torch torchvision
  .venv-gpu/bin/pip install -q -e ".[dev]"
  PY=.venv-gpu/bin/python
  has_cuda "$PY" || { echo "gpu-check: no CUDA device visible to torch" >&2; exit 2; }
fi
# A Python that came with CUDA torch (a GPU image) gets torchgarden itself, without its
# dependencies and offline: the registry finds the built-in experiments through its entry points.
if ! "$PY" -c "import importlib.metadata as m; m.distribution('torchgarden')" 2>/dev/null; then
  "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e .
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
timeout 480 "$PY" benchmarks/gpu_check.py --out "${GPU_CHECK_OUT:-runs/gpu_check}" "$@"
