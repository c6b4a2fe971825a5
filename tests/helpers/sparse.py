"""Shared data and Elasticsearch helpers of the sparse-index tests (tests/storage/test_sparse*.py)."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from arborag.config import SparseConfig
from arborag.storage.schemas import NODES
from arborag.storage.sparse import SparseHit
from arborag.storage.sparse.es_connection import EsConnection

# ------------------------------------------------------------------------------------------------
# A small corpus designed so every behaviour is visible in the ranking
# ------------------------------------------------------------------------------------------------
DOCS = [
    # node_id, level, doc_ids, text
    ("apple-pie", 0, ["recipes"], "Apple pie is a baked dessert. The apple filling is sweet."),
    ("apple-tree", 0, ["botany"], "The apple tree grows apples in orchards; apple trees need pollination."),
    ("banana-bread", 0, ["recipes"], "Banana bread is a sweet bread made with mashed bananas."),
    ("pie-crust", 0, ["recipes"], "A pie crust holds the filling; apple and cherry are classic pie fillings."),
    ("runners", 0, ["sport"], "Marathon runners were running through the city while a runner rested."),
    ("cherry-tree", 1, ["botany", "recipes"], "Cherry trees blossom in spring; the cherry is a stone fruit."),
    ("fruit-summary", 2, ["botany", "recipes"], "Summary: fruit trees such as apple and cherry, and desserts made from fruit."),
    ("beijing-univ", 0, ["zh"], "北京大学是中国著名的综合性大学，位于北京市海淀区。"),
    ("shanghai-jt", 0, ["zh"], "上海交通大学位于上海，是一所研究型大学。"),
    ("tokyo", 0, ["ja"], "東京大学は日本の国立大学です。"),
    ("mixed", 1, ["zh", "sport"], "Python编程 and running: 跑步 is running in Chinese."),
]


def nodes_table(rows: list[tuple[str, int, list[str], str]] = DOCS) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "node_id": nid,
                "level": level,
                "text": text,
                "n_tokens": len(text.split()),
                "doc_ids": docs,
                "summary_of": None,
                "summarizer": "leaf",
                "summary_status": "leaf",
                "created_by_run": "test",
            }
            for nid, level, docs, text in rows
        ],
        schema=NODES,
    )


def ids(hits: list[SparseHit]) -> list[str]:
    return [h.node_id for h in hits]


# ------------------------------------------------------------------------------------------------
# Elasticsearch availability
# ------------------------------------------------------------------------------------------------
def es_skip_reason() -> str | None:
    """None when a real Elasticsearch answers at ARBORAG_ES_URL, else why the ES tests skip."""
    url = os.environ.get("ARBORAG_ES_URL")
    if not url:
        return "ARBORAG_ES_URL is not set (start one with deploy/docker-compose.yml; see docs/SPARSE.md)"
    try:
        conn = EsConnection(SparseConfig(backend="elasticsearch"), request_timeout=3.0)
        try:
            conn.call(lambda c: c.options(max_retries=0).info())
        finally:
            conn.close()
    except Exception as exc:  # noqa: BLE001 - any failure means "not reachable"
        return f"Elasticsearch at ARBORAG_ES_URL is not reachable: {exc}"
    return None


ES_SKIP = es_skip_reason()
needs_es = pytest.mark.skipif(ES_SKIP is not None, reason=str(ES_SKIP))


def es_cleanup(cfg: SparseConfig) -> None:
    """Delete every index of this test run's prefix."""
    conn = EsConnection(cfg)
    try:  # by name: 8.x refuses wildcard deletes (action.destructive_requires_name)
        names = list(conn.call(lambda c: c.indices.get(index=f"{cfg.es_index_prefix}-*", allow_no_indices=True)))
        for name in names:
            conn.call(lambda c: c.indices.delete(index=name, ignore_unavailable=True))
    finally:
        conn.close()


# Lucene-ish tokens the fuzzers combine (embedded: never crash; Elasticsearch: every normalised query runs)
FUZZ_TOKENS = ["apple", "pie", "cherry", "北京大学", "AND", "OR", "NOT", "&&", "||", "!", "+", "-", "(", ")",
               '"', '"apple pie"', "^2", "^0.5", "^", "~2", "level:", "level:1", "level:x", "text:", "node_id:",
               "doc_ids:recipes", "foo:", ":", "*", "?", "\\", "\\(", "*:*", "[", "{", "/", "<", ">", ""]
