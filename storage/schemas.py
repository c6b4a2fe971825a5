"""The Arrow schemas of every arborag table, in one place (docs/METHODS.md §1).

Each table is a Parquet file readable by DuckDB with no arborag code. Writers go through
:func:`arborag.storage.tables.write_table`, which refuses a table whose schema is not the one here.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = [
    "SCHEMAS", "SCHEMA_VERSIONS", "ADDED_COLUMNS", "DOCUMENTS", "SECTIONS", "DOC_CONTEXT", "CHUNKS", "NODES", "EDGES", "RUNS", "QUERIES", "EMBEDDING_DIM",
    "EVIDENCE", "HITS", "RESULTS", "EVAL_SCHEMAS", "LINKS", "BOILERPLATE", "REPEATS", "SEGMENT_KEYS", "SOURCE_STATS",
]

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
        pa.field("start_char", pa.int64()),  # the sections of a document tile [0, n_chars) exactly
        pa.field("end_char", pa.int64()),
        pa.field("strategy", pa.string()),  # structural | semantic
    ]
)

# AutoContext (docs/METHODS.md §4): one row per document whose chunks carry headers.
DOC_CONTEXT = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("title", pa.string()),
        pa.field("title_source", pa.string()),  # metadata | heading | llm | fallback
        pa.field("summary", pa.string()),  # "This document is about: ..." (may be empty)
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
        # version 2: a label for every summary node (tasks/summarize/labels.py); null for leaves
        pa.field("keywords", pa.list_(pa.string())),  # c-TF-IDF terms, best first
        pa.field("title", pa.string()),  # a short title: keywords, or the LLM's one line
        pa.field("title_source", pa.string()),  # ctfidf | llm | text
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

# Links between leaves (docs/METHODS.md §9.1, ``tasks/links.py``): one row per (leaf, entity, kind); in the snapshot.
LINKS = pa.schema(
    [
        pa.field("node_id", pa.string(), nullable=False),  # a leaf (chunk_id)
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("entity", pa.string(), nullable=False),  # normalized name (lower case)
        pa.field("kind", pa.string(), nullable=False),  # title (the leaf's document is titled so) | mention (its text names it)
        pa.field("df", pa.int32(), nullable=False),  # documents the entity reaches
        pa.field("weight", pa.float64(), nullable=False),  # ln(documents / df)
    ]
)

# Boilerplate share of each leaf (``tasks/boilerplate.py``): the fraction of its word shingles
# repeated across documents or across one document's pages; in the snapshot, read by the query side.
BOILERPLATE = pa.schema(
    [
        pa.field("node_id", pa.string(), nullable=False),  # a leaf (chunk_id)
        pa.field("share", pa.float64(), nullable=False),  # in [0, 1]
    ]
)

# Occurrences of a repeated text (``tasks/build/repeats.py``): a chunk whose text (NFKC, case
# folded, whitespace and punctuation runs as one space) repeats an earlier leaf's is not a leaf of its
# own; this row says which leaf stands for it. In the snapshot beside ``chunks``, which keeps every occurrence.
REPEATS = pa.schema(
    [
        pa.field("chunk_id", pa.string(), nullable=False),  # the occurrence not kept (a row of chunks)
        pa.field("node_id", pa.string(), nullable=False),  # the leaf (chunk_id) that stands for it
    ]
)

#: Version of each table's schema, raised when columns are added. Columns added after a table's
#: first version are nullable and listed in ADDED_COLUMNS: a file written before them (an older
#: snapshot) is read with them null (storage/tables.py ``conform``); DuckDB views over mixed
#: snapshots union by name, so the same holds in SQL.
SCHEMA_VERSIONS: dict[str, int] = {"nodes": 2}
ADDED_COLUMNS: dict[str, tuple[str, ...]] = {"nodes": ("keywords", "title", "title_source")}

# What the segment stage last segmented, per document (``tasks/segment/reuse.py``): a file of the
# corpus cache (``cache/segment/<strategy>.parquet``), not a table of SCHEMAS. Its Parquet metadata
# holds the run-wide part of the key (``setup``) and the chunks file it describes (``chunks``).
SEGMENT_KEYS = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("mime", pa.string()),
        pa.field("sections", pa.large_string()),  # the document's sections (id:start:end;...), null when none
    ]
)

# What each source file looked like when an update or a build last read it
# (``tasks/changes/source_stats.py``): a file of the corpus cache (``cache/source_stats.parquet``), not a
# table of SCHEMAS. Its Parquet metadata holds the content hash of the documents table it
# describes (``documents``) and the reader key (``reader``).
SOURCE_STATS = pa.schema(
    [
        pa.field("uri", pa.string(), nullable=False),
        pa.field("size", pa.int64(), nullable=False),
        pa.field("mtime_ns", pa.int64(), nullable=False),
        pa.field("ctime_ns", pa.int64(), nullable=False),
        pa.field("ino", pa.uint64(), nullable=False),
        pa.field("dev", pa.uint64(), nullable=False),
        pa.field("read_ns", pa.int64(), nullable=False),  # the clock just before that stat
    ]
)

SCHEMAS: dict[str, pa.Schema] = {
    "documents": DOCUMENTS,
    "sections": SECTIONS,
    "doc_context": DOC_CONTEXT,
    "chunks": CHUNKS,
    "nodes": NODES,
    "edges": EDGES,
    "runs": RUNS,
    "queries": QUERIES,
    "links": LINKS,
    "boilerplate": BOILERPLATE,
    "repeats": REPEATS,
}


# --------------------------------------------------------------------------------------------
# Evaluation tables (arborag eval): files of an evaluation folder, not of a corpus, so they are
# not in SCHEMAS (a Corpus has no such tables); EVAL_SCHEMAS names them.
# --------------------------------------------------------------------------------------------
EVIDENCE = pa.schema(
    [
        pa.field("gold_id", pa.string(), nullable=False),
        pa.field("file", pa.string(), nullable=False),  # path relative to the corpus folder
        pa.field("title", pa.string()),
        pa.field("text", pa.large_string()),
    ]
)

HITS = pa.schema(
    [
        pa.field("qid", pa.string(), nullable=False),
        pa.field("strategy", pa.string(), nullable=False),
        pa.field("system", pa.string(), nullable=False),
        pa.field("mode", pa.string(), nullable=False),
        pa.field("budget", pa.int32(), nullable=False),
        pa.field("latency_ms", pa.float64()),  # search + query embedding (dense modes)
        pa.field("embed_ms", pa.float64()),  # the query-embedding part of latency_ms (0 for sparse)
        pa.field("node_ids", pa.list_(pa.string())),
        pa.field("levels", pa.list_(pa.int32())),
        pa.field("scores", pa.list_(pa.float64())),
        pa.field("n_tokens", pa.list_(pa.int32())),
        pa.field("doc_ids", pa.list_(pa.list_(pa.string()))),
        pa.field("texts", pa.list_(pa.large_string())),
        pa.field("error", pa.string()),
    ]
)

RESULTS = pa.schema(
    [
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("qid", pa.string(), nullable=False),
        pa.field("type", pa.string()),
        pa.field("strategy", pa.string(), nullable=False),
        pa.field("system", pa.string(), nullable=False),
        pa.field("mode", pa.string(), nullable=False),
        pa.field("budget", pa.int32(), nullable=False),
        pa.field("n_hits", pa.int32()),
        pa.field("context_tokens", pa.int32()),
        pa.field("levels", pa.list_(pa.int32())),
        pa.field("answer_hit", pa.float64()),  # null: no span answer (yes/no)
        pa.field("recall_at_5", pa.float64()),
        pa.field("recall_at_5_docs", pa.float64()),  # within the first 5 distinct documents (HippoRAG 2's recall@5)
        pa.field("recall_at_10", pa.float64()),
        pa.field("recall_at_budget", pa.float64()),
        pa.field("full_support", pa.float64()),
        pa.field("mrr", pa.float64()),
        pa.field("ndcg_at_10", pa.float64()),
        pa.field("level_mix", pa.float64()),
        pa.field("latency_ms", pa.float64()),
        pa.field("embed_ms", pa.float64()),
        pa.field("n_gold", pa.int32()),
        pa.field("n_gold_resolved", pa.int32()),
        pa.field("prediction", pa.string()),  # LLM answer (null without --answer)
        pa.field("f1", pa.float64()),
        pa.field("em", pa.float64()),
        pa.field("rouge_l", pa.float64()),
        pa.field("bleu_1", pa.float64()),
        pa.field("bleu_4", pa.float64()),
        pa.field("error", pa.string()),
        pa.field("config_hash", pa.string()),
    ]
)

EVAL_SCHEMAS: dict[str, pa.Schema] = {"evidence": EVIDENCE, "hits": HITS, "results": RESULTS}
