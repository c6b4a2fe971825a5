"""Elasticsearch request bodies and names: pure functions, no client, testable without a server.

Scores: BM25 (k1=1.2, b=0.75) as in the embedded engine; Elasticsearch omits BM25's constant
(k1+1) factor, so its scores are the embedded engine's divided by 2.2 — same ranking.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from hashlib import sha1
from typing import Any, Final

from arborag.config import SparseConfig
from arborag.storage.lucene import DEFAULT_FIELD, to_lucene
from arborag.storage.sparse.analysis import parse_checked
from arborag.storage.sparse.protocol import ANALYZER_VERSION

__all__ = ["es_alias_name", "es_index_body", "es_index_name", "es_safe", "es_search_body"]

ES_SHARDS: Final = 1  # one shard: exact corpus-wide BM25 statistics, same scores as the embedded engine
ES_REPLICAS: Final = 0  # single-node default (green health); raise it for a multi-node cluster
_ES_NAME_OK = re.compile(r"[a-z0-9][a-z0-9_.-]{0,199}")


def es_safe(name: str) -> str:
    """``name`` if it is a valid Elasticsearch index/alias name part, else a slug + short hash."""
    if _ES_NAME_OK.fullmatch(name) and name not in (".", ".."):
        return name
    slug = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-_")[:60] or "x"
    return f"{slug}-{sha1(name.encode()).hexdigest()[:8]}"


def es_index_name(cfg: SparseConfig, snapshot_id: str) -> str:
    """The Elasticsearch index holding snapshot ``snapshot_id``: ``{prefix}-{snapshot_id}``."""
    return f"{es_safe(cfg.es_index_prefix)}-{es_safe(snapshot_id)}"


def es_alias_name(cfg: SparseConfig, corpus_name: str) -> str:
    """The alias readers search: ``{prefix}-corpus-{corpus_name}`` (made safe for Elasticsearch)."""
    return f"{es_safe(cfg.es_index_prefix)}-corpus-{es_safe(corpus_name)}"


def es_index_body(snapshot_id: str, cfg: SparseConfig | None = None) -> dict[str, Any]:
    """Settings and explicit mapping of a snapshot index (BM25, analysers, strict fields).

    ``cfg`` sets the shards and the bulk-time refresh interval (``es_shards``,
    ``es_bulk_refresh_interval``); replicas are 0 while the index loads (raised to
    ``es_replicas`` afterwards by the build: copying finished segments beats indexing twice).
    """
    return {
        "settings": {
            "number_of_shards": cfg.es_shards if cfg is not None else ES_SHARDS,
            "number_of_replicas": ES_REPLICAS,
            # bulk load without refreshes; refreshed once at the end
            "refresh_interval": cfg.es_bulk_refresh_interval if cfg is not None else "-1",
            "analysis": {
                "filter": {"arborag_porter2": {"type": "stemmer", "language": "porter2"}},
                "analyzer": {
                    # The default search field: the same tokens as the embedded engine.
                    "arborag_text": {
                        "type": "custom",
                        "tokenizer": "standard",
                        "filter": ["cjk_width", "lowercase", "cjk_bigram", "arborag_porter2"],
                    }
                },
            },
        },
        "mappings": {
            "dynamic": "strict",
            "_meta": {"arborag": {"snapshot_id": snapshot_id, "analyzer": ANALYZER_VERSION, "complete": False}},
            "properties": {
                "node_id": {"type": "keyword", "similarity": "boolean"},
                "level": {"type": "integer"},
                "doc_ids": {"type": "keyword", "similarity": "boolean"},
                "text": {
                    "type": "text",
                    "analyzer": "arborag_text",
                    "similarity": "BM25",
                    # Per-language views with the built-in analysers, for Elasticsearch-side use
                    # (Kibana, ad-hoc queries); arborag's own queries search `text`.
                    "fields": {
                        "en": {"type": "text", "analyzer": "english", "similarity": "BM25"},
                        "cjk": {"type": "text", "analyzer": "cjk", "similarity": "BM25"},
                    },
                },
            },
        },
    }


def es_search_body(
    query: str,
    *,
    k: int = 10,
    levels: Sequence[int] | None = None,
    doc_ids: Sequence[str] | None = None,
    lucene: bool = True,
) -> dict[str, Any] | None:
    """The body of the ``_search`` request for ``query`` (``None``: nothing can match, no request).

    The query string is :func:`arborag.storage.lucene.to_lucene` of the parsed query — explicit and
    escaped — so Elasticsearch answers what the embedded engine answers.
    """
    ast = parse_checked(query, lucene)
    rendered = to_lucene(ast)
    if k <= 0 or not rendered or (levels is not None and not levels) or (doc_ids is not None and not doc_ids):
        return None
    filters: list[dict[str, Any]] = []
    if levels is not None:
        filters.append({"terms": {"level": [int(x) for x in levels]}})
    if doc_ids is not None:
        filters.append({"terms": {"doc_ids": [str(x) for x in doc_ids]}})
    query_string = {
        "query": rendered,
        "default_field": DEFAULT_FIELD,
        "default_operator": "or",
        "allow_leading_wildcard": False,
        "analyze_wildcard": False,
        "auto_generate_synonyms_phrase_query": False,
        "lenient": False,
    }
    return {
        "query": {"bool": {"must": [{"query_string": query_string}], "filter": filters}},
        "size": int(k),
        "_source": ["node_id", "level"],
        "track_total_hits": False,
    }
