"""A snapshot's links by vector row: what a bounded index's ``hop`` reads per query.

``links.parquet`` (node_id, entity, kind, weight; sorted by node_id) is rewritten once per
snapshot as a ``.npy`` array of fixed 16-byte records sorted by vector row — ``ent`` (uint64: a
hash of the entity text), ``weight`` (float32), ``title`` (uint8) — beside a ``.ptr.npy`` array
whose entries ``ptr[r]:ptr[r + 1]`` are row ``r``'s records. :meth:`LinkRows.links_of` reads
the records of a few hundred candidate rows with one positioned read per row
(:mod:`arborag.storage.positioned`): nothing per link or per entity is held in memory and nothing
of the file is mapped into the process, so its RSS does not grow with the rows queries read
(only ``ptr``, 8 bytes a row, is loaded).

The file lives in the corpus cache (``cache/link_rows/<snapshot>.npy``), never in the
immutable snapshot folder; it is written on first use (streamed by parquet row group: memory
bounded by one row group plus the node ids and the records) and atomically, so concurrent
readers agree. Retention removes the files of snapshots it removes
(:func:`arborag.storage.snapshots.sweeps.sweep_link_rows`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from arborag.storage.positioned import PositionedFile
from arborag.storage.tables import atomic_path

__all__ = ["FOLDER", "RECORD", "LinkRows", "Links", "link_rows_path", "ptr_path", "write_link_rows"]

#: one link: the entity's hash, its weight (IDF), whether it is a title link (16 bytes, aligned)
RECORD = np.dtype([("ent", "<u8"), ("weight", "<f4"), ("title", "u1")], align=True)
#: the folder of the files in the corpus cache
FOLDER = "link_rows"


def link_rows_path(cache_dir: Path, snapshot: str) -> Path:
    """The records file of ``snapshot`` in the corpus cache (its ``ptr`` beside it: :func:`ptr_path`)."""
    return Path(cache_dir) / FOLDER / f"{snapshot}.npy"


def ptr_path(path: Path) -> Path:
    return Path(path).with_name(Path(path).name[: -len(".npy")] + ".ptr.npy")


class Links(NamedTuple):
    """The links of some rows, one entry per link: ``pos`` (the position of its row in the rows
    asked for), ``ent``, ``weight``, ``title``."""

    pos: np.ndarray
    ent: np.ndarray
    weight: np.ndarray
    title: np.ndarray


def _hash(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    import polars as pl

    return pl.Series(values=values).cast(pl.String).hash(seed=0).to_numpy().astype(np.uint64, copy=False)


def entity_hash(entities: list[str]) -> np.ndarray:
    """The ``ent`` code of entity texts (as written in the file)."""
    return _hash(pa.array(entities, pa.string()))


def write_link_rows(links_parquet: Path, node_ids: pa.ChunkedArray, path: Path) -> Path:
    """Write ``links_parquet`` as the row-sorted records at ``path`` (and its ``ptr``) over the
    vector rows whose ids are ``node_ids`` (a link of a node not among them is dropped)."""
    import polars as pl
    import pyarrow.parquet as pq

    if not str(path).endswith(".npy"):
        raise ValueError(f"{path}: the link rows are a .npy file (use link_rows_path)")
    n_rows = len(node_ids)
    ids = pl.DataFrame({"node_id": pl.Series(values=node_ids).cast(pl.String)}).with_row_index("row")

    def rows_of(column: pa.ChunkedArray) -> np.ndarray:
        got = pl.DataFrame({"node_id": pl.Series(values=column).cast(pl.String)}).join(ids, on="node_id", how="left",
                                                                                   maintain_order="left")
        return got.get_column("row").fill_null(-1).cast(pl.Int64).to_numpy()

    path.parent.mkdir(parents=True, exist_ok=True)
    rows_parts: list[np.ndarray] = []
    rec_parts: list[np.ndarray] = []
    if Path(links_parquet).exists():
        pf = pq.ParquetFile(links_parquet)
        for g in range(pf.num_row_groups):
            t = pf.read_row_group(g, columns=["node_id", "entity", "kind", "weight"])
            rows = rows_of(t.column("node_id"))
            keep = rows >= 0
            rec = np.zeros(int(keep.sum()), dtype=RECORD)
            rec["ent"] = _hash(t.column("entity"))[keep]
            rec["weight"] = np.asarray(t.column("weight").to_numpy(), dtype=np.float32)[keep]
            rec["title"] = np.asarray(t.column("kind").to_numpy(zero_copy_only=False) == "title")[keep]
            rows_parts.append(rows[keep])
            rec_parts.append(rec)
    row = np.concatenate(rows_parts) if rows_parts else np.zeros(0, dtype=np.int64)
    records = np.concatenate(rec_parts) if rec_parts else np.zeros(0, dtype=RECORD)
    order = np.argsort(row, kind="stable")
    records, row = records[order], row[order]
    ptr = np.searchsorted(row, np.arange(n_rows + 1)).astype(np.int64)
    with atomic_path(ptr_path(path)) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, ptr)
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, records)
    return path


class LinkRows:
    """The links by row, read by positioned reads (module docs)."""

    def __init__(self, path: Path) -> None:
        path = Path(path)
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read_header(f)
            self._data_at = f.tell()
        if dtype != RECORD or fortran or len(shape) != 1:
            raise ValueError(f"{path}: not a link rows file ({dtype}, shape {shape}); delete it and it is rewritten on first use")
        self.n_edges = int(shape[0])
        self.ptr = np.load(ptr_path(path))
        self._file = PositionedFile(path)

    @classmethod
    def open_or_write(cls, links_parquet: Path, path: Path, node_ids: Callable[[], pa.ChunkedArray]) -> "LinkRows":
        """The file at ``path``, written first from ``links_parquet`` when absent (``node_ids``: the
        vector rows' ids, asked for only then)."""
        if not (path.is_file() and ptr_path(path).is_file()):
            write_link_rows(links_parquet, node_ids(), path)
        return cls(path)

    def links_of(self, rows: np.ndarray) -> Links:
        """Every link of ``rows`` (one positioned read per row that has links)."""
        rows = np.asarray(rows, dtype=np.int64)
        starts = self.ptr[rows]
        lengths = self.ptr[rows + 1] - starts
        has = lengths > 0
        buf = self._file.read_into(self._data_at + starts[has] * RECORD.itemsize, lengths[has] * RECORD.itemsize)
        rec = np.frombuffer(buf, dtype=RECORD)
        return Links(np.repeat(np.arange(rows.size), lengths), rec["ent"], rec["weight"], rec["title"].astype(bool))

    def close(self) -> None:
        self._file.close()
