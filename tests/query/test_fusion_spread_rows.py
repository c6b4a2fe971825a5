"""Fusing a few candidates spread over a huge row range sorts them instead of allocating a
presence mask over the range (a few hundred rows of 10^6 were a 1M-entry mask and cumsum per
query), with the same fused scores as the same candidates at small rows."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from arborag.query.fusion import fuse


@pytest.mark.parametrize("method", ["zscore", "minmax", "rrf"])
def test_fuse_of_rows_far_apart_equals_the_same_rows_close_together(method: str) -> None:
    far = 20_000_000  # a mask over this range: 20 MB, and its cumsum 160 MB
    small = {7: 7, 12: 12, 100: far, 105: far + 5}  # order-preserving
    dense = (np.array([100, 7, 12]), np.array([0.9, 0.5, 0.1]))
    sparse = (np.array([12, 105]), np.array([3.0, 1.0]))
    kw = {"method": method, "depth": 10, "k": 60, "absent": [None, 0.0] if method != "rrf" else None}
    want_rows, want = fuse([dense, sparse], **kw)  # type: ignore[arg-type]
    spread = [(np.array([small[int(r)] for r in rows], dtype=np.int64), s) for rows, s in (dense, sparse)]
    tracemalloc.start()
    try:
        rows, got = fuse(spread, **kw)  # type: ignore[arg-type]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8_000_000, f"{peak} bytes for 5 candidates"
    assert rows.tolist() == [small[int(r)] for r in want_rows]
    np.testing.assert_allclose(got, want)
