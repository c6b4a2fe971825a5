"""The snapshot catalog and retention: list, resolve, pin, diff, roll back, collect garbage.

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

import json
import os
import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from arborag.errors import SnapshotNotFound
from arborag.storage.leases import LEASES_DIR, live_leases, prune_leases

if TYPE_CHECKING:
    import numpy as np

    from arborag.config import RetentionConfig
    from arborag.storage.corpus import Corpus

__all__ = [
    "BUILD_KEYED_STAGES",
    "GcReport",
    "PINS_DIR",
    "SnapshotInfo",
    "collect_garbage",
    "diff_snapshots",
    "list_snapshots",
    "pin_snapshot",
    "pinned_ids",
    "plan_retention",
    "resolve_snapshot",
    "retained_ids",
    "rollback",
    "snapshot_dir",
    "unpin_snapshot",
]

PINS_DIR = "pins"
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class SnapshotInfo:
    """One retained snapshot as ``arborag snapshots list`` shows it."""

    id: str
    published_at: datetime | None
    run_id: str | None
    flow: str | None
    build_key: str | None
    bytes: int | None  # on disk (the object store for a remote corpus); None when not measured
    published: bool
    pinned: bool
    leases: int
    documents: int | None
    leaves: int | None
    nodes: int | None
    levels: dict[str, int] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["published_at"] = self.published_at.isoformat() if self.published_at else None
        out.pop("info")
        return out


def _parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        t = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _dir_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def _sealed_ids(corpus: "Corpus") -> list[str]:
    return corpus.snapshot_ids()


def _info(corpus: "Corpus", snapshot_id: str) -> dict[str, Any]:
    local = corpus.snapshots_dir / snapshot_id / "info.json"
    if local.is_file():
        try:
            return dict(json.loads(local.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return {}
    if corpus.store is not None:
        got, _ = corpus.store.get_json(f"snapshots/{snapshot_id}/info.json")
        return dict(got or {})
    return {}


def _published_id(corpus: "Corpus") -> str | None:
    man = corpus.manifest()
    return str(man["snapshot"]) if man and man.get("snapshot") else None


def pinned_ids(corpus: "Corpus") -> dict[str, dict[str, Any]]:
    """``snapshot_id -> pin record`` (``pinned_at``, ``note``)."""
    out: dict[str, dict[str, Any]] = {}
    for rel in corpus.list_records(PINS_DIR):
        rec = corpus.get_record(rel)
        if rec is not None:
            out[str(rec.get("snapshot") or Path(rel).stem)] = rec
    return out


def _run_flows(corpus: "Corpus") -> dict[str, str]:
    """``run_id -> flow`` from the runs table (empty when there is none)."""
    import polars as pl

    path = corpus.table_path("runs")
    if not path.exists():
        return {}
    runs = pl.read_parquet(path, columns=["run_id", "flow"]).unique("run_id", keep="last")
    return dict(zip(runs["run_id"].to_list(), runs["flow"].to_list()))


def _rows(path: Path) -> int | None:
    import pyarrow.parquet as pq

    try:
        return int(pq.read_metadata(path).num_rows)
    except (OSError, pa.ArrowInvalid):
        return None


def _snapshot_bytes(corpus: "Corpus", snapshot_id: str) -> int:
    if corpus.store is not None:
        try:
            return int(corpus.store.fs.du(corpus.store.path(f"snapshots/{snapshot_id}")))
        except FileNotFoundError:
            return 0
    return _dir_bytes(corpus.snapshots_dir / snapshot_id)


def list_snapshots(corpus: "Corpus", *, sizes: bool = True) -> list[SnapshotInfo]:
    """Every retained snapshot, newest first (by ``published_at``; the id breaks ties)."""
    published = _published_id(corpus)
    pins = pinned_ids(corpus)
    leases = live_leases(corpus)
    flows = _run_flows(corpus)
    out: list[SnapshotInfo] = []
    for sid in _sealed_ids(corpus):
        info = _info(corpus, sid)
        counts = info.get("counts") or {}
        levels = {str(k): int(v) for k, v in (counts.get("levels") or {}).items()}
        local = corpus.snapshots_dir / sid
        out.append(SnapshotInfo(
            id=sid, published_at=_parse_time(info.get("published_at")), run_id=info.get("run_id"),
            flow=flows.get(str(info.get("run_id"))), build_key=info.get("build_key"),
            bytes=_snapshot_bytes(corpus, sid) if sizes else None, published=sid == published, pinned=sid in pins,
            leases=len(leases.get(sid, [])), documents=_rows(local / "documents.parquet") if local.is_dir() else None,
            leaves=levels.get("0"), nodes=counts.get("nodes"), levels=levels, info=info,
        ))
    out.sort(key=lambda s: (s.published_at or _EPOCH, s.id), reverse=True)
    return out


def _published_times(corpus: "Corpus") -> list[tuple[str, datetime | None]]:
    """``(id, published_at)`` of every retained snapshot, newest first: only the ``info.json``
    files are read (what resolving a reference needs on every query), not leases, runs or tables."""
    out = [(sid, _parse_time(_info(corpus, sid).get("published_at"))) for sid in _sealed_ids(corpus)]
    out.sort(key=lambda t: (t[1] or _EPOCH, t[0]), reverse=True)
    return out


def retained_ids(corpus: "Corpus") -> list[str]:
    """The retained snapshot ids, newest first."""
    return [sid for sid, _ in _published_times(corpus)]


def resolve_snapshot(corpus: "Corpus", ref: str | None = None, *, as_of: datetime | None = None) -> str:
    """The full id of the snapshot ``ref`` names: a full id, a unique prefix (``snap-`` may be left
    out), ``"published"`` / None (the published one), or — with ``as_of`` — the snapshot published
    most recently at or before that time (a naive time is UTC). Raises :class:`SnapshotNotFound`
    with a message listing what exists."""
    snaps = _published_times(corpus)
    ids = [sid for sid, _ in snaps]
    if as_of is not None:
        if ref not in (None, "", "published"):
            raise SnapshotNotFound(corpus.location, str(ref), ids, "give a snapshot id or a time (--as-of), not both")
        when = as_of if as_of.tzinfo else as_of.replace(tzinfo=timezone.utc)
        for sid, published_at in snaps:  # newest first
            if published_at is not None and published_at <= when:
                return sid
        oldest = snaps[-1][1].isoformat() if snaps and snaps[-1][1] else "none"
        raise SnapshotNotFound(corpus.location, f"as of {when.isoformat()}", ids,
                               f"no retained snapshot was published at or before that time (the oldest retained: {oldest})")
    if ref in (None, "", "published"):
        pub = _published_id(corpus)
        if pub is None:
            raise SnapshotNotFound(corpus.location, "published", ids, "nothing is published yet")
        return pub
    assert ref is not None
    if ref in ids:
        return ref
    matches = [i for i in ids if i.startswith(ref) or i.startswith(f"snap-{ref}")]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise SnapshotNotFound(corpus.location, ref, matches, f"the prefix is ambiguous ({len(matches)} snapshots start with it); give more characters")
    raise SnapshotNotFound(corpus.location, ref, ids)


def snapshot_dir(corpus: "Corpus", snapshot_id: str) -> Path:
    """The local folder of the retained snapshot ``snapshot_id`` (downloaded once into the mirror
    for a remote corpus). Raises :class:`SnapshotNotFound` when it is not retained."""
    path = corpus.snapshots_dir / snapshot_id
    if corpus.store is not None and not path.is_dir() and corpus.store.exists(f"snapshots/{snapshot_id}/info.json"):
        corpus.snapshots_dir.mkdir(parents=True, exist_ok=True)
        corpus.store.download_dir(f"snapshots/{snapshot_id}", path)
    if not (path / "info.json").is_file():
        raise SnapshotNotFound(corpus.location, snapshot_id, retained_ids(corpus), "it is not retained (removed by gc, or never published)")
    return path


# -- pins, rollback ------------------------------------------------------------------------------
def pin_snapshot(corpus: "Corpus", ref: str, *, note: str = "") -> str:
    """Pin the snapshot ``ref`` names (retention never removes it); returns its full id."""
    sid = resolve_snapshot(corpus, ref)
    corpus.put_record(f"{PINS_DIR}/{sid}.json", {"snapshot": sid, "note": note,
                                                  "pinned_at": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    return sid


def unpin_snapshot(corpus: "Corpus", ref: str) -> str:
    """Remove the pin of ``ref`` (a pinned id need not be resolvable any more); returns the id."""
    pins = pinned_ids(corpus)
    sid = ref if ref in pins else next((p for p in pins if p.startswith(ref) or p.startswith(f"snap-{ref}")), None)
    if sid is None:
        sid = resolve_snapshot(corpus, ref)
        if sid not in pins:
            raise SnapshotNotFound(corpus.location, ref, sorted(pins), "that snapshot is not pinned")
    corpus.delete_record(f"{PINS_DIR}/{sid}.json")
    return sid


def rollback(corpus: "Corpus", ref: str, *, lock: bool = True, wait: bool = True,
             policy: "RetentionConfig | None" = None, report: dict[str, Any] | None = None) -> str:
    """Publish the retained snapshot ``ref`` again (one atomic manifest switch, under the writer
    lock); returns its id. Its ``info.json`` stays as sealed; the manifest records the rollback.
    Retention then runs as after any publish (``policy``, default the config's; skipped when its
    ``auto`` is off); its summary goes to ``report["gc"]`` when a dict is given."""
    from arborag.storage.lock import corpus_lock

    def _do() -> str:
        sid = resolve_snapshot(corpus, ref)
        before = _published_id(corpus)
        info = _info(corpus, sid)
        info = {k: v for k, v in info.items() if k not in ("snapshot", "published_at")}
        corpus.publish_existing(sid, {**info, "rolled_back_from": before})
        pol = policy
        if pol is None:
            from arborag.config import load_config

            pol = load_config().retention
        if pol.auto:  # inside the lock already: the publish hook's way
            try:
                summary = collect_garbage(corpus, pol, lock=False).summary()
            except Exception as exc:  # noqa: BLE001 - the rollback stands; say why gc did not run
                summary = {"errors": [f"{type(exc).__name__}: {exc}"]}
            if report is not None:
                report["gc"] = summary
        return sid

    if not lock:
        return _do()
    with corpus_lock(corpus.root, wait=wait, purpose="rollback"):
        return _do()


# -- diff --------------------------------------------------------------------------------------------
def diff_snapshots(corpus: "Corpus", a: str, b: str) -> dict[str, Any]:
    """What changed from snapshot ``a`` to ``b`` (refs as :func:`resolve_snapshot` takes them):
    documents added / removed / changed (by uri; changed = same uri, other content), leaves
    added / removed (chunk ids), and per summary level the nodes added and removed (a rewritten
    summary is a removed id plus an added one). Polars joins over the two snapshots' tables."""
    import polars as pl

    ida, idb = resolve_snapshot(corpus, a), resolve_snapshot(corpus, b)
    da, db = snapshot_dir(corpus, ida), snapshot_dir(corpus, idb)

    def docs(d: Path) -> pl.DataFrame:
        return pl.read_parquet(d / "documents.parquet", columns=["doc_id", "uri"]).unique(["uri", "doc_id"])

    A, B = docs(da), docs(db)
    j = A.join(B, on="uri", how="full", suffix="_b", coalesce=True)
    added = j.filter(pl.col("doc_id").is_null())["uri"].sort().to_list()
    removed = j.filter(pl.col("doc_id_b").is_null())["uri"].sort().to_list()
    changed = j.filter(pl.col("doc_id").is_not_null() & pl.col("doc_id_b").is_not_null() & (pl.col("doc_id") != pl.col("doc_id_b")))["uri"].unique().sort().to_list()

    def nodes(d: Path) -> pl.DataFrame:
        return pl.read_parquet(d / "nodes.parquet", columns=["node_id", "level"]).unique("node_id")

    NA, NB = nodes(da), nodes(db)
    only_b = NB.join(NA, on="node_id", how="anti").group_by("level").len().rename({"len": "added"})
    only_a = NA.join(NB, on="node_id", how="anti").group_by("level").len().rename({"len": "removed"})
    per = (NA.group_by("level").len().rename({"len": "nodes_a"})
           .join(NB.group_by("level").len().rename({"len": "nodes_b"}), on="level", how="full", coalesce=True)
           .join(only_b, on="level", how="left").join(only_a, on="level", how="left")
           .fill_null(0).sort("level"))
    levels = {str(r["level"]): {k: int(r[k]) for k in ("nodes_a", "nodes_b", "added", "removed")} for r in per.iter_rows(named=True)}
    leaf = levels.get("0", {"added": 0, "removed": 0})
    return {
        "a": ida, "b": idb,
        "documents": {"added": added, "removed": removed, "changed": changed},
        "leaves": {"added": leaf["added"], "removed": leaf["removed"]},
        "summaries": {lvl: {"added": v["added"], "removed": v["removed"]} for lvl, v in levels.items() if lvl != "0"},
        "levels": levels,
    }


# -- retention -------------------------------------------------------------------------------------
def plan_retention(
    snapshots: list[SnapshotInfo], policy: "RetentionConfig", *, now: datetime | None = None,
) -> tuple[dict[str, list[str]], dict[str, str]]:
    """``(kept: id -> reasons, removed: id -> reason)`` for ``snapshots`` (newest first, as
    :func:`list_snapshots` returns them) under ``policy``. Pure: reads nothing."""
    now = now or datetime.now(timezone.utc)
    kept: dict[str, list[str]] = {}
    removed: dict[str, str] = {}
    newer_at: datetime | None = None  # published_at of the next newer snapshot (when this one was superseded)
    for rank, s in enumerate(snapshots):
        why: list[str] = []
        if s.published:
            why.append("published")
        if s.pinned:
            why.append("pinned")
        if s.leases:
            why.append(f"leased ({s.leases} live reader{'s' if s.leases != 1 else ''})")
        if s.published_at is None:
            why.append("no publish time recorded")
        elif newer_at is not None and (now - newer_at).total_seconds() < policy.grace_s:
            why.append(f"superseded {max(0.0, (now - newer_at).total_seconds()):.0f} s ago (< grace_s={policy.grace_s:g})")
        young = s.published_at is None or policy.keep_days is None or now - s.published_at < timedelta(days=policy.keep_days)
        if rank < policy.keep_last and young:
            why.append(f"among the last {policy.keep_last}")
        if why:
            kept[s.id] = why
        elif rank >= policy.keep_last:
            removed[s.id] = f"beyond keep_last={policy.keep_last}"
        else:
            removed[s.id] = f"older than keep_days={policy.keep_days:g}"
        if s.published_at is not None:
            newer_at = s.published_at
    return kept, removed


@dataclass
class GcReport:
    """What :func:`collect_garbage` removed (or, with ``dry_run``, would remove)."""

    dry_run: bool
    kept: dict[str, list[str]] = field(default_factory=dict)  # snapshot id -> why it stays
    removed: list[dict[str, Any]] = field(default_factory=list)  # {"id", "bytes", "reason"}
    parts: dict[str, dict[str, int]] = field(default_factory=dict)  # part -> {"items", "bytes"} removed
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def bytes_freed(self) -> int:
        return sum(p.get("bytes", 0) for p in self.parts.values())

    def add(self, part: str, items: int, nbytes: int) -> None:
        p = self.parts.setdefault(part, {"items": 0, "bytes": 0})
        p["items"] += int(items)
        p["bytes"] += int(nbytes)

    def to_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "kept": self.kept, "removed": self.removed, "parts": self.parts,
                "bytes_freed": self.bytes_freed, "errors": self.errors, "seconds": round(self.seconds, 3)}

    def summary(self) -> dict[str, Any]:
        """The small form recorded in a run's counts."""
        return {"snapshots_removed": [r["id"] for r in self.removed], "snapshots_kept": len(self.kept),
                "bytes_freed": self.bytes_freed, "parts": self.parts, "errors": self.errors, "seconds": round(self.seconds, 3)}


def _remove_snapshot(corpus: "Corpus", sid: str) -> bool:
    """Remove sealed snapshot ``sid``: unseal it (``info.json`` goes first), check for a lease taken
    meanwhile (then reseal and keep it: False), else delete the folder (remote and mirror)."""
    if corpus.store is not None:
        seal_rel = f"snapshots/{sid}/info.json"
        info, _ = corpus.store.get_json(seal_rel)
        corpus.store.fs.rm_file(corpus.store.path(seal_rel))
        if sid in live_leases(corpus):
            corpus.store.fs.pipe_file(corpus.store.path(seal_rel), json.dumps(info, indent=2, sort_keys=True).encode())
            return False
        corpus.store.fs.rm(corpus.store.path(f"snapshots/{sid}"), recursive=True)
        local = corpus.snapshots_dir / sid
        if local.is_dir():
            _trash(corpus, local)
        return True
    folder = corpus.snapshots_dir / sid
    seal = folder / "info.json"
    data = seal.read_bytes()
    seal.unlink()
    if sid in live_leases(corpus):
        from arborag.storage.tables import atomic_write_bytes

        atomic_write_bytes(seal, data)
        return False
    _trash(corpus, folder)
    return True


def _trash(corpus: "Corpus", folder: Path) -> None:
    """Rename ``folder`` out of the catalog (one step), then delete it."""
    trash = corpus.snapshots_dir / f".trash-{folder.name}-{uuid.uuid4().hex[:6]}"
    folder.rename(trash)
    shutil.rmtree(trash, ignore_errors=True)


def _pid_of_download(name: str) -> int | None:
    try:
        return int(name.rsplit("-", 1)[-1])
    except ValueError:
        return None


def _sweep_unsealed(corpus: "Corpus", report: GcReport, *, dry_run: bool) -> None:
    """``*.partial`` folders of killed publishes, ``.trash-*`` leftovers, folders without a seal,
    stale ``.download-<pid>`` folders (of readers that died mid-download)."""
    from arborag.storage.lock import _pid_alive

    if not corpus.snapshots_dir.is_dir():
        return
    for p in corpus.snapshots_dir.iterdir():
        if not p.is_dir():
            continue
        name = p.name
        if ".download-" in name:
            pid = _pid_of_download(name)
            if pid is not None and _pid_alive(pid):
                continue
        elif not (name.endswith(".partial") or name.startswith(".trash-") or not (p / "info.json").is_file()):
            continue
        if corpus.store is not None and not name.startswith(".") and not name.endswith(".partial"):
            continue  # a remote corpus's mirror: a folder without a seal is a download in progress elsewhere
        size = _dir_bytes(p)
        if not dry_run:
            shutil.rmtree(p, ignore_errors=True)
        report.add("unsealed", 1, size)


def _sweep_scratch(corpus: "Corpus", report: GcReport, *, dry_run: bool) -> None:
    """Scratch copies (:meth:`~arborag.storage.corpus.Corpus.scratch_copy`, ``.scratch-<pid>-<random>``)
    and half-written catalogs (``.published.duckdb.<pid>-<random>.tmp``, :func:`~arborag.storage.catalog.write_catalog`)
    of processes that died before removing theirs."""
    from arborag.storage.catalog import CATALOG_FILE
    from arborag.storage.corpus import SCRATCH_PREFIX
    from arborag.storage.lock import _pid_alive

    if not corpus.root.is_dir():
        return
    for prefix in (SCRATCH_PREFIX, f".{CATALOG_FILE}."):
        for p in corpus.root.glob(f"{prefix}*"):
            try:
                pid = int(p.name[len(prefix):].split("-", 1)[0])
            except ValueError:
                continue
            if _pid_alive(pid):
                continue
            report.add("scratch", 1, _remove_path(p, dry_run=dry_run))


def _remove_path(p: Path, *, dry_run: bool) -> int:
    """Remove the folder or file ``p`` (unless ``dry_run``); returns the bytes it held."""
    size = _dir_bytes(p) if p.is_dir() else p.stat().st_size
    if not dry_run:
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    return size


def _sweep_staging(corpus: "Corpus", report: GcReport, *, dry_run: bool, keep: set[str]) -> set[str]:
    """Staging folders of abandoned runs; returns the keys that stay."""
    root = corpus.root / "staging"
    stays: set[str] = set()
    if not root.is_dir():
        return stays
    for p in root.iterdir():
        if p.name in keep:
            stays.add(p.name)
            continue
        report.add("staging", 1, _remove_path(p, dry_run=dry_run))
    return stays


#: The stages keyed by a build key (every stage the pipelines declare with a ``key`` param): their
#: Prefect records are named ``<stage>-<build key>`` (flows/stage.run_stage). storage does not
#: import flows; ``tests/storage/test_gc_stages.py`` holds this equal to the declarations.
BUILD_KEYED_STAGES = ("embed", "links", "publish", "sparse", "tree", "tree-update", "vectors")
#: Record name prefixes, longest first (``tree-update-`` before ``tree-``).
_TREE_STAGES = tuple(sorted((f"{name}-" for name in BUILD_KEYED_STAGES), key=len, reverse=True))


def _sweep_prefect(corpus: "Corpus", report: GcReport, *, dry_run: bool, keys: set[str], cutoff: datetime | None,
                   keep_newest: int = 1) -> None:
    """Prefect result records under ``prefect/results``: a tree stage's record whose build key is no
    kept snapshot's (nor a staging folder's) goes; any other record (ingest, sections, context,
    segment — keyed by their inputs, not by a build key) goes once it is older than ``cutoff`` (the
    oldest snapshot kept by the last-N rule) and is not among the ``keep_newest`` newest of its
    stage: the records of the run that just published were written before its snapshot, and the
    next run's cache hit needs them (bounded all the same: ``keep_newest`` per stage, plus what is
    younger than the cutoff)."""
    root = corpus.prefect_dir / "results"
    if not root.is_dir():
        return
    limit = cutoff.timestamp() if cutoff is not None else None
    by_stage: dict[str, list[tuple[float, Path, int]]] = {}
    for p in root.iterdir():
        if not p.is_file():
            continue
        try:
            st = p.stat()
        except OSError:
            continue
        prefix = next((t for t in _TREE_STAGES if p.name.startswith(t)), None)
        if prefix is not None:
            if p.name[len(prefix):] in keys:
                continue
            _drop_record(p, st.st_size, report, dry_run=dry_run)
            continue
        by_stage.setdefault(p.name.rsplit("-", 1)[0], []).append((st.st_mtime, p, st.st_size))
    for records in by_stage.values():
        records.sort(key=lambda r: r[0], reverse=True)
        for mtime, p, size in records[max(0, keep_newest):]:
            if limit is not None and mtime < limit:
                _drop_record(p, size, report, dry_run=dry_run)


def _drop_record(p: Path, size: int, report: GcReport, *, dry_run: bool) -> None:
    if not dry_run:
        p.unlink(missing_ok=True)
    report.add("prefect", 1, size)


def _kept_digests(corpus: "Corpus", ids: list[str]) -> np.ndarray | None:
    """The digests (:func:`~arborag.storage.embedding_cache.vector_digests`) of every vector the
    snapshots ``ids`` hold (the sweep makes them distinct); None when one cannot be read (then
    nothing is swept from the embedding cache). A local snapshot's vectors are read through a
    memory map, without a copy."""
    import numpy as np

    from arborag.errors import SchemaError
    from arborag.storage.arrays import arrow_to_vectors
    from arborag.storage.embedding_cache import vector_digests
    from arborag.storage.vectors import ARROW_FILE

    parts: list[np.ndarray] = []
    for sid in ids:
        local = corpus.snapshots_dir / sid / "vectors.lance" / ARROW_FILE
        try:
            if local.is_file():
                with pa.memory_map(str(local)) as src:
                    col = pa.ipc.open_file(src).read_all().column("vector")
                    parts.append(vector_digests(arrow_to_vectors(col)))
            elif corpus.store is not None:
                with corpus.store.fs.open(corpus.store.path(f"snapshots/{sid}/vectors.lance/{ARROW_FILE}"), "rb") as fh:
                    col = pa.ipc.open_file(pa.BufferReader(fh.read())).read_all().column("vector")
                parts.append(vector_digests(arrow_to_vectors(col)))
            else:
                return None
        except (OSError, pa.ArrowInvalid, KeyError, SchemaError):
            return None
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


def _kept_summaries(corpus: "Corpus", ids: list[str]) -> set[str] | None:
    """The summary texts of the snapshots ``ids``: read from the local folder, or from the object
    store for a remote corpus's snapshot the mirror does not hold. None when a snapshot's nodes
    cannot be read (then nothing is swept from the LLM cache: a kept reply must never go)."""
    import io

    import polars as pl

    texts: set[str] = set()
    for sid in ids:
        path = corpus.snapshots_dir / sid / "nodes.parquet"
        try:
            if path.is_file():
                df = pl.read_parquet(path, columns=["level", "text"])
            elif (corpus.snapshots_dir / sid).is_dir():
                continue  # a snapshot without a tree holds no summaries
            elif corpus.store is not None:
                data = corpus.store.fs.cat_file(corpus.store.path(f"snapshots/{sid}/nodes.parquet"))
                df = pl.read_parquet(io.BytesIO(data), columns=["level", "text"])
            else:
                continue
        except (OSError, pl.exceptions.PolarsError):
            return None
        texts.update(t.strip() for t in df.filter(pl.col("level") > 0)["text"].to_list())
    return texts


def collect_garbage(
    corpus: "Corpus",
    policy: "RetentionConfig | None" = None,
    *,
    dry_run: bool = False,
    lock: bool = True,
    wait: bool = True,
    keep_staging: set[str] | None = None,
    now: datetime | None = None,
) -> GcReport:
    """Apply ``policy`` (default: the loaded config's ``retention``) to ``corpus``'s snapshots and
    bound its caches, staging folders and Prefect records (module docs). ``dry_run``: remove
    nothing, report what would go and how many bytes. ``lock``: take the writer lock (``wait``:
    wait for it); the publish hook passes ``lock=False`` because it runs inside the writer.
    A part that fails is reported in ``errors``; the others still run."""
    from arborag.storage.lock import corpus_lock, read_lock, stale_reason, lock_path

    if policy is None:
        from arborag.config import load_config

        policy = load_config().retention
    t0 = time.perf_counter()
    report = GcReport(dry_run=dry_run)
    if lock and not dry_run:
        with corpus_lock(corpus.root, wait=wait, purpose="gc"):
            _collect(corpus, policy, report, dry_run=dry_run, writer_live=False, keep_staging=keep_staging or set(), now=now)
    else:
        writer_live = False
        if dry_run and lock:  # no lock taken for a dry run: leave what a live writer may be staging alone
            owner = read_lock(corpus.root)
            writer_live = owner is not None and stale_reason(owner, lock_path(corpus.root)) is None
        _collect(corpus, policy, report, dry_run=dry_run, writer_live=writer_live, keep_staging=keep_staging or set(), now=now)
    report.seconds = time.perf_counter() - t0
    return report


def _collect(corpus: "Corpus", policy: "RetentionConfig", report: GcReport, *, dry_run: bool, writer_live: bool,
             keep_staging: set[str], now: datetime | None) -> None:
    now = now or datetime.now(timezone.utc)
    snaps = list_snapshots(corpus)
    kept, removed = plan_retention(snaps, policy, now=now)
    report.kept = kept
    by_id = {s.id: s for s in snaps}
    kept_ids = [s.id for s in snaps if s.id in kept]
    for s in snaps:
        if s.id not in removed:
            continue
        try:
            gone = True if dry_run else _remove_snapshot(corpus, s.id)
        except OSError as exc:
            report.errors.append(f"snapshot {s.id}: {type(exc).__name__}: {exc}")
            continue
        if gone:
            report.removed.append({"id": s.id, "bytes": s.bytes or 0, "reason": removed[s.id]})
            report.add("snapshots", 1, s.bytes or 0)
        else:
            kept[s.id] = ["leased while gc ran"]
            kept_ids.append(s.id)
    # the oldest snapshot kept by the last-N rule (or the published one): records older than it go
    ruled = [by_id[i] for i in kept_ids if any(r.startswith("among the last") or r == "published" for r in kept[i])]
    cutoff = min((s.published_at for s in ruled if s.published_at), default=None)
    keys = {str(by_id[i].build_key) for i in kept_ids if by_id[i].build_key}
    steps: list[tuple[str, Any]] = []
    if not writer_live:
        steps.append(("unsealed", lambda: _sweep_unsealed(corpus, report, dry_run=dry_run)))
        steps.append(("scratch", lambda: _sweep_scratch(corpus, report, dry_run=dry_run)))
        steps.append(("staging", lambda: keys.update(_sweep_staging(corpus, report, dry_run=dry_run, keep=keep_staging))))
        steps.append(("prefect", lambda: _sweep_prefect(corpus, report, dry_run=dry_run, keys=keys, cutoff=cutoff,
                                                             keep_newest=max(1, int(policy.keep_last)))))
    steps.append(("embedding_cache", lambda: _sweep_embeddings(corpus, report, kept_ids, dry_run=dry_run)))
    steps.append(("llm_cache", lambda: _sweep_llm(corpus, report, kept_ids, policy, dry_run=dry_run)))
    if not writer_live:
        steps.append(("runs", lambda: _trim_runs(corpus, report, {by_id[i].run_id for i in kept_ids if by_id[i].run_id},
                                                 int(getattr(policy, "keep_runs", 1000)), dry_run=dry_run)))
    if not dry_run:
        steps.append(("leases", lambda: report.add("leases", prune_leases(corpus), 0)))
    for part, step in steps:
        try:
            step()
        except Exception as exc:  # one part failing leaves the others (and the publish) standing
            report.errors.append(f"{part}: {type(exc).__name__}: {exc}")


def _trim_runs(corpus: "Corpus", report: GcReport, kept_runs: set[str], keep: int, *, dry_run: bool) -> None:
    """Keep the newest ``keep`` rows of the runs table and every run that published a kept snapshot."""
    import polars as pl

    if not corpus.table_path("runs").exists():
        return
    runs = pl.from_arrow(corpus.read("runs"))
    assert isinstance(runs, pl.DataFrame)
    if runs.height <= keep:
        return
    ranked = runs.with_row_index("_pos").with_columns(
        pl.col("started_at").fill_null(pl.col("started_at").min()).rank("ordinal", descending=True).alias("_rank"))
    kept = ranked.filter((pl.col("_rank") <= keep) | pl.col("run_id").is_in(sorted(kept_runs))).sort("_pos").drop("_pos", "_rank")
    dropped = runs.height - kept.height
    if dropped <= 0:
        return
    nbytes = int(runs.estimated_size() * dropped / runs.height)
    if not dry_run:
        from arborag.storage.schemas import SCHEMAS

        corpus.write("runs", kept.to_arrow().cast(SCHEMAS["runs"]))
    report.add("runs", dropped, nbytes)


def _sweep_embeddings(corpus: "Corpus", report: GcReport, kept_ids: list[str], *, dry_run: bool) -> None:
    from arborag.storage.embedding_cache import sweep_embedding_cache

    folder = corpus.cache_dir / "embeddings"
    if not folder.is_dir():
        return
    keep = _kept_digests(corpus, kept_ids)
    if keep is None:
        report.errors.append("embedding_cache: a kept snapshot's vectors could not be read; nothing swept")
        return
    got = sweep_embedding_cache(folder, keep, dry_run=dry_run)
    report.add("embedding_cache", got["entries_removed"], got["bytes_freed"])


def _sweep_llm(corpus: "Corpus", report: GcReport, kept_ids: list[str], policy: "RetentionConfig", *, dry_run: bool) -> None:
    from arborag.llm.cache import LLMCache

    folder = corpus.cache_dir / "llm"
    if not folder.is_dir():
        return
    keep = _kept_summaries(corpus, kept_ids)
    if keep is None:
        report.errors.append("llm_cache: a kept snapshot's summaries could not be read; nothing swept")
        return
    max_age = None if policy.keep_days is None else policy.keep_days * 86400.0
    got = LLMCache.sweep(folder, keep_texts=keep, max_age_s=max_age, dry_run=dry_run)
    report.add("llm_cache", got["records_removed"], got["bytes_freed"])


def disk_usage(corpus: "Corpus") -> dict[str, int]:
    """Bytes on local disk per part of the corpus (snapshots, caches, staging, Prefect records, tables)."""
    root = corpus.root
    parts = {
        "snapshots": corpus.snapshots_dir, "embedding_cache": corpus.cache_dir / "embeddings",
        "llm_cache": corpus.cache_dir / "llm", "staging": root / "staging", "prefect": corpus.prefect_dir,
        "tables": corpus.tables_dir, "leases": root / LEASES_DIR,
    }
    out = {name: (_dir_bytes(p) if p.is_dir() else 0) for name, p in parts.items()}
    out["total"] = _dir_bytes(root) if root.is_dir() else 0
    return out


__all__ += ["disk_usage"]
