"""``cluster.umap_layout_blocks`` (tasks/umap_layout.py): UMAP's SGD layout in vertex blocks — the
same coordinates on one thread or several, UMAP's own layout at 1 block, and a layout as good."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from arborag.config import ArboragConfig, ClusterConfig
from arborag.tasks import umap_layout
from arborag.tasks.clustering import ClusterStats, _reduce, cluster_level
from arborag.tasks.umap_runtime import import_umap


def _blobs(sizes: list[int], dim: int = 32, spread: float = 0.35, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((len(sizes), dim))
    x = np.concatenate([centers[c] + spread * rng.standard_normal((s, dim)) for c, s in enumerate(sizes)])
    labels = np.concatenate([np.full(s, c) for c, s in enumerate(sizes)])
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), labels


def _fit(x: np.ndarray, seed: int = 224, epochs: int = 120) -> np.ndarray:
    umap = import_umap()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return umap.UMAP(n_neighbors=12, n_components=4, metric="cosine", random_state=seed, n_jobs=1,
                         n_epochs=epochs).fit_transform(x)


def _knn_kept(x: np.ndarray, e: np.ndarray, k: int = 10) -> float:
    """Mean share of each point's k nearest neighbours (cosine, input) that are among its k nearest in ``e``."""
    s = x @ x.T
    np.fill_diagonal(s, -np.inf)
    d = ((e[:, None, :] - e[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(d, np.inf)
    a, b = np.argsort(-s, axis=1)[:, :k], np.argsort(d, axis=1)[:, :k]
    return float(np.mean([len(set(p) & set(q)) / k for p, q in zip(a, b)]))


def test_one_block_is_umaps_own_layout():
    """UMAP's module calls its layout through arborag's function; at one block (the default) that
    is UMAP's own layout: the same coordinates as with UMAP's function in place."""
    umap = import_umap()
    x, _ = _blobs([40, 30, 30])
    ours = _fit(x)
    assert umap.umap_.optimize_layout_euclidean is umap_layout.optimize_layout_blocks
    from umap.layouts import optimize_layout_euclidean

    umap.umap_.optimize_layout_euclidean = optimize_layout_euclidean
    try:
        own = _fit(x)
    finally:
        umap.umap_.optimize_layout_euclidean = umap_layout.optimize_layout_blocks
    assert np.array_equal(ours, own)


def test_one_thread_layout_seconds_count_on_the_fitting_thread_only():
    """``layout_thread_seconds`` (the critical path's serial part in benchmarks/cold_path.py) grows
    by the layout's CPU on the thread that fits — within the fit's wall — and not on another."""
    import threading
    import time

    x, _ = _blobs([40, 30, 30])
    _fit(x, epochs=20)  # the compiled layout loaded: the timed fit below is its own work
    before, t0 = umap_layout.layout_thread_seconds(), time.perf_counter()
    _fit(x, epochs=400)
    wall, spent = time.perf_counter() - t0, umap_layout.layout_thread_seconds() - before
    assert 0.0 < spent <= wall
    seen: list[float] = []
    worker = threading.Thread(target=lambda: (_fit(x, epochs=50), seen.append(umap_layout.layout_thread_seconds())))
    mine = umap_layout.layout_thread_seconds()
    worker.start()
    worker.join()
    assert seen and seen[0] > 0.0 and umap_layout.layout_thread_seconds() == mine


def test_blocks_give_the_same_coordinates_on_any_number_of_threads(monkeypatch):
    """No block reads what another writes during a sub-step: one thread, two or three, bit for bit."""
    x, _ = _blobs([60, 50, 40], seed=1)
    monkeypatch.setattr(umap_layout, "BLOCKS_MIN", 0)  # blocks even for this small fit
    got = {}
    real = umap_layout.optimize_layout_blocks
    for threads in (1, 2, 3):

        def with_threads(*args, _threads=threads, **kw):
            return real(*args, threads=_threads, **kw)

        monkeypatch.setattr(import_umap().umap_, "optimize_layout_euclidean", with_threads)
        with umap_layout.block_layout(3):
            got[threads] = _fit(x)
    assert np.array_equal(got[1], got[2]) and np.array_equal(got[1], got[3])
    with umap_layout.block_layout(3):
        again = _fit(x)  # and from one call to the next
    monkeypatch.undo()
    assert np.array_equal(again, got[1])
    assert not np.array_equal(got[1], _fit(x))  # it is not UMAP's own one-thread layout


def test_block_layout_keeps_neighbours_and_clusters_as_umaps_own(monkeypatch):
    """The layout's quality: the share of input neighbours kept, and how many of each point's
    layout neighbours come from its own blob, within a few points of UMAP's own layout."""
    monkeypatch.setattr(umap_layout, "BLOCKS_MIN", 0)
    x, labels = _blobs([120, 100, 80, 60], seed=2)
    own = _fit(x, epochs=200)
    with umap_layout.block_layout(2):
        blk = _fit(x, epochs=200)
    kept_own, kept_blk = _knn_kept(x, own), _knn_kept(x, blk)
    assert kept_blk >= kept_own - 0.05, (kept_blk, kept_own)

    def purity(e: np.ndarray) -> float:  # share of each point's 10 layout neighbours from its own blob
        d = ((e[:, None, :] - e[None, :, :]) ** 2).sum(-1)
        np.fill_diagonal(d, np.inf)
        return float((labels[np.argsort(d, axis=1)[:, :10]] == labels[:, None]).mean())

    assert purity(blk) >= 0.95 and purity(blk) >= purity(own) - 0.02


def test_the_knob_reaches_the_fits_of_a_level_and_the_default_stays(monkeypatch):
    """Every fit of a level is asked for the blocks (those under BLOCKS_MIN points decline)."""
    seen: list[int] = []
    real = umap_layout.optimize_layout_blocks

    def recording(*args, **kw):
        seen.append(umap_layout.current_blocks())
        return real(*args, **kw)

    monkeypatch.setattr(import_umap().umap_, "optimize_layout_euclidean", recording)
    x, _ = _blobs([40, 35, 30, 25], seed=4)
    stats = ClusterStats()
    cfg = ClusterConfig(max_clusters=8)
    cluster_level(x, np.full(len(x), 10), cfg.model_copy(update={"umap_layout_blocks": 2}), stats=stats)
    assert stats.umap_fits > 1 and seen and set(seen) == {2}  # the global fit and the local fits (threads too)
    seen.clear()
    cluster_level(x, np.full(len(x), 10), cfg, stats=ClusterStats())
    assert seen and set(seen) == {1}
    assert umap_layout.current_blocks() == 1  # nothing left behind on this thread


def test_a_small_fit_falls_back_to_umaps_own(monkeypatch):
    """Fewer than BLOCKS_MIN points, or than two per block (also: densMAP, a transform): UMAP's own
    function does the work."""
    import umap.layouts

    calls: list[int] = []
    real = umap.layouts.optimize_layout_euclidean

    def own(*args, **kw):
        calls.append(len(args[0]))
        return real(*args, **kw)

    monkeypatch.setattr(umap.layouts, "optimize_layout_euclidean", own)
    x, _ = _blobs([20, 20], seed=5)
    _reduce(x, 2, 5, 224, None, layout_blocks=4)
    assert calls == [40]  # below BLOCKS_MIN (the local fits' size): UMAP's own layout
    monkeypatch.setattr(umap_layout, "BLOCKS_MIN", 0)
    small, _ = _blobs([3, 3], seed=5)
    red = _reduce(small, 2, 3, 224, None, layout_blocks=4)  # 6 points < 2 x 4 blocks
    assert red.shape == (6, 2) and np.isfinite(red).all() and calls == [40, 6]
    _reduce(x, 2, 5, 224, None, layout_blocks=4)
    assert calls == [40, 6]  # 40 points in 4 blocks: arborag's layout


def test_config_hash_only_changes_when_blocks_are_asked_for():
    base = ArboragConfig()
    assert "umap_layout_blocks" not in base.public_dict()["cluster"]
    two = base.with_overrides(cluster={"umap_layout_blocks": 2})
    assert two.public_dict()["cluster"]["umap_layout_blocks"] == 2
    assert two.config_hash() != base.config_hash()
    with pytest.raises(ValueError):
        ClusterConfig(umap_layout_blocks=0)


def test_a_second_process_loads_the_block_kernels_from_the_cache():
    """The sub-step, the merge and the one-thread driver are compiled once per machine: after one
    fresh process has run them, a second finds all three in numba's on-disk cache (each used to hold
    UMAP's compiled functions, or the other kernels, in closure cells — keyed by a per-process id,
    so missed). The user-level cache is used, so UMAP's own code is not compiled again for the test."""
    import subprocess
    import sys

    code = (
        "import numpy as np\n"
        "from arborag.tasks import umap_layout\n"
        "from arborag.tasks.clustering import _reduce\n"
        "x = np.random.default_rng(0).standard_normal((umap_layout.BLOCKS_MIN + 40, 16)).astype(np.float32)\n"
        "import arborag.tasks.clustering as c\n"
        "for threads in (1, 2):  # one thread runs _all_epochs, two the sub-step and merge themselves\n"
        "    c.usable_cores = lambda: threads\n"
        "    _reduce(x, 4, 15, 224, None, n_epochs=5, layout_blocks=2)\n"
        "print(*(f'{k.py_func.__name__}:{len(k.stats.cache_misses)}:{len(k.stats.cache_hits)}' for k in umap_layout._kernels()))\n"
    )
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True) for _ in range(2)]
    second = {f.split(":")[0]: tuple(map(int, f.split(":")[1:])) for f in runs[1].stdout.split()}
    assert set(second) == {"_substep", "_merge", "_all_epochs"}
    assert all(misses == 0 and hits >= 1 for misses, hits in second.values()), second  # loaded, none compiled again
