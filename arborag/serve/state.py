"""The published snapshot the server answers from, and the switch to a newer one.

:class:`SnapshotHolder` stats ``CORPUS/manifest.json`` on every request (one ``os.stat``,
microseconds). When the manifest changed, the first request to notice opens the newly published
snapshot while every other request goes on answering from the current one; then the current
one is switched in one assignment. A request holds a *lease* on the snapshot it started with
and finishes on it, so one answer always comes from one complete snapshot; a replaced snapshot
is released when its last lease ends.

The query embedder (:mod:`arborag.serve.embedders`) is resident and shared across snapshots
built with the same embedder configuration: a switch never reloads the model.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
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
    """One opened, published snapshot: the query index plus what the API shows around hits."""

    def __init__(self, index: Any, corpus: Any) -> None:
        self.index = index
        self.id: str = index.snapshot
        self.dir: Path = Path(index.snapshot_dir)
        self.info: dict[str, Any] = dict(index.info)
        self.corpus = corpus
        self.leases = 0
        self.retired = False
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

    def documents(self) -> dict[str, tuple[str | None, str]]:
        """doc_id -> (title, uri) from the corpus's documents table (read once per snapshot)."""
        if self._docs is None:
            with self._lock:
                if self._docs is None:
                    import pyarrow.parquet as pq

                    path = self.corpus.table_path("documents")
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

    def __init__(self, corpus_dir: str | Path, config: ArboragConfig, embedders: ResidentEmbedders) -> None:
        from arborag.storage.corpus import Corpus

        self.corpus = Corpus(corpus_dir)
        self.config = config
        self.embedders = embedders
        self._current: Snapshot | None = None
        self._sig: tuple[int, int, int] | None = None
        self._swap_lock = threading.Lock()
        self._lease_lock = threading.Lock()
        self._failed: tuple[tuple[int, int, int] | None, float] | None = None
        self.swaps = 0
        self.released: deque[str] = deque(maxlen=20)

    # -- opening ---------------------------------------------------------------------------
    def _signature(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.corpus.manifest_path)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _open(self) -> Snapshot:
        from arborag.query import open_index, snapshot_embed_config

        info = json.loads((self.corpus.published_dir() / "info.json").read_text(encoding="utf-8"))
        embed_cfg = snapshot_embed_config(info, self.config)  # the embedder the snapshot was built with
        index = open_index(self.corpus.root, config=self.config, embed_query=self.embedders.for_config(embed_cfg))
        return Snapshot(index, self.corpus)

    def refresh(self, *, wait: bool = False) -> Snapshot | None:
        """Switch to the published snapshot if the manifest changed. Never blocks a request
        (``wait=False``): while one request opens the new snapshot, others use the current one."""
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
            try:
                published = (self.corpus.manifest() or {}).get("snapshot")
                if self._current is not None and published == self._current.id:  # re-published, same snapshot
                    self._sig = sig
                    return self._current
                new = self._open()
            except Exception as exc:  # a half-deleted or broken snapshot: keep answering from the old one
                self._failed = (sig, time.monotonic())
                log.warning("cannot open the published snapshot of %s (%s); still serving %s",
                            self.corpus.root, exc, self._current.id if self._current else "nothing")
                return self._current
            self._sig = sig
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
            log.info("serving snapshot %s", new.id)
            return new
        finally:
            self._swap_lock.release()

    def _release(self, snap: Snapshot) -> None:
        snap.release()
        self.released.append(snap.id)

    # -- leases ----------------------------------------------------------------------------
    @property
    def current(self) -> Snapshot | None:
        return self._current

    @contextmanager
    def lease(self) -> Iterator[Snapshot | None]:
        """The snapshot a request answers from, held until the request is done."""
        self.refresh()
        with self._lease_lock:
            snap = self._current
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
                    self._release(snap)
