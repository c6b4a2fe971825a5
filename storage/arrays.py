"""The one numpy <-> Arrow converter for vectors (``fixed_size_list<float32>[dim]``).

    vectors_to_arrow(np.ndarray (n, dim)) -> pa.FixedSizeListArray   (zero-copy for C-contiguous float32)
    arrow_to_vectors(pa.Array | pa.ChunkedArray) -> np.ndarray (n, dim) float32 (zero-copy for one chunk
                                                                  of float32 values without nulls)

Vectors never pass through Python lists. A matrix coming back zero-copy is read-only (it views
Arrow's buffer); take ``np.array(m, copy=True)`` when you need to write into it or want an
owned, C-contiguous block for heavy arithmetic.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from arborag.errors import SchemaError

__all__ = ["arrow_to_vectors", "vector_type", "vectors_to_arrow"]


def vector_type(dim: int) -> pa.FixedSizeListType:
    """The Arrow type of one vector column: ``fixed_size_list<item: float32>[dim]``."""
    return pa.list_(pa.float32(), int(dim))


def vectors_to_arrow(vectors: np.ndarray, *, dim: int | None = None) -> pa.FixedSizeListArray:
    """``(n, dim)`` numbers -> a fixed-size-list<float32> array of ``n`` rows.

    The float32, C-contiguous case wraps the numpy buffer without copying. Zero rows give an
    empty array of list size ``dim`` (default: ``vectors.shape[1]`` when it is > 0, else 1).
    Raises :class:`~arborag.errors.SchemaError` for anything that is not a 2-d matrix.
    """
    arr = np.asarray(vectors)
    if arr.ndim == 1 and arr.size == 0:
        arr = arr.reshape(0, 0)
    if arr.ndim != 2:
        raise SchemaError("vectors", f"expected a 2-d (rows, dim) matrix, got shape {arr.shape}")
    rows, width = arr.shape
    if dim is not None and rows and width != dim:
        raise SchemaError("vectors", f"vectors have {width} dimensions, expected {dim}")
    size = int(dim if dim is not None else (width or 1))
    if rows == 0:
        return pa.FixedSizeListArray.from_arrays(pa.array([], type=pa.float32()), size)
    flat = pa.array(np.ascontiguousarray(arr, dtype=np.float32).reshape(-1), type=pa.float32())
    return pa.FixedSizeListArray.from_arrays(flat, size)


def arrow_to_vectors(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A fixed-size-list (or equal-length list) column -> ``(n, dim)`` float32 matrix.

    One chunk of float32 values without nulls comes back without copying (read-only);
    several chunks are joined once, other float types are cast to float32 once.
    Raises :class:`~arborag.errors.SchemaError` for nulls, non-list columns or ragged lists.
    """
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if isinstance(arr, pa.ChunkedArray):  # pragma: no cover - combine_chunks of a nested type
        arr = pa.concat_arrays(arr.chunks)
    t = arr.type
    if not (pa.types.is_fixed_size_list(t) or pa.types.is_list(t) or pa.types.is_large_list(t)):
        raise SchemaError("vectors", f"a vector column must be a list of floats, got {t}")
    if arr.null_count:
        raise SchemaError("vectors", f"{arr.null_count} vectors are null")
    flat = arr.flatten()  # respects slice offsets; no copy for fixed-size lists
    if flat.null_count:
        raise SchemaError("vectors", f"{flat.null_count} vector components are null")
    n = len(arr)
    if pa.types.is_fixed_size_list(t):
        dim = t.list_size
    else:
        dim = len(flat) // n if n else 0
        if n and (dim * n != len(flat) or not pc.all(pc.equal(pc.list_value_length(arr), dim)).as_py()):
            raise SchemaError("vectors", "vectors have different lengths")
    values = flat.to_numpy(zero_copy_only=False)
    if values.dtype != np.float32:
        values = values.astype(np.float32)
    return values.reshape(n, dim)
