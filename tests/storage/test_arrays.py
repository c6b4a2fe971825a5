"""arborag.storage.arrays: the one numpy <-> Arrow vector converter."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from arborag.errors import SchemaError
from arborag.storage.arrays import arrow_to_vectors, vector_type, vectors_to_arrow


def test_round_trip_is_zero_copy_for_float32() -> None:
    m = np.random.default_rng(0).random((5, 4), dtype=np.float32)
    arr = vectors_to_arrow(m)
    assert arr.type == vector_type(4) and len(arr) == 5
    back = arrow_to_vectors(arr)
    assert back.dtype == np.float32 and back.shape == (5, 4)
    assert np.shares_memory(back, m)
    np.testing.assert_array_equal(back, m)


def test_slices_chunks_and_other_float_types() -> None:
    m = np.arange(12, dtype=np.float64).reshape(6, 2)
    arr = vectors_to_arrow(m)
    np.testing.assert_array_equal(arrow_to_vectors(arr.slice(2, 3)), m[2:5].astype(np.float32))
    np.testing.assert_array_equal(arrow_to_vectors(pa.chunked_array([arr, arr])), np.vstack([m, m]).astype(np.float32))
    assert arrow_to_vectors(pa.array([[1.0, 2.0], [3.0, 4.0]])).dtype == np.float32


def test_zero_rows() -> None:
    assert vectors_to_arrow(np.zeros((0, 384), np.float32)).type == vector_type(384)
    assert vectors_to_arrow(np.zeros((0,), np.float32)).type == vector_type(1)
    assert arrow_to_vectors(pa.chunked_array([], type=vector_type(3))).shape == (0, 3)


def test_bad_inputs_are_schema_errors() -> None:
    with pytest.raises(SchemaError):
        vectors_to_arrow(np.zeros(3))
    with pytest.raises(SchemaError):
        arrow_to_vectors(pa.array([[1.0, 2.0], [3.0]]))
    with pytest.raises(SchemaError):
        arrow_to_vectors(pa.array([1.0, 2.0]))
    with pytest.raises(SchemaError):
        arrow_to_vectors(pa.array([[1.0], None], type=vector_type(1)))
