"""Rank fusion and diversification (docs/METHODS.md §6.5: hybrid = dense + sparse by RRF; multi-query + MMR).

* :func:`rrf` — reciprocal rank fusion (Cormack, Clarke & Büttcher, 2009):
  ``score(d) = Σ_r 1 / (k + rank_r(d))`` over the rankings ``r`` that contain ``d``, ranks from 1.
* :func:`fuse` — score fusion over node rows (vectorized, every candidate kept):
  ``rrf`` (the same formula over ranks), or a convex combination ``Σ w_r · norm_r(score)`` of
  per-list normalized scores (``minmax``: ``(s − lo) / (hi − lo)``; ``zscore``:
  ``(s − mean) / std``), each list's normalization anchored on its ``depth`` best scores so
  the long tail of a dense ranking does not flatten its head. A node absent from a sparse list
  counts as a BM25 score of 0.
* :func:`mmr` — maximal marginal relevance (Carbonell & Goldstein, 1998): pick greedily
  ``argmax_d λ·sim(q, d) − (1 − λ)·max_{s ∈ picked} sim(d, s)`` with cosine similarity.

Both are pure and deterministic: ties keep the earlier candidate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

import numpy as np

__all__ = ["FUSIONS", "Fusion", "adaptive_weight", "fuse", "mmr", "normalize", "rrf"]

Fusion = Literal["rrf", "minmax", "zscore"]
FUSIONS: tuple[str, ...] = get_args(Fusion)


def rrf(rankings: Sequence[Sequence[str]], *, k: int = 60) -> list[tuple[str, float]]:
    """Fuse ranked id lists into one ``[(id, score), ...]``, best first (higher score is better).

    An id repeated within one ranking counts at its best (first) rank only. Ties are broken by
    the best rank an id reached in any list, then by first appearance (ranking order, then
    position), so the result does not depend on hash order.
    """
    if k < 0:
        raise ValueError(f"rrf: k must be >= 0, got {k}")
    scores: dict[str, float] = {}
    best_rank: dict[str, int] = {}
    for ranking in rankings:
        seen: set[str] = set()
        for rank, item in enumerate(ranking, start=1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
            best_rank[item] = min(best_rank.get(item, rank), rank)
    order = {item: i for i, item in enumerate(scores)}  # first appearance
    fused = sorted(scores, key=lambda item: (-scores[item], best_rank[item], order[item]))
    return [(item, scores[item]) for item in fused]


def _ranks(scores: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """1-based rank of every entry: score descending, then row ascending."""
    order = np.lexsort((rows, -scores))
    ranks = np.empty(scores.size, dtype=np.float64)
    ranks[order] = np.arange(1, scores.size + 1, dtype=np.float64)
    return ranks


def normalize(scores: np.ndarray, method: Fusion, *, depth: int = 100, absent: float | None = None) -> tuple[np.ndarray, float]:
    """(normalized ``scores``, normalized value of ``absent``) with the statistics of the
    ``depth`` best scores: ``minmax`` maps the depth-th best to 0 and the best to 1 (the tail
    goes below 0, keeping its order); ``zscore`` subtracts their mean, divides by their std."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0:
        return s, 0.0
    head = -np.partition(-s, min(depth, s.size) - 1)[: min(depth, s.size)]
    if method == "minmax":
        lo, hi = float(head.min()), float(head.max())
        scale = hi - lo if hi > lo else 1.0
        out = (s - lo) / scale
        return out, (0.0 if absent is None else (absent - lo) / scale)
    if method == "zscore":
        mu, sd = float(head.mean()), float(head.std())
        sd = sd if sd > 0 else 1.0
        return (s - mu) / sd, (0.0 if absent is None else (absent - mu) / sd)
    raise ValueError(f"normalize: unknown method {method!r}; use minmax or zscore")


def fuse(
    lists: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    method: Fusion = "rrf",
    weights: Sequence[float] | None = None,
    k: int = 60,
    depth: int = 100,
    absent: Sequence[float | None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Fuse scored candidate lists ``[(rows, scores), ...]`` (higher is better) into
    ``(rows, fused scores)`` over the union of their rows (rows ascending).

    ``rrf``: ``Σ w_r / (k + rank_r)`` (ranks from 1, score then row; weights default to 1).
    ``minmax``/``zscore``: ``Σ w_r · norm_r`` with :func:`normalize` (weights default to equal,
    summing to 1); a row missing from list ``r`` gets ``norm_r(absent[r])`` when ``absent[r]``
    is given (e.g. 0 for BM25), else 0 for ``rrf`` and the list's lowest normalized value.
    """
    if method not in FUSIONS:
        raise ValueError(f"fuse: unknown method {method!r}; use one of {', '.join(FUSIONS)}")
    if k < 0:
        raise ValueError(f"fuse: k must be >= 0, got {k}")
    lists = [(np.asarray(r, dtype=np.int64), np.asarray(s, dtype=np.float64)) for r, s in lists]
    if not lists:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    w = np.asarray(weights if weights is not None else [1.0 if method == "rrf" else 1.0 / len(lists)] * len(lists), dtype=np.float64)
    if w.shape != (len(lists),):
        raise ValueError(f"fuse: {len(lists)} lists but {w.size} weights")
    every = np.concatenate([r for r, _ in lists])
    slot: np.ndarray | None = None
    # rows are small non-negative ints: a presence mask sorts them in O(n) — unless the rows are
    # spread over a much larger range (a few hundred candidates of 10^6 rows: a sort is cheaper)
    if every.size and every.min() >= 0 and int(every.max()) < 64 * every.size + 65_536:
        present = np.zeros(int(every.max()) + 1, dtype=bool)
        present[every] = True
        union = np.flatnonzero(present).astype(np.int64)
        slot = np.cumsum(present) - 1  # row -> its position in union
    else:
        union = np.unique(every)
    fused = np.zeros(union.size, dtype=np.float64)
    for i, (rows, scores) in enumerate(lists):
        if rows.size == 0:
            continue
        pos = slot[rows] if slot is not None else np.searchsorted(union, rows)
        if method == "rrf":
            fused[pos] += w[i] / (k + _ranks(scores, rows))
            continue
        norm, miss = normalize(scores, method, depth=depth, absent=None if absent is None else absent[i])
        if absent is None or absent[i] is None:
            miss = float(norm.min())
        contrib = np.full(union.size, miss, dtype=np.float64)
        contrib[pos] = norm
        fused += w[i] * contrib
    return union, fused


def _unit_rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def mmr(
    query: np.ndarray,
    candidates: np.ndarray,
    *,
    k: int,
    lambda_: float = 0.5,
    relevance: Sequence[float] | np.ndarray | None = None,
) -> list[int]:
    """Indices of ``k`` rows of ``candidates`` (shape ``(n, d)``) in MMR selection order.

    ``query`` is a vector of dimension ``d``; similarities are cosine (vectors are normalised
    here, a zero vector has similarity 0). ``relevance`` (length ``n``) replaces ``sim(q, d)``
    when given — e.g. fused scores rescaled to [0, 1]. ``lambda_ = 1`` is pure relevance order,
    ``0`` pure diversity.
    """
    if not 0.0 <= lambda_ <= 1.0:
        raise ValueError(f"mmr: lambda_ must be in [0, 1], got {lambda_}")
    cands = _unit_rows(np.atleast_2d(candidates))
    n = 0 if np.size(candidates) == 0 else cands.shape[0]
    k = min(int(k), n)
    if k <= 0:
        return []
    if relevance is not None:
        rel = np.asarray(relevance, dtype=np.float64)
        if rel.shape != (n,):
            raise ValueError(f"mmr: relevance has shape {rel.shape}, expected ({n},)")
    else:
        rel = cands @ _unit_rows(np.asarray(query).reshape(-1))
    sims = cands @ cands.T
    picked: list[int] = []
    # max similarity of each candidate to anything picked so far (nothing picked: 0 penalty)
    redundancy = np.full(n, -np.inf)
    available = np.ones(n, dtype=bool)
    for _ in range(k):
        penalty = np.where(np.isfinite(redundancy), redundancy, 0.0)
        value = lambda_ * rel - (1.0 - lambda_) * penalty
        value = np.where(available, value, -np.inf)
        best = int(np.argmax(value))  # first index among ties
        picked.append(best)
        available[best] = False
        redundancy = np.maximum(redundancy, sims[best])
    return picked


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
