"""What every retrieval mode returns and the best-first fill they share (no index needed).

:class:`Hit` and the fill helpers live below :mod:`arborag.query.index` so that the modes
(``query/auto.py``, ``query/multi.py``, ``query/level/`` ...) can use them without importing
the index that calls them: the registry (:mod:`arborag.query.modes`) imports the modes by
name, and nothing in ``query/`` imports back up (no circle).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

__all__ = ["NEAR_DUPLICATE", "Hit", "distinct_fill", "fill_hits", "greedy_fill", "repeats", "top_order"]

#: Two texts are near-duplicates when the Jaccard similarity of their word 5-gram sets is at least this.
NEAR_DUPLICATE = 0.9
_SHINGLE = 5


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


def _shingles(words: list[str]) -> set[int]:
    n = min(_SHINGLE, len(words))
    return {hash(tuple(words[i : i + n])) for i in range(len(words) - n + 1)}


def repeats(texts: Sequence[str], *, threshold: float = NEAR_DUPLICATE) -> list[int]:
    """Positions of the texts that repeat an earlier one: equal after case and whitespace
    normalisation, or near-equal (Jaccard similarity of their word 5-gram sets >= ``threshold``).

    Filings repeat whole passages (certifications, signature blocks, page furniture): a context
    holding one twice spends its budget on nothing new. Linear in the texts' words: the shared
    5-grams with every earlier text are counted through one 5-gram -> texts map."""
    out: list[int] = []
    exact: set[str] = set()
    postings: dict[int, list[int]] = {}
    sizes: list[int] = []
    for i, text in enumerate(texts):
        words = text.lower().split()
        key = " ".join(words)
        if key in exact:
            out.append(i)
            continue
        sh = _shingles(words)
        shared = Counter(j for g in sh for j in postings.get(g, ()))
        if any(c >= threshold * (len(sh) + sizes[j] - c) for j, c in shared.items()):
            out.append(i)
            continue
        exact.add(key)
        for g in sh:
            postings.setdefault(g, []).append(len(sizes))
        sizes.append(len(sh))
    return out


def fill_hits(hits: Sequence[Hit], budget: int | None, k: int) -> list[Hit]:
    """Hits (in rank order) a best-first fill keeps: each one that still fits in ``budget``
    tokens (:func:`greedy_fill`) and does not repeat a hit already kept (:func:`repeats`);
    ``budget=None`` keeps the first ``k``. For modes that rank hits themselves (multi, level)."""
    hits = list(hits)
    while True:
        if budget is None:
            taken = hits[:k]
        else:
            sizes = np.fromiter((int(h.n_tokens) for h in hits), dtype=np.int64, count=len(hits))
            taken = [hits[int(i)] for i in greedy_fill(sizes, budget)]
        dup = repeats([h.text for h in taken])
        if not dup:
            return taken
        drop = {id(taken[i]) for i in dup}
        hits = [h for h in hits if id(h) not in drop]


_Fill = TypeVar("_Fill", bound=Callable[..., list[Hit]])


def distinct_fill(fill: _Fill) -> _Fill:
    """Wrap an index's ``fill(rows, scores, budget, k, *, ordered=False)`` so that no hit repeats
    one ranked above it (:func:`repeats`): a repeat is dropped from the candidates and the fill
    runs again, so the budget it held goes to the next candidate that fits. The fill is as
    before when nothing repeats (one check of the kept hits' texts)."""

    @functools.wraps(fill)
    def wrapper(index: Any, rows: np.ndarray, scores: np.ndarray, budget: int | None, k: int, **kw: Any) -> list[Hit]:
        rows = np.asarray(rows, dtype=np.int64)
        scores = np.asarray(scores, dtype=np.float64)
        while True:
            hits = fill(index, rows, scores, budget, k, **kw)
            dup = repeats([h.text for h in hits])
            if not dup:
                return hits
            row_of = index.vectors.row_of
            kept = {row_of[h.node_id] for i, h in enumerate(hits) if i not in dup}
            keep = np.ones(rows.size, dtype=bool)
            for r in {row_of[hits[i].node_id] for i in dup}:
                at = np.flatnonzero(rows == r)
                keep[at] = False
                if r in kept:  # the same node twice among the candidates: its best-scored entry stays
                    keep[at[int(np.argmax(scores[at]))]] = True
            rows, scores = rows[keep], scores[keep]

    return wrapper  # type: ignore[return-value]
