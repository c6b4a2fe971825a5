"""Rank fusion and diversification (SPEC §6: hybrid = dense + sparse by RRF; multi-query + MMR).

* :func:`rrf` — reciprocal rank fusion (Cormack, Clarke & Büttcher, 2009):
  ``score(d) = Σ_r 1 / (k + rank_r(d))`` over the rankings ``r`` that contain ``d``, ranks from 1.
* :func:`mmr` — maximal marginal relevance (Carbonell & Goldstein, 1998): pick greedily
  ``argmax_d λ·sim(q, d) − (1 − λ)·max_{s ∈ picked} sim(d, s)`` with cosine similarity.

Both are pure and deterministic: ties keep the earlier candidate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["mmr", "rrf"]


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
