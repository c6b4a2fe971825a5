"""Segment packing: fill the budget with contiguous runs of leaves where the ranking clusters.

A best-first fill takes leaves one by one, so a table or a paragraph that a PDF split over
several leaves enters the context as its best-scored fragment only (the row with the question's
words), while the rows beside it — the figures — rank below unrelated passages. Segment packing
(dsRAG's relevant segment extraction, :mod:`arborag.query.rse`, over a mode's own ranking):

1. the ``candidates`` best leaves of the ranking, best first, each with a relevance in [0, 1]
   (:func:`relevance`: its score min-max scaled over the candidates);
2. RSE chunk values and the greedy best non-overlapping runs of adjacent leaves of one document
   (:func:`~arborag.query.rse.chunk_values`, :func:`~arborag.query.rse.best_segments`; a leaf's
   neighbours are its document's leaves in ordinal order, :func:`arborag.query.segments.leaf_layout`);
3. :func:`pack`: the runs, best first, each trimmed at its lower-valued end until it fits, enter
   the context as their leaves in document order (a leaf already taken is not taken again); the
   budget left after the runs is filled best-first from the ranking as before.

The hits stay leaves of the tree (node ids, levels, scores of the ranking), so every metric and
front door reads them as before; only which leaves and in what order changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from arborag.query.hits import distinct_fill
from arborag.query.rse import Preset, RSEParams, Segment, best_segments, chunk_values

__all__ = ["CANDIDATES", "PARAMS", "pack", "pack_rows", "relevance"]

#: Best leaves of the ranking that RSE sees.
CANDIDATES = 200
#: RSE parameters of the packing: dsRAG's ``balanced`` preset with runs of at most 8 leaves
#: (docs/EVALUATION.md, "Document routing and segment packing", how they were chosen).
PARAMS: RSEParams = replace(Preset.BALANCED.value, max_length=8)


def relevance(scores: np.ndarray) -> np.ndarray:
    """``scores`` (best first or not) min-max scaled to [0, 1]; all equal -> all 1."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        return s
    lo, hi = float(s.min()), float(s.max())
    return np.ones_like(s) if hi <= lo else (s - lo) / (hi - lo)


def pack_rows(
    order_rows: np.ndarray,
    order_scores: np.ndarray,
    position: Sequence[tuple[str, int] | None],
    doc_rows: dict[str, np.ndarray],
    sizes: np.ndarray,
    budget: int,
    *,
    params: RSEParams | None = None,
) -> list[int] | None:
    """The vector rows of the packed context, in context order; None when no run was packed
    (the caller's plain best-first fill is then the answer).

    ``order_rows``/``order_scores``: the ranking, best first. ``position[i]``: (document, position
    of the leaf in its document) of ``order_rows[i]``, or None (a leaf without a place: taken
    best-first only). ``doc_rows[d]``: the vector rows of document ``d``'s leaves in order.
    ``sizes``: tokens per vector row. Only leaves of documents with at least ``2 × max_length``
    leaves form runs: in a shorter document a run would be the document itself, which the
    best-first fill already reaches leaf by leaf."""
    order_rows = np.asarray(order_rows, dtype=np.int64)
    n = min(order_rows.size, CANDIDATES)
    p = replace(PARAMS if params is None else params, chunk_length_adjustment=False)  # runs are measured in tokens below
    long_enough = 2 * p.max_length  # a run is a part of its document, not the whole of a short one
    placed = [i for i in range(n) if position[i] is not None and doc_rows[position[i][0]].size >= long_enough]  # type: ignore[index]
    taken: list[int] = []
    # a run carries only leaves of the ranking (one a filter or an earlier fill left out stays out)
    seen: set[int] = {int(r) for rows in doc_rows.values() for r in rows.tolist()} - set(order_rows.tolist())
    remaining = int(budget)
    if placed:
        docs = [position[i][0] for i in placed]  # type: ignore[index]
        pos = np.asarray([position[i][1] for i in placed], dtype=np.int64)  # type: ignore[index]
        rel = relevance(np.asarray(order_scores, dtype=np.float64)[:n])[placed]
        chars = np.zeros(len(placed), dtype=np.int64)
        values = chunk_values(docs, pos, rel, chars, p, doc_lengths={d: int(doc_rows[d].size) for d in set(docs)})
        for seg in sorted(best_segments(values, p), key=lambda s: -s.score):
            remaining = _take(seg, values, doc_rows, sizes, seen, taken, remaining)
    if not taken:
        return None
    for r in order_rows.tolist():  # the rest of the budget best-first, as the plain fill
        if r in seen:
            continue
        if int(sizes[r]) <= remaining:
            seen.add(r)
            taken.append(r)
            remaining -= int(sizes[r])
        if remaining <= 0:
            break
    return taken


def _take(seg: Segment, values: dict[str, np.ndarray], doc_rows: dict[str, np.ndarray], sizes: np.ndarray, seen: set[int],
          taken: list[int], remaining: int) -> int:
    """Take ``seg`` (trimmed to fit) into ``taken``; the budget left."""
    fit = _fit(seg, values[seg.doc_id], doc_rows[seg.doc_id], sizes, seen, remaining)
    if fit is None:
        return remaining
    for r in doc_rows[fit.doc_id][fit.start:fit.end].tolist():
        if r not in seen:
            seen.add(r)
            taken.append(r)
            remaining -= int(sizes[r])
    return remaining


def _fit(seg: Segment, values: np.ndarray, rows: np.ndarray, sizes: np.ndarray, seen: set[int], room: int) -> Segment | None:
    """``seg`` trimmed at its lower-valued end until its leaves not yet taken fit in ``room``
    tokens; None when no run with a positive value fits."""
    cur = seg
    while True:
        cost = sum(int(sizes[r]) for r in rows[cur.start:cur.end].tolist() if r not in seen)
        if cost <= room:
            return cur if cur.score > 0 or cur is seg else None
        if len(cur) <= 1:
            return None
        first, last = values[cur.start], values[cur.end - 1]
        if first < last:
            cur = replace(cur, start=cur.start + 1, score=cur.score - float(first))
        else:
            cur = replace(cur, end=cur.end - 1, score=cur.score - float(last))


def _pack(index: Any, rows: np.ndarray, scores: np.ndarray, budget: int | None, k: int) -> list[Any]:
    """The hits of ``index`` for the ranking (``rows``, ``scores``) packed by segments (see the
    module docs); ``budget=None`` is the plain best-first fill (``k`` hits)."""
    from arborag.query.boilerplate import downweight
    from arborag.query.segments import leaf_layout

    rows = np.asarray(rows, dtype=np.int64)
    if budget is None or rows.size == 0 or index.vectors.bounded:  # a bounded index: no layout of every leaf in memory
        return index.fill(rows, scores, budget, k)  # type: ignore[no-any-return]
    s = downweight(index, rows, np.nan_to_num(np.asarray(scores, dtype=np.float64), nan=-np.inf))
    order = np.lexsort((rows, -s))
    order_rows, order_scores = rows[order], s[order]
    finite = np.isfinite(order_scores)
    order_rows, order_scores = order_rows[finite], order_scores[finite]
    layout = leaf_layout(index)
    node_ids = index.vectors.node_ids
    row_of = index.vectors.row_of
    position = [layout.position.get(node_ids[r]) for r in order_rows[:CANDIDATES].tolist()]
    doc_rows: dict[str, np.ndarray] = {}
    for where in position:
        if where is not None and where[0] not in doc_rows:
            doc_rows[where[0]] = np.asarray([row_of[c] for c in layout.docs[where[0]].chunk_ids], dtype=np.int64)
    taken = pack_rows(order_rows, order_scores, position, doc_rows, index.vectors.n_tokens, budget)
    if taken is None:
        return index.fill(rows, scores, budget, k)  # type: ignore[no-any-return]
    score_of = dict(zip(order_rows.tolist(), order_scores.tolist()))
    return [index.hit(r, score_of[r]) for r in taken]  # every packed row is one of the ranking's


#: :func:`_pack` with no hit that repeats one packed before it (:func:`arborag.query.hits.distinct_fill`).
pack = distinct_fill(_pack)
