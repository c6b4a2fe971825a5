"""What ingestion reads and reports: source files, extracted documents, failures, the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["MIME_TYPES", "READER_VERSION", "Extracted", "IngestFailure", "IngestReport", "SourceFile"]

#: Bumped whenever a reader's output can change for the same bytes; part of the per-file skip key.
READER_VERSION = "readers-v3"

MIME_TYPES: dict[str, str] = {
    ".txt": "text/plain",
    ".text": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".pdf": "application/pdf",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".csv": "text/csv",
    ".jsonl": "application/jsonl",
    ".ndjson": "application/jsonl",
}

_MAX_REPORTED_FAILURES = 100  # failures listed in IngestReport.as_dict(); the count is exact


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One file to read: where it is and the uri it is recorded under (absolute path)."""

    path: Path
    uri: str


@dataclass(frozen=True, slots=True)
class Extracted:
    """A document read from a source: normalized text plus what we know about it."""

    uri: str
    text: str
    title: str
    mime: str
    metadata: dict[str, Any]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class IngestFailure:
    """A source (file or JSONL record) that could not be read, and why."""

    uri: str
    reason: str


@dataclass(slots=True)
class IngestReport:
    """What one :func:`build_documents` call did. Counts are of document uris, not bytes.

    ``added``: new doc_ids; ``unchanged``: doc_ids read again with the same content;
    ``duplicates``: (uri, doc_id) whose content was already a document under another uri;
    ``replaced``: doc_ids dropped because no source holds their content any more (the file
    changed); ``failed``: sources recorded with status=error; ``warnings``: documents read with
    a warning (e.g. invalid bytes replaced).
    """

    files: int = 0
    added: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    duplicates: list[tuple[str, str]] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    failed: list[IngestFailure] = field(default_factory=list)
    warnings: list[IngestFailure] = field(default_factory=list)
    skipped_unchanged_files: int = 0

    @property
    def ok(self) -> bool:
        """True when no source failed."""
        return not self.failed

    def counts(self) -> dict[str, int]:
        return {
            "files": self.files,
            "added": len(self.added),
            "unchanged": len(self.unchanged),
            "duplicates": len(self.duplicates),
            "replaced": len(self.replaced),
            "failed": len(self.failed),
            "warnings": len(self.warnings),
            "skipped_unchanged_files": self.skipped_unchanged_files,
        }

    def as_dict(self) -> dict[str, Any]:
        """Small JSON-able summary: the counts plus the first failures and warnings with reasons."""
        return {
            **self.counts(),
            "failures": [{"uri": f.uri, "reason": f.reason} for f in self.failed[:_MAX_REPORTED_FAILURES]],
            "warning_list": [{"uri": w.uri, "reason": w.reason} for w in self.warnings[:_MAX_REPORTED_FAILURES]],
        }
