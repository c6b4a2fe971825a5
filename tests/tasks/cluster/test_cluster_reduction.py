"""The UMAP of one clustering fit (tasks/cluster/reduction.py) and its exact kNN graph
(tasks/cluster/knn.py)."""

from __future__ import annotations

import numpy as np
from helpers.vectors import blobs

from arborag.config import ClusterConfig
from arborag.tasks.cluster import reduction
from arborag.tasks.cluster.fit import cluster_level
from arborag.tasks.cluster.knn import cosine_knn
from arborag.tasks.cluster.reduction import lanczos_breaks_down, umap_init, umap_reduce
from arborag.tasks.cluster.umap_import import import_umap


def _arc(n: int, step: float = 0.1) -> np.ndarray:
    """``n`` unit vectors on an arc: with n_neighbors 2 the fuzzy graph is a path with weights 1,
    symmetric, the case where ARPACK's Lanczos run from ``ones`` breaks down."""
    t = np.arange(n) * step
    x = np.zeros((n, 16), np.float32)
    x[:, 0], x[:, 1] = np.cos(t), np.sin(t)
    return x


def test_umap_is_reproducible_on_a_tiny_symmetric_graph() -> None:
    """Found by the per-document update: 4 leaves gave two different clusterings in four calls
    in one process (ARPACK restarted from its own unseeded state). The exact spectral init is
    used there, and the result no longer depends on what ran before."""

    x = _arc(4)
    init = umap_init(x, 2, 2, 224)
    assert isinstance(init, np.ndarray) and init.shape == (4, 2)
    cfg = ClusterConfig(dims=2)
    outs = []
    for i in range(4):
        umap_reduce(_arc(5 + i, 0.3), 2, 3, 7, None)  # other work in between moves any process-wide state
        outs.append(umap_reduce(x, 2, 2, 224, None))
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])
    first = cluster_level(x, [5] * 4, cfg)
    assert all(cluster_level(x, [5] * 4, cfg) == first for _ in range(3))
    # a generic graph keeps UMAP's own spectral init (nothing changes for ordinary inputs)
    rng = np.random.default_rng(0)
    y = rng.standard_normal((40, 16)).astype(np.float32)
    assert umap_init(y, 6, 10, 224) == "spectral"
    path = np.eye(4) - np.diag([1.0, 1.0, 1.0], 1) / 2 - np.diag([1.0, 1.0, 1.0], -1) / 2
    assert lanczos_breaks_down(path, 3)  # ones spans only the symmetric eigenvectors of a path


def test_cosine_knn_is_the_exact_graph_self_first_and_thread_independent():
    from sklearn.metrics import pairwise_distances

    x, _ = blobs([60, 50, 40], dim=32, spread=0.4, seed=9)
    x[7] = 0.0  # a zero row: distance 1 to every other row
    idx, dist = cosine_knn(x, 12, threads=1)
    assert idx.shape == dist.shape == (len(x), 12) and idx.dtype == np.int64 and dist.dtype == np.float32
    want = pairwise_distances(x.astype(np.float64), metric="cosine")
    np.fill_diagonal(want, -1.0)
    assert np.array_equal(idx[:, 0], np.arange(len(x))) and not dist[:, 0].any()  # each row itself first, at 0
    assert all(len(set(row)) == 12 for row in idx.tolist())
    # the k-1 others are the nearest ones: their distances are the k-1 smallest, ascending
    nearest = np.sort(want, axis=1)[:, 1:12]
    assert np.allclose(dist[:, 1:], nearest, atol=1e-6)
    assert np.allclose(np.take_along_axis(want, idx[:, 1:], axis=1), nearest, atol=1e-6)
    assert np.all(np.diff(dist, axis=1) >= 0)
    assert idx[7].tolist() == [7, *range(7), *range(8, 12)] and (dist[7, 1:] == 1.0).all()  # ties: index order
    for threads in (2, 3):
        i2, d2 = cosine_knn(x, 12, threads=threads)
        assert np.array_equal(i2, idx) and np.array_equal(d2, dist)
    one, zero = cosine_knn(x[:5], 1)
    assert np.array_equal(one[:, 0], np.arange(5)) and not zero.any()


def test_fits_above_the_exact_limit_get_the_exact_knn_not_nn_descent(monkeypatch):
    """From UMAP_EXACT_BELOW points (4,096; lowered here) UMAP gets cosine_knn's graph and never
    runs NN-descent (whose numba code is compiled again in every process); same input, same fit."""
    umap = import_umap()

    def no_nn_descent(*a, **k):
        raise AssertionError("NN-descent ran")

    monkeypatch.setattr(umap.umap_, "nearest_neighbors", no_nn_descent)
    monkeypatch.setattr(reduction, "UMAP_EXACT_BELOW", 50)
    x, _ = blobs([40, 30, 30], dim=32, spread=0.3, seed=2)
    a = reduction.umap_reduce(x, 5, 15, 224, None)
    assert np.array_equal(a, reduction.umap_reduce(x, 5, 15, 224, None))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = umap.UMAP(n_neighbors=15, n_components=5, metric="cosine", random_state=224, n_jobs=1,
                         precomputed_knn=cosine_knn(x, 15)).fit_transform(x)
    assert np.array_equal(a, want)
