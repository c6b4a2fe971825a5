"""``CORPUS/published.duckdb``: one stable path for plain DuckDB to what is published now.

A DuckDB database holding only views over the published snapshot's Parquet files, replaced
atomically by every publish and rollback (:meth:`arborag.storage.corpus.Corpus.publish`,
:meth:`~arborag.storage.corpus.Corpus.publish_existing`) and by ``arborag snapshots catalog``::

    duckdb -readonly CORPUS/published.duckdb -c "SELECT snapshot FROM snapshot"
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:  # pragma: no cover
    from arborag.storage.corpus import Corpus

__all__ = ["CATALOG_FILE", "SNAPSHOT_VIEW_TABLES", "STORAGE_VERSION", "sql_ident", "sql_literal", "write_catalog"]

#: Tables a snapshot may carry: the views of one snapshot (``arborag sql``, the catalog) and of all of them (``<name>_all``).
SNAPSHOT_VIEW_TABLES: Final = ("nodes", "edges", "documents", "chunks", "links", "boilerplate", "repeats")

#: The DuckDB file beside the manifest holding views over the published snapshot (:func:`write_catalog`).
CATALOG_FILE: Final = "published.duckdb"

#: The DuckDB storage format of the catalog: readable by DuckDB 1.0 and later (the CLI a user has
#: may be older than the Python package that wrote it).
STORAGE_VERSION: Final = "v1.0.0"


def sql_literal(value: str | int | float | bool | None) -> str:
    """``value`` as a SQL literal (text quoted, quotes doubled)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def sql_ident(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def write_catalog(corpus: "Corpus", folder: Path | None = None) -> Path:
    """Write ``CORPUS/published.duckdb``: a DuckDB database of views over the snapshot in
    ``folder`` (default: the published one) — its tables (:data:`SNAPSHOT_VIEW_TABLES`, those it
    holds) and ``snapshot`` (one row: id, published_at, run_id, build_key). Returns its path.

    For plain DuckDB, opened read-only (``duckdb -readonly CORPUS/published.duckdb``): the views
    name the Parquet files by absolute path (DuckDB resolves a relative one against the reader's
    working directory), and a snapshot's files never change, so a reader that opened the file
    before a publish keeps reading the snapshot it opened (while retention keeps it: the published
    one, the grace period, the last ``keep_last``). The file is written under a temporary name and
    renamed over the old one (``os.replace``): a reader opens the old file or the new one. For a remote corpus the views
    point at the local mirror's copy of the snapshot (downloaded when missing).
    """
    import json
    import os
    import uuid

    import duckdb

    if folder is None:
        folder = corpus.published_dir()
    folder = folder.resolve()
    info = json.loads((folder / "info.json").read_text(encoding="utf-8"))
    target = corpus.root / CATALOG_FILE
    tmp = corpus.root / f".{CATALOG_FILE}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
    try:
        # the oldest storage format this DuckDB can write: a reader's older DuckDB (CLI 1.x) opens it too
        con = duckdb.connect(str(tmp), config={"storage_compatibility_version": STORAGE_VERSION})
        try:
            for name in SNAPSHOT_VIEW_TABLES:
                path = folder / f"{name}.parquet"
                if path.exists():
                    con.execute(f"CREATE VIEW {sql_ident(name)} AS SELECT * FROM read_parquet({sql_literal(str(path))})")
            row = {k: info.get(k) for k in ("snapshot", "published_at", "run_id", "build_key")}
            row["snapshot"] = row["snapshot"] or folder.name
            cols = ", ".join(f"{sql_literal(None if v is None else str(v))}::VARCHAR AS {sql_ident(k)}" for k, v in row.items())
            con.execute(f"CREATE VIEW snapshot AS SELECT {cols}, {sql_literal(str(folder))}::VARCHAR AS folder")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}.wal").unlink(missing_ok=True)
    return target
