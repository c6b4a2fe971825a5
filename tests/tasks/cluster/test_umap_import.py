"""UMAP as arborag runs it (tasks/cluster/umap_import.py): the same numbers, compiled once per machine."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from arborag.env import numba_cache_dir
from arborag.tasks.cluster import umap_import as umap_runtime
from arborag.tasks.cluster.umap_import import cosine_matrix, import_umap


def _sklearn(x: np.ndarray) -> np.ndarray:
    from sklearn.metrics import pairwise_distances
    from umap.distances import cosine

    return pairwise_distances(x, metric=cosine)


def test_cosine_matrix_is_bit_identical_to_umaps_own_distances():
    import_umap()
    rng = np.random.default_rng(3)
    for n, d in ((2, 3), (40, 384), (257, 10)):
        x = rng.standard_normal((n, d)).astype(np.float32)
        x[0] = 0.0  # a zero row (distance 1 to others, 0 to itself)
        x[-1] = x[1]  # a duplicate
        got, want = cosine_matrix(x), _sklearn(x)
        assert got.dtype == want.dtype == np.float32
        assert np.array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want))


def test_cosine_matrix_threads_do_not_change_a_bit():
    """From umap_runtime._THREADED_MIN rows on, rows are dealt to threads: the same matrix as one
    thread (which the test above ties to sklearn + UMAP's cosine), for any thread count."""
    import_umap()
    rng = np.random.default_rng(11)
    x = rng.standard_normal((umap_runtime._THREADED_MIN + 37, 24)).astype(np.float32)
    x[5] = 0.0
    one = cosine_matrix(x, threads=1)
    for threads in (2, 3):
        assert np.array_equal(cosine_matrix(x, threads=threads), one)
    assert np.array_equal(one[:60, :60], _sklearn(x[:60]))


def _same_fit_with(name: str, umaps_own: object, seed: int, n: int, n_neighbors: int) -> None:
    """A seeded cosine UMAP fit of ``n`` random rows with arborag's ``umap.umap_.<name>`` and with
    UMAP's own ``umaps_own`` in its place: identical coordinates."""
    umap = import_umap()
    x = np.random.default_rng(seed).standard_normal((n, 32)).astype(np.float32)

    def fit() -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return umap.UMAP(n_neighbors=n_neighbors, n_components=4, metric="cosine", random_state=224, n_jobs=1,
                             n_epochs=50).fit_transform(x)

    ours = getattr(umap.umap_, name)
    assert ours is not umaps_own
    fast = fit()
    setattr(umap.umap_, name, umaps_own)
    try:
        slow = fit()
    finally:
        setattr(umap.umap_, name, ours)
    assert np.array_equal(fast, slow)


def test_umap_embedding_unchanged_by_the_compiled_distances():
    """A fit through UMAP's own sklearn path and through the compiled matrix: identical coordinates."""
    import_umap()
    _same_fit_with("pairwise_distances", umap_runtime._SKLEARN_PAIRWISE, seed=5, n=90, n_neighbors=9)


def test_knn_indices_equal_umaps_own_sort():
    """knn_indices (a partition, then a sort of the k found) against UMAP's fast_knn_indices (a
    stable argsort of every row): the same indices in the same order — ties, duplicates, NaN, any k."""
    import_umap()
    umaps = umap_runtime._UMAP_KNN
    assert umaps is not None and umaps is not umap_runtime.knn_indices
    rng = np.random.default_rng(17)
    x = rng.standard_normal((300, 16)).astype(np.float32)
    x[7] = x[3]  # duplicate rows: distance-0 ties
    x[8] = x[3]
    d = cosine_matrix(x)
    coarse = np.round(d, 1)  # many ties at every rank
    with_nan = d.copy()
    with_nan[5, 40] = np.nan  # a row UMAP's own sort orders
    for m in (d, coarse, with_nan, d.astype(np.float64)):
        for k in (1, 2, 17, 299, 300):
            got = umap_runtime.knn_indices(m, k)
            want = umaps(m, k)
            assert got.dtype == want.dtype == np.int32
            assert np.array_equal(got, want), (m.dtype, k)
    big = np.round(cosine_matrix(rng.standard_normal((umap_runtime._THREADED_MIN + 5, 8)).astype(np.float32)), 2)
    assert np.array_equal(umap_runtime.knn_indices(big, 31), umaps(big, 31))  # rows dealt to threads


def test_umap_embedding_unchanged_by_knn_indices():
    """A fit with UMAP's own neighbour sort and with knn_indices: identical coordinates."""
    umap = import_umap()
    assert umap.umap_.fast_knn_indices is umap_runtime.knn_indices
    _same_fit_with("fast_knn_indices", umap_runtime._UMAP_KNN, seed=23, n=120, n_neighbors=10)


def test_other_metrics_go_to_sklearn_unchanged():
    import_umap()
    rng = np.random.default_rng(7)
    x = rng.standard_normal((12, 5)).astype(np.float32)
    from sklearn.metrics import pairwise_distances

    assert np.array_equal(umap_runtime.pairwise_distances(x, metric="euclidean"), pairwise_distances(x, metric="euclidean"))
    y = x.astype(np.float64)  # not float32: UMAP's cosine, but through sklearn
    from umap.distances import cosine

    assert np.array_equal(umap_runtime.pairwise_distances(y, metric=cosine), pairwise_distances(y, metric=cosine))


def test_functions_defined_while_importing_are_cached_on_disk():
    """Inside the import block numba.njit/vectorize cache by default; outside, numba is untouched."""
    import numba

    with umap_runtime._numba_cache_on():
        inside = numba.njit(lambda a: a + 1)
        explicit = numba.njit(cache=False)(lambda a: a + 2)
    outside = numba.njit(lambda a: a + 3)
    assert inside._cache.__class__.__name__ == "FunctionCache"
    assert explicit._cache.__class__.__name__ == "NullCache"
    assert outside._cache.__class__.__name__ == "NullCache"


def test_a_fresh_process_caches_umaps_layout_code():
    """umap's SGD epoch is not ``cache=True`` in umap itself; imported by us it is (a fresh process)."""
    import subprocess
    import sys

    code = ("from arborag.tasks.cluster.umap_import import import_umap; u = import_umap(); "
            "print(type(u.layouts._nb_optimize_layout_euclidean_single_epoch._cache).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    assert out.stdout.strip().splitlines()[-1] == "FunctionCache"


def test_a_second_process_loads_the_distance_and_neighbour_kernels_from_the_cache():
    """cosine_matrix's and knn_indices' kernels are compiled once per machine, not once per process:
    after one fresh process has run them (compiling them into the cache if they were not there), a
    second fresh process finds every one of them in the on-disk cache (a kernel calling another
    compiled function of ours from its closure would miss it every time: numba keys a closure by
    its cells' pickles, and a dispatcher's carries a per-process id). The user-level cache is used,
    so UMAP's own code is not compiled again for the test."""
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from arborag.tasks.cluster import umap_import as r\n"
        "x = np.random.default_rng(0).standard_normal((r._THREADED_MIN + 3, 8)).astype(np.float32)\n"
        "r.knn_indices(r.cosine_matrix(x), 5)\n"
        "kernels = (*r._cosine_matrix_fn(), r._knn_rows_fn())\n"
        "print(sum(len(k.stats.cache_misses) for k in kernels), sum(len(k.stats.cache_hits) for k in kernels))\n"
    )
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True) for _ in range(2)]
    second = tuple(int(v) for v in runs[1].stdout.split()[-2:])
    assert second == (0, 4), second  # norms, rows, mirror, knn rows: loaded, none compiled again


def test_numba_cache_dir_user_level_and_switchable(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("ARBORAG_NUMBA_CACHE", raising=False)
    folder = numba_cache_dir()
    assert folder == tmp_path / "arborag" / "numba" and folder.is_dir()
    monkeypatch.setenv("ARBORAG_NUMBA_CACHE", "0")
    assert numba_cache_dir() is None


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_numba_cache_dir_unwritable_is_none(tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    monkeypatch.setenv("XDG_CACHE_HOME", str(ro))
    monkeypatch.delenv("ARBORAG_NUMBA_CACHE", raising=False)
    try:
        assert numba_cache_dir() is None
    finally:
        ro.chmod(0o700)


def _small_fit(x: np.ndarray, epochs: int) -> np.ndarray:
    umap = import_umap()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return umap.UMAP(n_neighbors=12, n_components=4, metric="cosine", random_state=224, n_jobs=1,
                         n_epochs=epochs).fit_transform(x)


def _unit_blobs() -> np.ndarray:
    rng = np.random.default_rng(0)
    x = np.concatenate([c + 0.35 * rng.standard_normal((s, 32)) for c, s in zip(rng.standard_normal((3, 32)), (40, 30, 30))])
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_the_timed_layout_is_umaps_own_layout():
    """UMAP's module calls its layout through ``timed_layout``: the same coordinates as with UMAP's
    own function in place."""
    from umap.layouts import optimize_layout_euclidean

    umap = import_umap()
    x = _unit_blobs()
    ours = _small_fit(x, 120)
    assert umap.umap_.optimize_layout_euclidean is umap_runtime.timed_layout
    umap.umap_.optimize_layout_euclidean = optimize_layout_euclidean
    try:
        own = _small_fit(x, 120)
    finally:
        umap.umap_.optimize_layout_euclidean = umap_runtime.timed_layout
    assert np.array_equal(ours, own)


def test_one_thread_layout_seconds_count_on_the_fitting_thread_only():
    """``layout_thread_seconds`` (the critical path's serial part in benchmarks/cold_path.py) grows
    by the layout's CPU on the thread that fits — within the fit's wall — and not on another."""
    import threading
    import time

    x = _unit_blobs()
    _small_fit(x, 20)  # the compiled layout loaded: the timed fit below is its own work
    before, t0 = umap_runtime.layout_thread_seconds(), time.perf_counter()
    _small_fit(x, 400)
    wall, spent = time.perf_counter() - t0, umap_runtime.layout_thread_seconds() - before
    assert 0.0 < spent <= wall
    seen: list[float] = []
    worker = threading.Thread(target=lambda: (_small_fit(x, 50), seen.append(umap_runtime.layout_thread_seconds())))
    mine = umap_runtime.layout_thread_seconds()
    worker.start()
    worker.join()
    assert seen and seen[0] > 0.0 and umap_runtime.layout_thread_seconds() == mine
