"""UMAP of one clustering fit: cosine, seeded, to a few dimensions (PCA when UMAP fails).

:func:`umap_reduce` runs umap-learn's ``UMAP`` (imported by :mod:`arborag.tasks.cluster.umap_import`
with its compiled code cached on disk). From :data:`~arborag.tasks.cluster.knn.UMAP_EXACT_BELOW` to
:data:`~arborag.tasks.cluster.knn.EXACT_KNN_MAX` points UMAP gets the exact cosine kNN graph
(:func:`~arborag.tasks.cluster.knn.cosine_knn`) instead of running NN-descent. On graphs where
UMAP's spectral init would not be reproducible (:func:`umap_init`) the same spectral embedding is
computed exactly and passed as the init.
"""

from __future__ import annotations

import logging
import time
import warnings
from typing import Any

import numpy as np

from arborag.tasks.cluster.knn import EXACT_KNN_MAX, UMAP_EXACT_BELOW, cosine_knn
from arborag.tasks.cluster.mixture import ClusterStats
from arborag.tasks.cluster.umap_import import import_umap

__all__ = ["lanczos_breaks_down", "pca", "pca_project", "umap_init", "umap_reduce"]

log = logging.getLogger("arborag.tasks.cluster")


def pca(x: np.ndarray, dims: int) -> np.ndarray:
    xc = x - x.mean(axis=0, keepdims=True)
    u, s, _ = np.linalg.svd(xc.astype(np.float64), full_matrices=False)
    out = u[:, :dims] * s[:dims]
    if out.shape[1] < dims:
        out = np.pad(out, ((0, 0), (0, dims - out.shape[1])))
    # fix the sign of each component so the result does not depend on the LAPACK build
    signs = np.sign(out[np.argmax(np.abs(out), axis=0), np.arange(dims)])
    signs[signs == 0] = 1
    return (out * signs).astype(np.float32)


def pca_project(x: np.ndarray, dims: int) -> np.ndarray:
    """``x`` centred and projected on its first ``dims`` principal components (float32).

    The components come from the d x d covariance (float64 ``eigh``), so memory stays O(n * d)
    however many rows there are; each component's sign is fixed by its largest-magnitude
    loading, so the result does not depend on the LAPACK build. ``dims >= x.shape[1]`` returns
    ``x`` unchanged."""
    n, d = x.shape
    if dims >= d:
        return x
    mean = x.mean(axis=0, dtype=np.float64)
    xc = x.astype(np.float64) - mean
    values, vectors = np.linalg.eigh(xc.T @ xc)
    comp = vectors[:, np.argsort(values, kind="stable")[::-1][:dims]]
    flip = np.sign(comp[np.abs(comp).argmax(axis=0), np.arange(dims)])
    comp = comp * np.where(flip == 0, 1.0, flip)
    return np.ascontiguousarray(xc @ comp, dtype=np.float32)


#: Up to this many points the spectral init is checked (and computed exactly when ARPACK would
#: break down); above it a kNN graph with the symmetry that causes the breakdown is not met in
#: practice (rows are distinct), and checking would compute the kNN graph twice.
_SPECTRAL_CHECK_MAX = 64


def lanczos_breaks_down(lap: np.ndarray, k: int) -> bool:
    """Whether ARPACK's Lanczos run on ``lap`` from the start vector ``ones`` (as UMAP's spectral
    layout calls ``eigsh(lap, k, ncv=max(2k + 1, sqrt n), v0=ones)``) meets an invariant
    subspace before it has its ``ncv`` basis vectors — the point where ARPACK restarts from its
    own, unseeded random state. Lanczos with full re-orthogonalisation, exact for small ``n``."""
    n = len(lap)
    ncv = min(max(2 * k + 1, int(np.sqrt(n))), n)
    basis = np.zeros((n, ncv))
    basis[:, 0] = 1.0 / np.sqrt(n)
    scale = max(float(np.abs(lap).sum(axis=1).max()), 1e-300)
    for j in range(1, ncv):
        w = lap @ basis[:, j - 1]
        for _ in range(2):
            w -= basis[:, :j] @ (basis[:, :j].T @ w)
        beta = float(np.linalg.norm(w))
        if beta <= 1e-10 * scale:
            return True
        basis[:, j] = w / beta
    return False


def umap_init(x: np.ndarray, n_neighbors: int, dims: int, seed: int) -> str | np.ndarray:
    """UMAP's ``init`` for ``x``: ``"spectral"`` (its default) whenever that is reproducible.

    UMAP computes the spectral init with ARPACK from the start vector ``ones``. On a small,
    symmetric fuzzy graph (a few points, weights all 1) that vector lies in an invariant
    subspace, the Lanczos iteration breaks down and ARPACK restarts from its own process-wide
    random state, which ``random_state`` does not reach: the embedding — and so the clusters —
    changed from call to call in one process (measured: 4 leaves, ``n_neighbors`` 2, two
    different clusterings in four calls, so per-document trees of small documents differed
    between two builds of the same leaves; cause as analysed in lmcinnes/umap#1277). So for up
    to :data:`_SPECTRAL_CHECK_MAX` points the graph UMAP will build is built here too and the
    breakdown tested (:func:`lanczos_breaks_down`); only when it would happen, the same spectral
    embedding is computed exactly (dense ``eigh`` of the normalised Laplacian, signs fixed) and
    passed as the init — or, on a disconnected graph (UMAP lays out each component), UMAP's
    seeded ``"random"`` init. Everywhere else nothing changes."""
    n = len(x)
    if n > _SPECTRAL_CHECK_MAX:
        return "spectral"
    from scipy.sparse.csgraph import connected_components
    from sklearn.metrics import pairwise_distances

    fuzzy_simplicial_set = import_umap().umap_.fuzzy_simplicial_set

    # the graph UMAP.fit builds for small data: exact cosine distances, precomputed
    graph = fuzzy_simplicial_set(pairwise_distances(x, metric="cosine"), n_neighbors, np.random.RandomState(seed), "precomputed")[0]
    g = np.asarray(graph.todense(), dtype=np.float64)
    k = dims + 1
    n_comp, labels = connected_components(graph, directed=False)
    if n_comp > 1:
        for c in range(n_comp):
            sub = g[np.ix_(labels == c, labels == c)]
            if len(sub) < 2 * dims or len(sub) <= k:
                continue  # UMAP places such a component with its seeded generator
            sq = np.sqrt(sub.sum(axis=0))
            if lanczos_breaks_down(np.eye(len(sub)) - sub / np.outer(sq, sq), k):
                return "random"
        return "spectral"
    sq = np.sqrt(g.sum(axis=0))
    lap = np.eye(n) - g / np.outer(sq, sq)
    if not lanczos_breaks_down(lap, k):
        return "spectral"
    values, vectors = np.linalg.eigh(lap)
    init = vectors[:, np.argsort(values, kind="stable")[1:k]]
    flip = np.sign(init[np.abs(init).argmax(axis=0), np.arange(init.shape[1])])
    return np.ascontiguousarray(init * np.where(flip == 0, 1.0, flip), dtype=np.float32)


def umap_reduce(x: np.ndarray, dims: int, n_neighbors: int, seed: int, stats: ClusterStats | None) -> np.ndarray:
    """UMAP of ``x`` (float32, distinct rows) to ``dims`` dims, cosine, seeded; PCA if UMAP fails."""
    n = len(x)
    dims = max(1, min(dims, n - 2))
    n_neighbors = max(2, min(n_neighbors, n - 1))
    t0, c0 = time.perf_counter(), time.thread_time()
    try:
        umap = import_umap()
        knn: tuple[Any, ...] = (None, None, None)
        if UMAP_EXACT_BELOW <= n <= EXACT_KNN_MAX:  # exact neighbours where UMAP would run NN-descent
            knn = cosine_knn(x, n_neighbors)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reducer = umap.UMAP(
                n_neighbors=n_neighbors,
                n_components=dims,
                metric="cosine",
                random_state=seed,
                n_jobs=1,
                init=umap_init(x, n_neighbors, dims, seed),
                precomputed_knn=knn,
            )
            out = np.asarray(reducer.fit_transform(np.ascontiguousarray(x, dtype=np.float32)), dtype=np.float32)
        if not np.isfinite(out).all():
            raise FloatingPointError("UMAP produced non-finite coordinates")
    except Exception as exc:  # noqa: BLE001 - umap/scipy raise many types on degenerate inputs
        log.warning("UMAP failed on %d points (%r); using PCA for this reduction", n, exc)
        out = pca(x, dims)
    if stats is not None:
        stats.umap_fits += 1
        stats.umap_s += time.perf_counter() - t0
        stats.umap_cpu_s += time.thread_time() - c0
    return out
