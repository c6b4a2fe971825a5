#!/usr/bin/env bash
# Install arborag into ./.venv (offline-capable: only the package registry is needed).
#   bash scripts/install.sh            the core: build, update, query, sql, inspect, serve
#   bash scripts/install.sh dev        plus every extra and the test tools (scripts/test.sh)
#   bash scripts/install.sh eval,llm   plus the extras named (pyproject.toml [project.optional-dependencies])
# torch==2.13.0 goes first: where a CPU-only wheel of it is available (a local wheel or index),
# installing it before anything that depends on torch stops pip from pulling a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1
python -c "import torch" 2>/dev/null || pip install -q "torch==2.13.0"
EXTRAS=${1:-}
TARGET="."
if [ -n "$EXTRAS" ]; then TARGET=".[$EXTRAS]"; fi
pip install -q -e "$TARGET" 2>&1 | grep -v "is ignored: it is neither" || true
# Byte-compile the project's modules now, as pip does for a regular (non-editable) install: an
# editable install leaves that to the first import, and where PYTHONDONTWRITEBYTECODE is set it
# never happens — every `arborag` process then compiles ~120 modules again (0.3 s of a cold
# update's own process in a profile: docs/BENCHMARKS.md, "The cold path"). compileall skips
# what is already up to date.
python -m compileall -q arborag flows tasks storage query >/dev/null
python -c "import arborag.cli, arborag.flows, arborag.tasks, arborag.storage, arborag.query"
# Compile UMAP's numba code into arborag's user-level cache now (tasks/cluster/umap_import.py), as the
# byte-compiling above does for Python: otherwise the first build on a machine pays it — measured
# 33 s for this warm-up on a fresh 2-core machine, and a first cold build of the 1x cold-path
# corpus 52.6 s against 40.2 s once compiled (docs/BENCHMARKS.md, the cold path). A machine that
# has compiled it loads the cache instead (~2 s). ARBORAG_NUMBA_CACHE=0 leaves numba's own cache
# folder. Only a speed-up: if it cannot run here, the install goes on and the first build compiles.
python -c "from arborag.tasks.cluster.fit import warm_up; warm_up()" \
  || echo "note: UMAP's numba code was not compiled now; the first build will compile it (15-50 s)"
