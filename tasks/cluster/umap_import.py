"""UMAP imported with its compiled code cached on disk, and its one-thread layout clocked.

**Compiling in every process** is not UMAP's method, only how the library runs: umap-learn
decorates ~125 functions with ``numba.njit`` and only one asks numba to cache its machine code
(``cache=True``); pynndescent caches most of its own. So every new process compiled UMAP again —
15-50 s of a cold build on a 2-core machine (more under load), before any work.
:func:`import_umap` imports umap (and pynndescent) with numba's on-disk cache switched on for every
function they define while being imported: ``numba.njit`` and ``numba.vectorize`` are wrapped for
the duration of that import only, adding ``cache=True`` where the library did not say. The cache
lives in ``NUMBA_CACHE_DIR`` (:func:`arborag.env.offline_env` points it at a user-level folder,
``~/.cache/arborag/numba``), keyed by numba on each source file's path and modification time, so a
machine compiles a given umap install once; a function numba cannot cache is compiled as before
(numba's warning about it is silenced). No number UMAP computes changes.

Everything UMAP computes is its own: its exact distances below 4,096 points (sklearn's
``pairwise_distances`` with ``umap.distances.cosine``), its neighbour sort, the fuzzy graph,
spectral init, the SGD layout, its epochs and its seed. Compiled copies of UMAP's exact distances
and neighbour sort were measured on a cold 300-paragraph HotpotQA build (686 nodes, 85 s wall):
with their kernels already cached they saved 0.79 s (0.9% of the build); with the kernels not yet
cached they cost 18.8 s more than UMAP's own code. Under the 10% a hand copy must earn, so UMAP's
own code runs.

UMAP's module calls its layout through :func:`timed_layout`, which only counts the CPU seconds of
this thread's one-thread layouts (:func:`layout_thread_seconds`): what a run reports as the part of
a level nothing else can run beside.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["import_umap", "layout_compiled", "layout_thread_seconds", "timed_layout"]

_LOCK = threading.Lock()
_UMAP: Any = None


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
    from numba.core import config

    settings: Any = config  # numba sets its settings on the module from the environment at import
    if not settings.CACHE_DIR:
        from arborag.env import numba_cache_dir

        folder = numba_cache_dir()
        if folder is not None:
            settings.CACHE_DIR = str(folder)


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
            _install_layout(umap.umap_)
            _UMAP = umap
    return _UMAP


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
