#!/usr/bin/env bash
# The arborag demo: install, build a tree over examples/corpus/, inspect it with DuckDB, ask a question.
#   bash scripts/demo.sh [CORPUS_DIR]        (default: .arborag-demo/, or $ARBORAG_DEMO_CORPUS)
# Offline, no server, no API key. Set ARBORAG_DEMO_NO_PREFECT=1 to run the stages without
# Prefect (no temporary API server: faster start).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install.sh  # the core install: no extra is needed for the demo
. .venv/bin/activate
. scripts/env.sh

CORPUS=${1:-${ARBORAG_DEMO_CORPUS:-.arborag-demo}}
PREFECT_FLAG=()
if [ "${ARBORAG_DEMO_NO_PREFECT:-0}" = "1" ]; then PREFECT_FLAG=(--no-prefect); fi

echo "== 1. build: ingest examples/corpus/, segment (sentence, <= 100 tokens), embed, cluster + summarize per level, index, publish -> $CORPUS"
arborag build examples/corpus/ --corpus "$CORPUS" "${PREFECT_FLAG[@]}"

echo
echo "== 2. documents and their chunks (DuckDB over the corpus's Parquet tables)"
arborag sql "SELECT d.title, d.mime, d.n_chars, count(c.chunk_id) AS chunks, sum(c.n_tokens) AS tokens
             FROM documents d LEFT JOIN chunks c ON c.doc_id = d.doc_id AND c.strategy = 'sentence'
             WHERE d.status = 'ok' GROUP BY ALL ORDER BY d.title" --corpus "$CORPUS"

echo
echo "== 3. the tree: nodes per level"
arborag sql "SELECT level, count(*) AS nodes, round(avg(n_tokens)) AS avg_tokens FROM nodes GROUP BY level ORDER BY level" --corpus "$CORPUS"

echo
echo "== 4. a question, answered by the default mode (hop: dense + BM25 over the leaves, fused, plus one hop through the links between leaves; <= 2,000 tokens)"
arborag query "How did Cinderella reach her happy ending?" --corpus "$CORPUS" --budget 2000

echo
echo "== 5. an HTML view of the tree"
arborag inspect tree --corpus "$CORPUS" --html "$CORPUS/tree.html"
