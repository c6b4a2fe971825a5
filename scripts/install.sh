#!/usr/bin/env bash
# Install arborag into ./.venv (offline-capable: only the package registry is needed).
# torch==2.13.0 goes first: it is a local CPU wheel on our machines, and installing it
# before anything that depends on torch stops pip from pulling a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1
python -c "import torch" 2>/dev/null || pip install -q "torch==2.13.0"
pip install -q -e ".[dev]" 2>&1 | grep -v "is ignored: it is neither" || true
python -c "import arborag.cli, arborag.flows, arborag.tasks, arborag.storage, arborag.query"
