"""The retained snapshots: list, resolve, pin, diff, disk usage (the DuckDB catalog of the
published tables is :mod:`arborag.storage.catalog`)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from arborag.errors import SnapshotNotFound
from arborag.storage.leases import LEASES_DIR, live_leases

if TYPE_CHECKING:
    from arborag.storage.corpus import Corpus

__all__ = [
    "PINS_DIR", "SnapshotInfo", "diff_snapshots", "disk_usage", "list_snapshots", "pin_snapshot", "pinned_ids", "resolve_snapshot",
    "retained_ids", "snapshot_dir", "unpin_snapshot",
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


# -- pins ----------------------------------------------------------------------------------------
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
