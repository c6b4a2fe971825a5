"""The published snapshot the server answers from, and the switch to a newer one.

:class:`SnapshotHolder` stats ``CORPUS/manifest.json`` on every request (one ``os.stat``,
microseconds). When the manifest changed, the first request to notice opens the newly published
snapshot while every other request goes on answering from the current one; then the current
one is switched in one assignment. A request holds a *lease* on the snapshot it started with
and finishes on it, so one answer always comes from one complete snapshot; a replaced snapshot
is released when its last lease ends.

The query embedder (:mod:`arborag.serve.embedders`) is resident and shared across snapshots
built with the same embedder configuration: a switch never reloads the model.

**Retention cannot pull files from under the server.** Every snapshot the server has open holds a
reader lease on the corpus (:func:`arborag.storage.leases.acquire_lease`, holder ``serve``): the
published one it answers from, a replaced one until its last request is done, and the earlier
snapshots requests asked for by name (``POST /search {"snapshot": ...}``, kept open for
``old_idle_s`` after their last use, at most ``max_old`` of them). A timer renews the leases
every ``ttl_s / 3``; a lease is released when its snapshot is closed, and stops counting at once
if the server dies. ``arborag snapshots gc`` keeps every leased snapshot, so the server answers
from a snapshot for as long as it has it open, and the snapshot may go at the first gc after the
server let it go.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import OrderedDict, deque
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from arborag.config import ArboragConfig

if TYPE_CHECKING:
    from arborag.serve.embedders import ResidentEmbedders

__all__ = ["Snapshot", "SnapshotHolder"]

log = logging.getLogger("arborag.serve")
RETRY_FAILED_OPEN_S = 5.0


class Snapshot:
    """One opened snapshot (the published one, or an earlier one a request named): the query
    index plus what the API shows around hits. ``leases`` counts requests in flight on it; the
    index's own ``lease`` is the corpus-level reader lease that keeps retention away."""

    def __init__(self, index: Any, corpus: Any) -> None:
        self.index = index
        self.id: str = index.snapshot
        self.dir: Path = Path(index.snapshot_dir)
        self.info: dict[str, Any] = dict(index.info)
        self.corpus = corpus
        self.leases = 0
        self.retired = False
        self.last_used = time.monotonic()
        self._lock = threading.Lock()
        self._docs: dict[str, tuple[str | None, str]] | None = None
        self._tables: tuple[Any, Any] | None = None
        self.levels = self._level_counts()

    def _level_counts(self) -> dict[str, int]:
        import polars as pl
        import pyarrow.parquet as pq

        levels = pl.DataFrame(pq.read_table(self.dir / "nodes.parquet", columns=["level"]))
        counts = levels.group_by("level").len().sort("level")
        return {str(lv): int(n) for lv, n in zip(counts["level"].to_list(), counts["len"].to_list())}

    @property
    def dim(self) -> int | None:
        """The embedding size of this snapshot's vectors (None when the index does not say)."""
        return getattr(getattr(self.index, "vectors", None), "dim", None)

    @property
    def n_nodes(self) -> int:
        return sum(self.levels.values())

    def renew(self) -> None:
        """Push the expiry of this snapshot's reader lease forward (no-op without one)."""
        lease = getattr(self.index, "lease", None) if self.index is not None else None
        if lease is not None and not lease.released:
            try:
                lease.renew()
            except RuntimeError:
                if not lease.released:
                    raise  # released by a request meanwhile: nothing left to renew

    def documents(self) -> dict[str, tuple[str | None, str]]:
        """doc_id -> (title, uri) from the snapshot's documents (none for a snapshot written before
        snapshots kept them: the working tables describe another state), read once per snapshot."""
        if self._docs is None:
            with self._lock:
                if self._docs is None:
                    import pyarrow.parquet as pq

                    path = self.dir / "documents.parquet"
                    if path.exists():
                        t = pq.read_table(path, columns=["doc_id", "title", "uri"])
                        self._docs = dict(zip(t.column("doc_id").to_pylist(),
                                              zip(t.column("title").to_pylist(), t.column("uri").to_pylist())))
                    else:
                        self._docs = {}
        return self._docs

    def tables(self) -> tuple[Any, Any]:
        """(nodes, edges) of this snapshot as polars frames, loaded on first use."""
        if self._tables is None:
            with self._lock:
                if self._tables is None:
                    import polars as pl

                    nodes = pl.from_arrow(self.corpus.read_snapshot("nodes", self.dir))
                    edges = pl.from_arrow(self.corpus.read_snapshot("edges", self.dir))
                    self._tables = (nodes, edges)
        return self._tables

    def release(self) -> None:
        """Drop everything this snapshot holds (memory maps close with their objects)."""
        index, self.index, self._tables, self._docs = self.index, None, None, None
        close = getattr(index, "close", None)  # the query API has no close() yet: close its sparse index
        if close is None:
            sparse = getattr(index, "_sparse", None)
            close = sparse.close if sparse is not None else None
        if close is not None:
            close()


class SnapshotHolder:
    """The current snapshot of a corpus, switched to a newly published one between requests."""

    def __init__(self, corpus_dir: str | Path, config: ArboragConfig, embedders: ResidentEmbedders, *,
                 ttl_s: float = 600.0, old_idle_s: float = 300.0, max_old: int = 2, pinned: str | None = None) -> None:
        from arborag.storage.corpus import Corpus

        self.corpus = Corpus(corpus_dir)
        self.config = config
        self.embedders = embedders
        self.ttl_s = float(ttl_s)
        self.old_idle_s = float(old_idle_s)
        self.max_old = int(max_old)
        self.pinned = pinned  # serve this retained snapshot only (never follow publishes)
        self._old: OrderedDict[str, Snapshot] = OrderedDict()  # earlier snapshots requests named, LRU
        self._retired: set[Snapshot] = set()  # replaced, still answering requests in flight
        self._old_lock = threading.Lock()
        self._renewer: threading.Thread | None = None
        self._closing = threading.Event()
        self._current: Snapshot | None = None
        self._sig: tuple[int, int, int] | None = None
        self._swap_lock = threading.Lock()
        self._lease_lock = threading.Lock()
        self._failed: tuple[tuple[int, int, int] | None, float] | None = None
        self.open_error: str | None = None  # why the published snapshot could not be opened (said by a 503)
        self.swaps = 0
        self.released: deque[str] = deque(maxlen=20)

    # -- opening ---------------------------------------------------------------------------
    def _signature(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.corpus.manifest_path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _open(self, snapshot_id: str | None = None) -> Snapshot:
        """Open the published snapshot (or ``snapshot_id``) under a reader lease."""
        from arborag.query import open_index, snapshot_embed_config

        if snapshot_id is None:
            man = self.corpus.manifest()
            if man is None:
                self.corpus.published_dir()  # raises NotBuiltError with its message
            snapshot_id = str(man["snapshot"])  # type: ignore[index]
        info = json.loads((self.corpus.snapshots_dir / snapshot_id / "info.json").read_text(encoding="utf-8")) \
            if (self.corpus.snapshots_dir / snapshot_id / "info.json").is_file() else {}
        embed_cfg = snapshot_embed_config(info, self.config)  # the embedder the snapshot was built with
        index = open_index(self.corpus.root, config=self.config, embed_query=self.embedders.for_config(embed_cfg),
                           snapshot=snapshot_id, lease_holder="serve", lease_ttl_s=self.ttl_s)
        self._start_renewer()
        return Snapshot(index, self.corpus)

    # -- reader leases on the corpus ---------------------------------------------------------
    def _start_renewer(self) -> None:
        if self._renewer is None:
            self._renewer = threading.Thread(target=self._renew_loop, name="arborag-lease-renewer", daemon=True)
            self._renewer.start()

    def open_snapshots(self) -> list[Snapshot]:
        """Every snapshot the server has open (current, replaced ones still answering, named earlier ones)."""
        with self._lease_lock:
            snaps = [s for s in [self._current, *self._retired] if s is not None]
        with self._old_lock:
            snaps += [s for s in self._old.values() if s not in snaps]
        return snaps

    def _renew_loop(self) -> None:
        interval = max(0.05, self.ttl_s / 3)
        while not self._closing.wait(min(interval, max(0.05, self.old_idle_s / 2))):
            for snap in self.open_snapshots():
                try:
                    snap.renew()
                except Exception as exc:  # noqa: BLE001 - keep renewing the others; the expiry is far
                    log.warning("cannot renew the reader lease on %s: %s", snap.id, exc)
            self._drop_idle()

    def _drop_idle(self) -> None:
        now = time.monotonic()
        with self._old_lock:
            idle = [s for s in self._old.values() if s.leases == 0 and now - s.last_used > self.old_idle_s]
            for s in idle:
                del self._old[s.id]
        for s in idle:
            self._release(s)

    def close(self) -> None:
        """Release every open snapshot and its reader lease (server shutdown)."""
        self._closing.set()
        with self._old_lock:
            old, self._old = list(self._old.values()), OrderedDict()
        with self._lease_lock:
            snaps = [s for s in [self._current, *self._retired] if s is not None]
            self._current, self._retired = None, set()
        for s in [*snaps, *old]:
            if s.index is not None:
                self._release(s)

    def refresh(self, *, wait: bool = False) -> Snapshot | None:
        """Switch to the published snapshot if the manifest changed. Never blocks a request
        (``wait=False``): while one request opens the new snapshot, others use the current one.
        A holder ``pinned`` to a snapshot opens that one once and never switches."""
        if self.pinned is not None:
            return self._open_pinned()
        sig = self._signature()
        if sig == self._sig and self._current is not None:
            return self._current
        if sig is None:
            return self._current
        if self._failed and self._failed[0] == sig and time.monotonic() - self._failed[1] < RETRY_FAILED_OPEN_S:
            return self._current
        if not self._swap_lock.acquire(blocking=wait or self._current is None):
            return self._current
        try:
            if self._signature() == self._sig and self._current is not None:
                return self._current
            sig = self._signature()
            published = None
            try:
                published = (self.corpus.manifest() or {}).get("snapshot")
                if self._current is not None and published == self._current.id:  # re-published, same snapshot
                    self._sig = sig
                    return self._current
                new = self._open()
            except Exception as exc:  # a half-deleted or broken snapshot: keep answering from the old one
                self._failed = (sig, time.monotonic())
                self.open_error = f"snapshot {published or '?'}: {type(exc).__name__}: {exc}"
                log.warning("cannot open the published snapshot of %s (%s); still serving %s",
                            self.corpus.root, exc, self._current.id if self._current else "nothing")
                return self._current
            self._sig = sig
            self.open_error = None
            old = self._current
            if old is not None and old.id == new.id:
                new.release()
                return old
            with self._lease_lock:
                self._current = new
                if old is not None:
                    old.retired = True
                    self.swaps += 1
                    if old.leases == 0:
                        self._release(old)
                    else:
                        self._retired.add(old)
            log.info("serving snapshot %s", new.id)
            return new
        finally:
            self._swap_lock.release()

    def _open_pinned(self) -> Snapshot | None:
        if self._current is not None:
            return self._current
        with self._swap_lock:
            if self._current is None:
                from arborag.storage.snapshots import resolve_snapshot

                assert self.pinned is not None
                self._current = self._open(resolve_snapshot(self.corpus, self.pinned))
                log.info("serving snapshot %s (pinned: publishes are not followed)", self._current.id)
        return self._current

    def _release(self, snap: Snapshot) -> None:
        snap.release()
        self.released.append(snap.id)

    # -- leases ----------------------------------------------------------------------------
    @property
    def current(self) -> Snapshot | None:
        return self._current

    @contextmanager
    def lease(self, snapshot: str | None = None) -> Iterator[Snapshot | None]:
        """The snapshot a request answers from, held until the request is done: the published one,
        or the retained snapshot ``snapshot`` names (an id or unique prefix; raises
        :class:`~arborag.errors.SnapshotNotFound` when none is retained)."""
        if snapshot is not None and snapshot != "published":  # a named snapshot: the server does not move for it
            with self._named(snapshot) as snap:
                yield snap
            return
        self.refresh()
        with self._current_lease() as snap:
            yield snap

    @contextmanager
    def _current_lease(self, expect: str | None = None) -> Iterator[Snapshot | None]:
        with self._lease_lock:
            snap = self._current
            if snap is not None and expect is not None and snap.id != expect:
                snap = None
            if snap is not None:
                snap.leases += 1
        try:
            yield snap
        finally:
            if snap is not None:
                with self._lease_lock:
                    snap.leases -= 1
                    done = snap.retired and snap.leases == 0
                    if done:
                        self._retired.discard(snap)
                if done:
                    self._release(snap)

    @contextmanager
    def _named(self, ref: str) -> Iterator[Snapshot]:
        """An earlier retained snapshot, opened on first use and kept (LRU) while requests use it."""
        with self._old_lock:
            snap = self._old.get(ref)
        if snap is None:
            from arborag.storage.snapshots import resolve_snapshot

            current = self._current
            sid = current.id if current is not None and ref == current.id else resolve_snapshot(self.corpus, ref)
            if current is not None and sid == current.id:
                with self._current_lease(expect=sid) as cur:
                    if cur is not None:  # still the current one (not switched meanwhile)
                        yield cur
                        return
            with self._old_lock:
                snap = self._old.get(sid)
            if snap is None:
                opened = self._open(sid)
                spare: Snapshot | None = opened  # released below unless it becomes the cached one
                evicted: list[Snapshot] = []
                with self._old_lock:
                    snap = self._old.get(sid)
                    if snap is None:
                        snap, spare = opened, None
                        self._old[sid] = snap
                        while len(self._old) > self.max_old:
                            victim = next((s for s in self._old.values() if s.leases == 0 and s is not snap), None)
                            if victim is None:
                                break
                            del self._old[victim.id]
                            evicted.append(victim)
                if spare is not None:  # another request opened it meanwhile
                    spare.release()
                for v in evicted:
                    self._release(v)
        with self._old_lock:
            snap.leases += 1
            snap.last_used = time.monotonic()
            self._old.move_to_end(snap.id)
        try:
            yield snap
        finally:
            with self._old_lock:
                snap.leases -= 1
                snap.last_used = time.monotonic()
