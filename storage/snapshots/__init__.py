"""The snapshot catalog and retention: list, resolve, pin, diff, roll back, collect garbage.

Three modules: :mod:`.catalog` (what is retained: list, resolve, pin, diff, disk usage),
:mod:`.retention` (which snapshots stay, :func:`collect_garbage`, :func:`rollback`) and
:mod:`.sweeps` (one sweep per thing a corpus grows, each reporting into a :class:`GcReport`).

Every publish seals an immutable snapshot (:mod:`arborag.storage.corpus`); this module decides
which of them a corpus keeps and bounds everything else a long-lived corpus writes.

**Retention** (``retention.*`` in the config, :class:`arborag.config.RetentionConfig`). A
snapshot is kept when any of these holds, and removed otherwise:

- it is the **published** one (the manifest names it);
- it is **pinned** (``arborag snapshots pin``: a record ``pins/<id>.json``);
- a reader holds a **live lease** on it (:mod:`arborag.storage.leases`);
- it was **superseded less than** ``grace_s`` ago (default 60 s: a reader that read the manifest
  just before a publish and opened the snapshot without a lease);
- it is among the last ``keep_last`` published (default 10, the published one counting) **and**
  younger than ``keep_days`` (default 7).

``keep_last`` and ``keep_days`` are both *caps*, combined with AND: the number of snapshots never
exceeds ``keep_last`` (plus published, pinned, leased) however often updates run — the union
("last N *or* younger than D") would keep 672 snapshots (~11 GB at 17 MB each) under the
15-minute schedule ``arborag schedule`` suggests — and a deleted document's text leaves the disk
within ``keep_days`` of its deletion. Readers are protected by leases, not by the age window
(Delta Lake's ``VACUUM`` protects readers by a window alone, which fails a reader older than the
window, e.g. a server left on one snapshot for a week).

**Everything else that grows** (:func:`collect_garbage`, also run after every publish):

- ``snapshots/*.partial`` and other unsealed folders (a killed publish), ``.trash-*`` leftovers;
- ``.scratch-<pid>-*`` copies of dry runs and ``.published.duckdb.<pid>-*`` half-written catalogs
  whose process died (:meth:`Corpus.scratch_copy`, :func:`arborag.storage.catalog.write_catalog`);
- ``staging/<key>/`` of abandoned runs (gc holds the writer lock — or runs inside the writer
  after its publish — so no live writer owns any of them);
- Prefect task records under ``prefect/results`` whose build key is no snapshot kept, and any
  record older than the oldest snapshot kept by the last-N rule;
- embedding-cache entries whose vector no kept snapshot holds (vectors are copied bit for bit
  from the cache into the snapshot, so the kept snapshots' vectors are the referenced set; they
  are matched by a 64-bit digest, which may keep an unreferenced entry, never drop a referenced
  one: :func:`arborag.storage.embedding_cache.sweep_embedding_cache`);
- LLM-call cache records older than ``keep_days`` whose reply is no kept snapshot's summary
  (:meth:`arborag.llm.cache.LLMCache.sweep`);
- lease records that are no longer live;
- rows of the ``runs`` table beyond the newest ``retention.keep_runs`` that published no kept
  snapshot (the table would otherwise grow ~300 bytes a run, forever).

The lock (:mod:`arborag.storage.lock`) guards gc against a concurrent writer: ``arborag
snapshots gc`` takes it; the publish hook runs inside the writer that holds it.
"""

from __future__ import annotations

from arborag.storage.snapshots.catalog import (
    PINS_DIR, SnapshotInfo, diff_snapshots, disk_usage, list_snapshots, pin_snapshot, pinned_ids, resolve_snapshot, retained_ids,
    snapshot_dir, unpin_snapshot,
)
from arborag.storage.snapshots.retention import collect_garbage, plan_retention, rollback
from arborag.storage.snapshots.sweeps import GcReport, build_record_key

__all__ = [
    "GcReport", "PINS_DIR", "SnapshotInfo", "build_record_key", "collect_garbage", "diff_snapshots", "disk_usage", "list_snapshots",
    "pin_snapshot", "pinned_ids", "plan_retention", "resolve_snapshot", "retained_ids", "rollback", "snapshot_dir", "unpin_snapshot",
]
