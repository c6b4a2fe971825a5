"""Snapshots carry their own provenance: the leaf chunks and the documents they come from."""

from __future__ import annotations

import pyarrow as pa

from arborag.storage.schemas import CHUNKS, DOCUMENTS, NODES
from arborag.tasks.stages.publish import snapshot_provenance


def _chunks(rows):
    return pa.Table.from_pylist([
        {"chunk_id": c, "doc_id": d, "section_id": None, "ordinal": o, "start_char": s, "end_char": s + 10,
         "n_tokens": 3, "text": f"text {c}", "header": "", "strategy": st}
        for c, d, o, s, st in rows], schema=CHUNKS)


def test_only_the_snapshots_leaves_and_their_documents_are_kept():
    nodes = pa.Table.from_pylist([
        {"node_id": i, "level": lv, "text": "t", "n_tokens": 1, "doc_ids": ds, "summary_of": None,
         "summarizer": "leaf", "summary_status": "leaf", "created_by_run": "r"}
        for i, lv, ds in [("c2", 0, ["d1"]), ("c1", 0, ["d1"]), ("c9", 0, ["d3"]), ("s", 1, ["d1", "d3"])]], schema=NODES)
    chunks = _chunks([("c1", "d1", 0, 0, "sentence"), ("c2", "d1", 1, 10, "sentence"), ("c9", "d3", 0, 0, "sentence"),
                      ("x1", "d2", 0, 0, "sentence"), ("c1ffs", "d1", 0, 0, "ffs")])
    documents = pa.Table.from_pylist([
        {"doc_id": d, "uri": f"/c/{d}.txt", "title": d.upper(), "mime": "text/plain", "n_chars": 20, "text": "x" * 20,
         "metadata": "{}", "ingested_at": None, "status": "ok", "error": None} for d in ("d3", "d2", "d1")], schema=DOCUMENTS)
    leaf_chunks, docs = snapshot_provenance(nodes, chunks, documents)
    assert leaf_chunks.schema == CHUNKS and docs.schema == DOCUMENTS
    assert leaf_chunks.column("chunk_id").to_pylist() == ["c1", "c2", "c9"]  # (doc_id, ordinal) order, no strangers
    assert docs.column("doc_id").to_pylist() == ["d1", "d3"]  # d2 has no leaf in this snapshot
