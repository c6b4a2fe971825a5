"""Document routing: a prior on the leaves of the documents a question clearly points to.

A question over a few long filings names its document ("Ulta Beauty's stock repurchases",
"the number of Best Buy stores"); ranked leaf by leaf, a passage of another filing that shares
the topic words ("repurchases", "stores") takes budget from the named one. This stage scores
every *document* against the question and, when one or a few of them stand out, lifts their
leaves:

1. **Document score** (:func:`document_bm25`): BM25 (``k1`` = 1.2, ``b`` = 0.75) of the
   question's terms against each document as one bag of words — its title and the text of its
   leaves — with the analyser of the sparse index (:func:`arborag.storage.sparse.analysis.tokens`).
   A term that occurs in every document scores little (its IDF is the floor,
   ``log(1 + 0.5 / (N + 0.5))``), so the names that tell the documents apart decide.
2. **Margin rule** (:func:`leading_documents`): the leading ``m`` documents (``m`` ≤
   ``query.route_max_docs``) are routed to when the ``m``-th best score is at least
   ``query.route_ratio`` × the next one (the smallest such ``m``); otherwise nothing is. A
   question that spreads evenly over many documents (a HotpotQA bridge question over two of
   ~1,000 paragraphs names both, and they then stand out together) routes to at most those.
3. **Spent names** (:func:`document_names`, :func:`without_names`): the question's terms that
   occur in the routed documents only have done their work; inside those documents they match
   the name on every page (cover, certifications, signatures) rather than the passage asked
   about, so BM25 over the leaves runs again without the words made of them (a Lucene query is
   kept as written; a question made of names only keeps them all).
4. **Prior** (:func:`route`): the routed documents' leaves gain ``query.route_weight`` on the
   fused score (z-score units for the default fusion). With no routed document the ranking is
   exactly the one before.

The document terms are counted once per snapshot and kept with the index. An index searched
through its ANN index (``vectors.bounded``: ``query.ann_min_rows`` rows or more) is not routed:
counting every leaf's terms at query time does not fit its bounded memory.
"""

from __future__ import annotations

import math
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from arborag.query.index import Index

__all__ = ["DocumentTerms", "document_bm25", "document_names", "document_terms", "leading_documents", "route", "route_boost", "without_names"]

K1 = 1.2
B = 0.75


@dataclass(frozen=True)
class DocumentTerms:
    """Per-document term counts over a snapshot's documents (codes 0..n_docs-1).

    ``doc_of_row``: the document code of every vector row (-1: a summary or a row without a
    document); ``lengths``: tokens per document; ``postings``: term -> (document codes,
    term frequencies)."""

    doc_of_row: np.ndarray
    n_docs: int
    lengths: np.ndarray
    postings: dict[str, tuple[np.ndarray, np.ndarray]]


def document_terms(docs: Sequence[Iterable[Sequence[str]]], doc_of_row: np.ndarray) -> DocumentTerms:
    """:class:`DocumentTerms` of ``docs`` (per document code, its token lists: title, leaves)."""
    by_term: dict[str, tuple[list[int], list[int]]] = {}
    lengths = np.zeros(len(docs), dtype=np.float64)
    for code, parts in enumerate(docs):
        counts: Counter[str] = Counter()
        for toks in parts:
            counts.update(toks)
        lengths[code] = sum(counts.values())
        for term, tf in counts.items():
            codes, tfs = by_term.setdefault(term, ([], []))
            codes.append(code)
            tfs.append(tf)
    postings = {t: (np.asarray(c, dtype=np.int64), np.asarray(f, dtype=np.float64)) for t, (c, f) in by_term.items()}
    return DocumentTerms(doc_of_row=np.asarray(doc_of_row, dtype=np.int64), n_docs=len(docs), lengths=lengths, postings=postings)


def document_bm25(terms: DocumentTerms, query_tokens: Iterable[str], *, k1: float = K1, b: float = B) -> np.ndarray:
    """BM25 of the distinct ``query_tokens`` against every document (aligned with the codes)."""
    scores = np.zeros(terms.n_docs, dtype=np.float64)
    if terms.n_docs == 0:
        return scores
    avg = float(terms.lengths.mean()) or 1.0
    norm = k1 * (1.0 - b + b * terms.lengths / avg)
    for term in dict.fromkeys(query_tokens):
        hit = terms.postings.get(term)
        if hit is None:
            continue
        codes, tf = hit
        idf = math.log(1.0 + (terms.n_docs - codes.size + 0.5) / (codes.size + 0.5))
        scores[codes] += idf * tf * (k1 + 1.0) / (tf + norm[codes])
    return scores


def leading_documents(scores: np.ndarray, *, ratio: float, max_docs: int) -> np.ndarray:
    """Codes of the documents that stand out: the smallest ``m`` ≤ ``max_docs`` whose ``m``-th
    best score is positive and at least ``ratio`` × the ``m+1``-th; none when no such ``m``
    (or fewer than two documents: nothing to tell apart)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size < 2 or max_docs <= 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((np.arange(s.size), -s))
    for m in range(1, min(max_docs, s.size - 1) + 1):
        here, below = s[order[m - 1]], s[order[m]]
        if here > 0 and here >= ratio * below:
            return np.sort(order[:m]).astype(np.int64)
    return np.zeros(0, dtype=np.int64)


def route_boost(doc_of_row: np.ndarray, rows: np.ndarray, routed: np.ndarray, weight: float) -> np.ndarray:
    """Per candidate row: ``weight`` when its document is routed to, else 0."""
    rows = np.asarray(rows, dtype=np.int64)
    if routed.size == 0 or weight == 0.0 or rows.size == 0:
        return np.zeros(rows.size, dtype=np.float64)
    codes = doc_of_row[rows]
    return np.where(np.isin(codes, routed) & (codes >= 0), float(weight), 0.0)


_TERMS: "weakref.WeakKeyDictionary[Any, DocumentTerms]" = weakref.WeakKeyDictionary()


def index_terms(index: Index) -> DocumentTerms:
    """The :class:`DocumentTerms` of ``index``'s snapshot (leaves grouped by their first
    document, each document's title counted once), built on first use and kept with the index."""
    got = _TERMS.get(index)
    if got is None:
        from arborag.storage.sparse.analysis import tokens

        v = index.vectors
        titles = index.doc_titles()
        codes: dict[str, int] = {}
        doc_of_row = np.full(len(v), -1, dtype=np.int64)
        parts: list[list[Sequence[str]]] = []
        for r in np.flatnonzero(v.levels == 0):
            ids = v.doc_ids[int(r)]
            if not ids:
                continue
            code = codes.get(ids[0])
            if code is None:
                code = codes[ids[0]] = len(parts)
                parts.append([tokens(titles.get(ids[0], ""))])
            doc_of_row[r] = code
            parts[code].append(tokens(v.texts[int(r)]))
        got = document_terms(parts, doc_of_row)
        _TERMS[index] = got
    return got


def document_names(terms: DocumentTerms, query_tokens: Iterable[str], routed: np.ndarray) -> frozenset[str]:
    """The question's terms that occur in routed documents only: the names that routed it.
    They have done their work; inside the routed documents they match the name on every page
    (cover, certifications, signatures) rather than the passage asked about."""
    if routed.size == 0:
        return frozenset()
    inside = set(routed.tolist())
    out = set()
    for term in query_tokens:
        hit = terms.postings.get(term)
        if hit is not None and set(hit[0].tolist()) <= inside:
            out.add(term)
    return frozenset(out)


def without_names(text: str, names: frozenset[str], analyse: Callable[[str], Sequence[str]]) -> str:
    """``text`` without its words whose every index token is one of ``names`` ("Ulta Beauty's
    stock" -> "stock" when ``ulta`` and ``beauti`` are names); a word with no token is kept."""
    if not names:
        return text
    return " ".join(w for w in text.split() if not (toks := analyse(w)) or not set(toks) <= names)


def route(index: Index, text: str, fused: Callable[[str], tuple[np.ndarray, np.ndarray]], *, lucene: bool = False,
          scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """The first-hop ranking ``(rows, scores)`` with the routing of ``query.route_*``.

    ``fused(sparse_text)`` is the mode's fused ranking (dense on the question's vector, BM25 on
    ``sparse_text``). When documents stand out, BM25 runs again without the names that routed
    the question (:func:`document_names`; a Lucene query is kept as written) and the routed
    documents' leaves gain ``route_weight`` × ``scale`` (1 on z-score/min-max scores,
    ``1 / (rrf_k + 1)`` on RRF sums). Unchanged when routing is off (``route_weight`` 0), the
    index is bounded, or no document stands out."""
    rows, scores = fused(text)
    q = index.config.query
    if q.route_weight == 0.0 or rows.size == 0 or index.vectors.bounded:
        return rows, scores
    from arborag.storage.sparse.analysis import tokens

    terms = index_terms(index)
    query_tokens = tokens(text)
    routed = leading_documents(document_bm25(terms, query_tokens), ratio=q.route_ratio, max_docs=q.route_max_docs)
    if routed.size == 0:
        return rows, scores
    if not lucene:
        rest = without_names(text, document_names(terms, query_tokens, routed), tokens)
        if rest != text and tokens(rest):
            rows, scores = fused(rest)
    return rows, scores + route_boost(terms.doc_of_row, rows, routed, q.route_weight * scale)
