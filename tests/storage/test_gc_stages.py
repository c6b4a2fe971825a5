"""gc's view of the stages and of scratch copies: the Prefect records of every stage keyed by a
build key (``links`` included) are kept or swept by that key, and the scratch copies of dry runs and half-written catalogs whose
process died are removed."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa

from arborag.storage.corpus import SCRATCH_PREFIX, Corpus
from arborag.storage.schemas import DOCUMENTS
from arborag.storage.snapshots.sweeps import GcReport, _sweep_prefect, _sweep_scratch
from arborag.storage.tables import write_table


def test_records_of_every_build_keyed_stage_are_kept_and_swept_by_build_key(tmp_path: Path) -> None:
    """gc knows no stage names: the record name says it is keyed by a build key. Every stage the
    pipelines declare with a build key (links included) names its record so; a stage keyed by its
    inputs (ingest) does not, and its fresh record stays."""
    from arborag.flows.pipelines import INGEST, PIPELINES, TREE_PIPELINE, UPDATE_PIPELINE
    from arborag.flows.stage import _record_key

    declared = {s for pipeline in (*PIPELINES.values(), TREE_PIPELINE, UPDATE_PIPELINE) for s in pipeline if s.keyed_by_build}
    assert "links" in {s.name for s in declared}
    corpus = Corpus(tmp_path / "c").ensure()
    results = corpus.prefect_dir / "results"
    results.mkdir(parents=True)
    kept = {_record_key(s, "KEPT") for s in declared}
    for name in (*kept, *(_record_key(s, "GONE") for s in declared), _record_key(INGEST, "a1")):
        (results / name).write_text("{}")
    report = GcReport(dry_run=False)
    _sweep_prefect(corpus, report, dry_run=False, keys={"KEPT"}, cutoff=datetime(2000, 1, 1, tzinfo=timezone.utc), keep_newest=10)
    assert sorted(p.name for p in results.iterdir()) == sorted({*kept, "ingest-a1"})
    assert report.parts["prefect"]["items"] == len(declared)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_scratch_copies_and_catalog_writes_of_dead_processes_are_swept(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "c").ensure()
    dead = corpus.root / f"{SCRATCH_PREFIX}{_dead_pid()}-abcd1234"
    live = corpus.root / f"{SCRATCH_PREFIX}{os.getpid()}-abcd1234"
    for folder in (dead, live):
        (folder / "tables").mkdir(parents=True)
        (folder / "tables" / "documents.parquet").write_bytes(b"x" * 100)
    torn = corpus.root / f".published.duckdb.{_dead_pid()}-abcd1234.tmp"  # a catalog write killed midway
    writing = corpus.root / f".published.duckdb.{os.getpid()}-abcd1234.tmp"
    torn.write_bytes(b"y" * 10)
    writing.write_bytes(b"y" * 10)
    report = GcReport(dry_run=True)
    _sweep_scratch(corpus, report, dry_run=True)
    assert dead.is_dir() and torn.is_file() and report.parts["scratch"] == {"items": 2, "bytes": 110}
    _sweep_scratch(corpus, GcReport(dry_run=False), dry_run=False)
    assert not dead.exists() and live.is_dir() and not torn.exists() and writing.is_file()


def test_scratch_copy_changes_nothing_of_the_corpus(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "c").ensure()
    row = {"doc_id": "d1", "uri": "file:///x.txt", "title": "x", "mime": "text/plain", "n_chars": 3, "text": "abc",
           "metadata": "{}", "status": "ok"}
    write_table("documents", pa.Table.from_pylist([row], schema=DOCUMENTS), corpus.table_path("documents"))
    (corpus.cache_dir / "llm").mkdir()
    (corpus.cache_dir / "record.parquet").write_bytes(b"before")
    before = corpus.table_path("documents").read_bytes()
    with corpus.scratch_copy() as scratch:
        assert scratch.read("documents").num_rows == 1
        scratch.write("documents", pa.Table.from_pylist([row, {**row, "doc_id": "d2"}], schema=DOCUMENTS))
        (scratch.cache_dir / "record.parquet").write_bytes(b"after")  # written in place: a copy, not a link
        (scratch.cache_dir / "llm" / "reply.json").write_text("{}")  # the LLM cache is shared
        folder = scratch.root
    assert corpus.table_path("documents").read_bytes() == before and corpus.read("documents").num_rows == 1
    assert (corpus.cache_dir / "record.parquet").read_bytes() == b"before"
    assert (corpus.cache_dir / "llm" / "reply.json").is_file()
    assert not folder.exists()
