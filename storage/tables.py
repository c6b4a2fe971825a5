"""Atomic, schema-checked Parquet I/O.

A write goes to a temporary file in the same folder and is renamed over the target, so a
reader (or a crash) never sees half a table. These are arborag's only file writers:
:func:`atomic_path` (any writer), :func:`atomic_write_bytes`, :func:`atomic_write_json`,
:func:`atomic_write_parquet` and :func:`write_table` (schema-checked). A table whose schema differs from the one in
:mod:`arborag.storage.schemas` is refused with :class:`~arborag.errors.SchemaError`.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from arborag.errors import SchemaError
from arborag.storage.schemas import ADDED_COLUMNS, SCHEMAS

__all__ = [
    "atomic_path",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_parquet",
    "conform",
    "empty_table",
    "read_keyed_parquet",
    "read_table",
    "write_keyed_parquet",
    "write_table",
]


def empty_table(name: str) -> pa.Table:
    return SCHEMAS[name].empty_table()


def conform(name: str, table: pa.Table) -> pa.Table:
    """Return ``table`` with the exact schema of ``name``.

    Column order and nullability flags are normalised; a missing column, an extra column or
    a type that is not the same type is a :class:`SchemaError` (no silent casts) — except a
    column of ``ADDED_COLUMNS`` (added in a later schema version), which an older file lacks
    and reads as null.
    """
    schema = SCHEMAS[name]
    want = set(schema.names)
    have = set(table.schema.names)
    for col in ADDED_COLUMNS.get(name, ()):  # written before the column existed: null
        if col not in have:
            table = table.append_column(schema.field(col), pa.nulls(table.num_rows, schema.field(col).type))
            have.add(col)
    if want != have:
        missing = sorted(want - have)
        extra = sorted(have - want)
        raise SchemaError(name, f"columns differ from the schema: missing {missing}, unexpected {extra}")
    cols = []
    for field in schema:
        col = table.column(field.name)
        if col.type != field.type:
            # string <-> large_string of the same content is the one widening we accept
            if pa.types.is_string(col.type) and pa.types.is_large_string(field.type):
                col = col.cast(field.type)
            else:
                raise SchemaError(name, f"column {field.name!r} has type {col.type}, expected {field.type}")
        if not field.nullable and col.null_count:
            raise SchemaError(name, f"column {field.name!r} has {col.null_count} nulls but is not nullable")
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=schema)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary file beside ``path`` to write to; renamed over ``path`` when the block ends
    without an error, removed when it raises (readers never see a half-written file)::

        with atomic_path(out / "plot.png") as tmp:
            fig.savefig(tmp, format="png")
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (flushed to disk before the rename)."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def atomic_write_json(path: str | Path, obj: Any) -> None:
    """``obj`` as indented JSON with sorted keys (arborag's metadata files), written atomically."""
    atomic_write_bytes(path, json.dumps(obj, indent=2, sort_keys=True).encode())


def atomic_write_parquet(table: pa.Table, path: str | Path, **options: Any) -> Path:
    """Write ``table`` to ``path`` (zstd) through a temporary file in the same folder + rename;
    ``options`` go to ``pyarrow.parquet.write_table`` (e.g. another ``compression``)."""
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, **{"compression": "zstd", **options})
    return Path(path)


def write_keyed_parquet(table: pa.Table, path: str | Path, keys: dict[bytes, bytes]) -> Path:
    """Write a cache file: ``table`` with ``keys`` in its Parquet metadata (what it was made for),
    atomically; :func:`read_keyed_parquet` gives it back only for the same keys."""
    return atomic_write_parquet(table.replace_schema_metadata(keys), path)


def read_keyed_parquet(path: str | Path, schema: pa.Schema, keys: dict[bytes, bytes]) -> pa.Table | None:
    """The cache file at ``path`` when :func:`write_keyed_parquet` wrote it with these ``keys`` and
    ``schema``; None when it is absent, unreadable (torn, foreign) or was made for other keys."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        meta = pq.read_schema(path).metadata or {}
        if any(meta.get(k) != v for k, v in keys.items()):
            return None
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError):
        return None
    return table if table.schema.remove_metadata() == schema else None


def write_table(name: str, table: pa.Table, path: str | Path) -> Path:
    """Validate ``table`` against schema ``name`` and write it atomically to ``path``."""
    return atomic_write_parquet(conform(name, table), path)


def read_table(name: str, path: str | Path, *, missing_ok: bool = True) -> pa.Table:
    """Read table ``name`` from ``path``; an absent file is an empty table when ``missing_ok``."""
    path = Path(path)
    if not path.exists():
        if missing_ok:
            return empty_table(name)
        raise SchemaError(name, f"{path} does not exist")
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise SchemaError(name, f"{path} is not a readable Parquet file: {exc}") from exc
    return conform(name, table)
