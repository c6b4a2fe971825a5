"""Read-only query API over a published arborag snapshot.

    >>> from arborag.query import open_index
    >>> index = open_index("/tmp/corpus")
    >>> hits = index.search("How did Cinderella reach her happy ending?", mode="collapsed", budget=2000)

It reads only finished artifacts (the manifest, nodes/edges Parquet, the vectors — from the
snapshot's ``nodes.arrow`` without importing lancedb, or its LanceDB table — and the sparse
index), never starts Prefect and never writes. ``open_index(..., light=True)`` embeds the
query without sentence-transformers (a one-off process: ``arborag query``). The embedder and sparse backend are the
ones the snapshot recorded (:func:`snapshot_embed_config`, :func:`snapshot_sparse_config`).
"""

from arborag.query.index import Hit, Index, Mode, open_index, snapshot_embed_config, snapshot_sparse_config

__all__ = ["Hit", "Index", "Mode", "open_index", "snapshot_embed_config", "snapshot_sparse_config"]
