"""Where a process's seconds go besides its stages: start-up phases (imports, model load, JIT, Prefect).

A cold ``arborag build`` or ``update`` spends part of its time before and around the stages —
the interpreter and imports, torch and the model, numba loading UMAP's compiled code, Prefect's
API. The places that do such work time it here under a name (:func:`phase`, summed when a name
repeats); a run takes a :func:`snapshot` when it starts and records :func:`since` that snapshot
as ``phases`` in its ``runs`` row (a warm process — ``arborag schedule`` — runs many runs: each
gets only its own). :func:`process_age` is the seconds since this process started (from
``/proc/self/stat``), so a run also knows how long the process took to reach it.

Process-wide and thread-safe; costs a ``perf_counter`` call per phase.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["phase", "process_age", "record", "since", "snapshot"]

_LOCK = threading.Lock()
_SECONDS: dict[str, float] = {}


def record(name: str, seconds: float) -> None:
    """Add ``seconds`` to phase ``name``."""
    with _LOCK:
        _SECONDS[name] = _SECONDS.get(name, 0.0) + float(seconds)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block as phase ``name`` (added to what the name holds already)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        record(name, time.perf_counter() - t0)


def snapshot() -> dict[str, float]:
    """The phases so far (a copy)."""
    with _LOCK:
        return dict(_SECONDS)


def since(before: dict[str, float]) -> dict[str, float]:
    """The phase seconds added after ``before`` (a :func:`snapshot`), rounded to ms; zeros dropped."""
    now = snapshot()
    out = {k: round(v - before.get(k, 0.0), 3) for k, v in now.items()}
    return {k: v for k, v in out.items() if v > 0}


def process_age() -> float | None:
    """Seconds since this process started (Linux ``/proc``), or None where that cannot be read."""
    try:
        with open("/proc/self/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of proc(5): starttime, after "pid (comm)"
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
