"""The embedding worker's side (:mod:`arborag.embed_worker` starts it): ``python -m arborag.embed_worker_serve FD``.

Loads the local model named by the first message on the socket ``FD`` and answers ``embed``
requests with its ``embed`` — and ``call`` requests (a module-level function and its arguments,
the clustering's second lane: :mod:`arborag.tasks.lanes`) with the function's result — until the
socket closes. A model
:func:`~arborag.embedder_light.light_supported` accepts (the packaged one) runs as a
:class:`~arborag.embedder_light.LightEmbedder` — the same vectors bit for bit without
sentence-transformers' ~6 s import chain; any other as an :class:`~arborag.embedder.Embedder`.
``ARBORAG_EMBED_LIGHT=0`` makes the worker load sentence-transformers always.
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


def _embedder(cfg: Any) -> Any:
    """The worker's embedder of ``cfg``: light when the model allows it (module docs)."""
    from arborag.embedder import Embedder

    if os.environ.get("ARBORAG_EMBED_LIGHT", "").strip() != "0":
        from arborag.embedder_light import LightEmbedder, light_supported

        light = LightEmbedder(cfg)
        if light_supported(light.path):
            return light
    return Embedder(cfg)


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
    try:
        cfg = EmbedConfig.model_validate_json(raw)
        embedder = _embedder(cfg)
        embedder.load()
    except Exception as exc:  # noqa: BLE001 - reported to the run, which raises it
        _send_error(conn, exc)
        return
    try:
        conn.send(("ready", {"dim": embedder.dim, "max_len": embedder.max_len, "embedder": type(embedder).__name__, "phases": phases.snapshot()}))
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
        if kind == "call":  # a function of the run's (the clustering's second lane: arborag.tasks.lanes)
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
