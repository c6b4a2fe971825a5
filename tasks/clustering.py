"""RAPTOR clustering of one tree level (SPEC §5, steps 2-6).

:func:`cluster_level` takes the vectors of one level and returns soft clusters as lists of
``(row, probability)``:

1. global UMAP to ``dims`` (<= n-2) dimensions, ``n_neighbors = int(sqrt(n-1))``, cosine,
   seeded; Gaussian mixture with k = argmin BIC over 1..min(max_clusters, n-1);
2. inside each global cluster a local UMAP (``local_neighbors``, capped to the cluster size)
   and GMM + BIC again (a global cluster with <= dims+1 members is one local cluster);
3. soft membership: a row joins every cluster with P(c|x) > threshold, and a row under the
   threshold everywhere joins its argmax cluster (the reference code drops it);
4. a cluster whose members hold more than ``max_cluster_tokens`` tokens is re-clustered; if
   that does not split it (or the recursion is too deep) it is cut into contiguous
   token-bounded groups — so the loop always terminates;
5. tiny inputs (n <= dims+1, counted in distinct vectors) skip UMAP and form one cluster.

The reported probability of a row in a cluster is P(global|x) * P(local|x, global) (times the
re-clustering posterior when the guard re-clustered): the joint soft membership, in [0, 1].

Exact duplicate vectors are fitted once (UMAP and GMM see distinct rows only) and share their
memberships. Everything runs under ``threadpool_limits(1)`` (BLAS *and* OpenMP): multithreaded
OpenBLAS makes GaussianMixture ~10x slower on this hardware, and the OpenMP threads of the
KMeans that initialises each GMM cost up to 70x more than one thread when the cores are busy
(measured 0.15 s vs 0.002 s for one k=1 fit on 2,229 points at load 9). Same seed + same input
=> same output.

Cost: umap's numba JIT costs 15-50 s once per process; call :func:`warm_up` once (the flow
does) — nothing here creates per-call objects that force recompilation. The BIC search is
``cfg.bic_search``: ``"exhaustive"`` fits k = 1..K; ``"coarse_to_fine"`` fits a geometric grid
of k with an early stop and then every k around the best grid points
(benchmarks/results/bic_search.md).
"""

from __future__ import annotations

import logging
import math
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from arborag.config import ClusterConfig
from arborag.errors import ConfigError, SchemaError

__all__ = [
    "ClusterStats",
    "coarse_grid",
    "cluster_level",
    "select_k",
    "soft_membership",
    "cut_contiguous",
    "warm_up",
]

log = logging.getLogger(__name__)

Cluster = list[tuple[int, float]]

# Re-clustering depth for the token guard; below it clusters are cut into contiguous groups.
MAX_GUARD_DEPTH = 3
# coarse_to_fine stops climbing the k grid after two grid points this many one-component BIC
# penalties above the best (tuned on real curves: benchmarks/results/bic_search.md).
STOP_MARGIN = 2.0
# coarse_to_fine locates the minimum with fits at this EM tolerance, then refits the N_EXACT
# best candidates with sklearn's default tol (1e-3).
LOOSE_TOL = 1e-2
N_EXACT = 4
LOOSE_MIN_N = 500


@dataclass
class ClusterStats:
    """Counters of one :func:`cluster_level` call (filled when a stats object is passed)."""

    n: int = 0
    n_distinct: int = 0
    global_k: int = 0
    local_ks: list[int] = field(default_factory=list)
    gmm_fits: int = 0
    umap_fits: int = 0
    reclustered: int = 0
    cut: int = 0
    umap_s: float = 0.0
    gmm_s: float = 0.0


# -- membership ---------------------------------------------------------------------------------
def soft_membership(probs: np.ndarray, threshold: float) -> list[Cluster]:
    """Clusters (one per column with members) from a posterior matrix ``probs`` (n, k).

    Row i joins column c when ``probs[i, c] > threshold``; a row under the threshold in every
    column joins its argmax column. Columns without members are dropped. Members are in row
    order; each is ``(row, probs[row, c])``.
    """
    probs = np.asarray(probs, dtype=np.float64)
    if probs.ndim != 2:
        raise SchemaError("cluster probabilities", f"must be 2-D (n, k), got shape {probs.shape}")
    n, k = probs.shape
    if n == 0:
        return []
    if k == 0:
        raise SchemaError("cluster probabilities", "has no columns")
    member = probs > threshold
    orphans = np.flatnonzero(~member.any(axis=1))
    if orphans.size:
        member[orphans, np.argmax(probs[orphans], axis=1)] = True
    clusters: list[Cluster] = []
    for c in range(k):
        rows = np.flatnonzero(member[:, c])
        if rows.size:
            clusters.append([(int(r), float(probs[r, c])) for r in rows])
    return clusters


def cut_contiguous(members: Cluster, n_tokens: np.ndarray, max_tokens: int) -> list[Cluster]:
    """Cut a cluster into groups of consecutive rows (row order) of <= ``max_tokens`` tokens.

    A single member over the limit forms its own group. Every member lands in exactly one group.
    """
    groups: list[Cluster] = []
    cur: Cluster = []
    cur_tokens = 0
    for row, p in sorted(members):
        t = int(n_tokens[row])
        if cur and cur_tokens + t > max_tokens:
            groups.append(cur)
            cur, cur_tokens = [], 0
        cur.append((row, p))
        cur_tokens += t
    if cur:
        groups.append(cur)
    return groups


# -- BIC search ---------------------------------------------------------------------------------
def coarse_grid(max_k: int) -> list[int]:
    """The coarse grid of k: 1..6, then steps of ~25% (8, 10, 12, 15, 19, 24, 30, 38, 48), then max_k."""
    if max_k <= 6:
        return list(range(1, max_k + 1))
    grid = list(range(1, 7))
    k = 6
    while True:
        k = max(k + 1, int(round(k * 1.25)))
        if k >= max_k:
            break
        grid.append(k)
    grid.append(max_k)
    return grid


def _params_per_component(dims: int) -> int:
    """Free parameters a full-covariance Gaussian component adds: mean, covariance, weight."""
    return dims + dims * (dims + 1) // 2 + 1


def _fit_gmm(x: np.ndarray, k: int, seed: int, stats: ClusterStats | None, *, tol: float = 1e-3) -> Any:
    """GaussianMixture(k, random_state=seed) fitted to ``x`` (``tol`` 1e-3 is sklearn's default)."""
    from sklearn.mixture import GaussianMixture

    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gmm = GaussianMixture(n_components=k, random_state=seed, tol=tol).fit(x)
    except (ValueError, np.linalg.LinAlgError, FloatingPointError) as exc:
        log.debug("GMM k=%d failed on %d points: %s", k, len(x), exc)
        gmm = None
    if stats is not None:
        stats.gmm_fits += 1
        stats.gmm_s += time.perf_counter() - t0
    return gmm


def select_k(
    x: np.ndarray,
    max_k: int,
    seed: int,
    method: Literal["exhaustive", "coarse_to_fine"] = "coarse_to_fine",
    *,
    stats: ClusterStats | None = None,
) -> tuple[int, Any, dict[int, float]]:
    """k with the minimum BIC among 1..max_k, its fitted GaussianMixture, and the exact BICs computed.

    ``exhaustive`` fits every k with sklearn's defaults (tol 1e-3). ``coarse_to_fine`` first
    *locates* the minimum — from ``LOOSE_MIN_N`` points on with loose fits (tol ``LOOSE_TOL``,
    ~3-5x cheaper at large k; their BIC ranks the candidates almost exactly like the full fits
    do), below it with exact fits:

    1. the :func:`coarse_grid` upwards, stopping once two consecutive grid points are worse
       than the best so far by more than ``STOP_MARGIN`` one-component BIC penalties
       (ln(n) * parameters per component) — past its minimum the BIC climbs steadily with k;
    2. every k strictly between the grid neighbours of the two best grid points;
    3. then fits the ``N_EXACT`` best of those candidates exactly (a no-op for exact probes)
       and returns the exact argmin.

    The exact fits are the very fits ``exhaustive`` makes, so when the candidates include the
    exhaustive argmin both methods return the same model (how often:
    benchmarks/results/bic_search.md). Ties go to the smaller k; a k whose fit fails counts as
    BIC = +inf.
    """
    n = len(x)
    max_k = max(1, min(int(max_k), n))
    bics: dict[int, float] = {}
    models: dict[int, Any] = {}

    def evaluate(k: int) -> None:
        if k in bics or not 1 <= k <= max_k:
            return
        gmm = _fit_gmm(x, k, seed, stats)
        models[k] = gmm
        bics[k] = float(gmm.bic(x)) if gmm is not None else math.inf

    if method == "exhaustive" or (method == "coarse_to_fine" and max_k <= N_EXACT + 2):
        for k in range(1, max_k + 1):
            evaluate(k)
    elif method == "coarse_to_fine":
        loose: dict[int, float] = {}

        use_loose = n >= LOOSE_MIN_N  # below it loose fits are not much cheaper than exact ones

        def probe(k: int) -> None:
            if k in loose or not 1 <= k <= max_k:
                return
            if use_loose:
                gmm = _fit_gmm(x, k, seed, stats, tol=LOOSE_TOL)
                loose[k] = float(gmm.bic(x)) if gmm is not None else math.inf
            else:
                evaluate(k)
                loose[k] = bics[k]

        margin = STOP_MARGIN * math.log(max(n, 2)) * _params_per_component(x.shape[1])
        grid: list[int] = []
        worse = 0
        for k in coarse_grid(max_k):
            probe(k)
            grid.append(k)
            worse = worse + 1 if loose[k] > min(loose.values()) + margin else 0
            if worse >= 2:
                break
        ranked = sorted(grid, key=lambda k: (loose[k], k))
        for g in ranked[:2]:
            i = grid.index(g)
            lo = grid[i - 1] if i > 0 else g
            hi = grid[i + 1] if i + 1 < len(grid) else g
            for k in range(lo + 1, hi):
                probe(k)
        for k in sorted(loose, key=lambda k: (loose[k], k))[:N_EXACT]:
            evaluate(k)
    else:  # pragma: no cover - guarded by the config Literal
        raise ConfigError(f"unknown cluster.bic_search {method!r}")
    best = min(bics, key=lambda k: (bics[k], k))
    if not math.isfinite(bics[best]):
        return 1, None, bics
    return best, models[best], bics


# -- reduction ----------------------------------------------------------------------------------
def _pca(x: np.ndarray, dims: int) -> np.ndarray:
    xc = x - x.mean(axis=0, keepdims=True)
    u, s, _ = np.linalg.svd(xc.astype(np.float64), full_matrices=False)
    out = u[:, :dims] * s[:dims]
    if out.shape[1] < dims:
        out = np.pad(out, ((0, 0), (0, dims - out.shape[1])))
    # fix the sign of each component so the result does not depend on the LAPACK build
    signs = np.sign(out[np.argmax(np.abs(out), axis=0), np.arange(dims)])
    signs[signs == 0] = 1
    return (out * signs).astype(np.float32)


def _reduce(x: np.ndarray, dims: int, n_neighbors: int, seed: int, stats: ClusterStats | None) -> np.ndarray:
    """UMAP of ``x`` (float32, distinct rows) to ``dims`` dims, cosine, seeded; PCA if UMAP fails."""
    n = len(x)
    dims = max(1, min(dims, n - 2))
    n_neighbors = max(2, min(n_neighbors, n - 1))
    t0 = time.perf_counter()
    try:
        import umap

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reducer = umap.UMAP(
                n_neighbors=n_neighbors,
                n_components=dims,
                metric="cosine",
                random_state=seed,
                n_jobs=1,
            )
            out = np.asarray(reducer.fit_transform(np.ascontiguousarray(x, dtype=np.float32)), dtype=np.float32)
        if not np.isfinite(out).all():
            raise FloatingPointError("UMAP produced non-finite coordinates")
    except Exception as exc:  # noqa: BLE001 - umap/scipy raise many types on degenerate inputs
        log.warning("UMAP failed on %d points (%r); using PCA for this reduction", n, exc)
        out = _pca(x, dims)
    if stats is not None:
        stats.umap_fits += 1
        stats.umap_s += time.perf_counter() - t0
    return out


# -- the RAPTOR pass ----------------------------------------------------------------------------
def _distinct(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows in first-occurrence order, inverse index row -> distinct row)."""
    _, first, inverse = np.unique(x, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(first, kind="stable")  # unique ids in first-occurrence order
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return x[np.sort(first)], rank[inverse]


def _expand(clusters: list[Cluster], inverse: np.ndarray) -> list[Cluster]:
    """Map clusters over distinct rows back to all rows (duplicates share memberships)."""
    groups: dict[int, list[int]] = {}
    for row, u in enumerate(inverse.tolist()):
        groups.setdefault(u, []).append(row)
    out: list[Cluster] = []
    for c in clusters:
        members = [(row, p) for u, p in c for row in groups[u]]
        out.append(sorted(members))
    return out


def _raptor_pass(x: np.ndarray, cfg: ClusterConfig, stats: ClusterStats | None, *, top: bool) -> list[Cluster]:
    """Global + local clustering of ``x``; rows are indices into ``x``. No token guard."""
    n = len(x)
    if n == 0:
        return []
    xd, inverse = _distinct(x)
    nd = len(xd)
    if top and stats is not None:
        stats.n, stats.n_distinct = n, nd
    if nd <= cfg.dims + 1:
        return [[(i, 1.0) for i in range(n)]]
    nn = cfg.global_neighbors if cfg.global_neighbors is not None else int(math.sqrt(nd - 1))
    reduced = _reduce(xd, cfg.dims, nn, cfg.seed, stats)
    k, gmm, _ = select_k(reduced, min(cfg.max_clusters, nd - 1), cfg.seed, cfg.bic_search, stats=stats)
    if gmm is None or k == 1:
        global_clusters = [[(i, 1.0) for i in range(nd)]]
    else:
        global_clusters = soft_membership(gmm.predict_proba(reduced), cfg.threshold)
    if top and stats is not None:
        stats.global_k = len(global_clusters)
    out: list[Cluster] = []
    for gc in global_clusters:
        idx = np.array([r for r, _ in gc], dtype=np.int64)
        pg = np.array([p for _, p in gc], dtype=np.float64)
        m = len(idx)
        if m <= cfg.dims + 1:
            local = [[(j, 1.0) for j in range(m)]]
        else:
            red_l = _reduce(xd[idx], cfg.dims, cfg.local_neighbors, cfg.seed, stats)
            kl, gmm_l, _ = select_k(red_l, min(cfg.max_clusters, m - 1), cfg.seed, cfg.bic_search, stats=stats)
            if gmm_l is None or kl == 1:
                local = [[(j, 1.0) for j in range(m)]]
            else:
                local = soft_membership(gmm_l.predict_proba(red_l), cfg.threshold)
        if top and stats is not None:
            stats.local_ks.append(len(local))
        for lc in local:
            out.append([(int(idx[j]), float(pg[j] * pl)) for j, pl in lc])
    return _expand(out, inverse)


def _guard(
    clusters: list[Cluster], x: np.ndarray, n_tokens: np.ndarray, cfg: ClusterConfig, stats: ClusterStats | None, depth: int
) -> list[Cluster]:
    out: list[Cluster] = []
    for c in clusters:
        rows = [r for r, _ in c]
        if len(c) == 1 or int(n_tokens[rows].sum()) <= cfg.max_cluster_tokens:
            out.append(c)
            continue
        split: list[Cluster] | None = None
        if depth < MAX_GUARD_DEPTH:
            sub = _raptor_pass(x[rows], cfg, None, top=False)
            if len(sub) >= 2 and all(len(s) < len(c) for s in sub):
                split = [[(rows[j], c[j][1] * p) for j, p in s] for s in sub]
        if split is None:
            if stats is not None:
                stats.cut += 1
            out.extend(cut_contiguous(c, n_tokens, cfg.max_cluster_tokens))
        else:
            if stats is not None:
                stats.reclustered += 1
            out.extend(_guard(split, x, n_tokens, cfg, stats, depth + 1))
    return out


def _canonical(clusters: list[Cluster]) -> list[Cluster]:
    """Members sorted by row, identical member sets merged (max probability), clusters sorted."""
    merged: dict[tuple[int, ...], dict[int, float]] = {}
    for c in clusters:
        probs: dict[int, float] = {}
        for r, p in c:
            probs[r] = max(p, probs.get(r, 0.0))
        key = tuple(sorted(probs))
        if not key:
            continue
        have = merged.setdefault(key, {})
        for r, p in probs.items():
            have[r] = max(p, have.get(r, 0.0))
    return [[(r, float(merged[key][r])) for r in key] for key in sorted(merged, key=lambda k: (k[0], len(k), k))]


def cluster_level(
    vectors: np.ndarray,
    n_tokens: Sequence[int] | np.ndarray,
    cfg: ClusterConfig,
    *,
    stats: ClusterStats | None = None,
) -> list[list[tuple[int, float]]]:
    """Soft clusters of the rows of ``vectors`` (SPEC §5 steps 2-6).

    Returns clusters as lists of ``(row, probability)``, members in row order, clusters sorted
    by their first row. Every row is in at least one cluster; no two clusters have the same
    member set; a cluster over ``cfg.max_cluster_tokens`` tokens has a single member. Pass a
    :class:`ClusterStats` to get counters and timings.
    """
    x = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
    if x.ndim != 2:
        raise SchemaError("vectors", f"must be 2-D (n, dim), got shape {x.shape}")
    tok = np.asarray(n_tokens, dtype=np.int64).reshape(-1)
    if len(tok) != len(x):
        raise SchemaError("vectors", f"{len(x)} vectors but {len(tok)} token counts")
    n = len(x)
    if n == 0:
        return []
    if not np.isfinite(x).all():
        raise SchemaError("vectors", "contain NaN or infinite values; check the embedder output")
    from threadpoolctl import threadpool_limits

    with _FIT_LOCK, threadpool_limits(1):
        clusters = _raptor_pass(x, cfg, stats, top=True)
        clusters = _guard(clusters, x, tok, cfg, stats, 0)
    clusters = _canonical(clusters)
    covered = np.zeros(n, dtype=bool)
    for c in clusters:
        covered[[r for r, _ in c]] = True
    assert covered.all(), "every row must land in a cluster"
    return clusters


# UMAP/numba and BLAS thread limits are process-wide: one clustering at a time per process.
_FIT_LOCK = threading.RLock()
_WARM = False


def warm_up(*, large: bool = False) -> float:
    """Compile umap's numba code (and touch GMM) once per process; returns the seconds spent.

    ``large=True`` also compiles the NNDescent path UMAP uses from 4,096 points on (+~35 s);
    worth it only when a level that large will be clustered. Idempotent (the small warm-up).
    """
    global _WARM
    t0 = time.perf_counter()
    from threadpoolctl import threadpool_limits

    with _FIT_LOCK, threadpool_limits(1):
        rng = np.random.default_rng(0)
        cfg = ClusterConfig()
        if not _WARM:
            x = rng.standard_normal((64, 16)).astype(np.float32)
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            red = _reduce(x, cfg.dims, 7, cfg.seed, None)
            _fit_gmm(red, 2, cfg.seed, None)
            _WARM = True
        if large:
            x = rng.standard_normal((4200, 16)).astype(np.float32)
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            _reduce(x, cfg.dims, 64, cfg.seed, None)
    return time.perf_counter() - t0
