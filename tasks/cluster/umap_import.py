"""UMAP as arborag runs it: compiled once per machine, and its exact distances in compiled code.

Three costs of a UMAP fit here are not UMAP's method, only how the library runs it; all are
removed without changing a single number it computes.

1. **Compiling in every process.** umap-learn decorates ~125 functions with ``numba.njit``
   and only one asks numba to cache its machine code (``cache=True``); pynndescent caches
   most of its own. So every new process compiled UMAP again — 15-50 s of a cold build on this
   2-core machine (more under load), before any work. :func:`import_umap` imports umap (and
   pynndescent) with numba's on-disk cache switched on for every function they define while
   being imported: ``numba.njit`` and ``numba.vectorize`` are wrapped for the duration of that
   import only, adding ``cache=True`` where the library did not say. The cache lives in
   ``NUMBA_CACHE_DIR`` (:func:`arborag.env.offline_env` points it at a user-level folder,
   ``~/.cache/arborag/numba``), keyed by numba on each source file's path and modification
   time, so a machine compiles a given umap install once; a function numba cannot cache is
   compiled as before (numba's warning about it is silenced).
2. **Exact distances one Python call per pair.** Below 4,096 points UMAP computes all pairwise
   distances with ``sklearn.metrics.pairwise_distances(X, metric=umap.distances.cosine)``:
   sklearn calls the compiled ``cosine`` from Python once per pair (n²/2 calls, ~2 million at
   2,000 points; measured 12 s of a 2,000-point fit on a loaded box, most of its time). The
   same matrix is computed by :func:`cosine_matrix` in compiled code that sums each pair as
   ``umap.distances.cosine`` does (the same float32 products into one float64 sum, in the same
   order, without fastmath, so each value is IEEE-exact), eight pairs side by side, rounded to
   float32 and mirrored as sklearn does — bit-identical (``tests/tasks`` checks it).
   :func:`import_umap` points ``umap.umap_.pairwise_distances`` at :func:`pairwise_distances`,
   which takes that path only for UMAP's cosine on a dense float32 matrix and hands every other
   call to sklearn unchanged.
3. **A full sort of every row for k neighbours.** UMAP then takes each point's neighbours from
   that matrix with ``umap.utils.fast_knn_indices``: a stable argsort of every row, the first k.
   :func:`knn_indices` (which :func:`import_umap` puts in its place) returns the same indices in
   the same order from a partition and a sort of the k found (4.7x faster on the 1x leaves,
   benchmarks/results/exact_neighbours.md).

Everything else (the fuzzy graph, spectral init, the SGD layout, its epochs and its seed) is UMAP's
own. UMAP's module calls its layout through :func:`timed_layout`, which only counts the CPU seconds
of this thread's one-thread layouts (:func:`layout_thread_seconds`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["EXACT_KNN_MAX", "UMAP_EXACT_BELOW", "cosine_knn", "cosine_matrix", "import_umap", "knn_indices", "layout_compiled",
           "layout_thread_seconds", "pairwise_distances", "timed_layout", "usable_cores"]

_LOCK = threading.Lock()
_UMAP: Any = None
_SKLEARN_PAIRWISE: Any = None
_COSINE_MATRIX: Any = None
_UMAP_KNN: Any = None
_KNN_ROWS: Any = None


@contextlib.contextmanager
def _numba_cache_on() -> Iterator[None]:
    """``numba.njit`` / ``numba.vectorize`` default to ``cache=True`` for the block (module imports)."""
    import numba

    njit, vectorize = numba.njit, numba.vectorize

    def cached_njit(*args: Any, **kw: Any) -> Any:
        kw.setdefault("cache", True)
        kw.setdefault("nogil", True)
        return njit(*args, **kw)

    def cached_vectorize(*args: Any, **kw: Any) -> Any:
        kw.setdefault("cache", True)
        return vectorize(*args, **kw)

    numba.njit, numba.vectorize = cached_njit, cached_vectorize
    try:
        yield
    finally:
        numba.njit, numba.vectorize = njit, vectorize


def _ensure_cache_dir() -> None:
    """numba's cache folder: ``NUMBA_CACHE_DIR`` if numba read one, else arborag's user-level default."""
    import numba

    if not numba.config.CACHE_DIR:
        from arborag.env import numba_cache_dir

        folder = numba_cache_dir()
        if folder is not None:
            numba.config.CACHE_DIR = str(folder)


def layout_compiled() -> bool:
    """False when arborag's numba cache folder (``NUMBA_CACHE_DIR``) holds no compiled UMAP SGD
    layout yet: the next fit compiles it (15-50 s, once per machine; ``scripts/install.sh`` does it
    at install). True when it is there or the folder is not known (nothing to say). No import."""
    import glob

    folder = os.environ.get("NUMBA_CACHE_DIR")
    if not folder or not os.path.isdir(folder):
        return True
    return bool(glob.glob(os.path.join(glob.escape(folder), "umap_*", "layouts._optimize_layout_euclidean_single_epoch-*.nbi")))


def import_umap() -> Any:
    """The ``umap`` module, imported once per process with numba's on-disk cache on (module docs)."""
    global _UMAP
    if _UMAP is not None:
        return _UMAP
    with _LOCK:
        if _UMAP is None:
            import sys

            from arborag import phases

            fresh = "umap" not in sys.modules
            with warnings.catch_warnings(), phases.phase("import umap (numba's cached code)"):
                warnings.simplefilter("ignore")  # numba: "cannot cache ..."; umap: tensorflow absent
                if fresh:
                    _ensure_cache_dir()
                    with _numba_cache_on():
                        import umap
                        import umap.umap_  # noqa: F401
                else:  # imported before us (a library, a notebook): used as it is
                    import umap
                    import umap.umap_  # noqa: F401
            _install_pairwise(umap.umap_)
            _install_knn(umap.umap_)
            _install_layout(umap.umap_)
            _UMAP = umap
    return _UMAP


def _install_pairwise(module: Any) -> None:
    global _SKLEARN_PAIRWISE
    current = getattr(module, "pairwise_distances", None)
    if current is pairwise_distances:
        return
    _SKLEARN_PAIRWISE = current
    module.pairwise_distances = pairwise_distances


def _install_knn(module: Any) -> None:
    global _UMAP_KNN
    current = getattr(module, "fast_knn_indices", None)
    if current is knn_indices or current is None:
        return
    _UMAP_KNN = current
    module.fast_knn_indices = knn_indices


_LAYOUT_CLOCK = threading.local()
_UMAP_LAYOUT: Any = None


def layout_thread_seconds() -> float:
    """CPU seconds this thread has spent in UMAP's one-thread SGD layout so far (a caller takes the
    difference around a fit). The global fit's is the part of a level nothing else of the method
    can run beside (``benchmarks/cold_path.py``: the method's critical path)."""
    return float(getattr(_LAYOUT_CLOCK, "cpu", 0.0))


def timed_layout(*args: Any, **kwargs: Any) -> Any:
    """UMAP's own ``optimize_layout_euclidean`` with the same arguments and result, its thread CPU
    seconds added to :func:`layout_thread_seconds` (a ``parallel=True`` layout is not counted)."""
    t0 = time.thread_time()
    try:
        return _UMAP_LAYOUT(*args, **kwargs)
    finally:
        if not kwargs.get("parallel", False):
            _LAYOUT_CLOCK.cpu = layout_thread_seconds() + (time.thread_time() - t0)


def _install_layout(module: Any) -> None:
    """UMAP's fits call :func:`timed_layout`, which calls UMAP's own layout."""
    global _UMAP_LAYOUT
    current = getattr(module, "optimize_layout_euclidean", None)
    if current is timed_layout or current is None:
        return
    _UMAP_LAYOUT = current
    module.optimize_layout_euclidean = timed_layout


def _cosine_matrix_fn() -> Any:
    """The compiled kernels (built on first use, cached on disk like the rest): each row's
    squared norm once, then a row's distances to the rows after it. Every value is the one
    ``umap.distances.cosine`` returns for the pair: the same float32 products summed into the
    same float64 accumulator in the same order, no fastmath (so LLVM may not reorder), only the
    two norms read from where they were summed once instead of being summed again per pair, and
    eight pairs summed side by side (independent sums: ~1.8x faster than one after the other,
    benchmarks/results/exact_neighbours.md)."""
    global _COSINE_MATRIX
    if _COSINE_MATRIX is None:
        import numba

        def _norms(x: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
            n = x.shape[0]
            out = np.zeros(n, dtype=np.float64)
            for i in range(n):
                norm = 0.0
                for k in range(x.shape[1]):
                    norm += x[i, k] ** 2  # as umap.distances.cosine: float32 ** 2 into a float64
                out[i] = norm
            return out

        def _mirror(out: np.ndarray, first: int, step: int) -> None:  # pragma: no cover - compiled
            # the lower triangle from the upper one, in tiles (a column walk misses the cache every step)
            n = out.shape[0]
            for b in range(first * 64, n, step * 64):
                for c in range(0, b + 64, 64):
                    for i in range(c, min(c + 64, n)):
                        for j in range(max(b, i + 1), min(b + 64, n)):
                            out[j, i] = out[i, j]

        # The kernels call no other compiled function of ours: numba's on-disk cache keys a closure by
        # its cells' pickles, and a dispatcher pickles with a per-process id, so a kernel calling one
        # would be compiled again in every process.
        def _rows(x: np.ndarray, xt: np.ndarray, norms: np.ndarray, out: np.ndarray, first: int, step: int) -> None:  # pragma: no cover - compiled
            # row i against eight rows j at a time (xt: x transposed): eight independent float64 sums,
            # each over k in order as umap.distances.cosine sums one pair — the same values, without
            # every add waiting for the one before it
            n = x.shape[0]
            dims = x.shape[1]
            for i in range(first, n, step):
                norm_x = norms[i]
                for j0 in range(i, n, 8):
                    m = min(8, n - j0)
                    if m == 8:
                        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
                        for k in range(dims):
                            xi = x[i, k]
                            a0 += xi * xt[k, j0]
                            a1 += xi * xt[k, j0 + 1]
                            a2 += xi * xt[k, j0 + 2]
                            a3 += xi * xt[k, j0 + 3]
                            a4 += xi * xt[k, j0 + 4]
                            a5 += xi * xt[k, j0 + 5]
                            a6 += xi * xt[k, j0 + 6]
                            a7 += xi * xt[k, j0 + 7]
                        sums = (a0, a1, a2, a3, a4, a5, a6, a7)
                    else:
                        part = np.zeros(8)
                        for jj in range(m):
                            result = 0.0
                            for k in range(dims):
                                result += x[i, k] * xt[k, j0 + jj]
                            part[jj] = result
                        sums = (part[0], part[1], part[2], part[3], part[4], part[5], part[6], part[7])
                    for jj in range(m):
                        j = j0 + jj
                        norm_y = norms[j]
                        if norm_x == 0.0 and norm_y == 0.0:
                            d = 0.0
                        elif norm_x == 0.0 or norm_y == 0.0:
                            d = 1.0
                        else:
                            d = 1.0 - (sums[jj] / np.sqrt(norm_x * norm_y))
                        v = np.float32(d)
                        if j == i:
                            out[i, i] = v
                        else:
                            # sklearn: out[i, j] = metric(x_i, x_j) (float64 -> float32), then out + out.T;
                            # out[j, i] = 0 + v = v + 0 is set by _mirror
                            out[i, j] = v + np.float32(0.0)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _COSINE_MATRIX = (numba.njit(cache=True, nogil=True)(_norms), numba.njit(cache=True, nogil=True)(_rows),
                              numba.njit(cache=True, nogil=True)(_mirror))
    return _COSINE_MATRIX


#: Below this many rows the matrix is computed on the calling thread (threads cost more than they save).
_THREADED_MIN = 1024


def usable_cores() -> int:
    """The cores this process may use (its CPU affinity), at most 8: the default thread count of
    the distance kernels here and of the local clusterings (:func:`arborag.tasks.cluster.fit.local_threads`)."""
    try:
        return max(1, min(8, len(os.sched_getaffinity(0))))
    except (AttributeError, OSError):
        return max(1, min(8, os.cpu_count() or 1))


def cosine_matrix(x: np.ndarray, threads: int | None = None) -> np.ndarray:
    """``sklearn.metrics.pairwise_distances(x, metric=umap.distances.cosine)``, bit for bit, compiled.

    ``x``: a dense 2-D float32 array. float32 ``(n, n)``; the diagonal is each row's own distance.
    From :data:`_THREADED_MIN` rows on, rows are dealt round-robin to ``threads`` (default: the
    cores this process may use) threads running the kernel without the GIL; every entry is written
    by exactly one of them, so the matrix does not depend on the count."""
    import_umap()
    norms_fn, rows_fn, mirror_fn = _cosine_matrix_fn()
    x = np.ascontiguousarray(x, dtype=np.float32)
    n = len(x)
    out = np.zeros((n, n), dtype=np.float32)
    norms = norms_fn(x)
    xt = np.ascontiguousarray(x.T)
    workers = (threads or usable_cores()) if n >= _THREADED_MIN else 1
    _dealt(rows_fn, (x, xt, norms, out), workers, "arborag-cosine")
    _dealt(mirror_fn, (out,), workers, "arborag-cosine")
    return out


def _dealt(kernel: Any, args: tuple[Any, ...], workers: int, name: str) -> None:
    """``kernel(*args, first, step)`` — a compiled kernel that takes its rows (or tiles of rows) ``first, first + step, ...``
    without the GIL — on ``workers`` threads (``first`` = 0..workers-1, ``step`` = workers), or here
    as ``(0, 1)`` for one worker. Each row is handled by one thread, so the result does not depend
    on the count."""
    if workers <= 1:
        kernel(*args, 0, 1)
        return
    pool = [threading.Thread(target=kernel, args=(*args, t, workers), name=name) for t in range(workers)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


#: From this many points UMAP finds neighbours with NN-descent (pynndescent) instead of exact distances.
UMAP_EXACT_BELOW = 4096
#: Up to this many points :func:`cosine_knn` gives UMAP the exact kNN graph instead (quadratic work:
#: ~1.5 s of one core at 10,000 x 384 — measured; NN-descent compiles ~40-80 s of numba code in every
#: process, as its distance-specialised functions cannot be cached on disk).
EXACT_KNN_MAX = 50_000


def cosine_knn(x: np.ndarray, k: int, threads: int | None = None, block: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The exact ``k`` nearest neighbours of every row of ``x`` by cosine distance, as UMAP's
    ``precomputed_knn`` wants them: (indices int64 ``(n, k)``, distances float32 ``(n, k)``), each
    row's own index first at distance 0, then the others by (distance, index) ascending.

    Distances are ``1 - <x_i, x_j> / (|x_i| |x_j|)`` in float64 (rows normalised once; a zero row
    is at distance 1 from every other row), computed block by block with one-threaded BLAS on up
    to ``threads`` threads (each block on one thread, so the values do not depend on the count)
    and rounded to float32 as UMAP's own distances are. Ties are broken by index, so the graph
    is a function of the rows alone. Memory: one ``block x n`` float64 buffer per thread."""
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    x64 = np.asarray(x, dtype=np.float64)
    n = len(x64)
    k = int(min(max(1, k), n))
    norms = np.sqrt(np.einsum("ij,ij->i", x64, x64))
    unit = np.divide(x64, norms[:, None], out=np.zeros_like(x64), where=norms[:, None] > 0)
    step = block or max(64, min(1024, (1 << 23) // max(n, 1)))
    indices = np.empty((n, k), dtype=np.int64)
    dists = np.empty((n, k), dtype=np.float32)

    def one(start: int) -> None:
        stop = min(n, start + step)
        d = 1.0 - unit[start:stop] @ unit.T
        rows = np.arange(stop - start)
        d[rows, np.arange(start, stop)] = -np.inf  # self first, whatever the rounding says
        if k < n:
            part = np.argpartition(d, k - 1, axis=1)[:, :k]
        else:
            part = np.broadcast_to(np.arange(n), d.shape).copy()
        vals = np.take_along_axis(d, part, axis=1)
        order = np.lexsort((part, vals), axis=1)  # by distance, then index
        idx = np.take_along_axis(part, order, axis=1)
        val = np.take_along_axis(vals, order, axis=1)
        val[:, 0] = 0.0
        indices[start:stop] = idx
        dists[start:stop] = np.maximum(val, 0.0).astype(np.float32)

    starts = list(range(0, n, step))
    workers = max(1, min(threads or usable_cores(), len(starts)))
    with threadpool_limits(1):
        if workers == 1:
            for s in starts:
                one(s)
        else:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="arborag-knn") as pool:
                list(pool.map(one, starts))
    return indices, dists


def _knn_rows_fn() -> Any:
    """The compiled kernel of :func:`knn_indices` (built on first use, cached on disk)."""
    global _KNN_ROWS
    if _KNN_ROWS is None:
        import numba

        def _knn_rows(d: np.ndarray, k: int, out: np.ndarray, first: int, step: int) -> None:  # pragma: no cover - compiled
            n = d.shape[1]
            cand = np.empty(n, dtype=np.int64)
            for r in range(first, d.shape[0], step):
                row = d[r]
                if np.isnan(row).any():  # NaN has no place in an order: UMAP's own sort decides
                    out[r] = row.argsort(kind="mergesort")[:k]
                    continue
                t = np.partition(row, k - 1)[k - 1]  # the k-th smallest value
                m = 0
                for c in range(n):  # below it, in index order
                    if row[c] < t:
                        cand[m] = c
                        m += 1
                for c in range(n):  # equal to it, in index order, as many as are left
                    if m == k:
                        break
                    if row[c] == t:
                        cand[m] = c
                        m += 1
                # a stable sort by value keeps index order among equal values: (value, index) order,
                # which is the stable argsort's order of the whole row
                order = row[cand[:k]].argsort(kind="mergesort")
                for q in range(k):
                    out[r, q] = cand[order[q]]

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _KNN_ROWS = numba.njit(cache=True, nogil=True)(_knn_rows)
    return _KNN_ROWS


def knn_indices(X: Any, n_neighbors: int) -> Any:
    """``umap.utils.fast_knn_indices`` (what UMAP runs on a precomputed distance matrix: each row's
    stable merge-sort argsort, the first ``n_neighbors``), equal to it, without sorting every row.

    The first ``k`` of a stable argsort are the ``k`` smallest entries by (value, index): the entries
    below the row's k-th smallest value (found by a partition), then entries equal to it in index
    order, sorted stably by value. A row with a NaN is argsorted as UMAP does. Rows are dealt to the
    cores' threads from :data:`_THREADED_MIN` rows on; each row is written by one thread.
    int32 ``(n, n_neighbors)`` as UMAP's."""
    k = int(n_neighbors)
    if not (isinstance(X, np.ndarray) and X.ndim == 2 and X.dtype in (np.float32, np.float64) and 1 <= k <= X.shape[1]):
        assert _UMAP_KNN is not None
        return _UMAP_KNN(X, n_neighbors)
    rows_fn = _knn_rows_fn()
    d = np.ascontiguousarray(X)
    out = np.empty((d.shape[0], k), dtype=np.int32)
    _dealt(rows_fn, (d, k, out), usable_cores() if len(d) >= _THREADED_MIN else 1, "arborag-knn")
    return out


def pairwise_distances(X: Any, Y: Any = None, metric: Any = "euclidean", **kwds: Any) -> Any:
    """What UMAP calls for exact distances: :func:`cosine_matrix` for its own cosine on one dense
    float32 matrix with no extra options, sklearn's ``pairwise_distances`` for everything else."""
    from umap.distances import cosine

    if (metric is cosine and Y is None and not kwds and isinstance(X, np.ndarray) and X.ndim == 2
            and X.dtype == np.float32 and len(X) > 1):
        return cosine_matrix(X)
    assert _SKLEARN_PAIRWISE is not None
    return _SKLEARN_PAIRWISE(X, Y, metric=metric, **kwds)
