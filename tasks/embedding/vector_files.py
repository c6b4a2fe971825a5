"""The staged vector files of a build: ``node_id`` + ``vector`` (fixed-size list) in Parquet.

Written by the embed, tree and tree-update stages and read by the tree, tree-update and vectors
stages (:mod:`arborag.storage.arrays` converts the vectors).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from arborag.storage.arrays import arrow_to_vectors, vectors_to_arrow
from arborag.storage.tables import atomic_write_parquet

__all__ = ["VECTOR_FILE_OPTIONS", "read_vectors_file", "write_vectors_file"]

#: Parquet options of a staged vector file: float vectors barely compress (2,982 × 384 floats:
#: 4.9 MB zstd, 5.3 MB plain) and the dictionary a writer tries on every column first costs more
#: than the write (43 ms with the defaults and zstd, 17 ms with these; the file lives until the
#: snapshot is published).
VECTOR_FILE_OPTIONS: dict[str, Any] = {"compression": "none", "use_dictionary": False, "write_statistics": False}


def write_vectors_file(path: Path, ids: pa.Array | pa.ChunkedArray, vectors: np.ndarray) -> None:
    """Stage ``vectors`` (rows aligned with ``ids``) as a Parquet file, atomically."""
    atomic_write_parquet(pa.table({"node_id": ids, "vector": vectors_to_arrow(vectors)}), path, **VECTOR_FILE_OPTIONS)


def read_vectors_file(path: Path) -> tuple[pa.ChunkedArray, np.ndarray]:
    """The ids and the ``(n, dim)`` float32 vectors of a staged vector file."""
    t = pq.read_table(path)
    return t.column("node_id"), arrow_to_vectors(t.column("vector"))
