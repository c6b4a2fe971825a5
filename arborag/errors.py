"""Typed errors of arborag.

    ArboragError                     base: every error arborag raises on purpose
    ├── ConfigError                  a config file or ARBORAG_* variable is invalid
    ├── IngestError                  a source could not be read (carries .uri and .reason)
    ├── SchemaError                  a table does not have the schema it must have (.table)
    ├── SegmentationError            a segmenter got parameters it cannot honour
    ├── BackendUnavailable           a service is unreachable (.backend, .url)
    ├── LLMError                     an LLM call failed after retries (.model, .reason)
    │   └── EmbedError               an embeddings request failed or its reply is unusable
    ├── NotBuiltError                a corpus has no published snapshot yet (.corpus)
    │   └── SparseNotBuiltError      no sparse index where one was expected
    ├── QueryError                   a query cannot be run (.query, .position, .reason)
    ├── CorpusLockedError            another writer holds the corpus lock (.corpus, .owner, .lock_file)
    ├── SnapshotNotFound             no retained snapshot matches a reference (.ref, .available)
    └── SparseIndexError             a sparse index cannot be built, published or opened
        └── SparseBulkError          Elasticsearch rejected some nodes (.index, .failures, .total)

Every message says what happened *and* what to do about it.
"""

from __future__ import annotations

__all__ = [
    "ArboragError",
    "BackendUnavailable",
    "ConfigError",
    "EmbedError",
    "IngestError",
    "LLMError",
    "NotBuiltError",
    "QueryError",
    "SchemaError",
    "SegmentationError",
]


class ArboragError(Exception):
    """Base class of every error arborag raises on purpose."""


class ConfigError(ArboragError):
    """The configuration (arborag.yaml or ARBORAG_* variables) is invalid."""


class IngestError(ArboragError):
    """A source could not be read. The run records it and goes on."""

    def __init__(self, uri: str, reason: str) -> None:
        self.uri = uri
        self.reason = reason
        super().__init__(f"{uri}: {reason}")


class SchemaError(ArboragError):
    """A table does not match the schema arborag requires for it."""

    def __init__(self, table: str, message: str) -> None:
        self.table = table
        super().__init__(f"table {table!r}: {message}")


class SegmentationError(ArboragError):
    """A segmenter was given parameters it cannot honour (e.g. step > window)."""


class BackendUnavailable(ArboragError):
    """A service (Elasticsearch, an LLM endpoint, a Prefect server) cannot be reached."""

    def __init__(self, backend: str, url: str | None, hint: str) -> None:
        self.backend = backend
        self.url = url
        self.hint = hint
        where = f" at {url}" if url else ""
        super().__init__(f"{backend} is not reachable{where}: {hint}")


class LLMError(ArboragError):
    """An LLM call failed after its retries."""

    def __init__(self, model: str, reason: str) -> None:
        self.model = model
        self.reason = reason
        super().__init__(f"LLM call to {model!r} failed: {reason}")


class EmbedError(LLMError):
    """An embeddings request to an OpenAI-compatible server failed after its retries, or its reply
    cannot be used (empty, wrong count, wrong dimension). Same transport as :class:`LLMError`."""

    def __init__(self, model: str, reason: str) -> None:
        self.model = model
        self.reason = reason
        ArboragError.__init__(self, f"embedding request to model {model!r} failed: {reason}")


class NotBuiltError(ArboragError):
    """A corpus has no published snapshot to query."""

    def __init__(self, corpus: str) -> None:
        self.corpus = corpus
        super().__init__(
            f"{corpus} has no published index yet; run `arborag build SOURCE... --corpus {corpus}` first"
        )


class QueryError(ArboragError):
    """A query cannot be run: malformed syntax, unknown field, bad option.

    ``position`` is the 0-based character offset of the problem when it is known.
    """

    def __init__(self, query: str, reason: str, position: int | None = None) -> None:
        self.query = query
        self.reason = reason
        self.position = position
        at = f" at position {position}" if position is not None else ""
        super().__init__(f"cannot run query {query!r}{at}: {reason}")


# --------------------------------------------------------------------------------------------
# Sparse-index errors (moved here from arborag.storage.sparse; names and bases unchanged)
# --------------------------------------------------------------------------------------------
def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class SparseIndexError(ArboragError):
    """A sparse index cannot be built, published or opened (incompatible, incomplete, in the way)."""


class SparseBulkError(SparseIndexError):
    """Some nodes were rejected by Elasticsearch. ``failures`` holds ``(node_id, status, reason)``
    for every rejected node; the half-built index is left unaliased for inspection.
    """

    def __init__(self, index: str, failures: list[tuple[str, int, str]], total: int) -> None:
        self.index = index
        self.failures = failures
        self.total = total
        shown = "; ".join(f"{_clip(nid)!r}: {status} {_clip(reason, 200)}" for nid, status, reason in failures[:5])
        more = f" (and {len(failures) - 5} more)" if len(failures) > 5 else ""
        super().__init__(
            f"Elasticsearch rejected {len(failures)} of {total} nodes while building {index!r}: {shown}{more}. "
            "The index was not published; fix the cause and build again (it is rebuilt from scratch)."
        )


class SparseNotBuiltError(NotBuiltError):
    """There is no sparse index where one was expected (a NotBuiltError with a precise message)."""

    def __init__(self, where: str, hint: str) -> None:
        self.corpus = where
        ArboragError.__init__(self, f"{where}: {hint}")


__all__ += ["SparseBulkError", "SparseIndexError", "SparseNotBuiltError"]


class CorpusLockedError(ArboragError):
    """Another writer (ingest, build, update, publish) holds the corpus lock (see arborag.storage.lock)."""

    def __init__(self, corpus: str, owner: str, lock_file: str, waited: float | None = None) -> None:
        self.corpus = corpus
        self.owner = owner
        self.lock_file = lock_file
        self.waited = waited
        how = f"still locked after waiting {waited:.0f} s" if waited is not None else "is locked"
        super().__init__(
            f"{corpus} {how} by another writer: {owner}. Run again without --no-wait to wait for it, "
            f"or, if that process is gone on another machine, delete {lock_file} after checking."
        )


__all__ += ["CorpusLockedError"]


class SnapshotNotFound(ArboragError):
    """No retained snapshot of the corpus matches ``ref`` (an id, a unique prefix, "published" or a time).

    ``available`` lists the retained snapshot ids (newest first); the message names a few and
    says how to see them all.
    """

    def __init__(self, corpus: str, ref: str, available: list[str], reason: str | None = None) -> None:
        self.corpus = corpus
        self.ref = ref
        self.available = list(available)
        shown = ", ".join(self.available[:8]) + (f" (and {len(self.available) - 8} more)" if len(self.available) > 8 else "")
        why = reason or "no retained snapshot has that id or id prefix"
        have = f"retained: {shown}" if self.available else "the corpus has no retained snapshot (build it first)"
        super().__init__(
            f"{corpus}: snapshot {ref!r} not found: {why}; {have}. "
            f"List them with `arborag snapshots list --corpus {corpus}`."
        )


__all__ += ["SnapshotNotFound"]
