#!/usr/bin/env bash
# Lint and type-check the package (run by scripts/test.sh before pytest; alone: bash scripts/check.sh).
#
# ruff: the bug-catching rules of [tool.ruff.lint] in pyproject.toml, never a reformat — over the
# package, and over benchmarks/ and scripts/ too (a benchmark is run rarely: an undefined name in a
# benchmark's rarely used path would go unnoticed until ruff saw it). tests/ is left out: pytest's
# fixture imports read as redefinitions (F811).
# mypy: the whole ``arborag`` namespace, and any error fails the check. setup.py maps the folders
# flows/, tasks/, storage/ and query/ into it, which mypy cannot follow, so a temporary tree of
# symlinks gives it the installed layout; the paths it reports are printed as in the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PKG_DIRS=(arborag flows tasks storage query)

echo "ruff check ${PKG_DIRS[*]} benchmarks scripts"
ruff check --quiet "${PKG_DIRS[@]}" benchmarks scripts

TREE=$(mktemp -d "${TMPDIR:-/tmp}/arborag-mypy.XXXXXX")
trap 'rm -rf "$TREE"' EXIT
mkdir -p "$TREE/arborag"
for f in arborag/*; do ln -s "$ROOT/$f" "$TREE/arborag/"; done
for d in flows tasks storage query; do ln -s "$ROOT/$d" "$TREE/arborag/$d"; done

echo "mypy -p arborag (cache: .mypy_cache)"
set +e
(cd "$TREE" && MYPYPATH="$TREE" mypy -p arborag --config-file "$ROOT/pyproject.toml" --cache-dir "$ROOT/.mypy_cache" \
   --show-error-codes) > "$TREE/mypy.txt" 2>&1
status=$?
set -e
# arborag/query/x.py (the mypy tree) -> query/x.py (the checkout)
sed -E 's#^arborag/(flows|tasks|storage|query)/#\1/#' "$TREE/mypy.txt"
exit "$status"
