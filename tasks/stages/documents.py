"""The ``documents`` stage: find source files, read them robustly, and keep one row per document.

The pure entry point is :func:`build_documents` (contract in docs/ARCHITECTURE.md). It walks the
sources, reads every file, and merges what it read into the existing ``documents`` table:

- ``doc_id`` is the content hash of the *normalized* text (:func:`normalize_text`: whitespace
  runs become one space, line breaks are kept), so identical content is one document wherever it
  was found; the other places are listed in ``metadata.duplicate_uris``.
- A file that cannot be read becomes a row with ``status = "error"`` and a reason in ``error``,
  keyed by its uri; the run goes on. A document read before is never dropped because its file
  fails now (both rows stay until the file is fixed).
- A file whose bytes and reader settings did not change since it was read is not parsed again,
  so re-running an ingest is cheap and changes nothing.
- Decoding never fails on a text file: invalid bytes become U+FFFD, and the row says so
  (``status = "ok"``, ``error = "warning: ..."``, ``metadata.replaced_chars``).

Formats and the libraries that read them: ``.txt``/``.md`` (charset-normalizer for the encoding),
``.html`` (BeautifulSoup, stdlib parser), ``.pdf`` (pypdf), ``.docx`` (python-docx), ``.csv``
(stdlib ``csv``), ``.jsonl`` (one document per record). See docs/INGESTION.md.

The stage is split along its seams in :mod:`arborag.tasks.ingest`: ``decode`` (normalization
and decoding), ``discover`` (sources to files), ``readers`` with ``formats_text`` and
``formats_doc`` (one reader per format family), ``merge`` and ``existing`` (the ingest state,
indexed with polars). This module is the stage's public API.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from arborag.config import IngestConfig
from arborag.errors import IngestError
from arborag.hashing import hash_bytes, hash_text
from arborag.progress import progress_bar
from arborag.storage.schemas import DOCUMENTS
from arborag.tasks.stage_context import StageContext, StageSummary, table_fingerprint
from arborag.tasks.ingest.decode import DecodedText, decode_bytes, looks_binary, normalize_text
from arborag.tasks.ingest.discover import discover_sources
from arborag.tasks.ingest.merge import DocumentState, error_doc_id
from arborag.tasks.ingest.readers import load_bytes_stat, read_source, reader_key
from arborag.tasks.ingest.records import MIME_TYPES, READER_VERSION, Extracted, IngestFailure, IngestReport, SourceFile

__all__ = [
    "MIME_TYPES",
    "READER_VERSION",
    "DecodedText",
    "DocumentsSummary",
    "Extracted",
    "IngestFailure",
    "IngestReport",
    "SourceFile",
    "build_documents",
    "cached_ingest_summary",
    "decode_bytes",
    "discover_sources",
    "error_doc_id",
    "hash_text",
    "looks_binary",
    "normalize_text",
    "read_source",
    "run_documents",
]


def build_documents(
    sources: Sequence[str | Path],
    cfg: IngestConfig,
    *,
    existing: pa.Table | None = None,
    progress: Callable[[int], None] | None = None,
    now: datetime | None = None,
    discovered: bool = False,
    stats: list[tuple[str, os.stat_result, int]] | None = None,
) -> tuple[pa.Table, IngestReport]:
    """Read ``sources`` and merge them into ``existing``; return the full new documents table.

    Existing rows are kept. A file whose bytes did not change since it was last read is not
    parsed again. A file that now fails keeps its earlier documents and gains an error row; a
    file that now reads replaces its error row; a file whose content changed replaces the
    document it held (unless another uri still holds that content). ``progress(1)`` is called
    per file. ``now`` (UTC) stamps new rows; defaults to the current time. ``discovered``: the
    sources are already the files :func:`discover_sources` found (absolute uris, confined): they
    are read as given, not walked and resolved again (an update names thousands of files).
    ``stats``: gets ``(uri, os.stat, ns before the stat)`` of every file whose bytes were read
    (:mod:`arborag.tasks.changes.source_stats` records them for the next update).

    Raises:
        IngestError: a source does not exist (see :func:`discover_sources`); nothing is read.
    """
    files = [SourceFile(Path(os.fspath(s)), os.fspath(s)) for s in sources] if discovered else discover_sources(sources, cfg)
    stamp = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    report = IngestReport(files=len(files))
    table = existing if existing is not None else DOCUMENTS.empty_table()
    state = DocumentState(table, [src.uri for src in files], report)
    reader = reader_key(cfg)
    for src in files:
        mime = MIME_TYPES.get(src.path.suffix.lower(), "text/plain")
        try:
            before = time.time_ns()
            raw, st = load_bytes_stat(src, cfg)
            if stats is not None:
                stats.append((src.uri, st, before))
        except IngestError as exc:
            state.fail(src.uri, exc.reason, sha=None, reader=reader, now=stamp, mime=mime)
        else:
            sha = hash_bytes(raw)
            if state.unchanged(src.uri, sha, reader):
                report.skipped_unchanged_files += 1
            else:
                try:
                    docs, failures = read_source(src, cfg, raw)
                except IngestError as exc:
                    state.fail(src.uri, exc.reason, sha=sha, reader=reader, now=stamp, mime=mime)
                else:
                    state.apply_file(src.uri, docs, failures, sha=sha, reader=reader, now=stamp, mime=mime)
        if progress is not None:
            progress(1)
    return state.to_table(), report


# ---------------------------------------------------------------------------------------------
# Stage runner (the ``ingest`` stage of the flows)
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DocumentsSummary(StageSummary):
    """What an ingest run did: the :class:`IngestReport`'s counts (of document uris) and first
    failures and warnings, the table's totals, whether it was written and its fingerprint.
    The run record (``runs.counts`` key ``ingest``) holds all of it but the failure lists."""

    files: int
    added: int
    unchanged: int
    duplicates: int
    replaced: int
    failed: int
    warnings: int
    skipped_unchanged_files: int
    failures: list[dict[str, str]]  # the first failures: uri, reason
    warning_list: list[dict[str, str]]  # the first warnings: uri, reason
    table: str
    documents: int  # ok rows
    errors: int  # error rows
    written: bool
    fingerprint: str

    def report(self) -> dict[str, Any]:
        return self.fields()

    def counts(self) -> dict[str, Any]:
        return {k: v for k, v in self.fields().items() if k not in ("failures", "warning_list")}


def run_documents(ctx: StageContext, files: list[str]) -> DocumentsSummary:
    """Read ``files`` (already discovered) into the corpus's documents table; a :class:`DocumentsSummary`.

    The summary holds the report's counts and first failures, table totals (``documents``: ok
    rows, ``errors``: error rows), whether the table was written and its ``fingerprint``. The
    table is written only when it changed (a no-op run leaves the file untouched).
    """
    from arborag.tasks.changes import source_stats

    corpus = ctx.corpus
    existing = corpus.read("documents")
    stats: list[tuple[str, os.stat_result, int]] = []
    with progress_bar("ingest", len(files), enabled=ctx.progress) as advance:
        table, report = build_documents(files, ctx.config.ingest, existing=existing, progress=advance, stats=stats)
    written = ctx.write_if_changed("documents", table, existing)
    fingerprint = table_fingerprint(corpus.table_path("documents"))
    if not corpus.remote:  # what the next update need not read again (tasks/changes/source_stats.py)
        source_stats.write_record(corpus.cache_dir, source_stats.stat_rows(stats), documents_hash=fingerprint, reader=reader_key(ctx.config.ingest))
    status = pl.from_arrow(table.select(["status"]))["status"]  # type: ignore[index]
    return DocumentsSummary(
        **report.as_dict(),
        table=str(corpus.table_path("documents")),
        documents=int((status == "ok").sum()),
        errors=int((status == "error").sum()),
        written=written,
        fingerprint=fingerprint,
    )


def cached_ingest_summary(summary: Mapping[str, Any]) -> Mapping[str, Any]:
    """What a cache hit of the ingest stage means in counts: nothing added; every document read before is unchanged."""
    seen = summary.get("added", 0) + summary.get("unchanged", 0) + summary.get("duplicates", 0)
    if isinstance(summary, DocumentsSummary):
        return replace(summary, added=0, duplicates=0, replaced=0, unchanged=seen, written=False)
    return {**summary, "added": 0, "duplicates": 0, "replaced": 0, "unchanged": seen, "written": False}
