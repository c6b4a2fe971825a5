"""``auto``: the default retrieval mode — the best configuration measured on the shared sets.

What it does by default (README "Evaluation" shows the table that chose it):

1. **Leaves are the context.** Every leaf is scored by dense cosine and by BM25; the two lists
   are fused by a convex combination of per-list normalized scores
   (:func:`arborag.query.fusion.fuse`; ``query.fusion`` = ``zscore``, ``query.dense_weight`` =
   0.5, each list normalized on its ``query.fusion_depth`` = 100 best scores).
2. **Best-first fill** of the budget over every leaf that still fits
   (:meth:`~arborag.query.index.Index.fill`).

Summaries did not earn budget on the shared sets (they took it from the leaves that hold the
answer), so the default leaves them out; the tree-aware variants stay as options and eval
systems (``auto-tree``, ``auto-summaries``) so the report shows them next to the default:

- ``tree="boost"``: summaries as routers. Every summary is scored against the question; a leaf
  gains ``tree_weight`` × the normalized score of its best ancestor (parent, grandparent …), so
  the region the summaries point to is read first; summaries never take budget.
- ``summaries="dedup"``: summaries may enter the context too (at most ``summary_share`` of the
  budget), each level list normalized on its own; provenance is respected: a summary one of
  whose children is already in the context is skipped (measured: also skipping the children
  of a summary already taken lost recall, 0.955 -> 0.635 on HotpotQA at 2,000).

Other options (``Index.search(mode="auto", **options)``): ``fusion`` (``rrf`` | ``minmax`` |
``zscore``), ``dense_weight`` (0..1, or ``"adaptive"``: per question, the list whose best
score stands out more gets more weight), ``depth``, ``sparse=False`` (dense leaves only).
``levels`` (e.g. ``[0]``) and ``doc_ids`` restrict the candidates as in every mode.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from arborag.errors import BackendUnavailable, QueryError, SparseNotBuiltError
from arborag.query.fusion import FUSIONS, fuse, normalize

if TYPE_CHECKING:  # pragma: no cover
    from arborag.query.index import Hit, Index

__all__ = ["DEFAULTS", "search"]

#: The measured default (README "Evaluation").
DEFAULTS: dict[str, Any] = {
    "fusion": None,  # None: query.fusion (zscore)
    "dense_weight": None,  # None: query.dense_weight (0.5); or "adaptive"
    "depth": None,  # None: query.fusion_depth (100)
    "sparse": True,
    "tree": "none",
    "tree_weight": 0.1,
    "summaries": "none",
    "summary_share": 0.25,
}


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        logging.getLogger("arborag.query.auto").warning(message)


def _sparse_scores(index: Index, text: str, *, levels, doc_ids, lucene: bool, want: int) -> tuple[np.ndarray, np.ndarray]:
    ranked = index._sparse_ranked(text, budget=None, k=want, levels=levels, doc_ids=doc_ids, lucene=lucene, want=want)
    if not ranked:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    rows = np.fromiter((r for r, _ in ranked), dtype=np.int64, count=len(ranked))
    scores = np.fromiter((s for _, s in ranked), dtype=np.float64, count=len(ranked))
    return rows, np.nan_to_num(scores, nan=0.0)


def fused_scores(index: Index, text: str, vector: np.ndarray, *, levels: Sequence[int] | None, doc_ids, lucene: bool,
                 fusion: str, dense_weight: float, depth: int, sparse: bool, rrf_k: int,
                 fallback: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(rows, fused score) of every node the filters allow: dense ⊕ BM25. ``fallback``: with no
    sparse index (or its backend down), fuse the dense list alone (logged once) instead of raising."""
    d_rows, d_scores = index.dense_scores(vector, levels=levels, doc_ids=doc_ids)
    if not sparse or d_rows.size == 0:
        if fusion == "rrf":
            return fuse([(d_rows, d_scores)], method="rrf", k=rrf_k)
        return d_rows, normalize(d_scores, fusion, depth=depth)[0]  # type: ignore[arg-type]
    try:
        s_rows, s_scores = _sparse_scores(index, text, levels=levels, doc_ids=doc_ids, lucene=lucene, want=2 * depth)
    except (SparseNotBuiltError, BackendUnavailable) as exc:  # the default mode still answers, dense only
        if not fallback:
            raise
        _warn_once(f"auto: no BM25 list ({exc}); fusing the dense list only. Rebuild the corpus or start the sparse backend.")
        s_rows, s_scores = np.zeros(0, dtype=np.int64), np.zeros(0)
    if s_rows.size == 0:
        return d_rows, normalize(d_scores, "minmax" if fusion == "rrf" else fusion, depth=depth)[0]  # type: ignore[arg-type]
    w = adaptive_weight(d_scores, s_scores, depth) if dense_weight == "adaptive" else float(dense_weight)
    return fuse([(d_rows, d_scores), (s_rows, s_scores)], method=fusion, weights=[w, 1.0 - w], k=rrf_k, depth=depth,  # type: ignore[arg-type]
                absent=[None, 0.0])


def _peak(scores: np.ndarray, depth: int) -> float:
    """How far the best score stands above the rest of the ``depth`` best, in their std."""
    head = -np.sort(-np.asarray(scores, dtype=np.float64))[: max(2, depth)]
    if head.size < 2:
        return 1.0
    sd = float(head[1:].std())
    return max(0.0, float(head[0] - head[1:].mean()) / sd) if sd > 0 else 1.0


def adaptive_weight(dense: np.ndarray, sparse: np.ndarray, depth: int) -> float:
    """The dense list's share for this question: each list's peak (best score over the rest of
    its head, in std units) over the sum of both — trust the list that is sure of its top."""
    pd, ps = _peak(dense, depth), _peak(sparse, depth)
    return 0.5 if pd + ps <= 0 else pd / (pd + ps)


def ancestor_best(index: Index, scores_by_row: np.ndarray) -> np.ndarray:
    """Per row, the best score among its ancestors (-inf for a node with none), top-down."""
    parents, children = index.edge_rows
    best = np.full(scores_by_row.size, -np.inf)
    if parents.size == 0:
        return best
    levels = index.vectors.levels
    # process edges from the highest parent level down, so a grandparent's score reaches leaves
    order = np.argsort(-levels[parents], kind="stable")
    p, c = parents[order], children[order]
    plev = levels[p]
    for lv in np.unique(plev)[::-1]:
        sel = plev == lv
        via = np.maximum(scores_by_row[p[sel]], best[p[sel]])
        np.maximum.at(best, c[sel], via)
    return best


def search(index: Index, text: str, *, budget: int | None, k: int, levels: Sequence[int] | None, doc_ids: Sequence[str] | None,
           vector: np.ndarray | None, lucene: bool, **options: Any) -> list[Hit]:
    unknown = set(options) - set(DEFAULTS)
    if unknown:
        raise QueryError(text, f"mode 'auto' has no option {', '.join(sorted(unknown))}; it takes {', '.join(DEFAULTS)}")
    o = {**DEFAULTS, **options}
    q = index.config.query
    o["fusion"] = o["fusion"] or q.fusion
    o["dense_weight"] = q.dense_weight if o["dense_weight"] is None else o["dense_weight"]
    o["depth"] = o["depth"] or q.fusion_depth
    if o["fusion"] not in FUSIONS:
        raise QueryError(text, f"auto: fusion must be one of {', '.join(FUSIONS)}, not {o['fusion']!r}")
    if o["tree"] not in ("boost", "none") or o["summaries"] not in ("none", "dedup"):
        raise QueryError(text, "auto: tree is boost | none, summaries is none | dedup")
    if vector is None:
        vector = index.embed_queries([text])[0]
    v = index.vectors
    top = int(v.levels.max()) if len(v) else 0
    with_summaries = o["summaries"] == "dedup" or o["tree"] == "boost"
    leaf_levels = [0] if levels is None else [lv for lv in levels if lv == 0]
    if levels is not None and not leaf_levels:  # only summary levels asked for: fuse those
        rows, scores = fused_scores(index, text, vector, levels=levels, doc_ids=doc_ids, lucene=lucene, fusion=o["fusion"],
                                    dense_weight=o["dense_weight"], depth=o["depth"], sparse=o["sparse"], rrf_k=index.config.query.rrf_k, fallback=True)
        return index.fill(rows, scores, budget, k)
    rows, scores = fused_scores(index, text, vector, levels=leaf_levels, doc_ids=doc_ids, lucene=lucene, fusion=o["fusion"],
                                dense_weight=o["dense_weight"], depth=o["depth"], sparse=o["sparse"], rrf_k=index.config.query.rrf_k, fallback=True)
    if top == 0 or not with_summaries or (levels is not None and levels == [0]):
        return index.fill(rows, scores, budget, k)
    summary_levels = [lv for lv in range(1, top + 1) if levels is None or lv in levels]
    if not summary_levels:
        return index.fill(rows, scores, budget, k)
    if o["tree"] == "boost" and o["tree_weight"] > 0:
        s_rows, s_scores = index.dense_scores(vector, levels=summary_levels, doc_ids=doc_ids)
        if s_rows.size:
            norm, _ = normalize(s_scores, "minmax" if o["fusion"] == "rrf" else o["fusion"], depth=o["depth"])
            by_row = np.full(len(v), -np.inf)
            by_row[s_rows] = norm
            anc = ancestor_best(index, by_row)[rows]
            scale = 1.0 / (index.config.query.rrf_k + 1) if o["fusion"] == "rrf" else 1.0
            scores = scores + o["tree_weight"] * scale * np.where(np.isfinite(anc), anc, 0.0)
    if o["summaries"] == "none":
        return index.fill(rows, scores, budget, k)
    return _fill_with_summaries(index, text, vector, rows, scores, summary_levels, budget=budget, k=k, doc_ids=doc_ids,
                                lucene=lucene, o=o)


def _fill_with_summaries(index: Index, text, vector, leaf_rows, leaf_scores, summary_levels, *, budget, k, doc_ids, lucene, o) -> list[Hit]:
    """Leaves and summaries ranked together (each list normalized on its own, so a level's
    scale does not decide), filled best-first with provenance: a summary is skipped when one of
    its children is already in the context (its content is there), and summaries take at most
    ``summary_share`` of the budget."""
    s_rows, s_scores = fused_scores(index, text, vector, levels=summary_levels, doc_ids=doc_ids, lucene=lucene, fusion=o["fusion"],
                                    dense_weight=o["dense_weight"], depth=o["depth"], sparse=o["sparse"], rrf_k=index.config.query.rrf_k, fallback=True)
    rows = np.concatenate([leaf_rows, s_rows])
    scores = np.concatenate([leaf_scores, s_scores])
    order = np.lexsort((rows, -scores))
    if budget is None:
        return [index._hit(int(rows[i]), float(scores[i])) for i in order[:k]]
    parents, children = index.edge_rows
    v = index.vectors
    taken = np.zeros(len(v), dtype=bool)
    remaining, summary_left = int(budget), int(o["summary_share"] * budget)
    smallest = int(v.n_tokens[rows].min())
    out = []
    for i in order:  # stops as soon as nothing can fit; typically a few dozen candidates
        if remaining < smallest:
            break
        r = int(rows[i])
        n = int(v.n_tokens[r])
        if n > remaining:
            continue
        if v.levels[r] > 0:
            if n > summary_left or taken[children[parents == r]].any():
                continue
            summary_left -= n
        out.append(index._hit(r, float(scores[i])))
        taken[r] = True
        remaining -= n
    return out
