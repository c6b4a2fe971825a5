"""arborag/tasks/cluster/processes.py: the clustering's fits on this process and the run's helper process give
the one-process answer — clusters, the fits the update keeps, the counters — and survive a helper
that fails or dies."""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest

from arborag.embed import worker as embed_worker
from arborag.config import ClusterConfig, EmbedConfig
from arborag.tasks.cluster import fit as clustering
from arborag.tasks.cluster import processes as lanes
from arborag.tasks.cluster.mixture import ClusterStats


@pytest.fixture()
def helper(monkeypatch):
    """A real embedding worker routed to like a console-script run's (start() refuses here: torch may be loaded)."""
    cfg = EmbedConfig()
    w = embed_worker.EmbedWorker(cfg)
    monkeypatch.setitem(embed_worker._ACTIVE, embed_worker._key(cfg), w)
    monkeypatch.delenv("ARBORAG_CLUSTER_HELPER", raising=False)
    yield w
    w.close()
    lanes._LANES.clear()


def _blobs(n: int, seed: int = 7) -> np.ndarray:
    """Unit vectors around eight directions in 24 dimensions: real structure for UMAP + GMM."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((8, 24))
    x = centres[rng.integers(0, 8, n)] + 0.35 * rng.standard_normal((n, 24))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _run(x: np.ndarray) -> tuple[list, list, ClusterStats]:
    stats, fitted = ClusterStats(), []
    out = clustering.cluster_level(x, np.full(len(x), 40), ClusterConfig(), stats=stats, fitted=fitted)
    return out, fitted, stats


def _fits(level_fit) -> list:
    return [None if f is None else (f.rows.tolist(), f.reduced.tobytes(), f.n_neighbors, None if f.means is None else f.means.tobytes())
            for f in [level_fit.global_fit, *level_fit.local_fits]]


def test_no_helper_without_a_worker_or_when_turned_off(monkeypatch, helper):
    assert lanes.helper_lanes() is not None
    monkeypatch.setenv("ARBORAG_CLUSTER_HELPER", "0")
    assert lanes.helper_lanes() is None
    monkeypatch.delenv("ARBORAG_CLUSTER_HELPER")
    monkeypatch.setattr(embed_worker, "_ACTIVE", {})
    assert lanes.helper_lanes() is None


def test_a_level_on_two_processes_is_the_one_process_level(monkeypatch, helper):
    import torch

    texts = ["The Eiffel Tower is in Paris.", "A river runs through the old town. " * 12, "x"]
    before, threads = helper.embed(texts), helper.call(torch.get_num_threads)
    x = _blobs(520)  # over LOOSE_MIN_N: the global BIC search probes loose fits, two at a time
    want, want_fit, want_stats = _run(x)  # no lanes: the level is under LANES_MIN_N
    monkeypatch.setattr(clustering, "LANES_MIN_N", 100)
    # the helper loads the clustering code first (as it does beside a build's global UMAP): a
    # 520-row level can otherwise end before the helper is ready to take a fit (seen once in CI)
    used = lanes.helper_lanes()
    assert used is not None
    used.warm(clustering.warm_up)
    deadline = time.monotonic() + 300
    while not used.warmed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert used.warmed
    got, got_fit, got_stats = _run(x)
    assert lanes.helper_lanes() is used and used.remote_items > 0  # the helper did take fits
    assert got == want
    assert _fits(got_fit[0]) == _fits(want_fit[0]) and got_fit[0].origins == want_fit[0].origins
    assert (got_stats.umap_fits, got_stats.global_k, got_stats.local_ks) == (want_stats.umap_fits, want_stats.global_k, want_stats.local_ks)
    # the grid is probed two points at a time: the point after the stop may be fitted (and dropped)
    assert want_stats.gmm_fits <= got_stats.gmm_fits <= want_stats.gmm_fits + 1
    # the worker embeds as before its fits (their thread limits were its own, and undone)
    assert helper.call(torch.get_num_threads) == threads
    assert np.array_equal(helper.embed(texts), before)


def test_a_failed_call_and_a_dead_helper_leave_the_work_to_this_process(helper, caplog):
    with pytest.raises(TypeError, match="pickle"):  # the worker's own error reply: a lock cannot travel back
        helper.call(threading.Lock)
    ln = lanes.helper_lanes()
    assert ln is not None
    ln.warm(clustering.warm_up)
    assert ln._warm.wait(120) and ln.warmed

    def failing_call(fn, *args):  # a fake failure of the helper (what a broken call raises here)
        raise RuntimeError("fake helper failure")

    helper.call = failing_call  # on the instance only
    try:
        with caplog.at_level(logging.WARNING, logger="arborag.tasks.cluster.processes"):
            out = ln.map(time.sleep, [(0.2,), (0.2,), (0.2,)])  # slow here: the helper's lane takes one and fails it
    finally:
        del helper.call
    assert out == [None, None, None] and ln.local_items == 3 and ln.remote_items == 0
    assert "computing it here" in caplog.text
    assert not ln.usable  # a helper that failed once is not asked again
    lanes._LANES.clear()
    ln = lanes.helper_lanes()
    assert ln is not None and ln.usable
    assert ln.map(pow, [(2, 3), (3, 2)]) == [8, 9] and ln.local_items == 2  # not warmed: all here
    helper.proc.kill()
    helper.proc.wait()
    assert lanes.helper_lanes() is None
    assert ln.map(pow, [(2, 3), (3, 2), (5, 2)]) == [8, 9, 25]


def test_the_local_fits_start_largest_first_and_come_back_in_the_jobs_order():
    """clustering._local_fits hands the lanes the largest global clusters first (so neither lane is
    left alone with a big fit at the end) and returns each job's clusters in the jobs' order: the
    answer of one fit after another. A named fake of Lanes runs the items here and keeps their order."""
    from threadpoolctl import threadpool_limits

    class RecordingLanes:  # fake lanes.Lanes: same map contract (results in item order), no helper process
        def __init__(self) -> None:
            self.sizes: list[int] = []

        def map(self, fn, items):
            self.sizes = [len(item[0]) for item in items]
            return [fn(*item) for item in items]

    jobs = [_blobs(n, seed=s) for n, s in ((30, 1), (80, 2), (12, 3), (55, 4), (80, 5))]
    cfg, fake = ClusterConfig(), RecordingLanes()
    with threadpool_limits(1):
        got = list(clustering._local_fits(jobs, cfg, None, fake))
        want = [clustering._fit_local(x, cfg, None) for x in jobs]
    assert fake.sizes == [80, 80, 55, 30, 12]  # ties keep the jobs' order
    assert got == want
