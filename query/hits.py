"""What every retrieval mode returns and the best-first fill they share (no index needed).

:class:`Hit` and the fill helpers live below :mod:`arborag.query.index` so that the modes
(``query/auto.py``, ``query/multi.py``, ``query/level/`` ...) can use them without importing
the index that calls them: the registry (:mod:`arborag.query.modes`) imports the modes by
name, and nothing in ``query/`` imports back up (no circle).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Hit", "fill_hits", "greedy_fill", "top_order"]


@dataclass(frozen=True, slots=True)
class Hit:
    """One retrieved node. ``score``: higher is better (cosine for dense modes, BM25 for
    sparse, the fused score for hybrid and auto)."""

    node_id: str
    level: int
    score: float
    text: str
    doc_ids: tuple[str, ...]
    n_tokens: int
    # optional: set by modes that return a span of one document (``segments``: node_id
    # "seg:<doc_id>:<first>-<last>" over chunk ordinals), None/empty for a single node
    title: str | None = None
    start_char: int | None = None  # character offsets of ``text`` in the document's text
    end_char: int | None = None
    chunk_ids: tuple[str, ...] = ()  # the leaf chunks the span covers, in document order


def top_order(rows: np.ndarray, scores: np.ndarray, m: int) -> np.ndarray:
    """Positions of the ``m`` best candidates, best first: score descending, then row ascending
    (deterministic, ties at the cut included by row). One partition plus a sort of ``m``."""
    n = scores.size
    m = max(0, min(int(m), n))
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    if m >= n:
        idx = np.arange(n)
    else:
        thr = scores[np.argpartition(-scores, m - 1)[:m]].min()
        above = np.flatnonzero(scores > thr)
        ties = np.flatnonzero(scores == thr)
        ties = ties[np.argsort(rows[ties], kind="stable")][: m - above.size]
        idx = np.concatenate([above, ties])
    return idx[np.lexsort((rows[idx], -scores[idx]))]


def greedy_fill(sizes: np.ndarray, budget: int) -> np.ndarray:
    """Positions of ``sizes`` (candidates in rank order) a best-first fill takes: each one that
    still fits in ``budget``, skipping those that do not; stops when nothing left fits.

    Vectorized by runs: find the next candidate that fits, take the longest run from it whose
    running sum fits, repeat (one step per skipped-then-resumed run, not per candidate)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    n = sizes.size
    out: list[np.ndarray] = []
    remaining = int(budget)
    smallest = max(1, int(sizes.min())) if n else 1
    i = 0
    while i < n and remaining > 0:
        fits = sizes[i:] <= remaining
        j = int(np.argmax(fits))
        if not fits[j]:
            break
        j += i
        cs = np.cumsum(sizes[j : j + remaining // smallest + 1])
        cnt = int(np.searchsorted(cs, remaining, side="right"))
        out.append(np.arange(j, j + cnt))
        remaining -= int(cs[cnt - 1])
        i = j + cnt
    return np.concatenate(out) if out else np.zeros(0, dtype=np.int64)


def fill_hits(hits: Sequence[Hit], budget: int | None, k: int) -> list[Hit]:
    """Hits (in rank order) a best-first fill keeps: each one that still fits in ``budget``
    tokens (:func:`greedy_fill`); ``budget=None`` keeps the first ``k``. For modes that rank
    hits themselves (multi, level)."""
    hits = list(hits)
    if budget is None:
        return hits[:k]
    sizes = np.fromiter((int(h.n_tokens) for h in hits), dtype=np.int64, count=len(hits))
    return [hits[int(i)] for i in greedy_fill(sizes, budget)]
