"""The Elasticsearch sparse backend: build a snapshot index, publish it by alias, search it.

    build:   index ``{prefix}-{snapshot_id}`` (bulk, retried; an identical complete one is reused),
             its name recorded in ``<snapshot>/sparse/elasticsearch.json``
    publish: one atomic ``_aliases`` request moves ``{prefix}-corpus-{corpus}`` to the new index
    search:  the normalised Lucene string of :func:`.es_bodies.es_search_body`
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa

from arborag.config import SparseConfig
from arborag.errors import QueryError, SparseBulkError, SparseIndexError, SparseNotBuiltError
from arborag.extras import extra
from arborag.storage.sparse.analysis import node_rows
from arborag.storage.sparse.es_bodies import es_alias_name, es_index_body, es_index_name, es_search_body
from arborag.storage.sparse.es_connection import ES_MAX_RETRIES, ES_RETRY_STATUS, EsConnection, es_meta, es_reason
from arborag.storage.sparse.protocol import ANALYZER_VERSION, SparseHit
from arborag.storage.tables import atomic_write_json

if TYPE_CHECKING:  # pragma: no cover
    from elasticsearch import Elasticsearch

__all__ = ["ES_MARKER_FILE", "ElasticsearchSparseIndex", "build_elasticsearch", "publish_elasticsearch"]

ES_MARKER_FILE: Final = "elasticsearch.json"  # which ES index holds this snapshot (no URL, no secrets)
ES_BULK_CHUNK: Final = 500  # the default of SparseConfig.es_bulk_docs
ES_BACKOFF_S: Final = 1.0  # first bulk retry wait; doubles per retry, capped at 10 s


def _bulk_actions(index: str, rows: Iterable[tuple[str, int, str, list[str]]]) -> Iterator[dict[str, Any]]:
    for nid, level, text, docs in rows:
        yield {
            "_op_type": "index",
            "_index": index,
            "_id": nid,
            "_source": {"node_id": nid, "level": level, "doc_ids": docs, "text": text},
        }


def build_elasticsearch(nodes: pa.Table, directory: Path, cfg: SparseConfig, *, snapshot_id: str) -> dict[str, Any]:
    """Create and fill index ``{prefix}-{snapshot_id}`` (not yet aliased) and record it in ``directory``."""
    with extra("es", "the Elasticsearch sparse backend (sparse.backend: elasticsearch)"):
        import elasticsearch
        from elasticsearch import helpers

    started = time.perf_counter()
    conn = EsConnection(cfg, request_timeout=120.0)
    name = es_index_name(cfg, snapshot_id)
    total = nodes.num_rows
    try:
        rows = list(node_rows(nodes))  # validates the table before anything is created
        meta = es_meta(conn, name)
        reused = False
        if meta is not None:
            if meta.get("complete") and meta.get("count") == total and meta.get("analyzer") == ANALYZER_VERSION:
                reused = True  # identical snapshot built before (snapshot ids are content hashes)
            else:
                aliases = conn.call(lambda c: c.indices.get_alias(index=name))
                if any(v.get("aliases") for v in dict(aliases).values()):
                    raise SparseIndexError(
                        f"index {name!r} is published (aliased) but not a complete build of this snapshot; "
                        "refusing to delete it — build under a new snapshot id"
                    )
                conn.call(lambda c: c.indices.delete(index=name))
        if not reused:
            body = es_index_body(snapshot_id, cfg)
            try:
                conn.call(lambda c: c.indices.create(index=name, settings=body["settings"], mappings=body["mappings"]))
            except elasticsearch.BadRequestError as exc:
                raise SparseIndexError(f"Elasticsearch refused to create index {name!r}: {es_reason(exc)}") from exc
            failures: list[tuple[str, int, str]] = []

            options: dict[str, Any] = {
                "chunk_size": cfg.es_bulk_docs,
                "max_chunk_bytes": int(cfg.es_bulk_mb * 1024 * 1024),
                "max_retries": cfg.es_bulk_retries if cfg.es_bulk_retries is not None else ES_MAX_RETRIES,
                "initial_backoff": ES_BACKOFF_S,
                "max_backoff": 10,
                "raise_on_error": False,  # collect every rejected node, report them all
                "raise_on_exception": True,  # transport failures surface (BackendUnavailable)
                "yield_ok": False,
            }
            if "retry_on_status" in inspect.signature(helpers.streaming_bulk).parameters:
                options["retry_on_status"] = ES_RETRY_STATUS  # older 8.x clients retry 429 only

            def run_bulk(client: Elasticsearch) -> None:
                for ok, item in helpers.streaming_bulk(client, _bulk_actions(name, rows), **options):
                    if not ok:
                        info = next(iter(item.values()))
                        err = info.get("error")
                        reason = err.get("reason") or err.get("type") if isinstance(err, dict) else str(err)
                        failures.append((str(info.get("_id")), int(info.get("status", 0)), str(reason)))

            try:
                conn.call(run_bulk)
            except elasticsearch.ApiError as exc:
                raise SparseIndexError(f"bulk indexing into {name!r} failed: {es_reason(exc)}") from exc
            if failures:
                raise SparseBulkError(name, failures, total)
            after = {"refresh_interval": cfg.es_refresh_interval, "number_of_replicas": cfg.es_replicas}
            conn.call(lambda c: c.indices.put_settings(index=name, settings={"index": after}))
            conn.call(lambda c: c.indices.refresh(index=name))
            count = int(conn.call(lambda c: c.count(index=name))["count"])
            if count != total:
                raise SparseIndexError(f"index {name!r} holds {count} documents after the build, expected {total}")
            done = {"snapshot_id": snapshot_id, "analyzer": ANALYZER_VERSION, "complete": True, "count": total}
            conn.call(lambda c: c.indices.put_mapping(index=name, meta={"arborag": done}))
    finally:
        conn.close()
    directory.mkdir(parents=True, exist_ok=True)
    marker = {"backend": "elasticsearch", "index": name, "snapshot_id": snapshot_id, "count": total}
    atomic_write_json(directory / ES_MARKER_FILE, marker)
    seconds = time.perf_counter() - started
    return {
        "backend": "elasticsearch",
        "snapshot_id": snapshot_id,
        "count": total,
        "seconds": round(seconds, 3),
        "docs_per_s": round(total / seconds, 1) if seconds > 0 and not reused else None,
        "index": name,
        "reused": reused,
    }


class ElasticsearchSparseIndex:
    """Searches one Elasticsearch index or alias with the normalised query string."""

    backend = "elasticsearch"

    def __init__(self, cfg: SparseConfig, target: str) -> None:
        with extra("es", "the Elasticsearch sparse backend (sparse.backend: elasticsearch)"):
            import elasticsearch

        self._conn = EsConnection(cfg)
        self.target = target
        try:
            self._conn.call(lambda c: c.count(index=target))
        except elasticsearch.NotFoundError:
            self._conn.close()
            raise self._missing() from None
        except BaseException:
            self._conn.close()
            raise

    def __repr__(self) -> str:
        return f"ElasticsearchSparseIndex({self._conn.safe_url!r}, {self.target!r})"

    def _missing(self) -> SparseNotBuiltError:
        return SparseNotBuiltError(
            f"Elasticsearch index or alias {self.target!r} at {self._conn.safe_url}",
            "it does not exist; build and publish the corpus with sparse.backend=elasticsearch first",
        )

    def close(self) -> None:
        self._conn.close()

    def search(
        self,
        query: str,
        *,
        k: int = 10,
        levels: Sequence[int] | None = None,
        doc_ids: Sequence[str] | None = None,
        lucene: bool = True,
    ) -> list[SparseHit]:
        with extra("es", "the Elasticsearch sparse backend (sparse.backend: elasticsearch)"):
            import elasticsearch

        body = es_search_body(query, k=k, levels=levels, doc_ids=doc_ids, lucene=lucene)
        if body is None:
            return []
        try:
            resp = self._conn.call(lambda c: c.search(index=self.target, **body))
        except elasticsearch.NotFoundError:
            raise self._missing() from None
        except elasticsearch.BadRequestError as exc:
            raise QueryError(query, f"Elasticsearch rejected the query: {es_reason(exc)}") from None
        hits = []
        for h in resp["hits"]["hits"]:
            src = h.get("_source") or {}
            score = h.get("_score")
            hits.append(SparseHit(str(src.get("node_id", h.get("_id"))), float(score if score is not None else math.nan), int(src.get("level", 0))))
        return hits


def publish_elasticsearch(cfg: SparseConfig, *, snapshot_id: str, corpus_name: str) -> None:
    """Move alias ``{prefix}-corpus-{corpus}`` to the snapshot's index in one atomic request
    (readers see the old or the new index, never a half-built one); refuses an incomplete index.
    """
    with extra("es", "the Elasticsearch sparse backend (sparse.backend: elasticsearch)"):
        import elasticsearch

    conn = EsConnection(cfg)
    name = es_index_name(cfg, snapshot_id)
    alias = es_alias_name(cfg, corpus_name)
    try:
        meta = es_meta(conn, name)
        if meta is None:
            raise SparseIndexError(f"cannot publish: index {name!r} does not exist at {conn.safe_url}; build it first")
        if not meta.get("complete"):
            raise SparseIndexError(f"cannot publish: index {name!r} is not completely built; build it again")
        try:
            current = dict(conn.call(lambda c: c.indices.get_alias(name=alias)))
        except elasticsearch.NotFoundError:
            current = {}
        actions: list[dict[str, Any]] = [{"remove": {"index": old, "alias": alias}} for old in current if old != name]
        actions.append({"add": {"index": name, "alias": alias}})
        try:
            conn.call(lambda c: c.indices.update_aliases(actions=actions))
        except elasticsearch.ApiError as exc:
            raise SparseIndexError(f"switching alias {alias!r} to {name!r} failed: {es_reason(exc)}") from exc
    finally:
        conn.close()
