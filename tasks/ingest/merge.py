"""Merging what a run read into the ``documents`` table (the ingest state).

:class:`DocumentState` holds, as mutable Python state, only the rows this run works on: the rows
the run's files produced before (found with polars by :class:`~.existing.ExistingDocuments`)
and, on demand, a document whose content a file turns out to hold. Every other row stays in
Arrow and goes back into the table unchanged (:func:`~.existing.sorted_documents`). The rules:
ok documents by ``doc_id``, error rows by uri; a document read before is never dropped because
its file fails now; a document whose last uri moves away is ``replaced``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from arborag.hashing import hash_text
from arborag.tasks.ingest.existing import RECORD_URI_PATTERN, ExistingDocuments, sorted_documents
from arborag.tasks.ingest.records import Extracted, IngestFailure, IngestReport

__all__ = ["DocumentState", "error_doc_id"]


def error_doc_id(uri: str) -> str:
    """The doc_id of an error row: stable per uri, so a failing file keeps one row."""
    return hash_text(f"error\x00{uri}")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


_RECORD_URI = re.compile(RECORD_URI_PATTERN.removeprefix("^").removesuffix("$"))


def _file_of(uri: str) -> str:
    """The file a uri belongs to: itself, or the file of a JSONL record uri ``FILE#L<n>``."""
    m = _RECORD_URI.fullmatch(uri)
    return m.group(1) if m else uri


@dataclass(slots=True)
class _Doc:
    row: dict[str, Any]
    meta: dict[str, Any]
    uris: dict[str, str | None]  # uri -> sha of the source bytes it was read from; first = primary
    dirty: bool = False


class DocumentState:
    """The documents table as mutable state for the files of one run."""

    def __init__(self, table: pa.Table, file_uris: Sequence[str], report: IngestReport) -> None:
        self.docs: dict[str, _Doc] = {}
        self.errors: dict[str, dict[str, Any]] = {}
        self.by_uri: dict[str, str] = {}
        self.report = report
        self.by_file: dict[str, set[str]] = {}  # file uri -> uris it produced (ok or error)
        self.existing = ExistingDocuments(table, file_uris)
        self.loaded: set[int] = set()  # rows of the existing table now held here
        self._load(self.existing.needed)

    def _load(self, indices: Sequence[int]) -> None:
        self.loaded.update(indices)
        for row in self.existing.rows(indices):
            try:
                meta = json.loads(row["metadata"]) if row["metadata"] else {}
            except json.JSONDecodeError:
                meta = {}
            if not isinstance(meta, dict):
                meta = {}
            if row["status"] == "error":
                self.errors[row["uri"]] = {**row, "_meta": meta}
                self._track(row["uri"])
                continue
            found = meta.get("source_sha")
            shas: dict[str, str | None] = found if isinstance(found, dict) else {}
            uris: dict[str, str | None] = {row["uri"]: shas.get(row["uri"])}
            for other in meta.get("duplicate_uris") or []:
                uris[other] = shas.get(other)
            self.docs[row["doc_id"]] = _Doc(row, meta, uris)
            for uri in uris:
                self.by_uri[uri] = row["doc_id"]
                self._track(uri)

    def _doc(self, doc_id: str) -> _Doc | None:
        """The document ``doc_id``, read from the existing table the first time it is asked for."""
        if doc_id not in self.docs:
            row = self.existing.row_of_doc(doc_id)
            if row is not None and row not in self.loaded:
                self._load([row])
        return self.docs.get(doc_id)

    # -- queries -----------------------------------------------------------------------------
    def _track(self, uri: str) -> None:
        self.by_file.setdefault(_file_of(uri), set()).add(uri)

    def _untrack(self, uri: str) -> None:
        if uri not in self.by_uri and uri not in self.errors:
            self.by_file.get(_file_of(uri), set()).discard(uri)

    def owned(self, file_uri: str) -> set[str]:
        """Every uri (document or error row) that ``file_uri`` produced before."""
        return set(self.by_file.get(file_uri, ()))

    def unchanged(self, file_uri: str, sha: str, reader: str) -> bool:
        """True when every row this file produced before came from these exact bytes and reader."""
        owned = self.owned(file_uri)
        if not owned:
            return False
        for uri in owned:
            if uri in self.errors:
                meta = self.errors[uri]["_meta"]
                if meta.get("source_sha") != sha or meta.get("reader") != reader:
                    return False
            if uri in self.by_uri:
                doc = self.docs[self.by_uri[uri]]
                if doc.uris.get(uri) != sha or doc.meta.get("reader") != reader:
                    return False
        for uri in sorted(owned):
            if uri in self.by_uri:
                self.report.unchanged.append(self.by_uri[uri])
            if uri in self.errors:
                self.report.failed.append(IngestFailure(uri, self.errors[uri]["error"] or "unknown error"))
        return True

    # -- updates -----------------------------------------------------------------------------
    def detach(self, uri: str) -> None:
        """Forget ``uri``: drop its error row; remove it from its document (dropping the
        document when no uri holds that content any more)."""
        self.errors.pop(uri, None)
        doc_id = self.by_uri.pop(uri, None)
        self._untrack(uri)
        if doc_id is None:
            return
        doc = self.docs[doc_id]
        doc.uris.pop(uri, None)
        doc.dirty = True
        if not doc.uris:
            del self.docs[doc_id]
            self.report.replaced.append(doc_id)

    def fail(self, uri: str, reason: str, *, sha: str | None, reader: str, now: datetime, mime: str | None) -> None:
        """Record (or keep) the error row of ``uri``. Documents read before are not touched."""
        self.report.failed.append(IngestFailure(uri, reason))
        old = self.errors.get(uri)
        meta = {"source_sha": sha, "reader": reader}
        if old is not None and old["error"] == reason and old["_meta"] == meta:
            return
        title = uri.rsplit("/", 1)[-1]
        self.errors[uri] = {
            "doc_id": error_doc_id(uri),
            "uri": uri,
            "title": title,
            "mime": mime,
            "n_chars": None,
            "text": None,
            "metadata": _dumps(meta),
            "ingested_at": old["ingested_at"] if old is not None and old["error"] == reason else now,
            "status": "error",
            "error": reason,
            "_meta": meta,
        }
        self._track(uri)

    def add(self, doc: Extracted, *, sha: str, reader: str, now: datetime) -> None:
        """Record that ``doc.uri`` holds ``doc.text`` now (replacing its error row, if any)."""
        self._add(doc, sha=sha, reader=reader, now=now)
        self._track(doc.uri)

    def _add(self, doc: Extracted, *, sha: str, reader: str, now: datetime) -> None:
        self.errors.pop(doc.uri, None)
        doc_id = hash_text(doc.text)
        current = self.by_uri.get(doc.uri)
        if current == doc_id:
            held = self.docs[doc_id]
            if held.uris.get(doc.uri) != sha or held.meta.get("reader") != reader:
                held.uris[doc.uri] = sha  # same text from other bytes (CRLF -> LF) or a newer reader
                held.meta["reader"] = reader
                held.dirty = True
            self.report.unchanged.append(doc_id)
            return
        if current is not None:
            self.detach(doc.uri)
        same_text = self._doc(doc_id)
        if same_text is not None:
            same_text.uris[doc.uri] = sha
            same_text.dirty = True
            self.by_uri[doc.uri] = doc_id
            self.report.duplicates.append((doc.uri, doc_id))
            return
        meta = {**doc.metadata, "reader": reader}
        if doc.warnings:
            meta["warnings"] = list(doc.warnings)
            for w in doc.warnings:
                self.report.warnings.append(IngestFailure(doc.uri, w))
        row = {
            "doc_id": doc_id,
            "uri": doc.uri,
            "title": doc.title,
            "mime": doc.mime,
            "n_chars": len(doc.text),
            "text": doc.text,
            "metadata": None,
            "ingested_at": now,
            "status": "ok",
            "error": ("warning: " + "; ".join(doc.warnings)) if doc.warnings else None,
        }
        self.docs[doc_id] = _Doc(row, meta, {doc.uri: sha}, dirty=True)
        self.by_uri[doc.uri] = doc_id
        self.report.added.append(doc_id)

    def apply_file(self, file_uri: str, docs: list[Extracted], failures: list[IngestFailure], *, sha: str,
                   reader: str, now: datetime, mime: str) -> None:
        """Replace everything ``file_uri`` produced before by what it produced now."""
        produced = {d.uri for d in docs} | {f.uri for f in failures}
        for uri in sorted(self.owned(file_uri) - produced):
            self.detach(uri)
        for doc in docs:
            self.add(doc, sha=sha, reader=reader, now=now)
        for failure in failures:
            self.fail(failure.uri, failure.reason, sha=sha, reader=reader, now=now, mime=mime)

    # -- output ------------------------------------------------------------------------------
    def to_table(self) -> pa.Table:
        rows: list[dict[str, Any]] = []
        for doc in self.docs.values():
            row = dict(doc.row)
            if doc.dirty or row["metadata"] is None:
                primary = doc.row["uri"] if doc.row["uri"] in doc.uris else min(doc.uris)
                row["uri"] = primary
                meta = dict(doc.meta)
                meta["source_sha"] = {u: doc.uris[u] for u in sorted(doc.uris)}
                others = sorted(u for u in doc.uris if u != primary)
                if others:
                    meta["duplicate_uris"] = others
                else:
                    meta.pop("duplicate_uris", None)
                row["metadata"] = _dumps(meta)
            rows.append(row)
        for err in self.errors.values():
            rows.append({k: v for k, v in err.items() if k != "_meta"})
        return sorted_documents(self.existing, self.loaded, rows)
