"""What every sparse backend gives: :class:`SparseIndex` (search one snapshot) and :class:`SparseHit`.

:func:`search_or_plain` is the fallback of docs/METHODS.md §6.4 over any backend: a malformed Lucene query is
retried as an escaped plain match.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol, runtime_checkable

from arborag.errors import QueryError

__all__ = ["ANALYZER_VERSION", "SparseHit", "SparseIndex", "search_or_plain"]

ANALYZER_VERSION: Final = "arborag-text-v1"  # bump when analysis changes: old indexes must be rebuilt


@dataclass(frozen=True, slots=True)
class SparseHit:
    """One search result. Higher ``score`` is better (BM25)."""

    node_id: str
    score: float
    level: int


@runtime_checkable
class SparseIndex(Protocol):
    """A read-only BM25 index over every node of one snapshot."""

    backend: str

    def search(
        self,
        query: str,
        *,
        k: int = 10,
        levels: Sequence[int] | None = None,
        doc_ids: Sequence[str] | None = None,
        lucene: bool = True,
    ) -> list[SparseHit]:
        """The ``k`` best nodes for ``query``, best first.

        ``lucene=True``: ``query`` is the Lucene subset of docs/METHODS.md §6.4; a malformed query raises
        :class:`~arborag.errors.QueryError` (with ``position``) — retry with
        :func:`arborag.storage.lucene.plain_query` or ``lucene=False``. ``lucene=False``: the query is
        escaped and its words matched as optional plain terms (never raises QueryError for
        syntax). ``levels``/``doc_ids`` filter without changing scores; an empty sequence
        matches nothing.
        """
        ...

    def close(self) -> None: ...


def search_or_plain(
    index: SparseIndex,
    query: str,
    *,
    k: int = 10,
    levels: Sequence[int] | None = None,
    doc_ids: Sequence[str] | None = None,
) -> tuple[list[SparseHit], QueryError | None]:
    """docs/METHODS.md §6.4: run ``query`` as Lucene; when it is malformed, retry it as an escaped plain match.

    Returns the hits and the QueryError that caused the retry (None when the query was fine),
    so the caller can report it (``err.position``, ``err.reason``).
    """
    try:
        return index.search(query, k=k, levels=levels, doc_ids=doc_ids, lucene=True), None
    except QueryError as err:
        return index.search(query, k=k, levels=levels, doc_ids=doc_ids, lucene=False), err
