"""The local embedding model in a helper process, so a cold CLI run imports torch beside its work.

Importing torch + sentence-transformers and loading the model takes ~6 s of CPU in a fresh
process, nearly all of it Python bytecode that holds the GIL. :func:`arborag.embed.model.preload`
used to do it on a background thread while the run ingested and segmented, and the two took
turns on one core — the GIL lets one thread run Python at a time — while the second core idled
(the idle 1x cold build before: ingest + segment 10.3 s beside a 7.5 s import that takes 5.5 s
alone; benchmarks/results/cold_path*.md have the runs). A cold ``arborag build`` / ``update`` now starts this worker
instead: a child process (``python -m arborag.embed.worker_serve``) imports, loads the model and
waits, on the other core, while the run works; the run's :class:`~arborag.embed.model.Embedder`
hands every ``embed`` call to it over a socket pair and gets the vectors back.

The vectors are the ones the run's process would compute, bit for bit: the worker runs
``Embedder.embed``'s batching with the same config, model file, dtype and torch thread count (the
cores, as in the run's own process; ``tests/embed/test_embed_worker.py`` compares). For the
packaged model it runs it as a :class:`~arborag.embed.light.LightEmbedder` (torch +
``tokenizers``, no sentence-transformers import: ready ~2 s after it starts instead of ~8 s; the
same vectors, ``tests/embed/test_embedder_light.py``). Progress is reported as
the worker goes. When the worker is gone (killed, out of memory) the embedder says so in the
log and embeds in its own process from then on — slower, the same numbers. An error of the
model itself (a missing model folder) is raised in the run as it would have been there.

Only the console script starts one (:func:`wanted`): a process that has torch imported already
(tests, a notebook, the warm ``arborag schedule``) embeds in-process as before, and
``ARBORAG_EMBED_WORKER=0`` turns it off. The worker ends when its socket closes — when the run's
process ends, however it ends.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

__all__ = ["EmbedWorker", "WorkerGone", "active", "any_active", "holding", "preimport", "start", "wanted"]

_ACTIVE: dict[str, EmbedWorker] = {}
#: helper processes without a model (:func:`preimport`), by the modules they import
_HELPERS: dict[tuple[str, ...], EmbedWorker] = {}
_ACTIVE_LOCK = threading.Lock()


class WorkerGone(RuntimeError):
    """The worker process ended or its socket broke; the caller embeds in its own process."""


def wanted() -> bool:
    """Start a worker (or a helper, :func:`preimport`) here? Only in the ``arborag`` console
    script, before torch is imported, unless ``ARBORAG_EMBED_WORKER=0`` (module docs); any process
    without torch with ``ARBORAG_EMBED_WORKER=1``."""
    switch = os.environ.get("ARBORAG_EMBED_WORKER", "").strip()
    if switch == "0" or "torch" in sys.modules:
        return False
    return switch == "1" or os.path.basename(sys.argv[0] if sys.argv else "") == "arborag"


def _key(cfg: Any) -> str:
    return cfg.model_dump_json()


#: Phase names (:mod:`arborag.phases`): how long the run waited for the worker's model (blocked on
#: its ``ready``), and the worker's whole start (spawned → ready; the import and load phases inside).
WAIT_PHASE = "run waited for the embedding worker"
READY_PHASE = "embedding worker spawned → ready"


#: The niceness of a helper process without a model (:func:`preimport`): its imports take the
#: core time the run and the embedding worker leave idle instead of taking turns with them
#: (three processes on the two cores of a cold update). benchmarks/results/update_start.md: cold
#: +1% updates of 2,295 documents 5.53 s mean with the helper, 5.91 s with lancedb on a thread.
HELPER_NICE = 19


class EmbedWorker:
    """The parent's handle on one worker process (one request at a time). ``cfg`` None: a helper
    process without a model, for ``call`` requests only (:func:`preimport`)."""

    def __init__(self, cfg: Any | None) -> None:
        from arborag.embed import spawn as worker_spawn

        self.cfg = cfg
        early = worker_spawn.take_early() if cfg is not None else None  # started by the console script's launcher
        if early is not None:
            self.proc, ours, self.started = early
        else:
            self.started = time.perf_counter()
            self.proc, ours = worker_spawn.spawn("helper" if cfg is None else "model")
        if cfg is None:  # a helper's work is background work: it takes what the run leaves idle
            try:
                os.setpriority(os.PRIO_PROCESS, self.proc.pid, HELPER_NICE)
            except OSError:
                pass
        self.conn = Connection(ours.detach())
        self.conn.send(("config", None if cfg is None else cfg.model_dump_json()))
        self._lock = threading.Lock()
        self._ready: dict[str, Any] | None = None
        #: modules the worker was asked to import (:meth:`preimport`)
        self.imported: set[str] = set()

    def _recv(self) -> Any:
        try:
            return self.conn.recv()
        except (EOFError, OSError) as exc:
            raise WorkerGone(f"the embedding worker (pid {self.proc.pid}) ended: {exc!r}") from exc

    def _await_ready(self) -> dict[str, Any]:
        if self._ready is None:
            t0 = time.perf_counter()
            kind, payload = self._recv()
            if kind == "error":
                raise _exception(payload)
            self._ready = payload
            from arborag import phases

            now = time.perf_counter()
            for name, seconds in payload.get("phases", {}).items():
                phases.record(name, seconds)
            if self.cfg is not None:  # the run's own seconds lost to the model's start, and the start itself
                phases.record(WAIT_PHASE, now - t0)
                phases.record(READY_PHASE, now - self.started)
        return self._ready

    def _send(self, kind: str, payload: Any) -> None:
        """One request, once the model is loaded (the caller holds the lock)."""
        self._await_ready()
        try:
            self.conn.send((kind, payload))
        except (OSError, ValueError) as exc:
            raise WorkerGone(f"the embedding worker (pid {self.proc.pid}) cannot be reached: {exc!r}") from exc

    def info(self) -> dict[str, Any]:
        """What the worker's loaded model says (``dim``, ``max_len``); waits for the load."""
        with self._lock:
            return self._await_ready()

    def embed(self, texts: Sequence[str], progress: Any = None, prefix_chars: Sequence[int] | None = None) -> np.ndarray:
        """``Embedder.embed(texts, prefix_chars=...)`` in the worker; ``progress(n)`` as it goes."""
        with self._lock:
            self._send("embed", (list(texts), None if prefix_chars is None else [int(p) for p in prefix_chars]))
            while True:
                kind, payload = self._recv()
                if kind == "progress":
                    if progress is not None:
                        progress(int(payload))
                elif kind == "vectors":
                    return np.asarray(payload, dtype=np.float32)
                else:
                    raise _exception(payload)

    def preimport(self, *modules: str) -> bool:
        """Have the process import ``modules`` on a thread of its own (after its model, if any, is
        loaded), for a later :meth:`call` that needs them; this returns at once (no answer is
        awaited: the process reads the request after its ``ready``). False when it cannot be reached."""
        with self._lock:
            try:
                self.conn.send(("import", list(modules)))
            except (OSError, ValueError):
                return False
        self.imported.update(modules)
        return True

    def call(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` in the worker (``fn`` a module-level function, pickled by name), once its
        model is loaded; its exception is raised here. The clustering's second lane
        (:mod:`arborag.tasks.cluster.processes`) sends its fits this way."""
        with self._lock:
            self._send("call", (fn, args))
            kind, payload = self._recv()
            if kind == "result":
                return payload
            raise _exception(payload)

    def close(self, timeout: float = 5.0, *, kill: bool = False) -> None:
        """End the worker (closing its socket ends it; ``kill``: at once, mid-import) and reap it."""
        try:
            self.conn.close()
        except OSError:
            pass
        if kill:
            self.proc.kill()
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _exception(payload: Any) -> BaseException:
    if isinstance(payload, bytes):
        try:
            exc = pickle.loads(payload)
            if isinstance(exc, BaseException):
                return exc
        except Exception:  # noqa: BLE001 - an exception that cannot travel is described instead
            pass
    return RuntimeError(f"the embedding worker failed: {payload!r}")


def start(cfg: Any) -> EmbedWorker | None:
    """A worker for the local model of ``cfg`` (an ``EmbedConfig``), started now; the
    :class:`~arborag.embed.model.Embedder` of the same config uses it (:func:`active`). None when
    :func:`wanted` says no or the process cannot be started (the run embeds in-process)."""
    if cfg.backend != "local" or not wanted():
        from arborag.embed.spawn import discard_early

        discard_early()  # the launcher's guess was wrong: this run embeds elsewhere, or not in a worker
        return None
    key = _key(cfg)
    with _ACTIVE_LOCK:
        if key in _ACTIVE:
            return _ACTIVE[key]
        try:
            worker = EmbedWorker(cfg)
        except OSError:
            return None
        _ACTIVE[key] = worker
        return worker


def active(cfg: Any) -> EmbedWorker | None:
    """The running worker for ``cfg``, if one was started in this process."""
    if not _ACTIVE:
        return None
    return _ACTIVE.get(_key(cfg))


def any_active() -> EmbedWorker | None:
    """A running worker this process started (the first), whatever its config."""
    with _ACTIVE_LOCK:
        return next(iter(_ACTIVE.values()), None)


def preimport(*modules: str) -> EmbedWorker | None:
    """A helper process (no model) that imports ``modules`` now, on the other core, for a later
    :meth:`EmbedWorker.call` that needs them (:func:`holding` finds it); None where this process
    starts no worker processes (:func:`wanted`: a warm ``arborag schedule`` process imports once,
    in itself), has the modules loaded already, or the helper cannot be started;
    ``ARBORAG_IMPORT_HELPER=0`` turns helpers off.

    A separate process, not a thread here nor one in the embedding worker: an import is bytecode
    holding the GIL, and beside it a thread's stages (or the worker's torch ops, each of which
    re-takes the GIL) wait their turn: a cold +1% update's links stage took 0.31 s beside the
    helper, 1.63 s beside a lancedb import on a thread (benchmarks/results/update_start.md); the
    worker's leaf embedding 0.2 → 1.4 s beside one in the worker (one try, not kept)."""
    if not wanted() or all(m in sys.modules for m in modules):  # a warm process (schedule), or loaded here already
        return None
    if os.environ.get("ARBORAG_IMPORT_HELPER", "").strip() == "0":  # the caller imports them on a thread of its own
        return None
    key = tuple(modules)
    with _ACTIVE_LOCK:
        helper = _HELPERS.get(key)
        if helper is None or helper.proc.poll() is not None:
            try:
                helper = EmbedWorker(None)
            except OSError:
                return None
            _HELPERS[key] = helper
    return helper if helper.preimport(*modules) else None


def holding(module: str) -> EmbedWorker | None:
    """The live helper process this process asked to import ``module`` (:func:`preimport`), if any."""
    with _ACTIVE_LOCK:
        helpers = list(_HELPERS.values())
    return next((h for h in helpers if module in h.imported and h.proc.poll() is None), None)


def forget(worker: EmbedWorker) -> None:
    """Stop routing to ``worker`` (it is gone) and reap it."""
    with _ACTIVE_LOCK:
        for key, w in list(_ACTIVE.items()):
            if w is worker:
                del _ACTIVE[key]
    worker.close(timeout=1.0)


def stop_all(*, kill: bool = False) -> None:
    """End every worker this process started (the end of a run; ``kill``: a run that turned out
    to need no model — an update that changes nothing — ends its worker mid-import)."""
    with _ACTIVE_LOCK:
        workers = list(_ACTIVE.values()) + list(_HELPERS.values())
        _ACTIVE.clear()
        _HELPERS.clear()
    for w in workers:
        w.close(kill=kill)
    from arborag.embed.spawn import discard_early

    discard_early()
