"""The ANN path of the vector store (used from ANN_MIN_ROWS rows on), at a small size.

The threshold is lowered for the test; the index is LanceDB's IVF_PQ as in a real build.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import arborag.storage.vectors as sv


def _nodes(n: int) -> pa.Table:
    return pa.table(
        {
            "node_id": [f"n{i}" for i in range(n)],
            "level": pa.array([0] * n, pa.int32()),
            "doc_ids": [["d"]] * n,
            "n_tokens": pa.array([5] * n, pa.int32()),
            "text": [f"text {i}" for i in range(n)],
        }
    )


def test_ann_index_is_built_and_scores_are_exact_cosines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sv, "ANN_MIN_ROWS", 1000)
    rng = np.random.default_rng(0)
    n, dim = 3000, 16
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    stats = sv.write_vectors(tmp_path / "v", _nodes(n), vectors)
    assert stats["ann_index"] is True
    store = sv.VectorStore.open(tmp_path / "v")
    assert store._lance is not None  # the ANN path is the one under test
    hits = store.search(vectors[7], k=5)
    assert hits[0][0] == 7 and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    for row, score in hits:
        assert score == pytest.approx(float(vectors[row] @ vectors[7]), abs=1e-5)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
