"""The sparse (BM25) index over every node: embedded tantivy (default) or Elasticsearch.

Both backends index the same fields — ``node_id``, ``text``, ``level``, ``doc_ids`` — and answer
the same query language (:mod:`arborag.storage.lucene`, the SPEC §6 Lucene subset), parsed once here so
they give the same answer::

    nodes.parquet ──build_sparse_index──▶ embedded: <snapshot>/sparse/  (tantivy files + meta)
                                          elasticsearch: index  <prefix>-<snapshot_id>
                  ──publish_sparse_index▶ elasticsearch: alias  <prefix>-corpus-<corpus> switched
                                          atomically to the new index (embedded: no-op; the
                                          snapshot directory is published by the manifest)
                  ──open_sparse_index───▶ SparseIndex.search(query, k=, levels=, doc_ids=, lucene=)

Text analysis (identical at index and query time, and in both engines):
  CJK (Han, kana, Hangul) → overlapping character bigrams (a lone character stays a unigram),
  full-width ASCII / half-width katakana folded first; other text → words (letters, digits,
  marks, ``_``, inner ``'`` and ``.``), lowercased, Snowball English (Porter2) stemmed.
  Elasticsearch: ``standard`` tokenizer + ``cjk_width`` + ``lowercase`` + ``cjk_bigram`` +
  ``stemmer(porter2)``; tantivy: the same bigrams made in Python, then a regex tokenizer +
  lowercase + ``stemmer("english")`` (also Porter2). See docs/SPARSE.md.

Scores: BM25 (k1=1.2, b=0.75) in both; higher is better. Elasticsearch omits BM25's constant
(k1+1) factor, so its scores are those of the embedded engine divided by 2.2 — same ranking.
Clauses on ``level``/``node_id``/``doc_ids`` score a constant 1 (times their boost) in both.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import re
import shutil
import time
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from hashlib import sha1
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Final, Protocol, TypeVar, runtime_checkable
from urllib.parse import urlsplit, urlunsplit

import pyarrow as pa

from arborag.config import SparseConfig
from arborag.errors import ArboragError, BackendUnavailable, ConfigError, NotBuiltError, QueryError, SchemaError
from arborag.storage.lucene import (
    DEFAULT_FIELD,
    INTEGER_FIELDS,
    KEYWORD_FIELDS,
    MAX_CLAUSES,
    Bool,
    MatchAll,
    Node,
    Phrase,
    Term,
    escape_query,
    parse_query,
    to_lucene,
)
from arborag.storage.tables import atomic_write_bytes

if TYPE_CHECKING:  # pragma: no cover
    import tantivy
    from elasticsearch import Elasticsearch

__all__ = [
    "ANALYZER_VERSION",
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

ANALYZER_VERSION: Final = "arborag-text-v1"  # bump when analysis changes: old indexes must be rebuilt
EMBEDDED_FORMAT: Final = 1
META_FILE: Final = "arborag_sparse.json"  # written last: an embedded index without it is incomplete
ES_MARKER_FILE: Final = "elasticsearch.json"  # which ES index holds this snapshot (no URL, no secrets)


# --------------------------------------------------------------------------------------------
# Errors and results
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

        ``lucene=True``: ``query`` is the SPEC §6 Lucene subset; a malformed query raises
        :class:`~arborag.errors.QueryError` (with ``position``) — retry with
        :func:`arborag.storage.lucene.plain_query` or ``lucene=False``. ``lucene=False``: the query is
        escaped and its words matched as optional plain terms (never raises QueryError for
        syntax). ``levels``/``doc_ids`` filter without changing scores; an empty sequence
        matches nothing.
        """
        ...

    def close(self) -> None: ...


# --------------------------------------------------------------------------------------------
# Analysis (shared by both engines' query side and the embedded index side)
# --------------------------------------------------------------------------------------------
_CJK_CLASS: Final = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3005-\u3007"  # 々 〆 〇
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana
    "\u3130-\u318f"  # Hangul compatibility Jamo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\U00020000-\U0003134f"  # CJK extensions B-G
)
_WIDE_CLASS: Final = "\uff01-\uff5e\uff65-\uff9f"  # full-width ASCII, half-width katakana
_CJK_RUN = re.compile(f"[{_CJK_CLASS}]+")
_WIDE_RUN = re.compile(f"[{_WIDE_CLASS}]+")
_NEEDS_PREP = re.compile(f"[{_CJK_CLASS}{_WIDE_CLASS}]")
# Words: letters/digits/marks/underscore with inner ' ’ . (don't, U.S.A, 3.14), or grouped numbers.
_WORD_PATTERN: Final = r"\p{N}+(?:[.,]\p{N}+)+|[\p{L}\p{N}\p{M}_]+(?:['’.][\p{L}\p{N}\p{M}_]+)*"
_TOKENIZER_NAME: Final = "arborag_text_v1"
_MAX_TOKEN_CHARS: Final = 255


def _bigrams(match: re.Match[str]) -> str:
    run = match.group()
    if len(run) == 1:
        return f" {run} "
    return " " + " ".join(run[i : i + 2] for i in range(len(run) - 1)) + " "


def prepare_text(text: str) -> str:
    """Fold widths and turn every CJK run into space-separated character bigrams (what
    Elasticsearch's ``cjk_width`` + ``cjk_bigram`` do); other text is returned unchanged.
    """
    if not _NEEDS_PREP.search(text):
        return text
    text = _WIDE_RUN.sub(lambda m: unicodedata.normalize("NFKC", m.group()), text)
    return _CJK_RUN.sub(_bigrams, text)


@cache
def _analyzer() -> "tantivy.TextAnalyzer":
    import tantivy

    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(_WORD_PATTERN))
        .filter(tantivy.Filter.remove_long(_MAX_TOKEN_CHARS))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


@lru_cache(maxsize=16384)
def _tokens(text: str) -> tuple[str, ...]:
    return tuple(_analyzer().analyze(prepare_text(text)))


def analyze(text: str) -> list[str]:
    """The index tokens of ``text``: ``analyze("Running in 北京大学")`` → ``['run', 'in', '北京', '京大', '大学']``."""
    return list(_tokens(text))


def _check_size(query: str, ast: Bool) -> None:
    """Refuse a query that analyses into more than MAX_CLAUSES terms (both backends alike)."""
    total = 0

    def walk(node: Node) -> None:
        nonlocal total
        if isinstance(node, Bool):
            for _, child in node.clauses:
                walk(child)
        elif isinstance(node, (Term, Phrase)):
            total += len(_tokens(node.text)) if node.field == DEFAULT_FIELD else 1

    walk(ast)
    if total > MAX_CLAUSES:
        raise QueryError(query, f"the query analyses into {total} terms, more than {MAX_CLAUSES}; shorten it")


def _parse(query: str, lucene: bool) -> Bool:
    ast = parse_query(query if lucene else escape_query(query))
    _check_size(query, ast)
    return ast


# --------------------------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------------------------
_REQUIRED: Final = ("node_id", "level", "text", "doc_ids")


def _node_rows(nodes: pa.Table) -> Iterator[tuple[str, int, str, list[str]]]:
    """(node_id, level, text, doc_ids) per node. A ``header`` column, when present and non-empty,
    is indexed in front of the text (SPEC §4: the context header is indexed with the chunk).
    """
    missing = [c for c in _REQUIRED if c not in nodes.column_names]
    if missing:
        raise SchemaError("nodes", f"the sparse index needs columns {list(_REQUIRED)}; missing {missing}")
    ids = nodes.column("node_id")
    if ids.null_count:
        raise SchemaError("nodes", f"{ids.null_count} rows have a null node_id")
    if len(set(ids.to_pylist())) != nodes.num_rows:
        raise SchemaError("nodes", "node_id values are not unique; the sparse index keys nodes by node_id")
    columns = list(_REQUIRED) + (["header"] if "header" in nodes.column_names else [])
    for batch in nodes.select(columns).to_batches(max_chunksize=4096):
        cols = batch.to_pydict()
        headers = cols.get("header") or [None] * batch.num_rows
        for nid, level, text, docs, header in zip(cols["node_id"], cols["level"], cols["text"], cols["doc_ids"], headers):
            text = text or ""
            if header:
                text = f"{header}\n\n{text}"
            yield nid, int(level or 0), text, [d for d in (docs or []) if d is not None]


# --------------------------------------------------------------------------------------------
# Embedded backend (tantivy)
# --------------------------------------------------------------------------------------------
def _tantivy_schema() -> "tantivy.Schema":
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_text_field("node_id", stored=True, tokenizer_name="raw")
    sb.add_integer_field("level", stored=True, indexed=True, fast=True)
    sb.add_text_field("doc_ids", tokenizer_name="raw")
    sb.add_text_field("text", tokenizer_name=_TOKENIZER_NAME, index_option="position")
    return sb.build()


def _clear_directory(directory: Path) -> None:
    if directory.exists() and any(directory.iterdir()):
        if not ((directory / META_FILE).exists() or (directory / "meta.json").exists()):
            raise SparseIndexError(
                f"{directory} is not empty and holds no arborag sparse index; refusing to overwrite it "
                "(give build_sparse_index the snapshot's own sparse/ folder)"
            )
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)


def _build_embedded(nodes: pa.Table, directory: Path, *, snapshot_id: str) -> dict[str, Any]:
    import tantivy

    started = time.perf_counter()
    _clear_directory(directory)
    index = tantivy.Index(_tantivy_schema(), path=str(directory), reuse=False)
    index.register_tokenizer(_TOKENIZER_NAME, _analyzer())
    # One indexing thread: one segment (fastest queries); the Python loop is the bottleneck anyway.
    writer = index.writer(heap_size=128_000_000, num_threads=1)
    count = 0
    try:
        for nid, level, text, docs in _node_rows(nodes):
            doc = tantivy.Document()
            doc.add_text("node_id", nid)
            doc.add_integer("level", level)
            for d in docs:
                doc.add_text("doc_ids", d)
            doc.add_text("text", prepare_text(text))
            writer.add_document(doc)
            count += 1
        writer.commit()
        writer.wait_merging_threads()
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    seconds = time.perf_counter() - started
    meta = {
        "format": EMBEDDED_FORMAT,
        "backend": "embedded",
        "snapshot_id": snapshot_id,
        "count": count,
        "analyzer": ANALYZER_VERSION,
        "tantivy": getattr(tantivy, "__version__", "unknown"),
    }
    atomic_write_bytes(directory / META_FILE, json.dumps(meta, indent=2, sort_keys=True).encode())
    return {
        "backend": "embedded",
        "snapshot_id": snapshot_id,
        "count": count,
        "seconds": round(seconds, 3),
        "docs_per_s": round(count / seconds, 1) if seconds > 0 else None,
        "directory": str(directory),
    }


class EmbeddedSparseIndex:
    """A tantivy index in a directory, opened read-only (memory-mapped, no background reload)."""

    backend = "embedded"

    def __init__(self, directory: str | Path) -> None:
        import tantivy

        self.directory = Path(directory)
        meta_path = self.directory / META_FILE
        if not meta_path.exists():
            raise SparseNotBuiltError(
                str(self.directory), "no complete sparse index here; build the corpus (arborag build ... --corpus DIR)"
            )
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format") != EMBEDDED_FORMAT or meta.get("analyzer") != ANALYZER_VERSION:
            raise SparseIndexError(
                f"the sparse index in {self.directory} was built with format {meta.get('format')} / analyzer "
                f"{meta.get('analyzer')!r}; this arborag needs {EMBEDDED_FORMAT} / {ANALYZER_VERSION!r}: rebuild the corpus"
            )
        self.meta = meta
        self._tantivy = tantivy
        self._index = tantivy.Index.open(str(self.directory))
        self._index.register_tokenizer(_TOKENIZER_NAME, _analyzer())
        self._index.config_reader(reload_policy="manual")
        self._schema = self._index.schema
        self._searcher = self._index.searcher()

    def __repr__(self) -> str:
        return f"EmbeddedSparseIndex({str(self.directory)!r}, count={self.meta.get('count')})"

    def __len__(self) -> int:
        return int(self._searcher.num_docs)

    def close(self) -> None:
        """Nothing to release (memory maps close with the object); here for the protocol."""

    def search(
        self,
        query: str,
        *,
        k: int = 10,
        levels: Sequence[int] | None = None,
        doc_ids: Sequence[str] | None = None,
        lucene: bool = True,
    ) -> list[SparseHit]:
        ast = _parse(query, lucene)
        if k <= 0 or (levels is not None and not levels) or (doc_ids is not None and not doc_ids):
            return []
        compiled = self._compile(ast)
        if compiled is None:
            return []
        T = self._tantivy
        filters = []
        if levels is not None:
            filters.append(T.Query.term_set_query(self._schema, "level", [int(x) for x in levels]))
        if doc_ids is not None:
            filters.append(T.Query.term_set_query(self._schema, "doc_ids", [str(x) for x in doc_ids]))
        if filters:
            # Filters must match but add nothing to the score.
            compiled = T.Query.boolean_query(
                [(T.Occur.Must, compiled)] + [(T.Occur.Must, T.Query.const_score_query(f, 0.0)) for f in filters]
            )
        searcher = self._searcher
        hits = []
        for score, address in searcher.search(compiled, int(k), count=False).hits:
            doc = searcher.doc(address)
            hits.append(SparseHit(doc["node_id"][0], float(score), int(doc["level"][0])))
        return hits

    # AST -> tantivy query (None = the clause matches nothing searchable and is dropped, as Lucene does)
    def _compile(self, node: Node) -> "tantivy.Query | None":
        T = self._tantivy
        Q, schema = T.Query, self._schema
        query: tantivy.Query | None
        if isinstance(node, Term) and node.field in INTEGER_FIELDS:
            query = Q.const_score_query(Q.term_query(schema, node.field, int(node.text)), 1.0)
        elif isinstance(node, Term) and node.field in KEYWORD_FIELDS:
            query = Q.const_score_query(Q.term_query(schema, node.field, node.text), 1.0)
        elif isinstance(node, Term):
            tokens = _tokens(node.text)
            if not tokens:
                return None
            terms = [Q.term_query(schema, node.field, t, index_option="freq") for t in tokens]
            query = terms[0] if len(terms) == 1 else Q.boolean_query([(T.Occur.Should, t) for t in terms])
        elif isinstance(node, Phrase):
            if node.field in KEYWORD_FIELDS or node.field in INTEGER_FIELDS:  # pragma: no cover - parser makes Terms
                return self._compile(Term(node.field, node.text, node.boost))
            tokens = _tokens(node.text)
            if not tokens:
                return None
            if len(tokens) == 1:
                query = Q.term_query(schema, node.field, tokens[0], index_option="freq")
            else:
                query = Q.phrase_query(schema, node.field, list(tokens), slop=node.slop)
        elif isinstance(node, MatchAll):
            query = Q.all_query()
        else:
            occurs = {"must": T.Occur.Must, "should": T.Occur.Should, "must_not": T.Occur.MustNot}
            subs = [(occurs[occ], q) for occ, child in node.clauses if (q := self._compile(child)) is not None]
            if not subs:
                return None
            if all(occ == T.Occur.MustNot for occ, _ in subs):
                # Elasticsearch's fixNegativeQueryIfNeeded: a purely negative group = all but those.
                subs.insert(0, (T.Occur.Must, Q.all_query()))
            query = Q.boolean_query(subs)
        if node.boost != 1.0:
            query = Q.boost_query(query, float(node.boost))
        return query


# --------------------------------------------------------------------------------------------
# Elasticsearch backend
# --------------------------------------------------------------------------------------------
ES_SHARDS: Final = 1  # one shard: exact corpus-wide BM25 statistics, same scores as the embedded engine
ES_REPLICAS: Final = 0  # single-node default (green health); raise it for a multi-node cluster
ES_BULK_CHUNK: Final = 500
ES_RETRY_STATUS: Final = (429, 502, 503, 504)
ES_MAX_RETRIES: Final = 3
ES_BACKOFF_S: Final = 1.0  # first bulk retry wait; doubles per retry, capped at 10 s
_ES_NAME_OK = re.compile(r"[a-z0-9][a-z0-9_.-]{0,199}")


def _es_safe(name: str) -> str:
    """``name`` if it is a valid Elasticsearch index/alias name part, else a slug + short hash."""
    if _ES_NAME_OK.fullmatch(name) and name not in (".", ".."):
        return name
    slug = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-_")[:60] or "x"
    return f"{slug}-{sha1(name.encode()).hexdigest()[:8]}"


def es_index_name(cfg: SparseConfig, snapshot_id: str) -> str:
    """The Elasticsearch index holding snapshot ``snapshot_id``: ``{prefix}-{snapshot_id}``."""
    return f"{_es_safe(cfg.es_index_prefix)}-{_es_safe(snapshot_id)}"


def es_alias_name(cfg: SparseConfig, corpus_name: str) -> str:
    """The alias readers search: ``{prefix}-corpus-{corpus_name}`` (made safe for Elasticsearch)."""
    return f"{_es_safe(cfg.es_index_prefix)}-corpus-{_es_safe(corpus_name)}"


def es_index_body(snapshot_id: str) -> dict[str, Any]:
    """Settings and explicit mapping of a snapshot index (BM25, analysers, strict fields)."""
    return {
        "settings": {
            "number_of_shards": ES_SHARDS,
            "number_of_replicas": ES_REPLICAS,
            "refresh_interval": "-1",  # bulk load without refreshes; refreshed once at the end
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
    ast = _parse(query, lucene)
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


def _redact(url: str) -> str:
    """``url`` without user:password (safe for messages and logs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<invalid URL>"
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))


def _setting(value: Any, env: str) -> Any:
    if value is not None:
        return value.get_secret_value() if hasattr(value, "get_secret_value") else value
    return os.environ.get(env) or None


def _compat8_node_class() -> type:
    """A urllib3 node that asks for REST compatibility with 8.x (``compatible-with=8``).

    elasticsearch-py 9.x sends ``compatible-with=9``, which 8.x servers reject (HTTP 400
    ``media_type_header_exception``); 9.x servers accept 8 as well. Used only after such a
    rejection, so a 9.x client works against an 8.x server without pinning
    ``elasticsearch>=8,<9`` (which also works and needs no switch).
    """
    from elastic_transport import Urllib3HttpNode

    class Compat8Node(Urllib3HttpNode):  # type: ignore[misc]
        def perform_request(self, method, target, body=None, headers=None, **kw):  # type: ignore[no-untyped-def]
            if headers is not None:
                headers = headers.copy()
                for name in ("accept", "content-type"):
                    value = headers.get(name)
                    if value and "compatible-with=" in value:
                        headers[name] = re.sub(r"compatible-with=\d+", "compatible-with=8", value)
            return super().perform_request(method, target, body=body, headers=headers, **kw)

    return Compat8Node


def _is_compat_rejection(exc: Exception) -> bool:
    status = getattr(exc, "status_code", None) or getattr(getattr(exc, "meta", None), "status", None)
    text = f"{exc} {getattr(exc, 'body', '')}"
    return status == 400 and ("media_type_header_exception" in text or "compatible-with" in text)


_R = TypeVar("_R")


class _EsConnection:
    """An Elasticsearch client built from SparseConfig/env, with typed errors and no secrets in messages."""

    def __init__(self, cfg: SparseConfig, *, request_timeout: float = 30.0) -> None:
        url = _setting(cfg.es_url, "ARBORAG_ES_URL")
        if not url:
            raise ConfigError(
                "sparse.backend is 'elasticsearch' but no URL is set: export ARBORAG_ES_URL=https://host:9200 "
                "or set sparse.es_url in arborag.yaml (see docs/SPARSE.md)"
            )
        self.url: str = url
        self.safe_url = _redact(url)
        self.cfg = cfg
        self._kwargs: dict[str, Any] = {
            "request_timeout": request_timeout,
            "max_retries": ES_MAX_RETRIES,
            "retry_on_timeout": True,
            "retry_on_status": ES_RETRY_STATUS,
        }
        api_key = _setting(cfg.es_api_key, "ARBORAG_ES_API_KEY")
        username = _setting(cfg.es_username, "ARBORAG_ES_USERNAME")
        password = _setting(cfg.es_password, "ARBORAG_ES_PASSWORD")
        ca_certs = _setting(cfg.es_ca_certs, "ARBORAG_ES_CA_CERTS")
        if api_key:
            self._kwargs["api_key"] = api_key
        elif username:
            self._kwargs["basic_auth"] = (username, password or "")
        if ca_certs:
            self._kwargs["ca_certs"] = ca_certs
        self._compat8 = False
        self._client: Elasticsearch | None = None

    def __repr__(self) -> str:
        return f"_EsConnection({self.safe_url!r})"

    @property
    def client(self) -> "Elasticsearch":
        if self._client is None:
            from elasticsearch import Elasticsearch

            kwargs = dict(self._kwargs)
            if self._compat8:
                kwargs["node_class"] = _compat8_node_class()
            try:
                self._client = Elasticsearch(self.url, **kwargs)
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"invalid Elasticsearch settings for {self.safe_url}: {exc}") from None
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def unavailable(self, hint: str) -> BackendUnavailable:
        return BackendUnavailable("elasticsearch", self.safe_url, hint)

    def call(self, fn: Callable[["Elasticsearch"], _R]) -> _R:
        """Run ``fn(client)``, mapping transport/auth failures to BackendUnavailable."""
        import elastic_transport
        import elasticsearch

        try:
            return fn(self.client)
        except elasticsearch.BadRequestError as exc:
            if _is_compat_rejection(exc) and not self._compat8:
                # An 8.x server and a 9.x client: switch to compatible-with=8 and retry once.
                self.close()
                self._compat8 = True
                return self.call(fn)
            raise
        except elasticsearch.AuthenticationException:
            raise self.unavailable(
                "authentication failed (HTTP 401): check sparse.es_api_key, or es_username/es_password "
                "(ARBORAG_ES_API_KEY, or ARBORAG_ES_USERNAME/ARBORAG_ES_PASSWORD)"
            ) from None
        except elasticsearch.AuthorizationException:
            raise self.unavailable(
                "permission denied (HTTP 403): the user or API key needs 'read' on the corpus alias to search and "
                f"'create_index', 'write', 'manage' on '{_es_safe(self.cfg.es_index_prefix)}-*' to build and publish"
            ) from None
        except elasticsearch.UnsupportedProductError:
            raise self.unavailable("the server at this URL does not identify as Elasticsearch; check ARBORAG_ES_URL") from None
        except elastic_transport.TlsError as exc:
            raise self.unavailable(
                f"TLS failed ({type(exc).__name__}): for a self-signed cluster set sparse.es_ca_certs / ARBORAG_ES_CA_CERTS "
                "to its CA (deploy: certs/ca/ca.crt), and use https://"
            ) from exc
        except (elastic_transport.ConnectionError, elastic_transport.ConnectionTimeout) as exc:
            raise self.unavailable(
                f"{type(exc).__name__}: is the server running and reachable from here (docker compose -f "
                "deploy/docker-compose.yml up -d)? Check ARBORAG_ES_URL / sparse.es_url (http vs https, host, port 9200)"
            ) from exc
        except elastic_transport.TransportError as exc:
            raise self.unavailable(f"{type(exc).__name__}: {exc}") from exc


def _es_reason(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            causes = err.get("root_cause") or []
            first = causes[0] if causes and isinstance(causes[0], dict) else err
            reason = first.get("reason") or err.get("reason") or err.get("type")
            caused = err.get("caused_by")
            if isinstance(caused, dict) and caused.get("reason"):
                reason = f"{reason} ({caused['reason']})"
            return str(reason)
    return str(exc)


def _es_meta(conn: _EsConnection, name: str) -> dict[str, Any] | None:
    """The arborag ``_meta`` of index ``name``; None when the index does not exist."""
    import elasticsearch

    try:
        resp = conn.call(lambda c: c.indices.get_mapping(index=name))
    except elasticsearch.NotFoundError:
        return None
    body = dict(resp)
    for _, value in body.items():
        return ((value.get("mappings") or {}).get("_meta") or {}).get("arborag") or {}
    return None


def _bulk_actions(index: str, rows: Iterable[tuple[str, int, str, list[str]]]) -> Iterator[dict[str, Any]]:
    for nid, level, text, docs in rows:
        yield {
            "_op_type": "index",
            "_index": index,
            "_id": nid,
            "_source": {"node_id": nid, "level": level, "doc_ids": docs, "text": text},
        }


def _build_elasticsearch(nodes: pa.Table, directory: Path, cfg: SparseConfig, *, snapshot_id: str) -> dict[str, Any]:
    import elasticsearch
    from elasticsearch import helpers

    started = time.perf_counter()
    conn = _EsConnection(cfg, request_timeout=120.0)
    name = es_index_name(cfg, snapshot_id)
    total = nodes.num_rows
    try:
        rows = list(_node_rows(nodes))  # validates the table before anything is created
        meta = _es_meta(conn, name)
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
            body = es_index_body(snapshot_id)
            try:
                conn.call(lambda c: c.indices.create(index=name, settings=body["settings"], mappings=body["mappings"]))
            except elasticsearch.BadRequestError as exc:
                raise SparseIndexError(f"Elasticsearch refused to create index {name!r}: {_es_reason(exc)}") from exc
            failures: list[tuple[str, int, str]] = []

            options: dict[str, Any] = {
                "chunk_size": ES_BULK_CHUNK,
                "max_chunk_bytes": 20 * 1024 * 1024,
                "max_retries": ES_MAX_RETRIES,
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
                raise SparseIndexError(f"bulk indexing into {name!r} failed: {_es_reason(exc)}") from exc
            if failures:
                raise SparseBulkError(name, failures, total)
            conn.call(lambda c: c.indices.put_settings(index=name, settings={"index": {"refresh_interval": None}}))
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
    atomic_write_bytes(directory / ES_MARKER_FILE, json.dumps(marker, indent=2, sort_keys=True).encode())
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
        import elasticsearch

        self._conn = _EsConnection(cfg)
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
        import elasticsearch

        body = es_search_body(query, k=k, levels=levels, doc_ids=doc_ids, lucene=lucene)
        if body is None:
            return []
        try:
            resp = self._conn.call(lambda c: c.search(index=self.target, **body))
        except elasticsearch.NotFoundError:
            raise self._missing() from None
        except elasticsearch.BadRequestError as exc:
            raise QueryError(query, f"Elasticsearch rejected the query: {_es_reason(exc)}") from None
        hits = []
        for h in resp["hits"]["hits"]:
            src = h.get("_source") or {}
            score = h.get("_score")
            hits.append(SparseHit(str(src.get("node_id", h.get("_id"))), float(score if score is not None else math.nan), int(src.get("level", 0))))
        return hits


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------
def search_or_plain(
    index: SparseIndex,
    query: str,
    *,
    k: int = 10,
    levels: Sequence[int] | None = None,
    doc_ids: Sequence[str] | None = None,
) -> tuple[list[SparseHit], QueryError | None]:
    """SPEC §6: run ``query`` as Lucene; when it is malformed, retry it as an escaped plain match.

    Returns the hits and the QueryError that caused the retry (None when the query was fine),
    so the caller can report it (``err.position``, ``err.reason``).
    """
    try:
        return index.search(query, k=k, levels=levels, doc_ids=doc_ids, lucene=True), None
    except QueryError as err:
        return index.search(query, k=k, levels=levels, doc_ids=doc_ids, lucene=False), err

def build_sparse_index(nodes: pa.Table, directory: Path, cfg: SparseConfig, *, snapshot_id: str) -> dict[str, Any]:
    """Index every node (``node_id``, ``level``, ``text``, ``doc_ids``; optional ``header``).

    embedded: writes a tantivy index into ``directory`` (the snapshot's ``sparse/`` folder).
    elasticsearch: creates index ``{prefix}-{snapshot_id}`` (not yet aliased; an identical
    complete one is reused) and records its name in ``directory/elasticsearch.json``.
    Returns small stats: backend, count, seconds, docs_per_s, and directory or index.
    """
    directory = Path(directory)
    if cfg.backend == "embedded":
        return _build_embedded(nodes, directory, snapshot_id=snapshot_id)
    return _build_elasticsearch(nodes, directory, cfg, snapshot_id=snapshot_id)


def publish_sparse_index(directory: Path, cfg: SparseConfig, *, snapshot_id: str, corpus_name: str) -> None:
    """Make snapshot ``snapshot_id`` the one readers of ``corpus_name`` search.

    elasticsearch: one atomic ``_aliases`` request moves alias ``{prefix}-corpus-{corpus}`` from
    the old index to the new (readers see the old or the new index, never a half-built one);
    refuses an index that is not completely built. embedded: nothing to do — the snapshot
    folder is published by the corpus manifest.
    """
    if cfg.backend == "embedded":
        return
    import elasticsearch

    conn = _EsConnection(cfg)
    name = es_index_name(cfg, snapshot_id)
    alias = es_alias_name(cfg, corpus_name)
    try:
        meta = _es_meta(conn, name)
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
            raise SparseIndexError(f"switching alias {alias!r} to {name!r} failed: {_es_reason(exc)}") from exc
    finally:
        conn.close()


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
