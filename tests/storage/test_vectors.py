"""arborag.storage.vectors: the LanceDB vector table of a snapshot, written and searched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers.query import NODES_SPEC, nodes_table

from arborag.errors import SchemaError
from arborag.storage.vectors import VectorStore, write_vectors


def _vectors() -> np.ndarray:
    return np.stack([v for _, _, v, _, _ in NODES_SPEC])


def test_write_then_open_keeps_rows_and_vectors(tmp_path: Path) -> None:
    stats = write_vectors(tmp_path / "v.lance", nodes_table(), _vectors())
    assert stats == {"rows": len(NODES_SPEC), "dim": 4, "ann_index": False}
    store = VectorStore.open(tmp_path / "v.lance")
    assert store.node_ids == [n[0] for n in NODES_SPEC] and store.dim == 4 and len(store) == len(NODES_SPEC)
    np.testing.assert_array_equal(store.matrix, _vectors())
    assert store.matrix.flags.c_contiguous and store.matrix.flags.writeable  # an owned copy (fast matmul)
    best = store.search(_vectors()[0], k=3)
    assert [store.node_ids[r] for r, _ in best] == ["a", "s1", "b"]
    assert [store.node_ids[r] for r, _ in store.search(_vectors()[0], k=9, levels=[1])] == ["s1", "s2"]


def test_rewrite_replaces_the_table(tmp_path: Path) -> None:
    write_vectors(tmp_path / "v.lance", nodes_table(), _vectors())
    write_vectors(tmp_path / "v.lance", nodes_table(NODES_SPEC[:2]), _vectors()[:2])
    assert VectorStore.open(tmp_path / "v.lance").node_ids == ["a", "b"]


def test_misaligned_vectors_are_a_schema_error(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="do not align"):
        write_vectors(tmp_path / "v.lance", nodes_table(), _vectors()[:3])
    with pytest.raises(SchemaError, match="do not align"):
        write_vectors(tmp_path / "v.lance", nodes_table(), _vectors().ravel())
