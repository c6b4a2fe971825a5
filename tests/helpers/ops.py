"""Helpers of tests/ops: a lock held by another real process, a local Prefect server, and a
benchmark script imported as a module (its report code is tested without running it).

Nothing here imports arborag at module level (the processes it starts do).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from helpers.reliability import REPO, cli_env, wait_for

PYTHON = sys.executable

__all__ = ["HOLD_LOCK", "benchmark_module", "free_port", "hold_lock", "no_server_env", "prefect_server", "stop", "write_small_docs"]

# hold the corpus lock in a separate process until the file argv[3] exists (or argv[4] seconds pass)
HOLD_LOCK = r"""
import sys, time
from pathlib import Path
from arborag.storage.lock import corpus_lock
corpus, purpose, release, limit = sys.argv[1], sys.argv[2], Path(sys.argv[3]), float(sys.argv[4])
with corpus_lock(corpus, purpose=purpose, heartbeat=0.2):
    print("HELD", flush=True)
    end = time.monotonic() + limit
    while not release.exists() and time.monotonic() < end:
        time.sleep(0.05)
print("RELEASED", flush=True)
"""


@contextlib.contextmanager
def hold_lock(corpus: Path, *, purpose: str = "test-holder", limit: float = 60.0) -> Iterator[tuple[subprocess.Popen, Path]]:
    """Another process holding ``corpus``'s lock; yields (process, release file); always stopped."""
    release = corpus.parent / f".release-{os.getpid()}-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [PYTHON, "-c", HOLD_LOCK, str(corpus), purpose, str(release), str(limit)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=str(REPO),
    )
    try:
        line = proc.stdout.readline()
        assert line.strip() == "HELD", f"the holder did not take the lock: {line!r} {proc.stderr.read() if proc.poll() is not None else ''}"
        yield proc, release
    finally:
        release.touch()
        stop(proc, grace=10)
        release.unlink(missing_ok=True)


_PLACES = ("Arden", "Bexley", "Corran", "Dunmore", "Elsworth", "Fallow", "Garth", "Hollin", "Ivel", "Jarrow", "Kestle", "Lowick")
_THINGS = ("a stone bridge", "a water mill", "a clock tower", "a salt market", "a rope walk", "a tide pool",
           "a glass works", "a bell foundry", "a paper mill", "a ferry landing", "a lime kiln", "a signal box")


def write_small_docs(folder: Path, n: int, *, start: int = 0) -> list[Path]:
    """``n`` one-sentence .txt documents, each with its own place and thing (one leaf each: a build
    of up to 11 of them makes no summary level, so no clustering: fast)."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(start, start + n):
        path = folder / f"note{i:03d}.txt"
        path.write_text(f"The town of {_PLACES[i % 12]}{i // 12 or ''} is known for {_THINGS[(i * 5) % 12]} built in {1800 + 7 * i}.\n")
        out.append(path)
    return out


def stop(proc: subprocess.Popen, *, grace: float = 10.0) -> None:
    """Stop a process we started: wait ``grace`` s if it is finishing, then SIGTERM, then SIGKILL."""
    if proc.poll() is None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM) if _own_group(proc) else proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL) if _own_group(proc) else proc.kill()
        proc.wait(timeout=30)


def _own_group(proc: subprocess.Popen) -> bool:
    try:
        return os.getpgid(proc.pid) == proc.pid
    except ProcessLookupError:
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_IDLE_SERVICES = ("CANCELLATION_CLEANUP", "DB_VACUUM", "EVENT_LOGGER", "FOREMAN", "LATE_RUNS", "PAUSE_EXPIRATIONS",
                  "REPOSSESSOR", "CLEANUP_RECONCILER", "TRIGGERS", "TASK_RUN_RECORDER", "EVENT_PERSISTER")


def no_server_env() -> dict[str, str]:
    """PREFECT_API_URL pointing at a free port nobody listens on."""
    return {"PREFECT_API_URL": f"http://127.0.0.1:{free_port()}/api"}


@contextlib.contextmanager
def prefect_server(home: Path, *, timeout: float = 90.0) -> Iterator[str]:
    """A real ``prefect server start`` on 127.0.0.1 with PREFECT_HOME=``home``; yields its API URL; always stopped."""
    import httpx

    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = cli_env(PREFECT_HOME=str(home), PREFECT_API_URL=url, PREFECT_SERVER_API_HOST="127.0.0.1",
                  PREFECT_SERVER_API_PORT=str(port), PREFECT_UI_ENABLED="false",
                  # only the scheduler is needed: the other services just load a busy box
                  **{f"PREFECT_SERVER_SERVICES_{name}_ENABLED": "false" for name in _IDLE_SERVICES})
    log = open(home / "server.log", "w")
    proc = subprocess.Popen(
        [str(Path(PYTHON).parent / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(home), start_new_session=True,
    )

    def healthy() -> bool:
        try:
            return httpx.get(f"{url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        if not wait_for(healthy, timeout=timeout, interval=0.5, proc=proc):
            raise AssertionError(f"prefect server did not start in {timeout} s:\n{(home / 'server.log').read_text()[-3000:]}")
        yield url
    finally:
        stop(proc, grace=0)
        log.close()


def benchmark_module(name: str) -> Any:
    """``benchmarks/<name>.py`` imported as a module (the folder is on ``sys.path`` only while it
    imports: its scripts import their ``_common`` helpers from there)."""
    import importlib

    folder = str(REPO / "benchmarks")
    sys.path.insert(0, folder)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(folder)
