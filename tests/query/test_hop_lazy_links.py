"""``hop`` on a bounded index reads its links lazily: the links of the candidates, by vector row,
from a file in the corpus cache (positioned reads) — never the graph of every link — and scores the
candidates as the full graph does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers.query import HOP_LINK_ROWS, HOP_SPEC, FakeQueryEmbedder, links_table, publish_snapshot

from arborag.config import SparseConfig, load_config
from arborag.query import hop, open_index
from arborag.storage.corpus import Corpus
from arborag.storage.link_rows import LinkRows, link_rows_path, write_link_rows
from arborag.storage.tables import write_table

@pytest.fixture()
def corpus(tmp_path: Path) -> Corpus:
    corpus = Corpus(tmp_path / "c")
    corpus.ensure()
    snap = publish_snapshot(corpus, "snap-hop", spec=HOP_SPEC, edges_spec=[], sparse=SparseConfig())
    write_table("links", links_table(HOP_LINK_ROWS), snap / "links.parquet")
    return corpus


def _open(corpus: Corpus, ann_min_rows: int):
    return open_index(corpus.root, embed_query=FakeQueryEmbedder(), config=load_config(overrides={"query": {"ann_min_rows": ann_min_rows}}))


def test_bounded_hop_reads_the_links_lazily_and_answers_as_the_full_graph(corpus: Corpus) -> None:
    exact, bounded = _open(corpus, 10**6), _open(corpus, 1)
    try:
        assert bounded.vectors.bounded and not exact.vectors.bounded
        want = exact.search("alpha", mode="hop", budget=120, seeds=2, hop_weight=2.0)
        got = bounded.search("alpha", mode="hop", budget=120, seeds=2, hop_weight=2.0)
        assert [h.doc_ids[0] for h in got][2] == "d2"  # the title link was followed
        assert [h.node_id for h in got] == [h.node_id for h in want]
        assert [h.score for h in got] == pytest.approx([h.score for h in want])
        assert bounded not in hop._GRAPHS  # no graph of every link was built ...
        assert exact in hop._GRAPHS
        path = link_rows_path(corpus.cache_dir, bounded.snapshot)
        assert path.is_file() and isinstance(hop._LINK_ROWS[bounded], LinkRows)  # ... the link rows were read instead
        assert not any(p.name.startswith("link") and p.suffix == ".arrow" for p in bounded.snapshot_dir.rglob("*"))  # snapshot untouched
    finally:
        exact.close()
        bounded.close()


def test_candidate_scores_equal_the_full_graph_at_the_candidates(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    n, n_ent = 400, 60
    node_ids = [f"n{i:04d}" for i in range(n)]
    doc_of = [[f"doc{i // 8}"] for i in range(n)]
    rows = []
    for i in range(n):
        for e in rng.choice(n_ent, size=int(rng.integers(0, 5)), replace=False).tolist():
            rows.append((node_ids[i], doc_of[i][0], f"entity {e}", "title" if rng.random() < 0.3 else "mention", float(rng.uniform(0.5, 3))))
    rows.sort()
    write_table("links", links_table(rows), tmp_path / "links.parquet")
    graph_all = hop.load_link_graph(tmp_path / "links.parquet", node_ids, doc_of)
    graph_titled = hop.load_link_graph(tmp_path / "links.parquet", node_ids, doc_of, titled_only=True)
    out = write_link_rows(tmp_path / "links.parquet", pa.chunked_array([pa.array(node_ids)]), tmp_path / "cache" / "s.npy")
    lazy = LinkRows(out)

    class FakeIndex:  # the one attribute candidate_hop_scores reads: the rows' documents
        class vectors:
            doc_ids = [tuple(d) for d in doc_of]

    for trial in range(5):
        cand = np.sort(rng.choice(n, size=80, replace=False)).astype(np.int64)
        scores = rng.standard_normal(cand.size)
        for kinds, graph in (("title", graph_titled), ("all", graph_all)):
            want = hop.hop_scores(graph, cand, scores, seeds=5, kinds=kinds)
            got = hop.candidate_hop_scores(lazy, FakeIndex, cand, scores, seeds=5, kinds=kinds)  # type: ignore[arg-type]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
            assert want.max() > 0 or trial  # the walk reaches something


def test_links_of_rows_are_their_rows_in_the_parquet(tmp_path: Path) -> None:
    node_ids = ["x", "y", "z"]
    write_table("links", links_table([("x", "d", "e1", "title", 1.0), ("x", "d", "e2", "mention", 2.0), ("z", "d", "e1", "title", 1.0),
                                 ("gone", "d", "e1", "title", 1.0)]), tmp_path / "links.parquet")
    lazy = LinkRows(write_link_rows(tmp_path / "links.parquet", pa.chunked_array([pa.array(node_ids)]), tmp_path / "l.npy"))
    assert lazy.n_edges == 3  # a link of a node the table lacks is dropped
    got = lazy.links_of(np.array([2, 1, 0]))
    assert got.pos.tolist() == [0, 2, 2]  # z's one link, y none, x's two
    assert sorted(got.weight[1:].tolist()) == [1.0, 2.0] and got.title[0] and got.title.tolist() == [True, True, False]
    assert got.ent[0] == got.ent[1] != got.ent[2]  # z and x share e1


def test_a_file_that_is_not_link_rows_is_refused_with_what_to_do(tmp_path: Path) -> None:
    np.save(tmp_path / "s.npy", np.zeros(3, dtype=np.float64))
    np.save(tmp_path / "s.ptr.npy", np.zeros(4, dtype=np.int64))
    with pytest.raises(ValueError, match="delete it"):
        LinkRows(tmp_path / "s.npy")
