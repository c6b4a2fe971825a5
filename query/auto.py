"""``auto``: the default retrieval mode — the best configuration measured on the shared sets.

What it does by default (docs/EVALUATION.md, "Results on the shared sets", shows the table that chose it):

1. **Leaves are the context.** Every leaf is scored by dense cosine and by BM25; the two lists
   are fused by a convex combination of per-list normalized scores
   (:func:`arborag.query.fusion.fuse`; ``query.fusion`` = ``zscore``, ``query.dense_weight`` =
   0.5, each list normalized on its ``query.fusion_depth`` = 100 best scores).
2. **Document routing** (:mod:`arborag.query.routing`): when one or two documents stand out
   for the question (document-level BM25, a margin rule), BM25 runs again without the names
   that routed it and their leaves gain ``query.route_weight``.
3. **Fill**: runs of adjacent leaves of long documents where the ranking clusters, then
   best-first over every leaf that still fits (``pack="segments"``, :mod:`arborag.query.packing`;
   ``pack="best"``: best-first only, :meth:`~arborag.query.index.Index.fill`).

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

Scores: one scale per fusion, whether BM25 contributes or not (``sparse=False``, no BM25 hit
for the question, no sparse index): ``rrf`` gives reciprocal-rank sums ``Σ w / (rrf_k + rank)``
(the dense list alone: ``1 / (rrf_k + rank)``), ``minmax``/``zscore`` the weighted normalized
scores (the dense list alone: its normalized scores). :meth:`~arborag.query.index.Index.fused_scores`
holds the rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from arborag.errors import QueryError
from arborag.query.fusion import FUSIONS, adaptive_weight, normalize
from arborag.query.options import AutoOptions
from arborag.query.packing import pack
from arborag.query.routing import route

if TYPE_CHECKING:  # pragma: no cover
    from arborag.query.hits import Hit
    from arborag.query.index import Index

__all__ = ["DEFAULTS", "adaptive_weight", "ancestor_best", "search"]

#: The measured default (docs/EVALUATION.md, "Results on the shared sets"): the defaults of :class:`~arborag.query.options.AutoOptions`
#: (None: the config's ``query.fusion``, ``query.dense_weight``, ``query.fusion_depth``).
DEFAULTS: dict[str, Any] = AutoOptions().model_dump()


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
    o = {**DEFAULTS, **options}  # names and values already checked by Index.search (modes.check_options, AutoOptions)
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
        rows, scores = index.fused_scores(text, vector, levels=levels, doc_ids=doc_ids, lucene=lucene, fusion=o["fusion"],
                                    dense_weight=o["dense_weight"], depth=o["depth"], sparse=o["sparse"], rrf_k=index.config.query.rrf_k, fallback=True)
        return index.fill(rows, scores, budget, k)

    def fused(sparse_text: str) -> tuple[np.ndarray, np.ndarray]:
        return index.fused_scores(sparse_text, vector, levels=leaf_levels, doc_ids=doc_ids, lucene=lucene, fusion=o["fusion"],
                                  dense_weight=o["dense_weight"], depth=o["depth"], sparse=o["sparse"], rrf_k=index.config.query.rrf_k,
                                  fallback=True)

    rows, scores = route(index, text, fused, lucene=lucene, scale=1.0 / (index.config.query.rrf_k + 1) if o["fusion"] == "rrf" else 1.0)
    if top == 0 or not with_summaries or (levels is not None and levels == [0]):
        return pack(index, rows, scores, budget, k) if o["pack"] == "segments" else index.fill(rows, scores, budget, k)
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
    s_rows, s_scores = index.fused_scores(text, vector, levels=summary_levels, doc_ids=doc_ids, lucene=lucene, fusion=o["fusion"],
                                    dense_weight=o["dense_weight"], depth=o["depth"], sparse=o["sparse"], rrf_k=index.config.query.rrf_k, fallback=True)
    rows = np.concatenate([leaf_rows, s_rows])
    scores = np.concatenate([leaf_scores, s_scores])
    order = np.lexsort((rows, -scores))
    if budget is None:
        return [index.hit(int(rows[i]), float(scores[i])) for i in order[:k]]
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
        out.append(index.hit(r, float(scores[i])))
        taken[r] = True
        remaining -= n
    return out
