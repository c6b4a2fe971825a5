"""A snapshot's links by vector row, memory-mapped: what a bounded index's ``hop`` reads per query.

``links.parquet`` (node_id, entity, kind, weight; sorted by node_id) is rewritten once per
snapshot as an uncompressed Arrow IPC file of integer columns sorted by vector row —
``row`` (int32), ``ent`` (uint64: a hash of the entity text), ``weight`` (float32), ``title``
(bool) — beside a ``.ptr.npy`` array whose entries ``ptr[r]:ptr[r + 1]`` are row ``r``'s links.
:meth:`LinkRows.edges_of` then gathers the links of a few hundred candidate rows from the mapped
files: nothing per link or per entity is held in memory, and a query touches only the pages of
its candidates.

The file lives in the corpus cache (``cache/link_rows/<snapshot>.arrow``), never in the
immutable snapshot folder; it is written on first use (streamed by parquet row group: memory
bounded by one row group plus the node ids) and atomically, so concurrent readers agree.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

from arborag.storage.tables import atomic_path

__all__ = ["LinkRows", "link_rows_path", "write_link_rows"]

SCHEMA = pa.schema([("row", pa.int32()), ("ent", pa.uint64()), ("weight", pa.float32()), ("title", pa.bool_())])


def link_rows_path(cache_dir: Path, snapshot: str) -> Path:
    return Path(cache_dir) / "link_rows" / f"{snapshot}.arrow"


def _hash(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    import polars as pl

    return pl.Series(values=values).cast(pl.String).hash(seed=0).to_numpy().astype(np.uint64, copy=False)


def entity_hash(entities: list[str]) -> np.ndarray:
    """The ``ent`` code of entity texts (as written in the file)."""
    return _hash(pa.array(entities, pa.string()))


def write_link_rows(links_parquet: Path, node_ids: pa.ChunkedArray, path: Path) -> Path:
    """Write ``links_parquet`` as the row-sorted file at ``path`` (and its ``.ptr.npy``) over the
    vector rows whose ids are ``node_ids`` (a link of a node not among them is dropped)."""
    import polars as pl
    import pyarrow.parquet as pq

    n_rows = len(node_ids)
    ids = pl.DataFrame({"node_id": pl.Series(values=node_ids).cast(pl.String)}).with_row_index("row")

    def rows_of(column: pa.ChunkedArray) -> np.ndarray:
        got = pl.DataFrame({"node_id": pl.Series(values=column).cast(pl.String)}).join(ids, on="node_id", how="left",
                                                                                   maintain_order="left")
        return got.get_column("row").fill_null(-1).cast(pl.Int64).to_numpy()

    path.parent.mkdir(parents=True, exist_ok=True)
    parts: list[pa.RecordBatch] = []
    if Path(links_parquet).exists():
        pf = pq.ParquetFile(links_parquet)
        for g in range(pf.num_row_groups):
            t = pf.read_row_group(g, columns=["node_id", "entity", "kind", "weight"])
            rows = rows_of(t.column("node_id"))
            keep = rows >= 0
            parts.append(pa.record_batch([
                pa.array(rows[keep].astype(np.int32)), pa.array(_hash(t.column("entity"))[keep]),
                pa.array(np.asarray(t.column("weight").to_numpy(), dtype=np.float32)[keep]),
                pa.array(np.asarray(t.column("kind").to_numpy(zero_copy_only=False) == "title")[keep]),
            ], schema=SCHEMA))
    table = pa.Table.from_batches(parts, schema=SCHEMA)
    if table.num_rows:
        table = table.take(np.argsort(np.asarray(table.column("row").to_numpy()), kind="stable"))
    row = np.asarray(table.column("row").to_numpy(), dtype=np.int64) if table.num_rows else np.zeros(0, dtype=np.int64)
    ptr = np.searchsorted(row, np.arange(n_rows + 1)).astype(np.int64)
    ptr_path = path.with_suffix(".ptr.npy")
    with atomic_path(ptr_path) as tmp:
        with open(tmp, "wb") as f:
            np.save(f, ptr)
    with atomic_path(path) as tmp, pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, SCHEMA) as writer:
        writer.write_table(table.combine_chunks())
    return path


class LinkRows:
    """The memory-mapped links by row (module docs)."""

    def __init__(self, path: Path) -> None:
        table = pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all().combine_chunks()
        self.n_edges = table.num_rows
        empty = self.n_edges == 0
        self.ent = np.zeros(0, np.uint64) if empty else table.column("ent").chunk(0).to_numpy()
        self.weight = np.zeros(0, np.float32) if empty else table.column("weight").chunk(0).to_numpy()
        self.title = np.zeros(0, bool) if empty else np.asarray(table.column("title").chunk(0).to_numpy(zero_copy_only=False))
        self.ptr = np.load(path.with_suffix(".ptr.npy"), mmap_mode="r")
        self._table = table  # keeps the mapping alive

    @classmethod
    def open_or_write(cls, links_parquet: Path, path: Path, node_ids: Callable[[], pa.ChunkedArray]) -> "LinkRows":
        """The file at ``path``, written first from ``links_parquet`` when absent (``node_ids``: the
        vector rows' ids, asked for only then)."""
        if not (path.is_file() and path.with_suffix(".ptr.npy").is_file()):
            write_link_rows(links_parquet, node_ids(), path)
        return cls(path)

    def edges_of(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in ``rows`` of each edge, edge index) of every link of ``rows``."""
        rows = np.asarray(rows, dtype=np.int64)
        starts = np.asarray(self.ptr[rows], dtype=np.int64)
        lengths = np.asarray(self.ptr[rows + 1], dtype=np.int64) - starts
        total = int(lengths.sum())
        if total == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        pos = np.repeat(np.arange(rows.size), lengths)
        offsets = np.repeat(starts - np.cumsum(lengths) + lengths, lengths)
        return pos, offsets + np.arange(total)
