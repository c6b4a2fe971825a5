"""The embedding worker's side (:mod:`arborag.embed.worker` starts it): ``python -m arborag.embed.worker_serve FD``.

Loads the local model named by the first message on the socket ``FD`` and answers ``embed``
requests with its ``embed`` — and ``call`` requests (a module-level function and its arguments:
the clustering's second lane, :mod:`arborag.tasks.cluster.processes`; an update's vector table, written
where lancedb is loaded) with the function's result — until the socket closes. An ``import``
request (module names; no answer) imports them on a thread of the worker's, so the call that
needs them later finds them loaded. The second argument is the role: ``model`` (the
default) or ``helper`` (no model, calls and imports only: :func:`arborag.embed.worker.preimport`). A model
:func:`~arborag.embed.light.light_supported` accepts (the packaged one) runs as a
:class:`~arborag.embed.light.LightEmbedder` — the same vectors bit for bit without
sentence-transformers' ~6 s import chain; any other as an :class:`~arborag.embed.model.Embedder`.
``ARBORAG_EMBED_LIGHT=0`` makes the worker load sentence-transformers always.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import sys
import threading
import traceback
from multiprocessing.connection import Connection
from types import SimpleNamespace
from typing import Any

import numpy as np

__all__ = ["serve"]


def _send_error(conn: Connection, exc: BaseException) -> None:
    try:
        payload: Any = pickle.dumps(exc)
    except Exception:  # noqa: BLE001 - unpicklable: send its text
        payload = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    try:
        conn.send(("error", payload))
    except OSError:  # the run is gone: nobody to tell
        pass


def _import_all(names: list[str]) -> None:
    """Import ``names`` (an ``import`` request: modules a later ``call`` needs, loaded on a thread
    while the worker answers other requests). A module that fails to import is left: the call
    that needs it raises the real error to the run."""
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - see the docstring
            pass


def _config(raw: str) -> Any:
    """The run's ``EmbedConfig`` from its JSON (``model_dump_json`` of a validated config, every
    field present) as plain attributes: what the embedders read of it. The pydantic models of
    arborag.config cost ~0.17 s of imports on the worker's way to ready, for a config the run
    validated already."""
    return SimpleNamespace(**json.loads(raw))


def _embedder(cfg: Any) -> Any:
    """The worker's embedder of ``cfg``: light when the model allows it (module docs)."""
    from arborag.embed.model import Embedder

    if os.environ.get("ARBORAG_EMBED_LIGHT", "").strip() != "0":
        from arborag.embed.light import LightEmbedder, light_supported

        light = LightEmbedder(cfg)
        if light_supported(light.path):
            return light
    return Embedder(cfg)


def serve(fd: int, role: str = "model") -> None:
    """Load the model named by the first message (None: a helper without one), then answer
    requests until EOF. ``role`` ``model`` imports torch and tokenizers before that message is
    read (they are the same for every local model, and the console script may start this process
    before its command knows the model: arborag.embed.spawn); ``helper`` imports neither."""
    from arborag import phases
    from arborag.env import offline_env

    offline_env()
    if role == "model":
        with phases.phase("import torch + tokenizers"):
            import tokenizers  # noqa: F401
            import torch  # noqa: F401
    conn = Connection(fd)
    try:
        kind, raw = conn.recv()
    except (EOFError, OSError):
        return
    embedder: Any = None
    try:
        if raw is not None:  # None: a helper without a model (calls only: embed_worker.preimport)
            embedder = _embedder(_config(raw))
            embedder.load()
    except Exception as exc:  # noqa: BLE001 - reported to the run, which raises it
        _send_error(conn, exc)
        return
    try:
        ready = {"dim": 0, "max_len": 0, "embedder": None, "phases": {}} if embedder is None else {
            "dim": embedder.dim, "max_len": embedder.max_len, "embedder": type(embedder).__name__, "phases": phases.snapshot()}
        conn.send(("ready", ready))
    except OSError:  # the run ended before it needed the model (a no-op, an error): nothing to say
        return
    while True:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):
            return
        except Exception as exc:  # noqa: BLE001 - a request that does not unpickle here (the stream is past it)
            _send_error(conn, exc)
            continue
        if kind == "import":  # no answer: the run does not wait for it (EmbedWorker.preimport)
            threading.Thread(target=_import_all, args=(list(payload),), name="arborag-worker-imports", daemon=True).start()
            continue
        if kind == "call":  # a function of the run's (the clustering's second lane: arborag.tasks.cluster.processes)
            try:
                fn, args = payload
                result = fn(*args)
            except Exception as exc:  # noqa: BLE001 - reported to the run, which computes it itself
                _send_error(conn, exc)
                continue
            try:
                conn.send(("result", result))
            except (EOFError, OSError):
                return
            except Exception as exc:  # noqa: BLE001 - a result that cannot be pickled
                _send_error(conn, exc)
            continue
        if kind != "embed":
            continue
        if embedder is None:
            _send_error(conn, RuntimeError("this helper process has no model to embed with"))
            continue
        texts, prefix_chars = payload
        try:
            vectors = embedder.embed(texts, progress=lambda n: conn.send(("progress", int(n))), prefix_chars=prefix_chars)
            conn.send(("vectors", np.ascontiguousarray(vectors, dtype=np.float32)))
        except (EOFError, OSError):  # the run is gone (OSError: a broken pipe mid-answer)
            return
        except Exception as exc:  # noqa: BLE001 - reported to the run, which raises it
            _send_error(conn, exc)


if __name__ == "__main__":  # pragma: no cover - run as a child process
    serve(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "model")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # nothing to write back: skip tearing torch down (seconds the run would wait for)
