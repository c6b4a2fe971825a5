"""One writer at a time: the corpus lock.

Every command that writes a corpus (ingest, build, update, publish) runs inside
:func:`corpus_lock`; readers (query, sql, inspect, serve) take no lock — they read the
published manifest, which a writer switches atomically.

The lock is the file ``CORPUS/writer.lock``; it exists while a writer holds the corpus and
holds its owner record as JSON::

    {"pid": 4242, "host": "box", "started": "2026-11-22T14:40:00+00:00", "purpose": "build",
     "token": "<uuid>", "boot_id": "<kernel boot id>", "proc_start": <start ticks of pid>}

It is created in one atomic step (the record is written to a temporary file, then hard-linked
to ``writer.lock``, which fails when the name exists — safe on local and network file
systems), so a reader never sees half a record. While held, a background thread touches the
file every ``heartbeat`` seconds.

A lock is **stale** — and the next writer removes it, saying so — when its owner cannot be
running any more:

- same host: the pid is gone, or it now belongs to another process (its start time differs),
  or the machine rebooted since (the kernel boot id differs);
- another host: the file has not been touched for ``max_age`` seconds (default 600, or
  ``ARBORAG_LOCK_MAX_AGE_S``; the owner's heartbeat touches it every 30 s).

A second writer waits, polling, and reports once per owner through ``on_wait`` ("waiting for
the lock held by pid N on HOST since T (build)"); with ``wait=False`` (``--no-wait`` on the
CLI) it raises :class:`~arborag.errors.CorpusLockedError` at once, and with ``timeout`` it raises
that after waiting so long. Check-and-remove of a stale lock is serialised on this host by an
``fcntl`` lock on ``CORPUS/writer.lock.guard``.

The lock belongs to one thread of one process. It is re-entrant for that thread only: a flow
that takes it and calls another runner that takes it again (``run_build`` → the ``build`` flow,
which Prefect runs in the calling thread; an update falling back to a full rebuild) does not wait
for itself. Another thread of the same process is a second writer: it waits for the lock (or,
with ``wait=False`` or a ``timeout``, fails) exactly as another process would.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from arborag.errors import CorpusLockedError

try:  # POSIX; elsewhere the guard is a no-op (the hard link alone is still atomic)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "DEFAULT_HEARTBEAT_S",
    "DEFAULT_MAX_AGE_S",
    "LOCK_NAME",
    "LockOwner",
    "corpus_lock",
    "lock_path",
    "read_lock",
    "stale_reason",
]

log = logging.getLogger("arborag.lock")

LOCK_NAME = "writer.lock"
GUARD_NAME = "writer.lock.guard"
DEFAULT_MAX_AGE_S = 600.0
DEFAULT_HEARTBEAT_S = 30.0
POLL_S = 0.5

_HELD: dict[Path, list[Any]] = {}  # lock path -> [depth, owner, thread ident]; this process's held locks
_HELD_GUARD = threading.Lock()


@dataclass(frozen=True)
class LockOwner:
    """Who holds (or held) a corpus lock."""

    pid: int
    host: str
    started: str
    purpose: str
    token: str = ""
    boot_id: str | None = None
    proc_start: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host} since {self.started} ({self.purpose})"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "LockOwner":
        if not isinstance(data, dict):
            raise ValueError(f"a lock record is a JSON object, not {type(data).__name__}")
        known = {k: data.get(k) for k in ("pid", "host", "started", "purpose", "token", "boot_id", "proc_start")}
        return cls(
            pid=int(data["pid"]), host=str(known["host"]), started=str(known["started"]), purpose=str(known["purpose"] or "?"),
            token=str(known["token"] or ""), boot_id=known["boot_id"], proc_start=known["proc_start"],
            extra={k: v for k, v in data.items() if k not in known},
        )


def lock_path(corpus_dir: str | Path) -> Path:
    return Path(corpus_dir).expanduser().resolve() / LOCK_NAME


def _max_age_default() -> float:
    raw = os.environ.get("ARBORAG_LOCK_MAX_AGE_S")
    try:
        return float(raw) if raw else DEFAULT_MAX_AGE_S
    except ValueError:
        return DEFAULT_MAX_AGE_S


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def _proc_start(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (Linux), or None when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:  # the command name (field 2) may hold spaces and parentheses: split after its last ')'
        return int(stat[stat.rindex(")") + 2:].split()[19])
    except (ValueError, IndexError):
        return None


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return False
    # a zombie (killed, not yet reaped by its parent) holds nothing any more
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:].split()[0] != "Z"
    except (OSError, ValueError, IndexError):
        return True


def read_lock(corpus_dir: str | Path) -> LockOwner | None:
    """The current owner record of ``corpus_dir``'s lock, or None when the corpus is not locked."""
    return _read(lock_path(corpus_dir))


def _read(path: Path) -> LockOwner | None:
    try:
        return LockOwner.from_json(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, KeyError):
        # unreadable or not ours: report it as an owner nobody can be (stale once old enough)
        return LockOwner(pid=-1, host="?", started="?", purpose="unreadable lock record")


def stale_reason(owner: LockOwner, path: Path, *, max_age: float | None = None) -> str | None:
    """Why the lock held by ``owner`` (file ``path``) is stale, or None while it may be alive."""
    max_age = _max_age_default() if max_age is None else max_age
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return "it is gone"
    if owner.pid == -1:
        return "its record is unreadable" if age > 5 else None
    if owner.host == socket.gethostname():
        boot = _boot_id()
        if owner.boot_id and boot and owner.boot_id != boot:
            return f"{owner.host} rebooted since it was taken"
        if not _pid_alive(owner.pid):
            return f"pid {owner.pid} is no longer running"
        start = _proc_start(owner.pid)
        if owner.proc_start is not None and start is not None and start != owner.proc_start:
            return f"pid {owner.pid} is now another process"
        return None
    if age > max_age:
        return f"its owner on {owner.host} has not refreshed it for {age:.0f} s (max age {max_age:.0f} s)"
    return None


@contextlib.contextmanager
def _guard(root: Path) -> Iterator[None]:
    """Serialise check-and-take on this host (an fcntl lock held for milliseconds)."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    fd = os.open(root / GUARD_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def _try_create(path: Path, owner: LockOwner) -> bool:
    """Create ``path`` holding ``owner`` in one step; False when it already exists."""
    tmp = path.with_name(f".{LOCK_NAME}.{owner.token}.tmp")
    payload = json.dumps({k: v for k, v in asdict(owner).items() if k != "extra"}, sort_keys=True)
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(payload)
        fh.flush()
        os.fsync(fh.fileno())
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _default_on_wait(owner: LockOwner) -> None:
    print(f"arborag: waiting for the lock held by {owner.describe()}", file=sys.stderr, flush=True)


def _heartbeat(path: Path, token: str, every: float, stop: threading.Event) -> None:
    while not stop.wait(every):
        owner = _read(path)
        if owner is None or owner.token != token:
            log.warning("the corpus lock %s is no longer ours (it was removed as stale)", path)
            return
        with contextlib.suppress(OSError):
            os.utime(path)


@contextlib.contextmanager
def corpus_lock(
    corpus_dir: str | Path,
    *,
    wait: bool = True,
    timeout: float | None = None,
    purpose: str = "build",
    on_wait: Callable[[LockOwner], None] | None = None,
    max_age: float | None = None,
    heartbeat: float = DEFAULT_HEARTBEAT_S,
    poll: float = POLL_S,
) -> Iterator[LockOwner]:
    """Hold ``corpus_dir``'s writer lock for the ``with`` block; yields the owner record.

    ``wait=False``: raise :class:`CorpusLockedError` at once when another writer holds it.
    ``timeout``: seconds to wait before raising it (None: wait as long as it takes).
    ``on_wait(owner)`` is called once per distinct owner we start waiting for (default: one
    line on stderr). ``max_age``: seconds after which a lock from *another host* that has not
    been refreshed is stale (default ``ARBORAG_LOCK_MAX_AGE_S`` or 600).
    """
    root = Path(corpus_dir).expanduser().resolve()
    path = root / LOCK_NAME
    with _HELD_GUARD:
        held = _HELD.get(path)
        if held is not None and held[2] == threading.get_ident():  # re-entrant within this thread
            held[0] += 1
        else:
            held = None  # free, or held by another thread: taken (or waited for) like another process
    if held is not None:
        try:
            yield held[1]
        finally:
            with _HELD_GUARD:
                held[0] -= 1
        return

    root.mkdir(parents=True, exist_ok=True)
    me = LockOwner(
        pid=os.getpid(), host=socket.gethostname(), started=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        purpose=purpose, token=uuid.uuid4().hex, boot_id=_boot_id(), proc_start=_proc_start(os.getpid()),
    )
    notify = on_wait or _default_on_wait
    t0 = time.monotonic()
    told: str | None = None
    while True:
        with _guard(root):
            if _try_create(path, me):
                break
            owner = _read(path)
            if owner is None:  # released between our attempt and the read: try again now
                continue
            why = stale_reason(owner, path, max_age=max_age)
            if why is not None:
                path.unlink(missing_ok=True)
                log.warning("removed a stale corpus lock (%s): %s", owner.describe(), why)
                continue
        if not wait:
            raise CorpusLockedError(str(root), owner.describe(), str(path))
        waited = time.monotonic() - t0
        if timeout is not None and waited >= timeout:
            raise CorpusLockedError(str(root), owner.describe(), str(path), waited=waited)
        if owner.token != told:
            told = owner.token
            notify(owner)
        time.sleep(poll if timeout is None else max(0.0, min(poll, timeout - waited)))

    stop = threading.Event()
    beat = threading.Thread(target=_heartbeat, args=(path, me.token, heartbeat, stop), name="arborag-lock-heartbeat", daemon=True)
    beat.start()
    with _HELD_GUARD:
        _HELD[path] = [1, me, threading.get_ident()]
    try:
        yield me
    finally:
        with _HELD_GUARD:
            _HELD.pop(path, None)
        stop.set()
        with _guard(root):
            current = _read(path)
            if current is not None and current.token == me.token:
                path.unlink(missing_ok=True)
