"""The embedding worker's side (:mod:`arborag.embed_worker` starts it): ``python -m arborag.embed_worker_serve FD``.

Loads the local model named by the first message on the socket ``FD`` and answers ``embed``
requests with :meth:`arborag.embedder.Embedder.embed` until the socket closes.
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from multiprocessing.connection import Connection
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


def serve(fd: int) -> None:
    """Load the model named by the first message, then answer ``embed`` requests until EOF."""
    from arborag.env import offline_env

    offline_env()
    conn = Connection(fd)
    try:
        kind, raw = conn.recv()
    except (EOFError, OSError):
        return
    from arborag import phases
    from arborag.config import EmbedConfig
    from arborag.embedder import Embedder

    try:
        cfg = EmbedConfig.model_validate_json(raw)
        embedder = Embedder(cfg)
        embedder.load()
    except Exception as exc:  # noqa: BLE001 - reported to the run, which raises it
        _send_error(conn, exc)
        return
    try:
        conn.send(("ready", {"dim": embedder.dim, "max_len": embedder.max_len, "phases": phases.snapshot()}))
    except OSError:  # the run ended before it needed the model (a no-op, an error): nothing to say
        return
    while True:
        try:
            kind, payload = conn.recv()
        except (EOFError, OSError):
            return
        if kind != "embed":
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
    serve(int(sys.argv[1]))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # nothing to write back: skip tearing torch down (seconds the run would wait for)
