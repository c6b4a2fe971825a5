"""The sweeps of :func:`~arborag.storage.snapshots.retention.collect_garbage`: one per thing a
corpus grows (removed snapshots, unsealed folders, scratch copies, staging folders, Prefect
records, the embedding and LLM caches, the link rows of bounded readers, rows of the runs table), each reporting into
a :class:`GcReport`."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from arborag.storage.leases import live_leases
from arborag.storage.snapshots.catalog import _dir_bytes

if TYPE_CHECKING:
    import numpy as np

    from arborag.config import RetentionConfig
    from arborag.storage.corpus import Corpus

__all__ = ["BUILD_RECORD_MARK", "GcReport", "build_record_key"]

_T = TypeVar("_T")


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


#: A Prefect record of a stage keyed by a build key is named ``<stage>@<build key>``
#: (:func:`build_record_key`, used by the stage runner): gc keeps it while the key is a kept
#: snapshot's (or a staging folder's) and removes it otherwise, whatever the stage is called.
#: Every other record is ``<stage>-<key of its inputs>``.
BUILD_RECORD_MARK = "@"


def build_record_key(stage: str, key: str) -> str:
    """The Prefect record name of ``stage`` keyed by the build key ``key``."""
    return f"{stage}{BUILD_RECORD_MARK}{key}"


def _sweep_prefect(corpus: "Corpus", report: GcReport, *, dry_run: bool, keys: set[str], cutoff: datetime | None,
                   keep_newest: int = 1) -> None:
    """Prefect result records under ``prefect/results``: a record keyed by a build key
    (``<stage>@<key>``, :data:`BUILD_RECORD_MARK`) whose key is no kept snapshot's (nor a staging
    folder's) goes; any other record (keyed by its stage's inputs, not by a build key) goes once
    it is older than ``cutoff`` (the
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
        _stage, mark, build_key = p.name.partition(BUILD_RECORD_MARK)
        if mark:
            if build_key not in keys:
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


def _sweep_cache(report: GcReport, part: str, folder: Path, what: str, kept: Callable[[], _T | None],
                 sweep: Callable[[_T], tuple[int, int]]) -> None:
    """Sweep the cache ``folder`` keeping what the kept snapshots hold (``kept()``; None when one of
    them cannot be read: then nothing is swept and ``part`` reports why). ``sweep(kept)`` returns
    ``(items, bytes)`` removed."""
    if not folder.is_dir():
        return
    keep = kept()
    if keep is None:
        report.errors.append(f"{part}: a kept snapshot's {what} could not be read; nothing swept")
        return
    report.add(part, *sweep(keep))


def _sweep_embeddings(corpus: "Corpus", report: GcReport, kept_ids: list[str], *, dry_run: bool) -> None:
    from arborag.storage.embedding_cache import sweep_embedding_cache

    folder = corpus.cache_dir / "embeddings"

    def sweep(keep: np.ndarray) -> tuple[int, int]:
        got = sweep_embedding_cache(folder, keep, dry_run=dry_run)
        return got["entries_removed"], got["bytes_freed"]

    _sweep_cache(report, "embedding_cache", folder, "vectors", lambda: _kept_digests(corpus, kept_ids), sweep)


def _sweep_llm(corpus: "Corpus", report: GcReport, kept_ids: list[str], policy: "RetentionConfig", *, dry_run: bool) -> None:
    from arborag.llm.cache import LLMCache

    folder = corpus.cache_dir / "llm"
    max_age = None if policy.keep_days is None else policy.keep_days * 86400.0

    def sweep(keep: set[str]) -> tuple[int, int]:
        got = LLMCache.sweep(folder, keep_texts=keep, max_age_s=max_age, dry_run=dry_run)
        return got["records_removed"], got["bytes_freed"]

    _sweep_cache(report, "llm_cache", folder, "summaries", lambda: _kept_summaries(corpus, kept_ids), sweep)


#: a hidden temporary file of the link rows folder older than this is a killed write's leftover
LINK_ROWS_TMP_AGE_S = 3600.0


def sweep_link_rows(folder: Path, kept_ids: list[str], *, dry_run: bool, now: float | None = None) -> tuple[int, int]:
    """Remove from ``folder`` (``cache/link_rows``) every file but the link rows of the kept
    snapshots (``<id>.npy`` and ``<id>.ptr.npy``, :mod:`arborag.storage.link_rows`): the files of
    removed snapshots, files of another layout, and temporary files of writes that died (hidden,
    older than :data:`LINK_ROWS_TMP_AGE_S`; a younger one may be a reader writing now). A reader
    of a removed snapshot that still has its file open keeps reading it (the file goes when it is
    closed). Returns (files, bytes) removed (or that would be, with ``dry_run``)."""
    keep = {name for sid in kept_ids for name in (f"{sid}.npy", f"{sid}.ptr.npy")}
    now = time.time() if now is None else now
    items = nbytes = 0
    for p in sorted(folder.iterdir()):
        if p.name in keep or not p.is_file():
            continue
        try:
            st = p.stat()
        except FileNotFoundError:  # removed meanwhile (a concurrent sweep)
            continue
        if p.name.startswith(".") and now - st.st_mtime < LINK_ROWS_TMP_AGE_S:
            continue
        if not dry_run:
            p.unlink(missing_ok=True)
        items += 1
        nbytes += st.st_size
    return items, nbytes


def _sweep_link_rows(corpus: "Corpus", report: GcReport, kept_ids: list[str], *, dry_run: bool) -> None:
    from arborag.storage.link_rows import FOLDER

    folder = corpus.cache_dir / FOLDER
    _sweep_cache(report, "link_rows", folder, "ids", lambda: kept_ids, lambda keep: sweep_link_rows(folder, keep, dry_run=dry_run))
