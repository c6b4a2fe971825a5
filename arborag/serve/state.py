"""The published snapshot the server answers from, and the switch to a newer one.

:class:`SnapshotHolder` stats ``CORPUS/manifest.json`` on every request (one ``os.stat``,
microseconds). When the manifest changed, the first request to notice opens the newly published
snapshot while every other request goes on answering from the current one; then the current
one is switched in one assignment. A request holds a *lease* on the snapshot it started with
and finishes on it, so one answer always comes from one complete snapshot; a replaced snapshot
is released when its last lease ends.

The query embedder is resident and shared across snapshots built with the same embedder
configuration: a switch never reloads the model.
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
from typing import Any, Callable, Iterator

import numpy as np

from arborag.config import ArboragConfig, EmbedConfig

__all__ = ["Snapshot", "SnapshotHolder", "ResidentEmbedders"]

log = logging.getLogger("arborag.serve")
RETRY_FAILED_OPEN_S = 5.0


class _Pending:
    __slots__ = ("texts", "result", "error", "done")

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.result: np.ndarray | None = None
        self.error: BaseException | None = None
        self.done = False


class ResidentEmbedders:
    """One loaded query embedder per embedder configuration, loaded on first use, kept for good.

    One forward pass runs at a time (the cores are better used by one batched pass than by
    several competing ones; the model loads once even under concurrent first requests), and
    the requests that arrive while a pass runs are embedded together in the next pass
    (up to :attr:`max_batch` texts), so concurrent clients share forward passes.
    """

    max_batch = 64

    def __init__(self, factory: Callable[[EmbedConfig], Callable[[list[str]], np.ndarray]] | None = None) -> None:
        self._factory = factory or _default_embedder
        self._models: dict[str, Callable[[list[str]], np.ndarray]] = {}
        self._queues: dict[str, list[_Pending]] = {}
        self._lock = threading.Lock()  # held during a forward pass
        self._qlock = threading.Lock()  # guards the queues
        self.passes = 0

    @property
    def loaded(self) -> bool:
        return bool(self._models)

    def for_config(self, cfg: EmbedConfig) -> Callable[[list[str]], np.ndarray]:
        key = cfg.model_dump_json()

        def embed(texts: list[str]) -> np.ndarray:
            item = _Pending(list(texts))
            with self._qlock:
                self._queues.setdefault(key, []).append(item)
            with self._lock:
                while not item.done:  # a previous pass may already have embedded this item
                    self._run_pass(key, cfg)
            if item.error is not None:
                raise item.error
            assert item.result is not None
            return item.result

        return embed

    def _run_pass(self, key: str, cfg: EmbedConfig) -> None:
        with self._qlock:
            queue = self._queues[key]
            batch, n = [], 0
            while queue and (not batch or n + len(queue[0].texts) <= self.max_batch):
                batch.append(queue.pop(0))
                n += len(batch[-1].texts)
        try:
            model = self._models.get(key)
            if model is None:
                model = self._models[key] = self._factory(cfg)
            vectors = np.asarray(model([t for item in batch for t in item.texts]), dtype=np.float32)
            self.passes += 1
            at = 0
            for item in batch:
                item.result = vectors[at:at + len(item.texts)]
                at += len(item.texts)
        except BaseException as exc:  # every waiter of this pass gets the error
            for item in batch:
                item.error = exc
        finally:
            for item in batch:
                item.done = True


def _default_embedder(cfg: EmbedConfig) -> Callable[[list[str]], np.ndarray]:
    from arborag.embedder import Embedder

    model = Embedder(cfg)
    return model.embed


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

        levels = pl.from_arrow(pq.read_table(self.dir / "nodes.parquet", columns=["level"]))
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
        sparse = getattr(index, "_sparse", None)
        if sparse is not None:
            sparse.close()


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
