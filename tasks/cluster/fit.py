"""RAPTOR clustering of one tree level (docs/METHODS.md §5.2–5.6).

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

Cost: UMAP (:mod:`arborag.tasks.cluster.reduction`) is umap-learn's own, its numba code compiled
once per machine (an on-disk cache, :mod:`arborag.tasks.cluster.umap_import`; 15-50 s the first
time, then a load of ~1-2 s per process that :func:`warm_up` pays). From 4,096 to
:data:`~arborag.tasks.cluster.knn.EXACT_KNN_MAX` points, where UMAP would find neighbours with
NN-descent (whose numba code is compiled again in every process), UMAP gets the exact cosine kNN
graph from scikit-learn instead (:func:`~arborag.tasks.cluster.knn.cosine_knn`). UMAP's SGD epochs
and layout are its own (500 epochs below 10,000 points, 200 above, on one thread). The GMM fits
are scikit-learn's ``GaussianMixture`` (:mod:`arborag.tasks.cluster.mixture`). The BIC search is
``cfg.bic_search``: ``"exhaustive"`` fits k = 1..K; ``"coarse_to_fine"`` fits a geometric grid
of k with an early stop and then every k around the best grid points
(benchmarks/results/bic_search.md).

Two processes: in a cold console-script build the embedding worker process sits idle while a
level is clustered; from :data:`LANES_MIN_N` rows on, the global GMM fits (two grid points at a
time, then the in-between points and the exact fits at once) and the local clusterings run on
this process and that one (:mod:`arborag.tasks.cluster.processes`) instead of on threads whose GMM
fits take turns for the GIL. Every fit is seeded and independent, so the clusters and the recorded
fits are the one-process ones (``tests/tasks/cluster/test_cluster_processes.py``);
``ARBORAG_CLUSTER_HELPER=0`` turns it off.
"""

from __future__ import annotations

import contextvars
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from arborag.config import ClusterConfig
from arborag.errors import SchemaError
from arborag.tasks.cluster import mixture
from arborag.tasks.cluster.fitted import FitRecord, LevelFit
from arborag.tasks.cluster.processes import Lanes, helper_lanes, usable_cores
from arborag.tasks.cluster.reduction import pca_project, umap_reduce
from arborag.tasks.cluster.umap_import import layout_thread_seconds
from arborag.tasks.cluster.mixture import (
    LOOSE_MIN_N,
    LOOSE_TOL,
    N_EXACT,
    STOP_MARGIN,
    Cluster,
    ClusterStats,
    coarse_grid,
    select_k,
    soft_membership,
)

__all__ = [
    "ClusterStats",
    "coarse_grid",
    "cluster_level",
    "select_k",
    "soft_membership",
    "cut_contiguous",
    "local_threads",
    "split_cluster",
    "warm_up",
    "LOOSE_MIN_N",
    "LOOSE_TOL",
    "N_EXACT",
    "STOP_MARGIN",
]

log = logging.getLogger(__name__)

MapFn = Callable[[Callable[..., Any], Iterable[Any]], Iterator[Any]]

# Re-clustering depth for the token guard; below it clusters are cut into contiguous groups.
MAX_GUARD_DEPTH = 3
# Rows of a level from which its fits use the run's helper process (arborag.tasks.cluster.processes).
LANES_MIN_N = 1000


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


def _fit_level(x: np.ndarray, neighbors: int, cfg: ClusterConfig, stats: ClusterStats | None, lanes: Lanes | None = None) -> list[Cluster]:
    """One clustering level over the rows of ``x``: UMAP to ``cfg.dims``, a GMM with k by BIC
    (its fits on ``lanes`` when given), soft memberships at ``cfg.threshold`` (one cluster of
    everything when k is 1)."""
    reduced = umap_reduce(x, cfg.dims, neighbors, cfg.seed, stats)
    fit_on = reduced
    if len(reduced) > cfg.gmm_max_fit:  # bounded GMM/BIC cost: fit a seeded sample, predict_proba for all
        pick = np.sort(np.random.default_rng(cfg.seed).choice(len(reduced), cfg.gmm_max_fit, replace=False))
        fit_on = reduced[pick]
    k, gmm, _ = select_k(fit_on, min(cfg.max_clusters, len(fit_on) - 1), cfg.seed, cfg.bic_search, stats=stats, lanes=lanes)
    recording = _RECORDING.get()
    if recording is not None:  # cluster_level(..., fitted=...) keeps the fits of its top pass
        recording.append((reduced, max(2, min(neighbors, len(x) - 1)), gmm if k > 1 else None))
    if gmm is None or k == 1:
        return [[(i, 1.0) for i in range(len(x))]]
    return soft_membership(gmm.predict_proba(reduced), cfg.threshold)


def _raptor_pass(
    x: np.ndarray, cfg: ClusterConfig, stats: ClusterStats | None, *, top: bool, map: MapFn | None = None, lanes: Lanes | None = None
) -> list[Cluster]:
    """Global + local clustering of ``x``; rows are indices into ``x``. No token guard.
    ``map`` (None: in this process) fans the local clusterings out, one task per global cluster;
    ``lanes``: the global GMM fits and the local clusterings on this process and the run's helper
    process (:mod:`arborag.tasks.cluster.processes`)."""
    n = len(x)
    if n == 0:
        return []
    xd, inverse = _distinct(x)
    nd = len(xd)
    if top and stats is not None:
        stats.n, stats.n_distinct = n, nd
    if nd <= cfg.dims + 1:
        return [[(i, 1.0) for i in range(n)]]
    # sqrt(n-1) of docs/METHODS.md §5.2, capped (docs/SCALE.md): kNN memory and time grow with n * n_neighbors
    nn = cfg.global_neighbors if cfg.global_neighbors is not None else min(int(math.sqrt(nd - 1)), cfg.max_global_neighbors)
    t0, umap_before, layout_before = time.perf_counter(), (stats.umap_s if stats is not None else 0.0), layout_thread_seconds()
    xg = xd
    if cfg.global_pca_above is not None and nd > cfg.global_pca_above:  # bounded cost per point of the global UMAP
        xg = pca_project(xd, cfg.global_pca_dims)
    global_clusters = _fit_level(xg, nn, cfg, stats, lanes)
    if top and stats is not None:
        stats.global_k = len(global_clusters)
        stats.global_s += time.perf_counter() - t0
        stats.global_umap_s += stats.umap_s - umap_before
        stats.global_layout_s += layout_thread_seconds() - layout_before
    out: list[Cluster] = []
    members = [(np.array([r for r, _ in gc], dtype=np.int64), np.array([p for _, p in gc], dtype=np.float64)) for gc in global_clusters]
    if map is None:
        fits = _local_fits([xd[idx] for idx, _ in members], cfg, stats, lanes)
    else:  # per-cluster local clustering fanned out (each fit counts into its own stats, merged here)
        fits = _merged(map(_fit_local_remote, ((xd[idx], cfg) for idx, _ in members)), stats)
    for (idx, pg), local in zip(members, fits):
        if top and stats is not None:
            stats.local_ks.append(len(local))
        for lc in local:
            out.append([(int(idx[j]), float(pg[j] * pl)) for j, pl in lc])
    return _expand(out, inverse)


def _fit_local(x: np.ndarray, cfg: ClusterConfig, stats: ClusterStats | None) -> list[Cluster]:
    """The local clusters inside one global cluster (rows of ``x``)."""
    if len(x) <= cfg.dims + 1:
        return [[(j, 1.0) for j in range(len(x))]]
    return _fit_level(x, cfg.local_neighbors, cfg, stats)


def local_threads() -> int:
    """Threads for the local clusterings of one level: ``ARBORAG_CLUSTER_THREADS``, else the cores
    this process may use (at most 8). The result does not depend on it (module docs)."""
    raw = os.environ.get("ARBORAG_CLUSTER_THREADS", "").strip()
    if raw:
        try:
            return max(1, int(raw))
        except ValueError:
            pass
    return usable_cores()


def _fit_local_recorded(x: np.ndarray, cfg: ClusterConfig, record: bool) -> tuple[list[Cluster], ClusterStats, list[Any] | None]:
    """:func:`_fit_local` with its own counters and, when ``record``, its own list of fits (a
    thread of :func:`_local_fits`, or the helper process of :mod:`arborag.tasks.cluster.processes`)."""
    st = ClusterStats()
    token = _RECORDING.set([] if record else None)  # this thread's own context
    try:
        local = _fit_local(x, cfg, st)
        return local, st, _RECORDING.get()
    finally:
        _RECORDING.reset(token)


def _local_fits(jobs: list[np.ndarray], cfg: ClusterConfig, stats: ClusterStats | None, lanes: Lanes | None = None) -> Iterator[list[Cluster]]:
    """The local clusterings of ``jobs`` (one per global cluster), in order: on ``lanes`` (this
    process and the run's helper process) when given, else on up to :func:`local_threads` threads
    (UMAP's compiled layout runs without the GIL, but the GMM fits hold it). Each fit is seeded and independent of the others, so the clusters and the
    recorded fits are those of one fit after another (``tests/tasks/cluster/test_cluster_fit.py`` and
    ``tests/tasks/cluster/test_cluster_processes.py`` compare). The fits start largest first (:func:`_largest_first`)."""
    recording = _RECORDING.get()
    record = recording is not None
    fitting = sum(1 for x in jobs if len(x) > cfg.dims + 1)
    if lanes is not None and fitting > 1:
        order = _largest_first(jobs)
        done = lanes.map(_fit_local_recorded, [(jobs[i], cfg, record) for i in order])
        results: list[Any] = [None] * len(jobs)
        for i, result in zip(order, done):
            results[i] = result
        for local, records in _merged(results, stats):
            if recording is not None and records:
                recording.extend(records)
            yield local
        return
    threads = min(local_threads(), fitting)
    if threads <= 1:
        for x in jobs:
            yield _fit_local(x, cfg, stats)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="arborag-cluster") as pool:
        futures = {i: pool.submit(_fit_local_recorded, jobs[i], cfg, record) for i in _largest_first(jobs)}
        for local, records in _merged((futures[i].result() for i in range(len(jobs))), stats):
            if recording is not None and records:
                recording.extend(records)
            yield local


def _largest_first(jobs: Sequence[np.ndarray]) -> list[int]:
    """The order in which to start the local fits: the largest global clusters first (ties in their
    order), so that the last fits to end are small ones and neither lane waits long for the other
    (longest-processing-time-first scheduling; a fit's UMAP layout and GMM fits grow with its rows).
    The results are put back in the jobs' order: the order of starting changes no fit."""
    return sorted(range(len(jobs)), key=lambda i: -len(jobs[i]))


def _fit_local_remote(args: tuple[np.ndarray, ClusterConfig]) -> tuple[list[Cluster], ClusterStats]:
    """:func:`_fit_local` in another process (a fan-out task): same thread limits, own counters."""
    from threadpoolctl import threadpool_limits

    x, cfg = args
    st = ClusterStats()
    with _FIT_LOCK, threadpool_limits(1):
        return _fit_local(x, cfg, st), st


def _merged(results: Iterable[tuple[Any, ...]], stats: ClusterStats | None) -> Iterator[Any]:
    """Each ``(local, counters, *rest)`` with its counters added to ``stats``: ``local`` (or
    ``(local, *rest)`` when there is a rest), in order."""
    for local, st, *rest in results:
        if stats is not None:
            stats.add(st)
        yield (local, *rest) if rest else local


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
    map: MapFn | None = None,
    fitted: list[LevelFit] | None = None,
) -> list[list[tuple[int, float]]]:
    """Soft clusters of the rows of ``vectors`` (docs/METHODS.md §5.2–5.6).

    Returns clusters as lists of ``(row, probability)``, members in row order, clusters sorted
    by their first row. Every row is in at least one cluster; no two clusters have the same
    member set; a cluster over ``cfg.max_cluster_tokens`` tokens has a single member. Pass a
    :class:`ClusterStats` to get counters and timings. ``map`` (e.g. Dask workers through
    Prefect) runs the per-global-cluster local clusterings elsewhere; the result is the same.
    ``fitted``: a list that receives the :class:`LevelFit` of this call (the global and local
    UMAP + GMM fits as data, and each returned cluster's (global, local) origin), which the
    incremental update assigns new rows with.
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

    st = stats if stats is not None or fitted is None else ClusterStats()
    lanes = _lanes_for(n) if map is None else None
    with _FIT_LOCK, threadpool_limits(1):
        token = _RECORDING.set([] if fitted is not None else None)
        try:
            raw = _raptor_pass(x, cfg, st, top=True, map=map, lanes=lanes)
            records = _RECORDING.get()
        finally:
            _RECORDING.reset(token)
        clusters = _guard(raw, x, tok, cfg, st, 0)
    clusters = _canonical(clusters)
    if fitted is not None:
        assert st is not None and records is not None
        fitted.append(_level_fit(x, raw, clusters, records, st.local_ks, cfg))
    covered = np.zeros(n, dtype=bool)
    for c in clusters:
        covered[[r for r, _ in c]] = True
    assert covered.all(), "every row must land in a cluster"
    return clusters


def _lanes_for(n: int) -> Lanes | None:
    """The run's two lanes (:func:`~arborag.tasks.cluster.processes.helper_lanes`) for a level of ``n`` rows:
    from :data:`LANES_MIN_N` rows on (the helper then loads the clustering code, ~4 s of its
    core, while this process runs the global UMAP), or at any size once it has."""
    lanes = helper_lanes()
    if lanes is None or (n < LANES_MIN_N and not lanes.warmed):
        return None
    lanes.warm(warm_up)
    return lanes


def split_cluster(vectors: np.ndarray, n_tokens: Sequence[int] | np.ndarray, probs: Sequence[float], cfg: ClusterConfig) -> list[Cluster]:
    """The build's token guard on one cluster (rows of ``vectors``, in document order, with their
    membership ``probs``): re-clustered, else cut into contiguous token-bounded groups; one group
    when it fits. Used by the incremental update on a cluster that grew."""
    from threadpoolctl import threadpool_limits

    x = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
    tok = np.asarray(n_tokens, dtype=np.int64).reshape(-1)
    with _FIT_LOCK, threadpool_limits(1):
        out = _guard([[(i, float(p)) for i, p in enumerate(probs)]], x, tok, cfg, None, 0)
    return _canonical(out)


def _level_fit(x: np.ndarray, raw: list[Cluster], clusters: list[Cluster], records: list[Any], local_ks: list[int], cfg: ClusterConfig) -> LevelFit:
    """The fits of one top pass as data (rows of ``x``), and each final cluster's origin.

    The top pass fits the global model on the distinct rows, then one local model per global
    cluster of more than dims+1 members, in order (``records``, by :func:`_fit_level`); the raw
    clusters are listed global cluster by global cluster (``local_ks`` of each). A final
    cluster lies inside the raw cluster it came from (the guard only splits), which gives its
    (global, local) origin. When the local fits ran elsewhere (a fan-out ``map``) they are not
    recorded: the update then places a row by the nearest cluster of its global cluster.
    """
    _, inverse = _distinct(x)
    first = np.full(int(inverse.max()) + 1 if len(inverse) else 0, -1, dtype=np.int64)
    for row in range(len(inverse) - 1, -1, -1):
        first[inverse[row]] = row
    nd = len(first)
    global_fit: FitRecord | None = None
    local_fits: list[FitRecord | None] = []
    if nd > cfg.dims + 1 and records:
        reduced, nn, gmm = records[0]
        global_fit = FitRecord.of(first, reduced, nn, gmm)
        probs = global_fit.predict_proba(reduced)
        groups = [np.array([r for r, _ in c], dtype=np.int64) for c in soft_membership(probs, cfg.threshold)] if global_fit.k > 1 else [np.arange(nd)]
        big = [g for g in groups if len(g) > cfg.dims + 1]
        if len(records) - 1 == len(big):
            it = iter(records[1:])
            for g in groups:
                if len(g) > cfg.dims + 1:
                    red, lnn, lg = next(it)
                    local_fits.append(FitRecord.of(first[g], red, lnn, lg))
                else:
                    local_fits.append(None)
        else:
            local_fits = [None] * len(groups)
    origin_of_raw: list[tuple[int, int]] = [(g, loc) for g, n_local in enumerate(local_ks) for loc in range(n_local)]
    if len(origin_of_raw) != len(raw):
        origin_of_raw = [(0, 0)] * len(raw)
    raw_sets = [{r for r, _ in c} for c in raw]
    origins: list[tuple[int, int]] = []
    for c in clusters:
        rows = {r for r, _ in c}
        j = next((j for j, rs in enumerate(raw_sets) if rows <= rs), 0)
        origins.append(origin_of_raw[j] if origin_of_raw else (0, 0))
    return LevelFit(global_fit, local_fits, origins)


# UMAP/numba and BLAS thread limits are process-wide: one clustering at a time per process.
_RECORDING: contextvars.ContextVar[list[Any] | None] = contextvars.ContextVar("arborag_cluster_fits", default=None)
_FIT_LOCK = threading.RLock()
_WARM = False


def warm_up(*, large: bool = False) -> float:
    """Compile umap's numba code (and touch GMM) once per process; returns the seconds spent.

    ``large=True`` also runs a 4,200-point fit (the exact-kNN path fits from 4,096 points take;
    NN-descent, whose compiling this used to pay, now runs only above
    :data:`~arborag.tasks.cluster.knn.EXACT_KNN_MAX` points). Idempotent (the small warm-up).
    """
    global _WARM
    from arborag import phases

    t0 = time.perf_counter()
    from threadpoolctl import threadpool_limits

    with _FIT_LOCK, threadpool_limits(1):
        rng = np.random.default_rng(0)
        cfg = ClusterConfig()
        if not _WARM:
            x = rng.standard_normal((64, 16)).astype(np.float32)
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            red = umap_reduce(x, cfg.dims, 7, cfg.seed, None)
            mixture._fit_gmm(red, 2, cfg.seed, None)
            _WARM = True
        if large:
            x = rng.standard_normal((4200, 16)).astype(np.float32)
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            umap_reduce(x, cfg.dims, 64, cfg.seed, None)
    seconds = time.perf_counter() - t0
    phases.record("UMAP warm-up (JIT)", seconds)
    return seconds
