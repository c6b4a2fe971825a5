"""The exact cosine kNN graph UMAP gets from 4,096 to :data:`EXACT_KNN_MAX` points.

From :data:`UMAP_EXACT_BELOW` points UMAP finds neighbours with NN-descent (pynndescent), whose
distance-specialised numba code is compiled again in every process (75-85 s of a 9,901-point global
fit measured on a shared 2-core box). Up to :data:`EXACT_KNN_MAX` points the clustering hands UMAP
the exact graph instead (its ``precomputed_knn``), computed by scikit-learn's public
``NearestNeighbors(metric="cosine", algorithm="brute")``: 1.9 s at 4,200 x 384 and 5.2 s at
9,901 x 384 on that box, quadratic in the points. Above the limit UMAP runs NN-descent.
"""

from __future__ import annotations

import numpy as np

__all__ = ["EXACT_KNN_MAX", "UMAP_EXACT_BELOW", "cosine_knn"]

#: From this many points UMAP finds neighbours with NN-descent (pynndescent) instead of exact distances.
UMAP_EXACT_BELOW = 4096
#: Up to this many points :func:`cosine_knn` gives UMAP the exact kNN graph instead.
EXACT_KNN_MAX = 50_000
#: MiB of distances scikit-learn computes per block of rows (its ``working_memory``; its default,
#: 1,024, held 1.5 GiB more at 19k points and ~3 GiB at 14k summaries of a 10⁵-leaf build).
KNN_BLOCK_MIB = 128


def cosine_knn(x: np.ndarray, k: int, threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The exact ``k`` nearest neighbours of every row of ``x`` by cosine distance, as UMAP's
    ``precomputed_knn`` wants them: (indices int64 ``(n, k)``, distances float32 ``(n, k)``), each
    row's own index first at distance 0, then its ``k - 1`` nearest other rows by distance.

    scikit-learn's brute-force ``NearestNeighbors`` with one BLAS thread per job and ``threads``
    jobs (default: the cores this process may use); a row's neighbours do not depend on the count.
    An all-zero row is at distance 1 from every other row: its neighbours are the first ``k - 1``
    other rows in index order (scikit-learn would choose among those ties by how the columns were
    split between the jobs).
    """
    from sklearn import config_context
    from sklearn.neighbors import NearestNeighbors
    from threadpoolctl import threadpool_limits

    from arborag.tasks.cluster.processes import usable_cores

    x = np.asarray(x, dtype=np.float32)
    n = len(x)
    k = int(min(max(1, k), n))
    indices = np.empty((n, k), dtype=np.int64)
    dists = np.zeros((n, k), dtype=np.float32)
    indices[:, 0] = np.arange(n)
    if k > 1:
        with threadpool_limits(1), config_context(working_memory=KNN_BLOCK_MIB):
            nn = NearestNeighbors(n_neighbors=k - 1, metric="cosine", algorithm="brute", n_jobs=threads or usable_cores()).fit(x)
            d, i = nn.kneighbors()  # no query: each row's neighbours without the row itself
        indices[:, 1:] = i
        dists[:, 1:] = np.maximum(d, 0.0)
        for z in np.flatnonzero(~x.any(axis=1)):
            others = np.arange(k)
            indices[z, 1:] = others[others != z][: k - 1]
            dists[z, 1:] = 1.0
    return indices, dists
