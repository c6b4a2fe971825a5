"""UMAP as arborag imports it (tasks/cluster/umap_import.py): UMAP's own numbers, compiled once per machine."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from arborag.env import numba_cache_dir
from arborag.tasks.cluster import umap_import
from arborag.tasks.cluster.umap_import import import_umap


def test_umap_computes_its_exact_distances_and_neighbours_with_its_own_code():
    """Below 4,096 points UMAP's exact distances are sklearn's ``pairwise_distances`` and its
    neighbour sort is ``umap.utils.fast_knn_indices``: the import puts no copy of either in their place."""
    import sklearn.metrics
    import umap.utils

    umap = import_umap()
    assert umap.umap_.pairwise_distances is sklearn.metrics.pairwise_distances
    assert umap.umap_.fast_knn_indices is umap.utils.fast_knn_indices


def test_functions_defined_while_importing_are_cached_on_disk():
    """Inside the import block numba.njit/vectorize cache by default; outside, numba is untouched."""
    import numba

    with umap_import._numba_cache_on():
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
    assert umap.umap_.optimize_layout_euclidean is umap_import.timed_layout
    umap.umap_.optimize_layout_euclidean = optimize_layout_euclidean
    try:
        own = _small_fit(x, 120)
    finally:
        umap.umap_.optimize_layout_euclidean = umap_import.timed_layout
    assert np.array_equal(ours, own)


def test_one_thread_layout_seconds_count_on_the_fitting_thread_only():
    """``layout_thread_seconds`` (the critical path's serial part in benchmarks/cold_path.py) grows
    by the layout's CPU on the thread that fits — within the fit's wall — and not on another."""
    import threading
    import time

    x = _unit_blobs()
    _small_fit(x, 20)  # the compiled layout loaded: the timed fit below is its own work
    before, t0 = umap_import.layout_thread_seconds(), time.perf_counter()
    _small_fit(x, 400)
    wall, spent = time.perf_counter() - t0, umap_import.layout_thread_seconds() - before
    assert 0.0 < spent <= wall
    seen: list[float] = []
    worker = threading.Thread(target=lambda: (_small_fit(x, 50), seen.append(umap_import.layout_thread_seconds())))
    mine = umap_import.layout_thread_seconds()
    worker.start()
    worker.join()
    assert seen and seen[0] > 0.0 and umap_import.layout_thread_seconds() == mine
