"""A corpus directory: working tables, immutable snapshots, the published manifest, caches.

Layout::

    CORPUS/
      tables/{documents,sections,chunks,runs}.parquet   working tables (atomic writes)
      snapshots/<snapshot_id>/                          immutable once published
          nodes.parquet  edges.parquet  vectors.lance/  sparse/  info.json
      manifest.json                                     {"snapshot": <id>, ...}: the published one
      cache/                                            content-addressed caches
      prefect/                                          Prefect task results (cache records)
      pins/<snapshot_id>.json                           pinned snapshots (kept by retention)
      leases/<snapshot_id>/<token>.json                 readers' leases (storage/leases.py)
      published.duckdb                                  DuckDB views over the published snapshot
                                                        (storage/catalog.py)

Which snapshots are kept, and how caches, staging folders and Prefect records stay bounded:
:mod:`arborag.storage.snapshots`.

Publishing is one ``os.replace`` of ``manifest.json``: readers see the old snapshot or the new
one, never a half-written one. A build writes its snapshot under a ``.partial`` name first.
Right after the manifest, ``published.duckdb`` is replaced the same way (publish and rollback):
plain ``duckdb -readonly CORPUS/published.duckdb`` reads what is published now.

A dry run computes in :meth:`Corpus.scratch_copy`, a throw-away corpus beside the working
tables, so nothing a reader sees changes.

A corpus may also be an object-store URI (``s3://bucket/prefix``, any fsspec URL;
:mod:`arborag.storage.objectstore`): ``root`` is then a local mirror folder where the stages
work, :meth:`Corpus.publish` uploads the sealed snapshot and switches the remote manifest with
a conditional write, and :meth:`Corpus.published_dir` downloads the published snapshot once.
``location`` is what the user named (the URI, or the folder).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa

from arborag.errors import NotBuiltError, SchemaError
from arborag.storage.objectstore import ObjectStore, is_remote, mirror_dir, normalize_location
from arborag.storage.schemas import SCHEMAS
from arborag.storage.tables import atomic_write_json, read_table, write_table

__all__ = ["Corpus", "SCRATCH_PREFIX", "WORKING_TABLES", "SNAPSHOT_TABLES"]

WORKING_TABLES = ("documents", "sections", "doc_context", "chunks", "runs", "queries")
SNAPSHOT_TABLES = ("nodes", "edges", "links")
#: Folders of :meth:`Corpus.scratch_copy` are ``CORPUS/.scratch-<pid>-<random>`` (gc removes those of dead processes).
SCRATCH_PREFIX = ".scratch-"
#: Cache folders a scratch copy shares with its corpus (content-addressed: a record written there
#: is right for every run); every other cache file is copied.
_SHARED_CACHES = ("llm", "embeddings")


class Corpus:
    def __init__(self, root: str | Path) -> None:
        self.store: ObjectStore | None = None
        self._manifest_version: str | None = None  # the remote manifest's ETag as first read
        self._manifest_seen = False
        if is_remote(root):
            self.location = normalize_location(root).rstrip("/")
            self.store = ObjectStore(self.location)
            self.root = mirror_dir(self.location)
        else:
            self.root = Path(root).expanduser().resolve()
            self.location = str(self.root)

    @property
    def remote(self) -> bool:
        """True when the corpus lives on an object store (``root`` is its local mirror)."""
        return self.store is not None

    # -- layout ---------------------------------------------------------------------------
    @property
    def tables_dir(self) -> Path:
        return self.root / "tables"

    @property
    def snapshots_dir(self) -> Path:
        return self.root / "snapshots"

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache"

    @property
    def prefect_dir(self) -> Path:
        return self.root / "prefect"

    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    def ensure(self) -> "Corpus":
        fresh = self.store is not None and not self.tables_dir.is_dir()
        for d in (self.tables_dir, self.snapshots_dir, self.cache_dir):
            d.mkdir(parents=True, exist_ok=True)
        if fresh and self.store is not None and self.store.exists("tables"):
            # a new mirror of a remote corpus starts from the working tables its last publish uploaded
            shutil.rmtree(self.tables_dir)
            self.store.download_dir("tables", self.tables_dir)
        return self

    def table_path(self, name: str) -> Path:
        if name not in SCHEMAS:
            raise SchemaError(name, f"is not a table of arborag; known: {', '.join(sorted(SCHEMAS))}")
        return self.tables_dir / f"{name}.parquet"

    # -- working tables -------------------------------------------------------------------
    def read(self, name: str) -> pa.Table:
        return read_table(name, self.table_path(name))

    def write(self, name: str, table: pa.Table) -> Path:
        return write_table(name, table, self.table_path(name))

    def append_run(self, row: dict[str, Any]) -> None:
        runs = self.read("runs")
        new = pa.Table.from_pylist([row], schema=SCHEMAS["runs"])
        self.write("runs", pa.concat_tables([runs, new]))

    # -- small JSON records (pins, leases): on the object store for a remote corpus ---------
    def put_record(self, rel: str, obj: dict[str, Any]) -> None:
        """Write the small JSON record ``rel`` (e.g. ``pins/<id>.json``) atomically; shared by every
        machine of a remote corpus (it goes to the object store)."""
        if self.store is not None:
            self.store.fs.pipe_file(self.store.path(rel), json.dumps(obj, sort_keys=True).encode())
            return
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, obj)

    def get_record(self, rel: str) -> dict[str, Any] | None:
        """The JSON record ``rel``, or None when absent or unreadable (a torn or foreign file)."""
        try:
            if self.store is not None:
                data = self.store.fs.cat_file(self.store.path(rel))
            else:
                data = (self.root / rel).read_bytes()
            obj = json.loads(data)
        except (FileNotFoundError, ValueError):
            return None
        except OSError:
            return None
        return obj if isinstance(obj, dict) else None

    def delete_record(self, rel: str) -> None:
        if self.store is not None:
            try:
                self.store.fs.rm_file(self.store.path(rel))
            except FileNotFoundError:
                pass
            return
        (self.root / rel).unlink(missing_ok=True)

    def list_records(self, folder: str) -> list[str]:
        """Relative paths of the ``*.json`` records under ``folder`` (recursively), sorted."""
        if self.store is not None:
            base = self.store.path(folder)
            self.store.fs.invalidate_cache(base)  # records written by other machines: never a cached listing
            try:
                found = self.store.fs.find(base)
            except FileNotFoundError:
                return []
            prefix = self.store.base + "/"
            return sorted(p[len(prefix):] for p in found if p.endswith(".json") and p.startswith(prefix))
        root = self.root / folder
        if not root.is_dir():
            return []
        return sorted(p.relative_to(self.root).as_posix() for p in root.rglob("*.json") if p.is_file())

    # -- snapshots ------------------------------------------------------------------------
    def snapshot_ids(self) -> list[str]:
        """Ids of every sealed snapshot (a folder holding ``info.json``; on the object store for a
        remote corpus), unordered. :func:`arborag.storage.snapshots.list_snapshots` describes them."""
        if self.store is not None:
            self.store.fs.invalidate_cache(self.store.path("snapshots"))  # other machines publish too
            try:
                entries = self.store.fs.ls(self.store.path("snapshots"), detail=False)
            except FileNotFoundError:
                return []
            names = [e.rstrip("/").rsplit("/", 1)[-1] for e in entries]
            return [n for n in names if not n.startswith(".") and not n.endswith(".partial") and self.store.exists(f"snapshots/{n}/info.json")]
        if not self.snapshots_dir.is_dir():
            return []
        return [p.name for p in self.snapshots_dir.iterdir()
                if p.is_dir() and not p.name.startswith(".") and not p.name.endswith(".partial") and (p / "info.json").is_file()]

    def manifest(self) -> dict[str, Any] | None:
        if self.store is not None:
            man, version = self.store.get_json("manifest.json")
            if not self._manifest_seen:  # a publish later switches only from what this run first saw
                self._manifest_seen, self._manifest_version = True, version
            return man
        if not self.manifest_path.exists():
            return None
        return json.loads(self.manifest_path.read_text(encoding="utf-8"))

    def published_dir(self) -> Path:
        man = self.manifest()
        if man is None:
            raise NotBuiltError(self.location)
        path = self.snapshots_dir / man["snapshot"]
        if self.store is not None and not path.is_dir():  # immutable: downloaded once into the mirror
            self.snapshots_dir.mkdir(parents=True, exist_ok=True)
            self.store.download_dir(f"snapshots/{man['snapshot']}", path)
        if not path.is_dir():
            raise NotBuiltError(self.location)
        return path

    def partial_dir(self, snapshot_id: str) -> Path:
        """A fresh staging folder for a snapshot being built."""
        path = self.snapshots_dir / f"{snapshot_id}.partial"
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return path

    def publish(self, partial: Path, snapshot_id: str, info: dict[str, Any]) -> Path:
        """Seal ``partial`` as snapshot ``snapshot_id`` and switch the manifest to it atomically."""
        final = self.snapshots_dir / snapshot_id
        info = {**info, "snapshot": snapshot_id, "published_at": datetime.now(timezone.utc).isoformat()}
        atomic_write_json(partial / "info.json", info)
        if final.exists():  # identical content was published before: keep the sealed copy
            shutil.rmtree(partial)
        else:
            partial.rename(final)
        if self.store is not None:
            self._publish_remote(final, snapshot_id, info)
        atomic_write_json(self.manifest_path, info)
        self._write_catalog(final)
        return final

    def _write_catalog(self, folder: Path) -> None:
        """Point ``published.duckdb`` at the snapshot in ``folder`` (just published). The publish
        stands if that fails: the error is logged, and ``arborag snapshots catalog`` writes it again."""
        from arborag.storage.catalog import write_catalog

        try:
            write_catalog(self, folder)
        except Exception as exc:  # noqa: BLE001 - the manifest switched: the snapshot is published
            logging.getLogger("arborag.catalog").warning(
                "%s not updated (%s: %s); run `arborag snapshots catalog --corpus %s`",
                self.root / "published.duckdb", type(exc).__name__, exc, self.location)

    @contextmanager
    def scratch_copy(self) -> Iterator["Corpus"]:
        """A throw-away local corpus holding the working tables as they are now (hard links: tables
        are only ever replaced, never written in place), for a run that must change nothing a reader
        sees (``build --dry-run``). The LLM and embedding caches are shared (content-addressed);
        other cache files are copied. Removed when the block ends."""
        folder = self.root / f"{SCRATCH_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            (folder / "tables").mkdir(parents=True)
            if self.tables_dir.is_dir():
                for p in self.tables_dir.iterdir():
                    if p.is_file() and not p.name.startswith("."):
                        _link_or_copy(p, folder / "tables" / p.name)
            (folder / "cache").mkdir()
            if self.cache_dir.is_dir():
                for p in self.cache_dir.iterdir():
                    if p.name in _SHARED_CACHES and p.is_dir():
                        (folder / "cache" / p.name).symlink_to(p.resolve(), target_is_directory=True)
                    elif p.is_dir():
                        shutil.copytree(p, folder / "cache" / p.name)
                    elif p.is_file():
                        shutil.copy2(p, folder / "cache" / p.name)
            (folder / "snapshots").mkdir()
            yield Corpus(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def _publish_remote(self, final: Path, snapshot_id: str, info: dict[str, Any]) -> None:
        """Upload the sealed snapshot (``info.json`` last) and the working tables, then switch the
        remote manifest conditionally (:meth:`ObjectStore.put_json`)."""
        assert self.store is not None
        if not self.store.exists(f"snapshots/{snapshot_id}/info.json"):
            self.store.upload_dir(final, f"snapshots/{snapshot_id}", last="info.json")
        self.store.upload_dir(self.tables_dir, "tables")
        self._switch_remote(info)

    def _switch_remote(self, info: dict[str, Any]) -> None:
        assert self.store is not None
        if not self._manifest_seen:
            self.manifest()
        self.store.put_json("manifest.json", info, expect=self._manifest_version, create=self._manifest_version is None)
        _, self._manifest_version = self.store.get_json("manifest.json")

    def publish_existing(self, snapshot_id: str, info: dict[str, Any]) -> Path:
        """Switch the manifest back to an already sealed snapshot (no copying, atomic)."""
        final = self.snapshots_dir / snapshot_id
        if self.store is not None and not final.is_dir() and self.store.exists(f"snapshots/{snapshot_id}/info.json"):
            self.store.download_dir(f"snapshots/{snapshot_id}", final)
        if not final.is_dir():
            raise NotBuiltError(self.location)
        info = {**info, "snapshot": snapshot_id, "published_at": datetime.now(timezone.utc).isoformat()}
        if self.store is not None:
            self._switch_remote(info)
        atomic_write_json(self.manifest_path, info)
        self._write_catalog(final)
        return final

    def snapshot_table_path(self, name: str, snapshot_dir: Path | None = None) -> Path:
        base = snapshot_dir if snapshot_dir is not None else self.published_dir()
        return base / f"{name}.parquet"

    def read_snapshot(self, name: str, snapshot_dir: Path | None = None) -> pa.Table:
        return read_table(name, self.snapshot_table_path(name, snapshot_dir))

    def all_table_paths(self) -> dict[str, Path]:
        """Every table a user can query: working tables plus the published snapshot's."""
        out = {name: self.table_path(name) for name in WORKING_TABLES if self.table_path(name).exists()}
        try:
            snap = self.published_dir()
        except NotBuiltError:
            return out
        for name in SNAPSHOT_TABLES:
            p = snap / f"{name}.parquet"
            if p.exists():
                out[name] = p
        return out


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:  # a file system without hard links
        shutil.copy2(src, dst)
