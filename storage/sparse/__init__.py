"""The sparse (BM25) index over every node: embedded tantivy (default) or Elasticsearch.

Both backends index the same fields — ``node_id``, ``text``, ``level``, ``doc_ids`` — and answer
the same query language (:mod:`arborag.storage.lucene`, the Lucene subset of docs/METHODS.md §6.4), parsed once
(:mod:`.analysis`) so they give the same answer::

    nodes.parquet ──build_sparse_index──▶ embedded: <snapshot>/sparse/  (tantivy files + meta)
                                          elasticsearch: index  <prefix>-<snapshot_id>
                  ──publish_sparse_index▶ elasticsearch: alias  <prefix>-corpus-<corpus> switched
                                          atomically to the new index (embedded: no-op; the
                                          snapshot directory is published by the manifest)
                  ──open_sparse_index───▶ SparseIndex.search(query, k=, levels=, doc_ids=, lucene=)

Modules: :mod:`.protocol` (SparseIndex, SparseHit, search_or_plain), :mod:`.analysis` (CJK
bigrams, stemming, input validation), :mod:`.tantivy_backend`, :mod:`.es_bodies` (request
bodies and names), :mod:`.es_connection` (client, typed errors), :mod:`.es_backend`.
The errors live in :mod:`arborag.errors` and are re-exported here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from arborag.config import SparseConfig
from arborag.errors import SparseBulkError, SparseIndexError, SparseNotBuiltError
from arborag.storage.sparse.analysis import analyze, prepare_text
from arborag.storage.sparse.es_backend import (
    ES_MARKER_FILE,
    ElasticsearchSparseIndex,
    build_elasticsearch,
    publish_elasticsearch,
)
from arborag.storage.sparse.es_bodies import es_alias_name, es_index_body, es_index_name, es_search_body
from arborag.storage.sparse.protocol import ANALYZER_VERSION, SparseHit, SparseIndex, search_or_plain
from arborag.storage.sparse.tantivy_backend import META_FILE, EmbeddedSparseIndex, build_embedded

__all__ = [
    "ANALYZER_VERSION",
    "ES_MARKER_FILE",
    "META_FILE",
    "ElasticsearchSparseIndex",
    "EmbeddedSparseIndex",
    "SparseBulkError",
    "SparseHit",
    "SparseIndex",
    "SparseIndexError",
    "SparseNotBuiltError",
    "analyze",
    "build_sparse_index",
    "es_alias_name",
    "es_index_body",
    "es_index_name",
    "es_search_body",
    "open_sparse_index",
    "prepare_text",
    "publish_sparse_index",
    "search_or_plain",
]


def build_sparse_index(nodes: pa.Table, directory: Path, cfg: SparseConfig, *, snapshot_id: str) -> dict[str, Any]:
    """Index every node (``node_id``, ``level``, ``text``, ``doc_ids``; optional ``header``).

    embedded: writes a tantivy index into ``directory`` (the snapshot's ``sparse/`` folder).
    elasticsearch: creates index ``{prefix}-{snapshot_id}`` (not yet aliased; an identical
    complete one is reused) and records its name in ``directory/elasticsearch.json``.
    Returns small stats: backend, count, seconds, docs_per_s, and directory or index.
    """
    directory = Path(directory)
    if cfg.backend == "embedded":
        return build_embedded(nodes, directory, snapshot_id=snapshot_id)
    return build_elasticsearch(nodes, directory, cfg, snapshot_id=snapshot_id)


def publish_sparse_index(directory: Path, cfg: SparseConfig, *, snapshot_id: str, corpus_name: str) -> None:
    """Make snapshot ``snapshot_id`` the one readers of ``corpus_name`` search.

    elasticsearch: one atomic ``_aliases`` request moves alias ``{prefix}-corpus-{corpus}`` from
    the old index to the new (readers see the old or the new index, never a half-built one);
    refuses an index that is not completely built. embedded: nothing to do — the snapshot
    folder is published by the corpus manifest.
    """
    if cfg.backend == "embedded":
        return
    publish_elasticsearch(cfg, snapshot_id=snapshot_id, corpus_name=corpus_name)


def open_sparse_index(directory: Path, cfg: SparseConfig, *, corpus_name: str | None = None) -> SparseIndex:
    """Open a built index read-only.

    embedded: the tantivy index in ``directory``. elasticsearch: the alias of ``corpus_name``
    when given (what was last published), else the snapshot's own index recorded in
    ``directory/elasticsearch.json`` (pinned to the same snapshot as the local tables).
    Raises NotBuiltError when there is nothing to open, BackendUnavailable when the server
    cannot be reached.
    """
    directory = Path(directory)
    if cfg.backend == "embedded":
        return EmbeddedSparseIndex(directory)
    if corpus_name is not None:
        target = es_alias_name(cfg, corpus_name)
    else:
        marker = directory / ES_MARKER_FILE
        if not marker.exists():
            raise SparseNotBuiltError(
                str(directory), f"no {ES_MARKER_FILE}: this snapshot was not built with sparse.backend=elasticsearch"
            )
        target = json.loads(marker.read_text(encoding="utf-8"))["index"]
    return ElasticsearchSparseIndex(cfg, target)
