"""Text analysis shared by both engines, at index and query time, and input validation.

CJK (Han, kana, Hangul; the ranges of :data:`arborag.text.CJK_RANGES`) → overlapping character bigrams (a lone character stays a unigram),
full-width ASCII / half-width katakana folded first; other text → words (letters, digits,
marks, ``_``, inner ``'`` and ``.``), lowercased, Snowball English (Porter2) stemmed.
Elasticsearch does the same with ``standard`` + ``cjk_width`` + ``lowercase`` + ``cjk_bigram`` +
``stemmer(porter2)`` (:mod:`.es_bodies`); tantivy gets the bigrams made here, then a regex
tokenizer + lowercase + ``stemmer("english")`` (also Porter2). See docs/SPARSE.md.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from functools import cache, lru_cache
from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.compute as pc

from arborag.errors import QueryError, SchemaError
from arborag.storage.lucene import DEFAULT_FIELD, MAX_CLAUSES, Bool, Node, Phrase, Term, escape_query, parse_query
from arborag.text import CJK_RANGES, CJK_RUN, WIDE_RANGES

if TYPE_CHECKING:  # pragma: no cover
    import tantivy

__all__ = ["TOKENIZER_NAME", "analyze", "analyzer", "node_rows", "parse_checked", "prepare_text", "tokens"]

_WIDE_RUN = re.compile(f"[{WIDE_RANGES}]+")
_NEEDS_PREP = re.compile(f"[{CJK_RANGES}{WIDE_RANGES}]")
# Words: letters/digits/marks/underscore with inner ' ’ . (don't, U.S.A, 3.14), or grouped numbers.
_WORD_PATTERN: Final = r"\p{N}+(?:[.,]\p{N}+)+|[\p{L}\p{N}\p{M}_]+(?:['’.][\p{L}\p{N}\p{M}_]+)*"
TOKENIZER_NAME: Final = "arborag_text_v1"
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
    return CJK_RUN.sub(_bigrams, text)


@cache
def analyzer() -> "tantivy.TextAnalyzer":
    """The tantivy analyser of the ``text`` field (applied after :func:`prepare_text`)."""
    import tantivy

    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.regex(_WORD_PATTERN))
        .filter(tantivy.Filter.remove_long(_MAX_TOKEN_CHARS))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


@lru_cache(maxsize=16384)
def tokens(text: str) -> tuple[str, ...]:
    """The index tokens of ``text`` (cached; :func:`analyze` returns them as a list)."""
    return tuple(analyzer().analyze(prepare_text(text)))


def analyze(text: str) -> list[str]:
    """The index tokens of ``text``: ``analyze("Running in 北京大学")`` → ``['run', 'in', '北京', '京大', '大学']``."""
    return list(tokens(text))


def _check_size(query: str, ast: Bool) -> None:
    """Refuse a query that analyses into more than MAX_CLAUSES terms (both backends alike)."""
    total = 0

    def walk(node: Node) -> None:
        nonlocal total
        if isinstance(node, Bool):
            for _, child in node.clauses:
                walk(child)
        elif isinstance(node, (Term, Phrase)):
            total += len(tokens(node.text)) if node.field == DEFAULT_FIELD else 1

    walk(ast)
    if total > MAX_CLAUSES:
        raise QueryError(query, f"the query analyses into {total} terms, more than {MAX_CLAUSES}; shorten it")


def parse_checked(query: str, lucene: bool) -> Bool:
    """Parse ``query`` (Lucene subset, or escaped plain words) and refuse oversized queries."""
    ast = parse_query(query if lucene else escape_query(query))
    _check_size(query, ast)
    return ast


_REQUIRED: Final = ("node_id", "level", "text", "doc_ids")


def node_rows(nodes: pa.Table) -> Iterator[tuple[str, int, str, list[str]]]:
    """(node_id, level, text, doc_ids) per node. A ``header`` column, when present and non-empty,
    is indexed in front of the text (docs/METHODS.md §4: the context header is indexed with the chunk).
    """
    missing = [c for c in _REQUIRED if c not in nodes.column_names]
    if missing:
        raise SchemaError("nodes", f"the sparse index needs columns {list(_REQUIRED)}; missing {missing}")
    ids = nodes.column("node_id")
    if ids.null_count:
        raise SchemaError("nodes", f"{ids.null_count} rows have a null node_id")
    if pc.count_distinct(ids).as_py() != nodes.num_rows:
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
