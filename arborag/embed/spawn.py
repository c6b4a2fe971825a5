"""Spawning the run's helper processes, and the embedding worker's early start.

:class:`arborag.embed.worker.EmbedWorker` starts ``python -m arborag.embed.worker_serve FD ROLE``
through :func:`spawn`: ROLE ``model`` (the embedding worker: it imports torch and tokenizers at
once, then reads which model to load) or ``helper`` (no model: calls only).

A cold ``arborag build`` / ``update`` / ``add`` spends ~0.4 s importing the command line (typer, rich, the
config models) before the command can say which model it embeds with, and a small update waits
for the worker's torch import. So the console script's launcher (:mod:`arborag.launch`) calls
:func:`start_early` first: for a command that will embed locally it spawns the ``model`` worker
before importing anything else, and the command's :class:`~arborag.embed.worker.EmbedWorker`
adopts it (:func:`take_early`) and sends it the model config. A command that turns out to need
no worker (another backend) ends it (:func:`discard_early`); it also ends when this process does
(its socket closes).

Imports only the standard library: it runs before the rest of the console script is imported.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

__all__ = ["EARLY_COMMANDS", "discard_early", "spawn", "start_early", "take_early"]

#: The commands whose run embeds with the local model (unless their options say otherwise).
EARLY_COMMANDS = ("build", "update", "add")

#: Options after which a command embeds nothing (or not in a worker of this process).
_NO_EMBEDDING = ("--help", "-h", "--dry-run", "--runner=dask")

#: A worker started by :func:`start_early` and not adopted yet: (process, socket, start time).
_EARLY: list[tuple[subprocess.Popen[bytes], socket.socket, float]] = []


def spawn(role: str) -> tuple[subprocess.Popen[bytes], socket.socket]:
    """A new ``arborag.embed.worker_serve`` process of ``role`` and this side's socket to it."""
    ours, theirs = socket.socketpair()
    env = dict(os.environ)
    env["ARBORAG_EMBED_WORKER"] = "0"  # the worker embeds in its own process
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "arborag.embed.worker_serve", str(theirs.fileno()), role],
            pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return proc, ours


def will_embed(argv: Sequence[str]) -> bool:
    """Does this command line run a command that embeds locally (module docs)? The backend is
    known only once the config is read: a wrong guess costs a worker that is ended unused."""
    if os.environ.get("ARBORAG_EMBED_WORKER", "").strip() == "0" or len(argv) < 2 or argv[1] not in EARLY_COMMANDS:
        return False
    args = list(argv[2:])
    if any(a in _NO_EMBEDDING for a in args):
        return False
    return not any(a == "--runner" and i + 1 < len(args) and args[i + 1] == "dask" for i, a in enumerate(args))


def start_early(argv: Sequence[str]) -> bool:
    """Spawn the ``model`` worker now when ``argv`` runs a command that embeds locally; True if one was started."""
    if _EARLY or not will_embed(argv):
        return False
    started = time.perf_counter()
    try:
        proc, sock = spawn("model")
    except OSError:
        return False
    _EARLY.append((proc, sock, started))
    atexit.register(discard_early)
    return True


def take_early() -> tuple[subprocess.Popen[bytes], socket.socket, float] | None:
    """The early worker (process, socket, perf_counter at its spawn), handed over once; None if there is none."""
    return _EARLY.pop() if _EARLY else None


def discard_early() -> None:
    """End the early worker if nobody adopted it."""
    while _EARLY:
        proc, sock, _ = _EARLY.pop()
        sock.close()
        proc.kill()
        proc.wait()
