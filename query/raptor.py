"""The four modes of the RAPTOR index itself: ``collapsed``, ``traversal``, ``sparse``, ``hybrid``.

Each is a ``search``-shaped function registered in :mod:`arborag.query.modes` and driven
through :class:`~arborag.query.index.Index`'s public API, like every plug-in mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from arborag.errors import QueryError
from arborag.query.hits import top_order

if TYPE_CHECKING:  # pragma: no cover
    from arborag.query.hits import Hit
    from arborag.query.index import Index

__all__ = ["collapsed", "hybrid", "sparse", "traversal"]


def _vector(index: Index, text: str, vector: np.ndarray | None) -> np.ndarray:
    return index.embed_queries([text])[0] if vector is None else vector


def collapsed(index: Index, text: str, *, budget: int | None, k: int, levels: Sequence[int] | None,
              doc_ids: Sequence[str] | None, vector: np.ndarray | None, lucene: bool = False) -> list[Hit]:
    """Every node of every allowed level scored by cosine, added best-first until ``budget``
    tokens are full (a node that would overflow is skipped, later smaller ones may still fit)."""
    rows, scores = index.dense_scores(_vector(index, text, vector), levels=levels, doc_ids=doc_ids)
    return index.fill(rows, scores, budget, k)


def traversal(index: Index, text: str, *, budget: int | None, k: int, levels: Sequence[int] | None,
              doc_ids: Sequence[str] | None, vector: np.ndarray | None, lucene: bool = False) -> list[Hit]:
    """Top-``k`` of every tree's root, then top-``k`` among their children, level by level to the
    leaves; the selected set best-first, capped at ``budget`` tokens."""
    q = np.asarray(_vector(index, text, vector), dtype=np.float32)
    v = index.vectors
    by_level = v.mask(levels=levels)
    by_doc = v.mask(doc_ids=doc_ids)
    # start from every tree's root (nodes with no parent within the allowed levels), not only
    # from the global top level: per-document trees of short documents end lower
    frontier = index.roots(by_level)
    if by_doc is not None:
        frontier = frontier[by_doc[frontier]]
    selected: dict[int, float] = {}
    seen = np.zeros(len(v), dtype=bool)
    while frontier.size:
        seen[frontier] = True
        s = v.matrix[frontier] @ q
        pick = top_order(frontier, s, min(k, frontier.size))
        for i in pick:
            row = int(frontier[i])
            if by_level is None or by_level[row]:
                selected[row] = float(s[i])
        frontier = index.children_of(frontier[pick])
        frontier = frontier[~seen[frontier]]
        if by_doc is not None:
            frontier = frontier[by_doc[frontier]]
    ranked = sorted(selected.items(), key=lambda rs: (-rs[1], rs[0]))
    if budget is None:
        return [index.hit(r, s) for r, s in ranked]
    rows = np.fromiter((r for r, _ in ranked), dtype=np.int64, count=len(ranked))
    scores = np.fromiter((s for _, s in ranked), dtype=np.float64, count=len(ranked))
    return index.fill(rows, scores, budget, k, ordered=True)


def sparse(index: Index, text: str, *, budget: int | None, k: int, levels: Sequence[int] | None,
           doc_ids: Sequence[str] | None, vector: np.ndarray | None = None, lucene: bool = False) -> list[Hit]:
    """BM25 best-first until the budget; ``lucene=True`` runs ``text`` as Lucene syntax."""
    # ask the sparse index for more matches only while the budget is open and a node could
    # still fit: every matching node is considered, best first (a first window of 64 usually
    # closes the budget; otherwise one more call for every match: each returned hit costs a
    # stored-document read, ~40 us with tantivy)
    n_nodes = len(index)
    want = k if budget is None else max(k, 64)
    smallest = int(index.vectors.n_tokens.min()) if n_nodes else 1
    while True:
        rows, scores = index.sparse_ranked(text, n=want, levels=levels, doc_ids=doc_ids, lucene=lucene)
        hits = index.fill(rows, scores, budget, k)  # ranked by fill, after the boilerplate weighting
        if budget is None or rows.size < want or want >= n_nodes:
            return hits
        if budget - sum(h.n_tokens for h in hits) < smallest:
            return hits
        want = n_nodes


def hybrid(index: Index, text: str, *, budget: int | None, k: int, levels: Sequence[int] | None,
           doc_ids: Sequence[str] | None, vector: np.ndarray | None, lucene: bool = False,
           fusion: str | None = None, dense_weight: Any = None, depth: int | None = None) -> list[Hit]:
    """Dense and BM25 scores of every node of the allowed levels fused (``query.fusion``:
    z-score convex combination by default, or ``rrf`` with k = ``query.rrf_k``), then filled
    best-first to the budget. ``fusion=``, ``dense_weight=``, ``depth=`` override the config."""
    q = index.config.query
    fusion = fusion or q.fusion
    if fusion not in ("rrf", "minmax", "zscore"):
        raise QueryError(text, f"hybrid: fusion must be rrf, minmax or zscore, not {fusion!r}")
    rows, scores = index.fused_scores(text, _vector(index, text, vector), levels=levels, doc_ids=doc_ids, lucene=lucene,
                                      fusion=fusion, dense_weight=q.dense_weight if dense_weight is None else dense_weight,
                                      depth=depth or q.fusion_depth, sparse=True, rrf_k=q.rrf_k)
    return index.fill(rows, scores, budget, k)
