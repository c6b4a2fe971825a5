"""The bounded vector store (``query.ann_min_rows`` rows or more): IVF_PQ candidates on clustered
data agree with exact search, and opening it copies nothing per row into memory.

The threshold is lowered so a small table takes the path a million-leaf table takes.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import arborag.storage.vectors as sv

N, DIM, CLUSTERS = 6000, 48, 40


def _nodes(n: int) -> pa.Table:
    return pa.table({
        "node_id": [f"node-{(i * 7919) % n:05d}" for i in range(n)],  # not in row order: row_of must search
        "level": pa.array([0 if i % 10 else 1 for i in range(n)], pa.int32()),
        "doc_ids": [[f"d{i // 50}"] + ([f"x{i % 3}"] if i % 2 else []) for i in range(n)],
        "n_tokens": pa.array([5 + i % 7 for i in range(n)], pa.int32()),
        "text": [f"text {i}" for i in range(n)],
    })


def _clustered(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((CLUSTERS, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    x = centres[rng.integers(0, CLUSTERS, n)] + 0.12 * rng.standard_normal((n, DIM)).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Table, np.ndarray]:
    d = tmp_path_factory.mktemp("ann") / "v"
    nodes, vectors = _nodes(N), _clustered(N)
    stats = sv.write_vectors(d, nodes, vectors, ann_min_rows=1000)
    assert stats["ann_index"] is True
    return d, nodes, vectors


def test_ann_top_hits_match_exact_search_on_clustered_data(table) -> None:
    d, _, vectors = table
    bounded = sv.VectorStore.open(d, ann_min_rows=1000)
    exact = sv.VectorStore.open(d, ann_min_rows=10**9)
    assert bounded.bounded and not exact.bounded and exact._lance is None
    rng = np.random.default_rng(1)
    recall = []
    for i in rng.integers(0, N, 40).tolist():
        q = vectors[i] + 0.05 * rng.standard_normal(DIM).astype(np.float32)
        q /= np.linalg.norm(q)
        got = bounded.search(q, k=10, levels=[0])
        want = exact.search(q, k=10, levels=[0])
        assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)
        for row, score in got:  # the scores are the exact cosines of the rows found
            assert score == pytest.approx(float(vectors[row] @ q), abs=1e-5)
            assert bounded.levels[row] == 0
        recall.append(len({r for r, _ in got} & {r for r, _ in want}) / 10)
    assert np.mean(recall) >= 0.98, np.mean(recall)


def test_opening_above_the_threshold_materializes_no_row(table) -> None:
    d, nodes, vectors = table
    sv.VectorStore.open(d, ann_min_rows=1000)  # imports and LanceDB's own first-open state, outside the measure

    def allocated_by_open(threshold: int) -> int:
        arrow_before = pa.total_allocated_bytes()  # Arrow's pool: a combined or cast column lands here
        tracemalloc.start()  # Python and numpy allocations
        try:
            start, _ = tracemalloc.get_traced_memory()
            store = sv.VectorStore.open(d, ann_min_rows=threshold)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        allocated_by_open.store = store  # type: ignore[attr-defined]
        return peak - start + max(0, pa.total_allocated_bytes() - arrow_before)

    exact_peak = allocated_by_open(10**9)
    bounded_peak = allocated_by_open(1000)
    bounded = allocated_by_open.store  # type: ignore[attr-defined]
    assert exact_peak >= vectors.nbytes  # the in-memory store copies the matrix ...
    assert bounded_peak < vectors.nbytes / 4, (bounded_peak, vectors.nbytes)  # ... the bounded one does not
    assert not isinstance(bounded.matrix, np.ndarray)
    assert not isinstance(bounded.texts, list) and not isinstance(bounded.node_ids, list) and not isinstance(bounded.doc_ids, list)
    assert not isinstance(bounded.row_of, dict)


def test_bounded_rows_read_the_same_values_as_the_in_memory_store(table) -> None:
    d, nodes, vectors = table
    b = sv.VectorStore.open(d, ann_min_rows=1000)
    ids = nodes.column("node_id").to_pylist()
    for row in (0, 1, 17, N - 1):
        assert b.node_ids[row] == ids[row]
        assert b.row_of[ids[row]] == row and ids[row] in b.row_of
        assert b.texts[row] == f"text {row}"
        assert b.doc_ids[row] == tuple(nodes.column("doc_ids")[row].as_py())
    assert "node-99999" not in b.row_of and b.row_of.get("node-99999") is None
    assert b.rows_of([ids[5], "absent", ids[3]]).tolist() == [5, -1, 3]
    assert b.row_of.rows(pa.array([ids[9], "absent"])).tolist() == [9, -1]
    rows = np.array([3, 999, 42])
    np.testing.assert_allclose(b.matrix[rows], vectors[rows])
    np.testing.assert_allclose(b.matrix @ vectors[0], vectors @ vectors[0], rtol=1e-5, atol=1e-6)
    exact = sv.VectorStore.open(d, ann_min_rows=10**9)
    for f in ({"doc_ids": ["x1", "d3"]}, {"levels": [1], "doc_ids": ["d7"]}):
        np.testing.assert_array_equal(b.mask(**f), exact.mask(**f))  # type: ignore[arg-type]


def test_the_ann_sized_table_records_its_rows_sorted_by_id(table) -> None:
    d, nodes, _ = table
    t = pa.ipc.open_file(pa.memory_map(str(d / sv.ARROW_FILE), "r")).read_all()
    order = t.column("id_order").to_numpy()
    ids = np.asarray(nodes.column("node_id").to_pylist())
    assert (ids[order][:-1] <= ids[order][1:]).all()


def test_a_table_written_without_its_id_order_is_searched_by_sorting_once(tmp_path: Path) -> None:
    n = 300
    nodes, vectors = _nodes(n), _clustered(n)
    sv.write_vectors(tmp_path / "v", nodes, vectors)  # below the write threshold: no id_order column, no index
    store = sv.VectorStore.open(tmp_path / "v", ann_min_rows=100)
    assert store.bounded
    ids = nodes.column("node_id").to_pylist()
    assert [store.row_of[x] for x in ids[:20]] == list(range(20))
    hits = store.search(vectors[4], k=3)  # no ANN index: LanceDB scans the table, still bounded here
    assert hits[0][0] == 4 and hits[0][1] == pytest.approx(1.0, abs=1e-5)


def test_rare_levels_and_documents_filter_inside_the_index(table) -> None:
    d, nodes, vectors = table
    bounded = sv.VectorStore.open(d, ann_min_rows=1000)
    exact = sv.VectorStore.open(d, ann_min_rows=10**9)
    q = vectors[10]  # row 10 is a level-1 node (every tenth)
    got = bounded.search(q, k=5, levels=[1])  # 10% of the rows: a LanceDB prefilter
    assert got[0][0] == 10 and all(bounded.levels[r] == 1 for r, _ in got)
    assert [r for r, _ in got] == [r for r, _ in exact.search(q, k=5, levels=[1])]
    docs = bounded.search(q, k=5, doc_ids=["d7"])
    assert docs and all("d7" in bounded.doc_ids[r] for r, _ in docs)


def test_ids_of_different_widths_are_found_one_by_one(tmp_path: Path) -> None:
    n = 300
    nodes = _nodes(n).set_column(0, "node_id", pa.array([f"id{i}" for i in range(n)]))  # 3 to 5 characters
    sv.write_vectors(tmp_path / "v", nodes, _clustered(n), ann_min_rows=100)
    store = sv.VectorStore.open(tmp_path / "v", ann_min_rows=100)
    assert store.row_of._fixed_keys() is None
    assert store.rows_of(["id7", "id123", "nope", "id299"]).tolist() == [7, 123, -1, 299]
