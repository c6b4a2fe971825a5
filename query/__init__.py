"""Read-only query API over a published arborag snapshot.

    >>> from arborag.query import open_index
    >>> index = open_index("/tmp/corpus")
    >>> hits = index.search("How did Cinderella reach her happy ending?", mode="collapsed", budget=2000)

It reads only finished artifacts (the manifest, nodes/edges Parquet, the vectors — from the
snapshot's ``nodes.arrow`` without importing lancedb, or its LanceDB table — and the sparse
index), never starts Prefect and never writes. ``open_index(..., light=True)`` embeds the
query without sentence-transformers (a one-off process: ``arborag query``). The embedder and sparse backend are the
ones the snapshot recorded (:func:`snapshot_embed_config`, :func:`snapshot_sparse_config`).
The retrieval modes are registered in :mod:`arborag.query.modes`.

The names below load :mod:`arborag.query.index` on first use, so reading the mode registry
(``arborag --help``, the server's request model) imports no index code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from arborag.query.index import Hit, Index, Mode, open_index, snapshot_embed_config, snapshot_sparse_config

__all__ = ["Hit", "Index", "Mode", "open_index", "snapshot_embed_config", "snapshot_sparse_config"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from arborag.query import index

        return getattr(index, name)
    raise AttributeError(f"module 'arborag.query' has no attribute {name!r}")
