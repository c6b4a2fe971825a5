#!/usr/bin/env bash
# Install arborag with its dev extras into ./.venv, then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
. .venv/bin/activate
. scripts/env.sh
python -m pytest "$@"
