"""Node vectors in LanceDB (one table per snapshot, keyed by node_id).

Rows: node_id, level, doc_ids, text, n_tokens, vector (fixed_size_list<float32>[dim]).
Vectors are L2-normalised, so cosine similarity is a dot product.

Next to the LanceDB table the same rows are written as one Arrow IPC file (``nodes.arrow``):
:meth:`VectorStore.open` memory-maps it with pyarrow and never imports lancedb (an import of
~1.2 s, most of a cold ``arborag query``) unless the table needs its ANN index. Snapshots
written before that file existed are read through lancedb as before.

Small tables are searched exactly (all vectors are loaded once into memory — a 10k x 384
table is 15 MB and a full scan takes well under a millisecond per query). From
:data:`ANN_MIN_ROWS` rows on (``query.ann_min_rows``) the table gets an IVF_PQ index and a
reader is *bounded*: it copies nothing per row into memory (the matrix alone would be 1.5 GB
at 10^6 x 384), LanceDB's index finds the candidates, and the texts, ids, documents and
vectors of the hits are read from the memory-mapped ``nodes.arrow`` (:class:`VectorStore`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from arborag.errors import SchemaError
from arborag.storage.tables import atomic_path
from arborag.storage.arrays import arrow_to_vectors, vectors_to_arrow
from arborag.storage.positioned import PositionedFile, mapped_base

__all__ = ["ANN_MIN_ROWS", "ANN_NPROBES", "ANN_REFINE_FACTOR", "ARROW_FILE", "LANCEDB_IMPORT", "ArrowColumn", "MappedMatrix",
           "SortedIds", "VectorStore", "write_vectors", "TABLE_NAME"]

TABLE_NAME = "nodes"
#: the rows of the LanceDB table as an Arrow IPC file inside the database folder (read without lancedb)
ARROW_FILE = "nodes.arrow"
#: Rows from which the table gets an ANN index and a reader keeps it bounded (the default of ``query.ann_min_rows``).
ANN_MIN_ROWS = 100_000
#: IVF_PQ search settings: IVF partitions probed per query, and the candidates re-ranked by their
#: full vectors (``refine`` x k, for k up to 10; 2k beyond) — chosen by measurement at 10^5 rows
#: (refine 10: recall@10 0.92; 20: 0.997) and 10^6 rows (refine 20: 0.957, 40: 0.990 for +4 ms
#: on one build of the index; on another, refine 40 gave 0.958 and the misses were in partitions
#: not probed: nprobes 20 / 40 / 50 / 60 gave 0.958 / 0.978 / 0.984 / 0.990 for an ANN search of
#: 23 / 27 / 29 / 33 ms p50 at 200 candidates); docs/SCALE.md §3.1.
ANN_NPROBES = 50
ANN_REFINE_FACTOR = 40
#: IVF k-means training: rows sampled per partition and iterations (LanceDB's defaults, 256 and 50,
#: took 370 s for 10^5 rows on the shared 2-core machine; the training cost grows with both)
ANN_SAMPLE_RATE = 64
ANN_KMEANS_ITERATIONS = 20
#: The module whose import loads lancedb the way this module uses it (:mod:`arborag.storage.lancedb_import`):
#: the name a run gives to ``warm_imports`` / ``embed_worker.preimport`` and asks ``embed_worker.holding`` for.
LANCEDB_IMPORT = "arborag.storage.lancedb_import"


def _vector_table(nodes: pa.Table, vectors: np.ndarray) -> pa.Table:
    if vectors.ndim != 2 or vectors.shape[0] != nodes.num_rows:
        raise SchemaError("vectors", f"vectors {vectors.shape} do not align with {nodes.num_rows} nodes")
    return pa.table(
        {
            "node_id": nodes.column("node_id"),
            "level": nodes.column("level"),
            "doc_ids": nodes.column("doc_ids"),
            "n_tokens": nodes.column("n_tokens"),
            "text": nodes.column("text").cast(pa.string()),
            "vector": vectors_to_arrow(vectors),
        }
    )


def write_vectors(directory: Path, nodes: pa.Table, vectors: np.ndarray, *, ann_min_rows: int | None = None) -> dict[str, int | bool]:
    """Write the vector table for a snapshot into ``directory`` (a new LanceDB database).

    From ``ann_min_rows`` rows on (default :data:`ANN_MIN_ROWS`) the table gets an IVF_PQ index
    (cosine; ~sqrt(n) partitions, 48 sub-vectors) and ``nodes.arrow`` an ``id_order`` column (the
    rows sorted by node_id), so a bounded reader finds a node's row by binary search."""
    from arborag.storage.lancedb_import import lancedb  # without the REST namespace client's API modules

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / ARROW_FILE).unlink(missing_ok=True)  # never leave a previous write's rows beside a new table
    db = lancedb.connect(str(directory))
    if TABLE_NAME in db.list_tables().tables:
        db.drop_table(TABLE_NAME)
    # mode="create" on a fresh folder: "overwrite" makes lance log a WARN for a missing dataset
    rows = _vector_table(nodes, vectors)
    table = db.create_table(TABLE_NAME, rows, mode="create")
    ann = nodes.num_rows >= (ANN_MIN_ROWS if ann_min_rows is None else int(ann_min_rows))
    if ann:
        order = pc.sort_indices(rows.column("node_id")).cast(pa.int64())
        _write_arrow(directory / ARROW_FILE, rows.append_column("id_order", order))
        from lancedb.index import Bitmap, IvfPq

        dim = int(vectors.shape[1])
        # lancedb 0.40: the column is positional; ``metric=`` beside ``config=`` was read as a field path
        table.create_index("vector", config=IvfPq(distance_type="cosine", num_partitions=_partitions(nodes.num_rows),
                                                  num_sub_vectors=_sub_vectors(dim), sample_rate=ANN_SAMPLE_RATE,
                                                  max_iterations=ANN_KMEANS_ITERATIONS))
        table.create_index("level", config=Bitmap())  # the ``level IN (...)`` prefilter of every leaf search
    else:
        _write_arrow(directory / ARROW_FILE, rows)
    return {"rows": nodes.num_rows, "dim": int(vectors.shape[1]) if vectors.size else 0, "ann_index": ann}


def _partitions(n: int) -> int:
    """IVF partitions: ~sqrt(n) / 2 (500 at 10^6 rows), with at least 256 rows each to train on."""
    return max(1, min(int(n ** 0.5 / 2), n // 256))


def _sub_vectors(dim: int) -> int:
    """PQ sub-vectors: 48 for 384 dims (8 dims each), else the largest divisor of ``dim`` up to dim / 8."""
    for m in range(max(1, dim // 8), 0, -1):
        if dim % m == 0:
            return m
    return 1


def _write_arrow(path: Path, rows: pa.Table) -> None:
    """``rows`` as an uncompressed Arrow IPC file (memory-mappable), written atomically."""
    with atomic_path(path) as tmp, pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, rows.schema) as writer:
        writer.write_table(rows)


@dataclass(frozen=True, slots=True)
class VectorRow:
    node_id: str
    level: int
    doc_ids: tuple[str, ...]
    n_tokens: int
    text: str


class ArrowColumn(Sequence):  # type: ignore[type-arg]
    """A column of the memory-mapped rows read one row at a time (``col[i]``): what a bounded
    store hands out instead of a Python list of every row. ``as_tuple``: list cells as tuples.
    With ``file`` (the same file opened for positioned reads) a string or list-of-strings cell
    is read by positioned reads of its offsets and bytes, so reading rows never maps the file's
    pages into the process (:mod:`arborag.storage.positioned`)."""

    def __init__(self, column: pa.ChunkedArray, *, as_tuple: bool = False, file: PositionedFile | None = None) -> None:
        self._chunks = column.chunks
        self._starts = np.cumsum([0] + [len(c) for c in self._chunks])
        self._n = int(self._starts[-1])
        self._as_tuple = as_tuple
        self._file = file
        layouts = [_cell_layout(c, file) for c in self._chunks] if file is not None else []
        self._layouts = layouts if layouts and all(x is not None for x in layouts) else None

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        i = int(i)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        c = int(np.searchsorted(self._starts, i, side="right")) - 1
        if self._layouts is not None and self._file is not None:
            v = _read_cell(self._file, self._layouts[c], i - int(self._starts[c]))
        else:
            v = self._chunks[c][i - int(self._starts[c])].as_py()
        return tuple(v) if self._as_tuple else v

    def __iter__(self):  # streams chunk by chunk (a full pass, for callers that really want every row)
        for chunk in self._chunks:
            for batch_start in range(0, len(chunk), 65_536):
                for v in chunk.slice(batch_start, 65_536).to_pylist():
                    yield tuple(v) if self._as_tuple else v


def _string_layout(arr: pa.Array, file: PositionedFile) -> tuple[int, int, int] | None:
    """(file offset of the offsets of row 0, file offset of the data, offset width) of a string
    array without nulls whose buffers lie in ``file``'s mapping, else None."""
    if arr.null_count or not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        return None
    bufs = arr.buffers()
    width = 8 if pa.types.is_large_string(arr.type) else 4
    offs = file.offset_of(bufs[1])
    data = file.offset_of(bufs[2]) if bufs[2] is not None and bufs[2].size else 0
    if offs is None or data is None:
        return None
    return offs + arr.offset * width, data, width


def _cell_layout(chunk: pa.Array, file: PositionedFile) -> tuple | None:
    """How :func:`_read_cell` finds a cell of ``chunk`` in ``file``: ("s", string layout) or
    ("l", file offset of the list offsets of row 0, layout of the child strings); None for
    another type, nulls, or buffers outside the mapping (then the mapped cell is read)."""
    if pa.types.is_list(chunk.type):
        if chunk.null_count:
            return None
        child = _string_layout(chunk.values, file)
        offs = file.offset_of(chunk.buffers()[1])
        if child is None or offs is None:
            return None
        return "l", offs + chunk.offset * 4, child
    layout = _string_layout(chunk, file)
    return None if layout is None else ("s", layout)


def _read_strings(file: PositionedFile, layout: tuple[int, int, int], lo: int, hi: int) -> list[str]:
    """Strings ``lo:hi`` of a string array laid out as ``layout`` (two positioned reads)."""
    offs_at, data_at, width = layout
    if hi <= lo:
        return []
    offs = np.frombuffer(file.read(offs_at + lo * width, (hi - lo + 1) * width), dtype=np.int64 if width == 8 else np.int32)
    raw = file.read(data_at + int(offs[0]), int(offs[-1] - offs[0]))
    rel = (offs - offs[0]).tolist()
    return [raw[rel[j]:rel[j + 1]].decode("utf-8") for j in range(hi - lo)]


def _read_cell(file: PositionedFile, layout: tuple, i: int) -> Any:
    if layout[0] == "s":
        return _read_strings(file, layout[1], i, i + 1)[0]
    lo, hi = np.frombuffer(file.read(layout[1] + i * 4, 8), dtype=np.int32).tolist()
    return _read_strings(file, layout[2], lo, hi)


class MappedMatrix:
    """The vectors as a read-only view of the memory-mapped file: ``m[rows]`` copies only those
    rows; ``m @ q`` is a full scan in slices. With ``file`` both read the rows by positioned
    reads (:mod:`arborag.storage.positioned`) instead of through the mapping, so the process's
    RSS does not grow with the rows it has read."""

    _SLICE = 65_536
    _READ_SLICE = 8_192  # rows per positioned read of a full scan (12 MB at 384 dims)

    def __init__(self, column: pa.ChunkedArray, *, file: PositionedFile | None = None) -> None:
        # chunk by chunk as Arrays: a ChunkedArray would be combined first (a copy of every vector)
        self._views = [arrow_to_vectors(c) for c in column.chunks] or [
            np.zeros((0, 0), dtype=np.float32)]
        self._starts = np.cumsum([0] + [v.shape[0] for v in self._views])
        self.shape = (int(self._starts[-1]), int(self._views[0].shape[1]) if self._views[0].ndim == 2 else 0)
        self.ndim = 2
        self._file: PositionedFile | None = None
        self._row_bytes = self.shape[1] * 4
        if file is not None and column.num_chunks and pa.types.is_float32(column.type.value_type):
            at: list[int | None] = []
            for c in column.chunks:
                flat = c.flatten()
                off = file.offset_of(flat.buffers()[1]) if not c.null_count and not flat.null_count else None
                at.append(None if off is None else off + flat.offset * 4)
            if all(x is not None for x in at):
                self._file, self._at = file, np.asarray(at, dtype=np.int64)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows) -> np.ndarray:
        rows = np.atleast_1d(np.asarray(rows, dtype=np.int64))
        if self._file is not None:
            if rows.size and (rows.min() < 0 or rows.max() >= self.shape[0]):
                raise IndexError(f"rows out of range 0..{self.shape[0] - 1}")
            chunk = np.searchsorted(self._starts, rows, side="right") - 1
            offsets = self._at[chunk] + (rows - self._starts[chunk]) * self._row_bytes
            buf = self._file.read_into(offsets, np.full(rows.size, self._row_bytes, dtype=np.int64))
            return np.frombuffer(buf, dtype=np.float32).reshape(rows.size, self.shape[1])
        if len(self._views) == 1:
            return np.array(self._views[0][rows], dtype=np.float32)
        out = np.empty((rows.size, self.shape[1]), dtype=np.float32)
        chunk = np.searchsorted(self._starts, rows, side="right") - 1
        for c in np.unique(chunk):
            sel = chunk == c
            out[sel] = self._views[c][rows[sel] - self._starts[c]]
        return out

    def __matmul__(self, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q, dtype=np.float32)
        if self._file is not None:
            parts = []
            for c, v in enumerate(self._views):
                for i in range(0, v.shape[0], self._READ_SLICE):
                    n = min(self._READ_SLICE, v.shape[0] - i)
                    buf = self._file.read_into([int(self._at[c]) + i * self._row_bytes], [n * self._row_bytes])
                    parts.append(np.frombuffer(buf, dtype=np.float32).reshape(n, self.shape[1]) @ q)
        else:
            parts = [np.array(v[i:i + self._SLICE]) @ q for v in self._views for i in range(0, v.shape[0], self._SLICE)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


class SortedIds:
    """node_id -> row without a dict of every id: a binary search over the memory-mapped
    ``node_id`` column in ``order`` (its rows sorted by id: the ``id_order`` column written with
    an ANN-sized table, or sorted once on first use for a table written without it)."""

    def __init__(self, column: pa.ChunkedArray, order: np.ndarray | None) -> None:
        self._column = column
        self._order = order
        arr = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        bufs = arr.buffers()
        width = np.int64 if pa.types.is_large_string(arr.type) else np.int32
        self._offsets = (np.frombuffer(bufs[1], dtype=width)[arr.offset:arr.offset + len(arr) + 1] if len(arr)
                         else np.zeros(1, dtype=np.int64))
        data = bufs[2]
        self._data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
        self._n = len(arr)

    def _fixed_keys(self) -> np.ndarray | None:
        """The ids as one ``S<width>`` array over the mapped bytes when every id has the same byte
        length (a build's ids are hashes of one length), else None."""
        if not hasattr(self, "_keys"):
            widths = np.diff(self._offsets) if self._n else np.zeros(0, dtype=np.int64)
            w = int(widths[0]) if widths.size else 0
            self._keys = None
            if w > 0 and bool((widths == w).all()):
                start = int(self._offsets[0])
                self._keys = np.frombuffer(self._data[start:start + w * self._n].data, dtype=f"S{w}")
        return self._keys

    def lookup(self, node_ids: Sequence[str]) -> np.ndarray:
        """Rows of ``node_ids`` (-1 where absent): one vectorized binary search when the ids
        have one width (:meth:`_fixed_keys`), else one binary search per id."""
        keys = self._fixed_keys()
        if keys is None or not len(node_ids):
            get = self.get
            return np.fromiter((-1 if (r := get(x)) is None else r for x in node_ids), dtype=np.int64, count=len(node_ids))
        width = keys.dtype.itemsize
        enc = [x.encode("utf-8") for x in node_ids]
        want = np.array(enc, dtype=f"S{width}")
        pos = np.minimum(np.searchsorted(keys, want, sorter=self.order), self._n - 1)
        rows = np.asarray(self.order[pos], dtype=np.int64)
        ok = (keys[rows] == want) & np.fromiter((len(b) == width for b in enc), dtype=bool, count=len(enc))
        return np.where(ok, rows, -1)

    @property
    def order(self) -> np.ndarray:
        if self._order is None:
            self._order = np.asarray(pc.sort_indices(self._column).to_numpy(), dtype=np.int64)
        return self._order

    def _key(self, row: int) -> bytes:
        return self._data[self._offsets[row]:self._offsets[row + 1]].tobytes()

    def get(self, node_id: str, default: int | None = None) -> int | None:
        order, want = self.order, node_id.encode("utf-8")
        lo, hi = 0, self._n
        while lo < hi:
            mid = (lo + hi) // 2
            if self._key(int(order[mid])) < want:
                lo = mid + 1
            else:
                hi = mid
        if lo < self._n and self._key(int(order[lo])) == want:
            return int(order[lo])
        return default

    def __getitem__(self, node_id: str) -> int:
        row = self.get(node_id)
        if row is None:
            raise KeyError(node_id)
        return row

    def __contains__(self, node_id: object) -> bool:
        return isinstance(node_id, str) and self.get(node_id) is not None

    def __len__(self) -> int:
        return self._n

    def rows(self, node_ids: Sequence[str] | pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Rows of many ids at once (-1 where absent): one hash join against the column (for
        the tree's edges; a handful of ids go through :meth:`get`)."""
        ids = node_ids if isinstance(node_ids, (pa.Array, pa.ChunkedArray)) else pa.array(list(node_ids), pa.string())
        idx = pc.index_in(ids, value_set=self._column.combine_chunks() if self._column.num_chunks != 1 else self._column.chunk(0))
        return np.asarray(idx.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)


class VectorStore:
    """Read-only access to a snapshot's vectors. ``open`` is cheap; search is exact or ANN.

    Below ``ann_min_rows`` rows (``query.ann_min_rows``) every row is held in memory (a matrix, the
    texts, ids and documents as lists) and searched exactly. From ``ann_min_rows`` on the store is
    *bounded*: nothing per row is copied into Python objects; ``node_ids``, ``texts`` and
    ``doc_ids`` read single rows of the memory-mapped file (:class:`ArrowColumn`), ``matrix``
    copies only the rows asked for (:class:`MappedMatrix`), ``row_of`` is a binary search
    (:class:`SortedIds`), and :meth:`search` asks LanceDB's ANN index for the candidates.
    """

    def __init__(self, directory: Path, table: pa.Table, lance_table: object | None, *, bounded: bool = False,
                 file: PositionedFile | None = None) -> None:
        self.directory = directory
        self._file = file if bounded else None
        self.bounded = bounded
        self.levels = np.asarray(table.column("level").to_numpy(), dtype=np.int32)
        self.n_tokens = np.asarray(table.column("n_tokens").to_numpy(), dtype=np.int64)
        self._lance = lance_table
        self.node_ids: Sequence[str]
        self.texts: Sequence[str]
        self.doc_ids: Sequence[tuple[str, ...]]
        self.matrix: Any
        self.row_of: Any
        self._doc_column = table.column("doc_ids")
        self._id_column = table.column("node_id") if bounded else None
        if bounded:
            order = table.column("id_order").to_numpy() if "id_order" in table.column_names else None
            f = self._file
            self.node_ids = ArrowColumn(table.column("node_id"), file=f)
            self.texts = ArrowColumn(table.column("text"), file=f)
            self.doc_ids = ArrowColumn(table.column("doc_ids"), as_tuple=True, file=f)
            self.matrix = MappedMatrix(table.column("vector"), file=f)
            self.row_of = SortedIds(table.column("node_id"), None if order is None else np.asarray(order, dtype=np.int64))
            return
        self.node_ids = table.column("node_id").to_pylist()
        self.doc_ids = [tuple(d) for d in table.column("doc_ids").to_pylist()]
        self.texts = table.column("text").to_pylist()
        # An owned, C-contiguous copy: a matrix-vector product over the Arrow-backed
        # (read-only, foreign) buffer measured ~10x slower here (3.1 ms vs 0.34 ms at 2k x 384).
        self.matrix = np.array(arrow_to_vectors(table.column("vector")), dtype=np.float32, copy=True, order="C")
        self.row_of = {nid: i for i, nid in enumerate(self.node_ids)}

    @classmethod
    def open(cls, directory: Path, *, ann_min_rows: int | None = None) -> "VectorStore":
        """Read the rows from ``nodes.arrow`` (memory-mapped, no lancedb import) when present;
        lancedb opens the table only for an ANN-sized table (``ann_min_rows`` rows or more;
        default :data:`ANN_MIN_ROWS`) or an older snapshot without the file."""
        directory = Path(directory)
        threshold = ANN_MIN_ROWS if ann_min_rows is None else int(ann_min_rows)
        arrow = directory / ARROW_FILE
        if arrow.is_file():
            # not closed explicitly: zero-copy columns keep the mapping alive
            mapped = pa.memory_map(str(arrow), "r")
            base = mapped_base(mapped)
            table = pa.ipc.open_file(mapped).read_all()
            big = table.num_rows >= threshold
            # bounded: the rows a query reads are copied by positioned reads, never through the mapping
            file = PositionedFile(arrow, base=base) if big else None
            return cls(directory, table, _open_lance(directory) if big else None, bounded=big, file=file)
        lt = _open_lance(directory)
        table = lt.to_arrow()  # type: ignore[attr-defined]
        big = table.num_rows >= threshold
        return cls(directory, table, lt if big else None)

    def __len__(self) -> int:
        return len(self.node_ids)

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1]) if self.matrix.ndim == 2 else 0

    def node_id_column(self) -> pa.ChunkedArray:
        """The node ids as an Arrow column (memory-mapped in a bounded store)."""
        if self._id_column is not None:
            return self._id_column
        return pa.chunked_array([pa.array(list(self.node_ids), pa.string())])

    def rows_of(self, node_ids: Sequence[str]) -> np.ndarray:
        """Rows of ``node_ids`` (-1 for an id not in the table)."""
        if self.bounded:
            return self.row_of.lookup(node_ids)  # type: ignore[no-any-return]
        get = self.row_of.get
        return np.fromiter((-1 if (r := get(x)) is None else r for x in node_ids), dtype=np.int64, count=len(node_ids))

    def mask(self, *, levels: Sequence[int] | None = None, doc_ids: Sequence[str] | None = None) -> np.ndarray | None:
        """Boolean row mask for the filters, or None when there is no filter."""
        if levels is None and doc_ids is None:
            return None
        m = np.ones(len(self.levels), dtype=bool)
        if levels is not None:
            m &= np.isin(self.levels, np.asarray(list(levels), dtype=np.int32))
        if doc_ids is not None:
            if self.bounded:  # columnar: no Python tuple per row
                m &= _rows_with_any(self._doc_column, list(doc_ids), len(self.levels))
            else:
                wanted = set(doc_ids)
                m &= np.fromiter((bool(wanted.intersection(d)) for d in self.doc_ids), dtype=bool, count=len(self.doc_ids))
        return m

    def scores(self, vector: np.ndarray) -> np.ndarray:
        """Cosine similarity of ``vector`` to every row (vectors are normalised)."""
        return self.matrix @ np.asarray(vector, dtype=np.float32)  # type: ignore[no-any-return]

    def search(
        self,
        vector: np.ndarray,
        *,
        k: int,
        levels: Sequence[int] | None = None,
        doc_ids: Sequence[str] | None = None,
        rows: np.ndarray | None = None,
    ) -> list[tuple[int, float]]:
        """Top-``k`` rows by cosine, best first, as (row index, score). ``rows`` restricts the candidates."""
        if self._lance is not None and rows is None:
            return self._ann_search(vector, k=k, levels=levels, doc_ids=doc_ids)
        if rows is not None:
            cand = np.asarray(rows, dtype=np.int64)
            m = self.mask(levels=levels, doc_ids=doc_ids)
            if m is not None:
                cand = cand[m[cand]]
            if cand.size == 0:
                return []
            s = self.matrix[cand] @ np.asarray(vector, dtype=np.float32)
        else:
            m = self.mask(levels=levels, doc_ids=doc_ids)
            cand = np.flatnonzero(m) if m is not None else np.arange(len(self.node_ids))
            if cand.size == 0:
                return []
            s = self.scores(vector) if m is None else self.matrix[cand] @ np.asarray(vector, dtype=np.float32)
        k = min(k, cand.size)
        top = np.argpartition(-s, k - 1)[:k]
        # stable, deterministic order: score desc, then row index
        order = sorted(top.tolist(), key=lambda i: (-float(s[i]), int(cand[i])))
        return [(int(cand[i]), float(s[i])) for i in order]

    def level_share(self, levels: Sequence[int]) -> float:
        """The share of rows at ``levels`` (cached per level set)."""
        key = tuple(sorted(int(x) for x in levels))
        shares = self.__dict__.setdefault("_shares", {})
        if key not in shares:
            shares[key] = float(np.isin(self.levels, np.asarray(key, dtype=np.int32)).mean()) if len(self.levels) else 0.0
        return shares[key]  # type: ignore[no-any-return]

    def _ann_search(self, vector, *, k, levels, doc_ids) -> list[tuple[int, float]]:
        """The best ``k`` by the ANN index: its best ``max(refine x min(k, 10), 2k)`` candidates by
        the quantized distance, re-ranked here by the exact cosines of the memory-mapped vectors
        (LanceDB's own ``refine_factor`` reads each candidate's vector from its data files: slower
        here). A levels-only filter that keeps most rows (leaves: ~90%) is applied to the
        candidates instead of as a LanceDB prefilter (a scan of the filter column per query);
        a document filter, or levels keeping under half the rows, is a prefilter."""
        want = max(ANN_REFINE_FACTOR * min(k, 10), 2 * k)
        q = self._lance_table().search(np.asarray(vector, dtype=np.float32)).metric("cosine").nprobes(ANN_NPROBES)
        post = levels is not None and doc_ids is None and self.level_share(levels) >= 0.5
        clauses = []
        if levels is not None and not post:
            clauses.append(f"level IN ({', '.join(str(int(x)) for x in levels)})")
        if doc_ids is not None:
            quoted = ", ".join("'" + d.replace("'", "''") + "'" for d in doc_ids)
            clauses.append(f"array_has_any(doc_ids, [{quoted}])")
        if clauses:
            q = q.where(" AND ".join(clauses), prefilter=True)
        fetch = int(np.ceil(want / self.level_share(levels) * 1.1)) if post else want
        out = q.limit(fetch).select(["node_id"]).to_arrow()
        rows = self.rows_of(out.column("node_id").to_pylist())
        rows = rows[rows >= 0]
        if post:
            rows = rows[np.isin(self.levels[rows], np.asarray(list(levels), dtype=np.int32))]
            if rows.size < min(k, want) and out.num_rows >= fetch:  # the levels were rarer near this query: ask LanceDB to filter
                return self._ann_search_prefiltered(vector, k=k, levels=levels)
        if rows.size == 0:
            return []
        s = self.matrix[rows] @ np.asarray(vector, dtype=np.float32)
        order = np.lexsort((rows, -s))[:k]
        return [(int(rows[i]), float(s[i])) for i in order]

    def _lance_table(self) -> Any:
        """The LanceDB table an ANN search goes through (open only at ``query.ann_min_rows`` rows or more)."""
        if self._lance is None:
            raise RuntimeError("no LanceDB table is open: this store is below query.ann_min_rows and searches exactly")
        return self._lance

    def _ann_search_prefiltered(self, vector, *, k, levels) -> list[tuple[int, float]]:
        want = max(ANN_REFINE_FACTOR * min(k, 10), 2 * k)
        out = (self._lance_table().search(np.asarray(vector, dtype=np.float32)).metric("cosine").nprobes(ANN_NPROBES)
               .where(f"level IN ({', '.join(str(int(x)) for x in levels)})", prefilter=True).limit(want).select(["node_id"]).to_arrow())
        rows = self.rows_of(out.column("node_id").to_pylist())
        rows = rows[rows >= 0]
        if rows.size == 0:
            return []
        s = self.matrix[rows] @ np.asarray(vector, dtype=np.float32)
        order = np.lexsort((rows, -s))[:k]
        return [(int(rows[i]), float(s[i])) for i in order]


def _rows_with_any(column: pa.ChunkedArray, wanted: list[str], n: int) -> np.ndarray:
    """Rows of a ``list<string>`` column holding any of ``wanted`` (columnar, chunk by chunk)."""
    out = np.zeros(n, dtype=bool)
    value_set = pa.array(wanted, pa.string())
    at = 0
    for chunk in column.chunks:
        flat = pc.list_flatten(chunk)
        if len(flat):
            hit = np.asarray(pc.is_in(flat, value_set=value_set.cast(flat.type)).to_numpy(zero_copy_only=False), dtype=bool)
            parents = np.asarray(pc.list_parent_indices(chunk).to_numpy(), dtype=np.int64)
            out[at + parents[hit]] = True
        at += len(chunk)
    return out


def _open_lance(directory: Path) -> object:
    from arborag.storage.lancedb_import import lancedb

    return _schema_read_once(lancedb.connect(str(directory)).open_table(TABLE_NAME))


_SCHEMA_ONCE: dict[type, type] = {}


def _schema_read_once(table: Any) -> Any:
    """``table`` with its ``schema`` read from the dataset once: LanceDB's ``schema`` property asks
    the dataset again on every call, and ``search`` calls it on every query (2-7 ms at 10^6 rows
    on the loaded box, through LanceDB's event-loop thread); a snapshot's table never changes."""
    cls = type(table)
    if not isinstance(getattr(cls, "schema", None), property):
        return table
    sub = _SCHEMA_ONCE.get(cls)
    if sub is None:
        def schema(self: Any) -> Any:
            got = self.__dict__.get("_schema_once")
            if got is None:
                got = self.__dict__["_schema_once"] = cls.schema.fget(self)  # type: ignore[attr-defined]
            return got

        sub = _SCHEMA_ONCE[cls] = type(cls.__name__, (cls,), {"schema": property(schema), "__module__": cls.__module__})
    table.__class__ = sub
    return table
