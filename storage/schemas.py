"""The Arrow schemas of every arborag table, in one place (SPEC §1).

Each table is a Parquet file readable by DuckDB with no arborag code. Writers go through
:func:`arborag.storage.tables.write_table`, which refuses a table whose schema is not the one here.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["SCHEMAS", "DOCUMENTS", "SECTIONS", "CHUNKS", "NODES", "EDGES", "RUNS", "QUERIES", "EMBEDDING_DIM"]

EMBEDDING_DIM = 384  # all-MiniLM-L6-v2; vector tables take the dim of the model in use

_ts = pa.timestamp("us", tz="UTC")

DOCUMENTS = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),  # content hash of normalized text (source hash for errors)
        pa.field("uri", pa.string(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("mime", pa.string()),
        pa.field("n_chars", pa.int64()),
        pa.field("text", pa.large_string()),
        pa.field("metadata", pa.string()),  # JSON object
        pa.field("ingested_at", _ts),
        pa.field("status", pa.string(), nullable=False),  # ok | error
        pa.field("error", pa.string()),  # reason when status == error; decode warnings otherwise
    ]
)

SECTIONS = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("section_id", pa.string(), nullable=False),
        pa.field("ordinal", pa.int32()),
        pa.field("start_line", pa.int32()),
        pa.field("end_line", pa.int32()),
        pa.field("title", pa.string()),
        pa.field("summary", pa.string()),
    ]
)

CHUNKS = pa.schema(
    [
        pa.field("chunk_id", pa.string(), nullable=False),  # hash(doc_id, strategy, params, span)
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("section_id", pa.string()),
        pa.field("ordinal", pa.int32(), nullable=False),
        pa.field("start_char", pa.int64(), nullable=False),
        pa.field("end_char", pa.int64(), nullable=False),
        pa.field("n_tokens", pa.int32(), nullable=False),
        pa.field("text", pa.large_string(), nullable=False),
        pa.field("header", pa.string()),
        pa.field("strategy", pa.string(), nullable=False),
    ]
)

NODES = pa.schema(
    [
        pa.field("node_id", pa.string(), nullable=False),
        pa.field("level", pa.int32(), nullable=False),  # 0 = leaf chunk
        pa.field("text", pa.large_string(), nullable=False),
        pa.field("n_tokens", pa.int32(), nullable=False),
        pa.field("doc_ids", pa.list_(pa.string()), nullable=False),
        pa.field("summary_of", pa.string()),  # cluster id for summary nodes
        pa.field("summarizer", pa.string()),  # model + prompt version (or "leaf")
        pa.field("summary_status", pa.string()),  # ok | fallback:<reason> | leaf
        pa.field("created_by_run", pa.string()),
    ]
)

EDGES = pa.schema(
    [
        pa.field("parent_id", pa.string(), nullable=False),
        pa.field("child_id", pa.string(), nullable=False),
        pa.field("probability", pa.float32(), nullable=False),
        pa.field("level", pa.int32(), nullable=False),  # level of the parent
    ]
)

RUNS = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("flow", pa.string(), nullable=False),
        pa.field("config_hash", pa.string(), nullable=False),
        pa.field("started_at", _ts),
        pa.field("finished_at", _ts),
        pa.field("status", pa.string()),  # ok | partial | failed
        pa.field("counts", pa.string()),  # JSON: per stage counts
        pa.field("tokens_in", pa.int64()),
        pa.field("tokens_out", pa.int64()),
        pa.field("message", pa.string()),
    ]
)

QUERIES = pa.schema(
    [
        pa.field("qid", pa.string(), nullable=False),
        pa.field("question", pa.string(), nullable=False),
        pa.field("answers", pa.list_(pa.string())),
        pa.field("gold_ids", pa.list_(pa.string())),  # gold evidence ids (e.g. paragraph titles)
        pa.field("gold_texts", pa.list_(pa.large_string())),  # gold evidence texts
        pa.field("type", pa.string()),
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "documents": DOCUMENTS,
    "sections": SECTIONS,
    "chunks": CHUNKS,
    "nodes": NODES,
    "edges": EDGES,
    "runs": RUNS,
    "queries": QUERIES,
}
