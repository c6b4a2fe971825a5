"""A bounded vector store and the link rows read the rows a query needs by positioned reads:
the values are those written, and reading many scattered rows does not grow the process's
resident pages of the files (a memory-mapped read keeps every page it touched resident)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import arborag.storage.vectors as sv
from arborag.storage.link_rows import LinkRows, write_link_rows
from arborag.storage.positioned import PositionedFile
from arborag.storage.tables import write_table

pytestmark = pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads the resident pages from /proc/self/smaps")


def _resident_kib(path: Path) -> int:
    """KiB of ``path``'s pages resident in this process (every mapping of it, /proc/self/smaps)."""
    target, total, inside = str(Path(path).resolve()), 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
            inside = len(head) >= 6 and head[5] == target
        elif inside and line.startswith("Rss:"):
            total += int(head[1])
    return total


def _store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int = 6000, dim: int = 64) -> tuple[sv.VectorStore, np.ndarray, pa.Table]:
    monkeypatch.setattr(sv, "ANN_MIN_ROWS", 1000)
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    nodes = pa.table({
        "node_id": [f"n{i:05d}" for i in range(n)],
        "level": pa.array([i % 3 for i in range(n)], pa.int32()),
        "doc_ids": [[f"d{i % 7}", f"é{i}"][: i % 3] for i in range(n)],  # empty, one and two documents
        "n_tokens": pa.array([5] * n, pa.int32()),
        "text": [f"text {i} " + "ü" * (i % 50) for i in range(n)],
    })
    sv.write_vectors(tmp_path / "v", nodes, vectors)
    store = sv.VectorStore.open(tmp_path / "v")
    assert store.bounded
    return store, vectors, nodes


def test_bounded_rows_are_read_by_positioned_reads_without_resident_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, vectors, nodes = _store(tmp_path, monkeypatch)
    arrow = tmp_path / "v" / sv.ARROW_FILE
    before = _resident_kib(arrow)
    rows = np.random.default_rng(1).permutation(len(vectors))[:3000]
    np.testing.assert_array_equal(store.matrix[rows], vectors[rows])
    texts = nodes.column("text").to_pylist()
    docs = nodes.column("doc_ids").to_pylist()
    ids = nodes.column("node_id").to_pylist()
    for r in rows.tolist():
        assert store.texts[r] == texts[r] and store.doc_ids[r] == tuple(docs[r]) and store.node_ids[r] == ids[r]
    q = vectors[11]
    np.testing.assert_allclose(store.matrix @ q, vectors @ q, rtol=1e-5, atol=1e-6)  # a full scan, in positioned slices
    grown = _resident_kib(arrow) - before
    size_kib = arrow.stat().st_size // 1024
    assert grown < 64, f"{grown} KiB of the {size_kib} KiB file became resident"
    with pytest.raises(IndexError):
        store.matrix[[len(vectors)]]


def test_mapped_reads_would_keep_the_pages_resident(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The measure above sees resident pages: the same rows read through the mapping grow them."""
    store, vectors, _ = _store(tmp_path, monkeypatch)
    arrow = tmp_path / "v" / sv.ARROW_FILE
    mapped = sv.MappedMatrix(pa.ipc.open_file(pa.memory_map(str(arrow), "r")).read_all().column("vector"))
    before = _resident_kib(arrow)
    rows = np.random.default_rng(1).permutation(len(vectors))[:3000]
    np.testing.assert_array_equal(mapped[rows], vectors[rows])
    assert _resident_kib(arrow) - before > 256


def test_link_rows_are_not_mapped(tmp_path: Path) -> None:
    from helpers.query import links_table

    n = 2000
    node_ids = [f"n{i:05d}" for i in range(n)]
    rng = np.random.default_rng(2)
    links = sorted((node_ids[i], "d", f"e{int(e)}", "title" if e % 2 else "mention", 1.0 + float(e))
                   for i in range(n) for e in rng.choice(300, size=4, replace=False))
    write_table("links", links_table(links), tmp_path / "links.parquet")
    path = write_link_rows(tmp_path / "links.parquet", pa.chunked_array([pa.array(node_ids)]), tmp_path / "cache" / "s.npy")
    lazy = LinkRows(path)
    got = lazy.links_of(np.arange(n))
    assert got.pos.size == 4 * n and np.array_equal(np.bincount(got.pos, minlength=n), np.full(n, 4))
    want = sorted(w for (_, _, _, _, w) in links)
    assert sorted(got.weight.tolist()) == pytest.approx(want)
    assert _resident_kib(path) == 0  # read, never mapped
    lazy.close()


@pytest.mark.parametrize("preadv", [True, False])
def test_a_short_read_says_the_file_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, preadv: bool) -> None:
    import arborag.storage.positioned as positioned

    if not preadv:  # a platform without os.preadv
        monkeypatch.setattr(positioned, "_PREADV", None)
    p = tmp_path / "f.bin"
    p.write_bytes(b"0123456789")
    f = PositionedFile(p)
    assert f.read(2, 3) == b"234" and bytes(f.read_into([0, 8], [2, 2])) == b"0189"
    with pytest.raises(OSError, match="reopen the index"):
        f.read_into([8], [5])
    with pytest.raises(OSError, match="reopen the index"):
        f.read(8, 5)
    f.close()
    with pytest.raises(ValueError, match="closed"):
        f.read(0, 1)


def test_the_lance_schema_is_read_once_per_open_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, vectors, _ = _store(tmp_path, monkeypatch, n=3000, dim=16)
    table = store._lance_table()
    base = type(table).__mro__[1]
    calls = []
    real = base.schema.fget

    def counting(self):  # the dataset's schema read, counted
        calls.append(1)
        return real(self)

    monkeypatch.setattr(base, "schema", property(counting))
    table.__dict__.pop("_schema_once", None)
    for r in (1, 2, 3):
        assert store.search(vectors[r], k=3, levels=[0, 1, 2])[0][0] == r
    assert len(calls) == 1 and table.schema.names[0] == "node_id"
