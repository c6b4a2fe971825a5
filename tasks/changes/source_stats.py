"""Which source files an update need not read again: their stat as it was when their bytes were read.

An update learns which documents changed by reading every source file and hashing its bytes
(``tasks/stages/plan.py``). On the 4x cold-path corpus (9,179 small files) that was ~0.7 s of a
7 s +1% update. On a folder of PDFs it means reading every byte of the corpus on every
scheduled run. This module trusts a file's stat, as ``make``, git's index and rsync's quick
check do. It is the per-file counterpart of the whole-run record of ``flows/noop.py``.

**The record.** After the plan of an update or the ingest stage of a build has written the
documents table, :func:`write_record` writes ``cache/source_stats.parquet`` (schema
:data:`~arborag.storage.schemas.SOURCE_STATS`). It has one row per file that run read, or
skipped through this record:
- uri, size, mtime and ctime (ns), inode and device, as ``os.stat`` gave them just before the
  bytes were read;
- ``read_ns``, the clock just before that stat.

The file's metadata holds the content hash of the documents table it describes and the reader
key (:func:`~arborag.tasks.ingest.readers.reader_key`).

**The skip.** :func:`skippable` lets the next update skip reading a file only when all of these
hold:
- the record describes this very documents table and this reader key;
- the file's size, mtime, ctime, inode and device all equal the recorded ones;
- both times are more than :data:`RACY_S` before ``read_ns``. A write in the same clock tick as
  the stat could leave the stat equal; this is git's "racily clean" rule;
- the documents table holds an ok row from the file, and no error row of the file. A file that
  failed is read again, so its failure is reported again.

Writing a file's content moves its ctime, and ctime cannot be set back (``touch -d``, ``cp -p``
and ``rsync -t`` set mtime only). A rename or a ``chmod`` moves it too. A skipped file is one
whose bytes the table already holds, so the documents table after the update is the table a full
read would give. ``tests/tasks/changes/test_source_stats.py`` compares the two.

The file is a cache. Deleting it costs one full read, never a wrong document. A remote
(``s3://``) corpus does not use it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import polars as pl
import pyarrow as pa

from arborag.storage.schemas import SOURCE_STATS
from arborag.storage.tables import read_keyed_parquet, write_keyed_parquet
from arborag.tasks.ingest.existing import RECORD_URI_PATTERN, duplicate_uris

__all__ = ["RACY_S", "RECORD", "current_stats", "read_record", "record_path", "skippable", "stat_rows", "write_record"]

RECORD = "source_stats.parquet"  # under the corpus cache folder
#: A file modified this close (seconds) before the stat that recorded it may have changed again
#: within the same clock tick, leaving the stat equal: such a row is not trusted.
RACY_S = 2.0
_DOCUMENTS = b"documents"
_READER = b"reader"
_STAT = ["size", "mtime_ns", "ctime_ns", "ino", "dev"]


def record_path(cache_dir: str | Path) -> Path:
    return Path(cache_dir) / RECORD


def _frame(rows: dict[str, list[object]]) -> pl.DataFrame:
    out = pl.from_arrow(pa.table(rows, schema=SOURCE_STATS))
    assert isinstance(out, pl.DataFrame)
    return out


def stat_rows(stats: Sequence[tuple[str, os.stat_result, int]]) -> pl.DataFrame:
    """SOURCE_STATS rows of ``(uri, os.stat, ns before the stat)``, as
    :func:`~arborag.tasks.stages.documents.build_documents` collects them while reading."""
    return _frame({
        "uri": [u for u, _, _ in stats],
        "size": [st.st_size for _, st, _ in stats],
        "mtime_ns": [st.st_mtime_ns for _, st, _ in stats],
        "ctime_ns": [st.st_ctime_ns for _, st, _ in stats],
        "ino": [st.st_ino for _, st, _ in stats],
        "dev": [st.st_dev for _, st, _ in stats],
        "read_ns": [t for _, _, t in stats],
    })


def current_stats(files: Sequence[str]) -> pl.DataFrame:
    """``uri`` and the stat columns of every file of ``files`` that can be stat'ed now (no byte read)."""
    rows: list[tuple[str, os.stat_result]] = []
    for f in files:
        try:
            rows.append((f, os.stat(f)))
        except OSError:
            continue  # read (and reported) by the plan
    return stat_rows([(u, st, 0) for u, st in rows]).drop("read_ns")


def read_record(cache_dir: str | Path, *, documents: str, reader: str) -> pl.DataFrame | None:
    """The record when it describes the documents table whose content hash is ``documents`` and
    was written for ``reader``; None when it is absent, unreadable or stale (read everything; the
    next write replaces it)."""
    table = read_keyed_parquet(record_path(cache_dir), SOURCE_STATS, {_DOCUMENTS: documents.encode(), _READER: reader.encode()})
    if table is None:
        return None
    out = pl.from_arrow(table)
    assert isinstance(out, pl.DataFrame)
    return out


def _files_of(documents: pa.Table) -> tuple[pl.Series, pl.Series]:
    """(files holding an ok row, files holding an error row) of a documents table: a row's uri,
    its ``duplicate_uris``, and a JSONL record ``FILE#L<n>``'s file."""
    df = pl.from_arrow(documents.select(["uri", "status", "metadata"]))
    assert isinstance(df, pl.DataFrame)
    ok = df.filter(pl.col("status") == "ok")
    uris = pl.concat([ok.select("uri"), ok.select(duplicate_uris(pl.col("metadata")).alias("uri")).explode("uri").drop_nulls("uri")])
    file_of = pl.col("uri").str.replace(RECORD_URI_PATTERN, "$1")
    errors = df.filter(pl.col("status") == "error").select(file_of)
    return uris.select(file_of)["uri"].unique(), errors["uri"].unique()


def skippable(cache_dir: str | Path, documents: pa.Table, documents_hash: str, files: Sequence[str], reader: str) -> pl.DataFrame:
    """The record rows of the ``files`` an update need not read (module docs): empty when the
    record does not describe ``documents`` (content hash ``documents_hash``) read with ``reader``."""
    rec = read_record(cache_dir, documents=documents_hash, reader=reader)
    if rec is None or not files:
        return _frame({name: [] for name in SOURCE_STATS.names})
    racy = int(RACY_S * 1e9)
    same = current_stats(files).join(rec, on=["uri", *_STAT], how="inner").filter(
        (pl.col("mtime_ns") < pl.col("read_ns") - racy) & (pl.col("ctime_ns") < pl.col("read_ns") - racy))
    ok, failed = _files_of(documents)
    return same.filter(pl.col("uri").is_in(ok.implode()) & ~pl.col("uri").is_in(failed.implode())).select(SOURCE_STATS.names)


def write_record(cache_dir: str | Path, rows: pl.DataFrame, *, documents_hash: str, reader: str) -> bool:
    """Write ``rows`` (one per uri, the last given wins) as the record of the documents table
    whose content hash is ``documents_hash``, read with ``reader``; whether it was written. Never
    fails the run: a record that cannot be written only costs the next update its skips (an
    older record describes another documents table and is not used)."""
    table = rows.unique("uri", keep="last", maintain_order=True).sort("uri").to_arrow().cast(SOURCE_STATS)
    try:
        write_keyed_parquet(table, record_path(cache_dir), {_DOCUMENTS: documents_hash.encode(), _READER: reader.encode()})
    except (OSError, pa.ArrowException):
        return False
    return True
