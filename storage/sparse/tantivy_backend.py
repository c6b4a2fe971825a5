"""The embedded sparse backend: a tantivy index in the snapshot's ``sparse/`` folder.

Scores: BM25 (k1=1.2, b=0.75), higher is better; clauses on ``level``/``node_id``/``doc_ids``
score a constant 1 (times their boost), as in Elasticsearch.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa

from arborag.errors import SparseIndexError, SparseNotBuiltError
from arborag.storage.lucene import INTEGER_FIELDS, KEYWORD_FIELDS, MatchAll, Node, Phrase, Term
from arborag.storage.sparse.analysis import TOKENIZER_NAME, analyzer, node_rows, parse_checked, prepare_text, tokens
from arborag.storage.sparse.protocol import ANALYZER_VERSION, SparseHit
from arborag.storage.tables import atomic_write_json

if TYPE_CHECKING:  # pragma: no cover
    import tantivy

__all__ = ["EMBEDDED_FORMAT", "META_FILE", "EmbeddedSparseIndex", "build_embedded"]

EMBEDDED_FORMAT: Final = 1
META_FILE: Final = "arborag_sparse.json"  # written last: an embedded index without it is incomplete


def _tantivy_schema() -> "tantivy.Schema":
    import tantivy

    sb = tantivy.SchemaBuilder()
    sb.add_text_field("node_id", stored=True, tokenizer_name="raw")
    sb.add_integer_field("level", stored=True, indexed=True, fast=True)
    sb.add_text_field("doc_ids", tokenizer_name="raw")
    sb.add_text_field("text", tokenizer_name=TOKENIZER_NAME, index_option="position")
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


def build_embedded(nodes: pa.Table, directory: Path, *, snapshot_id: str) -> dict[str, Any]:
    """Write a tantivy index of ``nodes`` into ``directory`` (replacing an older arborag index)."""
    import tantivy

    started = time.perf_counter()
    _clear_directory(directory)
    index = tantivy.Index(_tantivy_schema(), path=str(directory), reuse=False)
    index.register_tokenizer(TOKENIZER_NAME, analyzer())
    # One indexing thread: one segment (fastest queries); the Python loop is the bottleneck anyway.
    writer = index.writer(heap_size=128_000_000, num_threads=1)
    count = 0
    try:
        for nid, level, text, docs in node_rows(nodes):
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
    atomic_write_json(directory / META_FILE, meta)
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
        try:
            self._index = tantivy.Index.open(str(self.directory))
        except ValueError as exc:
            if "Lockfile" not in str(exc):
                raise
            # A read-only corpus: tantivy cannot create its lock file there. A snapshot's index
            # never changes, so a private temporary copy answers the same queries.
            self._copy = tempfile.TemporaryDirectory(prefix="arborag-sparse-")
            shutil.copytree(self.directory, self._copy.name, dirs_exist_ok=True)
            self._index = tantivy.Index.open(self._copy.name)
        self._index.register_tokenizer(TOKENIZER_NAME, analyzer())
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
        ast = parse_checked(query, lucene)
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
            toks = tokens(node.text)
            if not toks:
                return None
            terms = [Q.term_query(schema, node.field, t, index_option="freq") for t in toks]
            query = terms[0] if len(terms) == 1 else Q.boolean_query([(T.Occur.Should, t) for t in terms])
        elif isinstance(node, Phrase):
            if node.field in KEYWORD_FIELDS or node.field in INTEGER_FIELDS:  # pragma: no cover - parser makes Terms
                return self._compile(Term(node.field, node.text, node.boost))
            toks = tokens(node.text)
            if not toks:
                return None
            if len(toks) == 1:
                query = Q.term_query(schema, node.field, toks[0], index_option="freq")
            else:
                query = Q.phrase_query(schema, node.field, list(toks), slop=node.slop)
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
