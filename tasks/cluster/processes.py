"""Two lanes for independent, seeded CPU work: this process and the run's helper process; the cores this process may use.

A cold console-script build starts an embedding worker process (:mod:`arborag.embed.worker`)
that sits idle while the tree is clustered — and the clustering's fits are pure Python + numpy
under the GIL, so a second *thread* here buys little (two threads ran 16 GMM fits 1.23x faster
than one, measured on the shared box), while a second *process* has a core of its own.
:func:`helper_lanes` returns :class:`Lanes` over that worker when there is one (``None``
otherwise: tests, notebooks and ``arborag schedule`` keep their threads); :meth:`Lanes.map` runs
``fn(item)`` for every item, this thread and the worker each taking the next item as it frees,
and returns the results in item order.

Every result is the one this process would compute: the functions mapped are module-level,
seeded and independent of each other, and run under the same thread limits on either side
(``tests/tasks/cluster/test_cluster_processes.py`` compares clusterings with and without the helper). The worker
loads the clustering code once (:meth:`Lanes.warm`, which the clustering starts in the background
before its first fit, so the worker's ~4 s numba load overlaps this process's global UMAP); until
that is done the remote lane takes no item, and before it is started :meth:`Lanes.map` runs here. A worker that dies or fails a call hands its item back and this
process computes it — the same result, later. ``ARBORAG_CLUSTER_HELPER=0`` turns the helper off.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Lanes", "helper_lanes", "usable_cores"]

log = logging.getLogger(__name__)

_LANES: dict[int, Lanes] = {}
_LANES_LOCK = threading.Lock()


_CONTROLLER: list[Any] = []


def _limited(fn: Callable[..., Any], *args: Any) -> Any:
    """In the worker: ``fn(*args)`` under the thread limits the clustering runs under here (one
    BLAS and OpenMP thread: the same floats, and no oversubscription of the two cores). The
    libraries are looked up once (after the warm-up loaded them): ``threadpool_limits``
    looks them up on every call, 3.6 ms each with torch loaded vs 0.04 ms (measured)."""
    if not _CONTROLLER:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER.append(ThreadpoolController())
    with _CONTROLLER[0].limit(limits=1):
        return fn(*args)


class Lanes:
    """This process and one helper process (an :class:`arborag.embed.worker.EmbedWorker`)."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self._warm = threading.Event()
        self._failed = False
        self._started = False
        self._lock = threading.Lock()
        self.remote_items = 0
        self.local_items = 0

    @property
    def warmed(self) -> bool:
        """The helper has loaded the clustering code (and can take fits)."""
        return self._warm.is_set() and not self._failed

    @property
    def usable(self) -> bool:
        return not self._failed and self.worker.proc.poll() is None

    def warm(self, prepare: Callable[[], Any]) -> None:
        """Have the worker run ``prepare`` (a module-level function: the clustering passes its
        ``warm_up``, which imports and loads its compiled code) now, in the background; the
        remote lane takes items once it is done (idempotent)."""
        with self._lock:
            if self._started:
                return
            self._started = True

        def run() -> None:
            try:
                self.worker.call(prepare)
            except Exception as exc:  # noqa: BLE001 - the helper is an accelerator: without it, threads
                log.info("the helper process could not load the clustering code (%r); clustering in this process", exc)
                self._failed = True
            finally:
                self._warm.set()

        threading.Thread(target=run, name="arborag-lanes-warm", daemon=True).start()

    def map(self, fn: Callable[..., Any], items: Sequence[Any]) -> list[Any]:
        """``[fn(*item) for item in items]`` (each item a tuple of arguments), on both lanes."""
        items = list(items)
        if len(items) < 2 or not self.usable or not self._started:
            self.local_items += len(items)
            return [fn(*item) for item in items]
        results: list[Any] = [None] * len(items)
        done = [False] * len(items)
        claim = threading.Lock()
        cursor = [0]

        def take() -> int | None:
            with claim:
                if cursor[0] >= len(items):
                    return None
                i = cursor[0]
                cursor[0] += 1
                return i

        def remote() -> None:
            while not self._warm.wait(0.02):  # not ready yet: take nothing, stop once all is taken
                with claim:
                    if cursor[0] >= len(items):
                        return
            if self._failed:
                return
            while (i := take()) is not None:
                try:
                    results[i] = self.worker.call(_limited, fn, *items[i])
                except Exception as exc:  # noqa: BLE001 - hand the item back: this process computes it
                    log.warning("the helper process failed a clustering fit (%r); computing it here", exc)
                    self._failed = True
                    return
                done[i] = True
                self.remote_items += 1

        lane = threading.Thread(target=remote, name="arborag-lanes-remote", daemon=True)
        lane.start()
        while (i := take()) is not None:
            results[i] = fn(*items[i])
            done[i] = True
            self.local_items += 1
        lane.join()
        for i, ok in enumerate(done):  # items the helper could not finish
            if not ok:
                results[i] = fn(*items[i])
                self.local_items += 1
        return results


def helper_lanes() -> Lanes | None:
    """:class:`Lanes` over the run's embedding worker when this process started one and it is
    alive (module docs); None otherwise or with ``ARBORAG_CLUSTER_HELPER=0``."""
    if os.environ.get("ARBORAG_CLUSTER_HELPER", "").strip() == "0":
        return None
    module = sys.modules.get("arborag.embed.worker")
    if module is None:
        return None
    worker = module.any_active()
    if worker is None or worker.proc.poll() is not None:
        return None
    with _LANES_LOCK:
        lanes = _LANES.get(id(worker))
        if lanes is None or lanes.worker is not worker:
            lanes = _LANES[id(worker)] = Lanes(worker)
    return lanes if lanes.usable else None


def usable_cores() -> int:
    """The cores this process may use (its CPU affinity), at most 8: the default thread count of
    the exact kNN search (:func:`arborag.tasks.cluster.knn.cosine_knn`) and of the local clusterings
    (:func:`arborag.tasks.cluster.fit.local_threads`)."""
    try:
        return max(1, min(8, len(os.sched_getaffinity(0))))
    except (AttributeError, OSError):
        return max(1, min(8, os.cpu_count() or 1))
