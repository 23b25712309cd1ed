#!/usr/bin/env bash
# Creates .venv (if needed) and installs torchgarden with its dev extras.
# CPU torch is installed first so the project's "torch>=2.4" pulls nothing bigger.
# Override the torch requirement with TORCH_SPEC (e.g. TORCH_SPEC="torch" on a GPU box).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
EXTRAS=${EXTRAS:-dev}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip --disable-pip-version-check -q"
if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  $PIP install "$TORCH_SPEC"
fi
stamp="$VENV/.torchgarden-$EXTRAS-$(cksum pyproject.toml | cut -d' ' -f1)"
if [ ! -f "$stamp" ]; then
  $PIP install -e ".[$EXTRAS]"
  touch "$stamp"
fi
# Byte-compile the package: a shell with PYTHONDONTWRITEBYTECODE set (CI's) would otherwise
# compile its ~180 modules from source on every command (~0.2 s of each start-up).
"$VENV/bin/python" -m compileall -q src >/dev/null
