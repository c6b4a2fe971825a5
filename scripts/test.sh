#!/usr/bin/env bash
# Install arborag with its dev extras into ./.venv, lint and type-check the package, then run the whole test suite.
# The search-page test drives the system Chromium (Debian's package): it is installed here when
# missing and we may (root + apt-get); otherwise that one test skips and says why.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh dev
if [ ! -x /usr/bin/chromium ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "note: could not install chromium; the browser test will skip"
fi
. .venv/bin/activate
. scripts/env.sh
bash scripts/check.sh  # ruff + mypy on the package (pyproject.toml [tool.ruff], [tool.mypy]); any error stops here
python -m pytest "$@"
