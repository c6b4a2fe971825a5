#!/usr/bin/env bash
# The arborag demo: install, ingest examples/ into a corpus, segment, show what is there.
#   bash scripts/demo.sh [CORPUS_DIR]        (default: .arborag-demo/, or $ARBORAG_DEMO_CORPUS)
# Set ARBORAG_DEMO_NO_PREFECT=1 to run without Prefect (no temporary API server: faster start).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install.sh
. .venv/bin/activate
. scripts/env.sh

CORPUS=${1:-${ARBORAG_DEMO_CORPUS:-.arborag-demo}}
PREFECT_FLAG=()
if [ "${ARBORAG_DEMO_NO_PREFECT:-0}" = "1" ]; then PREFECT_FLAG=(--no-prefect); fi

echo "== 1. ingest examples/ and segment into sentence chunks (<= 100 tokens) -> $CORPUS"
arborag ingest examples/ --exclude README.md --corpus "$CORPUS" --segment --strategy sentence "${PREFECT_FLAG[@]}"

echo
echo "== 2. documents and their chunks (DuckDB over the corpus's Parquet tables)"
arborag sql "SELECT d.title, d.mime, d.n_chars, count(c.chunk_id) AS chunks, sum(c.n_tokens) AS tokens
             FROM documents d LEFT JOIN chunks c ON c.doc_id = d.doc_id AND c.strategy = 'sentence'
             WHERE d.status = 'ok' GROUP BY ALL ORDER BY d.title" --corpus "$CORPUS"

echo
echo "== 3. the first chunks of Cinderella"
arborag sql "SELECT c.ordinal, c.n_tokens, c.text FROM chunks c JOIN documents d USING (doc_id)
             WHERE d.title = 'cinderella' AND c.strategy = 'sentence' ORDER BY c.ordinal LIMIT 3" \
  --corpus "$CORPUS" --max-chars 200

echo
echo "== 4. runs recorded in the corpus"
arborag sql "SELECT run_id, flow, status, finished_at FROM runs ORDER BY finished_at" --corpus "$CORPUS"
