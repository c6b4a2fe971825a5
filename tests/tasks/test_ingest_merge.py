"""tasks/ingest/merge.py + existing.py: a merge holds only the rows its files touch; the rest stays Arrow."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from arborag.config import IngestConfig
from arborag.storage.schemas import DOCUMENTS
from arborag.tasks.stages.documents import IngestReport, build_documents
from arborag.tasks.ingest.existing import ExistingDocuments
from arborag.tasks.ingest.merge import DocumentState

CFG = IngestConfig()
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def synthetic(n: int, folder: str = "/corpus") -> pa.Table:
    """``n`` ok documents as an earlier ingest would have written them (sorted by uri)."""
    uris = [f"{folder}/f{i:05d}.txt" for i in range(n)]
    return pa.Table.from_pylist(
        [
            {
                "doc_id": f"{i:064x}", "uri": u, "title": f"f{i}", "mime": "text/plain", "n_chars": 9,
                "text": f"text {i:04d}", "metadata": json.dumps({"reader": "r", "source_sha": {u: "s"}}, sort_keys=True),
                "ingested_at": NOW, "status": "ok", "error": None,
            }
            for i, u in enumerate(uris)
        ],
        schema=DOCUMENTS,
    )


def test_rows_of_other_files_are_not_loaded_and_come_back_unchanged(tmp_path: Path) -> None:
    old = synthetic(500)
    state = DocumentState(old, [str(tmp_path / "new.txt")], IngestReport())
    assert state.loaded == set() and not state.docs and not state.errors
    (tmp_path / "new.txt").write_text("A brand new document.")
    table, report = build_documents([tmp_path], CFG, existing=old, now=NOW)
    assert report.counts()["added"] == 1 and table.num_rows == 501
    kept = table.filter(pc.starts_with(table.column("uri"), "/corpus/"))
    assert kept.equals(old)  # byte for byte the rows that were there
    assert table.schema == DOCUMENTS


def test_duplicate_uris_and_jsonl_records_find_their_rows() -> None:
    meta = {"reader": "r", "source_sha": {"/a.txt": "s", "/b.txt": "s"}, "duplicate_uris": ["/b.txt"]}
    rows = [
        {"doc_id": "d1", "uri": "/a.txt", "title": "a", "mime": "text/plain", "n_chars": 1, "text": "x",
         "metadata": json.dumps(meta), "ingested_at": NOW, "status": "ok", "error": None},
        {"doc_id": "d2", "uri": "/r.jsonl#L3", "title": "r", "mime": "application/jsonl", "n_chars": 1, "text": "y",
         "metadata": "{}", "ingested_at": NOW, "status": "ok", "error": None},
        {"doc_id": "e1", "uri": "/r.jsonl#L4", "title": "r", "mime": None, "n_chars": None, "text": None,
         "metadata": "{}", "ingested_at": NOW, "status": "error", "error": "bad line"},
        {"doc_id": "d3", "uri": "/c.txt", "title": "c", "mime": "text/plain", "n_chars": 1, "text": "z",
         "metadata": "{}", "ingested_at": NOW, "status": "ok", "error": None},
    ]
    table = pa.Table.from_pylist(rows, schema=DOCUMENTS)
    assert ExistingDocuments(table, ["/b.txt"]).needed == [0]  # found through duplicate_uris
    assert ExistingDocuments(table, ["/r.jsonl"]).needed == [1, 2]  # the file's records and error rows
    assert ExistingDocuments(table, ["/nothing.txt"]).needed == []
    state = DocumentState(table, ["/r.jsonl"], IngestReport())
    assert state.owned("/r.jsonl") == {"/r.jsonl#L3", "/r.jsonl#L4"}
    assert state._doc("d3") is not None and 3 in state.loaded  # read on demand, by content


def test_rows_without_metadata_are_completed_and_unknown_status_passes_through(tmp_path: Path) -> None:
    old = synthetic(3).to_pylist()
    old[1]["metadata"] = None
    old.append({**old[2], "doc_id": "pending-1", "status": "pending"})
    table = pa.Table.from_pylist(old, schema=DOCUMENTS)
    (tmp_path / "x.txt").write_text("Another document.")
    out, _ = build_documents([tmp_path], CFG, existing=table, now=NOW)
    rows = {(r["uri"], r["status"]): r for r in out.to_pylist()}
    filled = json.loads(rows[("/corpus/f00001.txt", "ok")]["metadata"])
    assert filled == {"source_sha": {"/corpus/f00001.txt": None}}
    assert rows[("/corpus/f00002.txt", "pending")]["doc_id"] == "pending-1"
    assert out.num_rows == 5


def test_a_moved_folder_finds_every_document_by_content_past_the_lookup_dict(tmp_path: Path, monkeypatch) -> None:
    """Every file of a moved folder is new by uri and found by content: past
    ``LOOKUPS_BEFORE_DICT`` lookups a dict answers them; the table is the same as the search's."""
    old_root, new_root = tmp_path / "old", tmp_path / "new"
    old_root.mkdir()
    n = ExistingDocuments.LOOKUPS_BEFORE_DICT + 30
    for i in range(n):
        (old_root / f"f{i:03d}.txt").write_text(f"Document number {i} about the river.")
    first, _ = build_documents([old_root], CFG, now=NOW)
    old_root.rename(new_root)
    (new_root / "f000.txt").write_text("Changed: not found by content.")
    moved, report = build_documents([new_root], CFG, existing=first, now=NOW)
    monkeypatch.setattr(ExistingDocuments, "LOOKUPS_BEFORE_DICT", 10**9)  # the search answers every lookup
    searched, report_searched = build_documents([new_root], CFG, existing=first, now=NOW)
    assert moved.equals(searched)
    assert len(report.duplicates) == n - 1 == len(report_searched.duplicates)  # found by content, past the dict's start
    assert report.counts()["added"] == 1
    by_uri = {r["uri"]: r for r in moved.to_pylist()}
    old_rows = {r["doc_id"]: r for r in first.to_pylist()}
    row = by_uri[str(old_root / "f050.txt")]  # the document keeps its row; the new uri is a duplicate
    assert row["text"] == old_rows[row["doc_id"]]["text"]
    assert str(new_root / "f050.txt") in json.loads(row["metadata"])["duplicate_uris"]
