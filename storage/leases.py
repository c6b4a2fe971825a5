"""Reader leases: a reader's claim on one snapshot, which retention never removes while it lives.

A lease is one small JSON record ``leases/<snapshot_id>/<token>.json`` under the corpus (on the
object store for an ``s3://`` corpus, so readers on every machine count)::

    {"snapshot": "snap-…", "holder": "serve", "pid": 4242, "host": "box", "boot_id": "…",
     "proc_start": 123456, "acquired": "2026-11-26T11:00:00+00:00", "expires": 1795000000.0, "token": "…"}

A lease is **live** while its expiry (epoch seconds) is in the future and — for a holder on this
host — its process still runs (the pid exists, is not a zombie, started at the recorded tick and
the machine did not reboot: the tests of :mod:`arborag.storage.lock`). A reader that dies
without releasing stops counting at once on its own host and after ``ttl_s`` elsewhere.
Long readers (``arborag serve``, a long query) call :meth:`Lease.renew` on a timer or per request.

Why leases *and* a time window (docs/RELIABILITY.md, "Reader guarantee"): Delta Lake's
``VACUUM … RETAIN n HOURS`` protects readers by age alone, which fails a reader older than the
window (a server left running for a week on one snapshot); a lease covers exactly that reader
for as long as it lives, and the short ``retention.grace_s`` window covers readers that opened a
snapshot without one.

Acquiring is race-free against :func:`arborag.storage.snapshots.collect_garbage`: the reader
writes its lease, *then* checks that the snapshot's seal (``info.json``) is still there; gc
removes the seal, *then* looks for leases, and puts the seal back when one appeared. One of the
two always sees the other.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from arborag.errors import SnapshotNotFound
from arborag.storage.lock import _boot_id, _pid_alive, _proc_start

if TYPE_CHECKING:
    from arborag.storage.corpus import Corpus

__all__ = ["LEASES_DIR", "Lease", "acquire_lease", "is_live", "live_leases"]

LEASES_DIR = "leases"


def _rel(snapshot_id: str, token: str) -> str:
    return f"{LEASES_DIR}/{snapshot_id}/{token}.json"


def is_live(record: dict[str, Any], *, now: float | None = None) -> bool:
    """Is the lease ``record`` still held (unexpired, and its holder alive when on this host)?"""
    now = time.time() if now is None else now
    try:
        if float(record.get("expires", 0)) <= now:
            return False
        pid = int(record.get("pid", -1))
    except (TypeError, ValueError):
        return False
    if record.get("host") != socket.gethostname():
        return True  # another machine: the expiry alone decides
    boot = _boot_id()
    if record.get("boot_id") and boot and record["boot_id"] != boot:
        return False
    if not _pid_alive(pid):
        return False
    start = _proc_start(pid)
    recorded = record.get("proc_start")
    return not (recorded is not None and start is not None and start != recorded)


class Lease:
    """A reader's claim on ``snapshot_id`` (a context manager: released on exit)."""

    def __init__(self, corpus: "Corpus", snapshot_id: str, *, holder: str, ttl_s: float) -> None:
        self.corpus = corpus
        self.snapshot_id = snapshot_id
        self.holder = holder
        self.ttl_s = float(ttl_s)
        self.token = uuid.uuid4().hex
        self.released = False
        # renew and release serialised: a renew that passed its check while another thread released
        # the lease would write the record again after the release deleted it — a lease nobody
        # holds, live until its expiry (seen once as a flaky tests/serve run: the server's timer
        # renewed the snapshot a request had just let go)
        self._lock = threading.Lock()
        pid = os.getpid()
        self._record: dict[str, Any] = {
            "snapshot": snapshot_id, "holder": holder, "pid": pid, "host": socket.gethostname(),
            "boot_id": _boot_id(), "proc_start": _proc_start(pid), "token": self.token,
            "acquired": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }

    @property
    def expires(self) -> float:
        return float(self._record.get("expires", 0.0))

    def _write(self) -> None:
        self._record["expires"] = time.time() + self.ttl_s
        self.corpus.put_record(_rel(self.snapshot_id, self.token), self._record)

    def renew(self) -> None:
        """Push the expiry ``ttl_s`` seconds past now (serve: on a timer or per request). Raises
        :class:`RuntimeError` once the lease is released (a caller racing a release checks
        :attr:`released` after catching it)."""
        with self._lock:
            if self.released:
                raise RuntimeError(f"lease on {self.snapshot_id} was released; acquire a new one")
            self._write()

    def release(self) -> None:
        """Give the snapshot up (idempotent); retention may remove it from now on. Waits for a
        renew in progress on another thread, so the record it writes is the one deleted."""
        with self._lock:
            if self.released:
                return
            self.released = True
            self.corpus.delete_record(_rel(self.snapshot_id, self.token))

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Lease({self.snapshot_id!r}, holder={self.holder!r}, expires={self.expires:.0f})"


def acquire_lease(corpus: "Corpus", snapshot_id: str, *, holder: str, ttl_s: float = 600.0) -> Lease:
    """Lease ``snapshot_id`` (a full id; see :func:`arborag.storage.snapshots.resolve_snapshot`)
    for ``ttl_s`` seconds. Raises :class:`SnapshotNotFound` when the snapshot is not (or no
    longer) retained; the lease is then not left behind."""
    if ttl_s <= 0:
        raise ValueError(f"ttl_s must be positive, got {ttl_s}")
    lease = Lease(corpus, snapshot_id, holder=holder, ttl_s=ttl_s)
    lease._write()
    if not _sealed(corpus, snapshot_id):  # after the write: see the module docs
        lease.release()
        raise SnapshotNotFound(corpus.location, snapshot_id, sorted(corpus.snapshot_ids(), reverse=True),
                               "it is not retained (removed by gc, or never published)")
    return lease


def _sealed(corpus: "Corpus", snapshot_id: str) -> bool:
    if corpus.store is not None:
        return corpus.store.exists(f"snapshots/{snapshot_id}/info.json")
    return (corpus.snapshots_dir / snapshot_id / "info.json").is_file()


def live_leases(corpus: "Corpus") -> dict[str, list[dict[str, Any]]]:
    """``snapshot_id -> [live lease records]`` (expired and dead-holder leases left out)."""
    now = time.time()
    out: dict[str, list[dict[str, Any]]] = {}
    for rel in corpus.list_records(LEASES_DIR):
        rec = corpus.get_record(rel)
        if rec is None or not is_live(rec, now=now):
            continue
        snap = rec.get("snapshot") or rel.split("/")[1]
        out.setdefault(str(snap), []).append(rec)
    return out


def prune_leases(corpus: "Corpus") -> int:
    """Delete the records of leases that are no longer live; returns how many went."""
    now = time.time()
    gone = 0
    for rel in corpus.list_records(LEASES_DIR):
        rec = corpus.get_record(rel)
        if rec is None or not is_live(rec, now=now):
            corpus.delete_record(rel)
            gone += 1
    if corpus.store is None:  # empty folders of snapshots that are gone (a reader of one would fail anyway)
        root = corpus.root / LEASES_DIR
        if root.is_dir():
            for d in root.iterdir():
                if d.is_dir() and not any(d.iterdir()) and not _sealed(corpus, d.name):
                    try:
                        d.rmdir()
                    except OSError:
                        pass
    return gone


__all__ += ["prune_leases"]
