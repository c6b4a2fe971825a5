"""An index opened above ``query.ann_min_rows``: BM25 leaves without the engine's level filter
give the same list as the filtered search."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from helpers.query import FakeQueryEmbedder, publish_snapshot

from arborag.config import SparseConfig, load_config
from arborag.query import open_index
from arborag.storage.corpus import Corpus


class RecordingSparse:
    """Fake wrapper: the real sparse index, recording the levels each search asked for."""

    def __init__(self, real) -> None:
        self.real, self.levels = real, []

    def search(self, text, *, k, levels=None, doc_ids=None, lucene=False):
        self.levels.append(levels)
        return self.real.search(text, k=k, levels=levels, doc_ids=doc_ids, lucene=lucene)


def test_bounded_leaf_bm25_is_the_filtered_list_without_the_engine_filter(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "c")
    corpus.ensure()
    publish_snapshot(corpus, "snap-b", text="text of {} and of the tree", sparse=SparseConfig())  # 6 leaves, 3 summaries
    cfg = lambda t: load_config(overrides={"query": {"ann_min_rows": t}})  # noqa: E731
    exact = open_index(corpus.root, embed_query=FakeQueryEmbedder(), config=cfg(10**6))
    bounded = open_index(corpus.root, embed_query=FakeQueryEmbedder(), config=cfg(1))
    try:
        spy = RecordingSparse(bounded.sparse_index())
        bounded._sparse = spy
        for n in (2, 4, 6):
            want_rows, want = exact.sparse_ranked("text of the tree a", n=n, levels=[0])
            got_rows, got = bounded.sparse_ranked("text of the tree a", n=n, levels=[0])
            assert [exact.vectors.node_ids[r] for r in want_rows] == [bounded.vectors.node_ids[r] for r in got_rows]
            np.testing.assert_allclose(got, want)
            assert all(bounded.vectors.levels[r] == 0 for r in got_rows)
        assert spy.levels and spy.levels[0] is None  # the engine was asked without the level filter
        # rare levels (the summaries: a third of the rows) still filter inside the engine
        bounded.sparse_ranked("text of the tree", n=2, levels=[2])
        assert spy.levels[-1] == [2]
    finally:
        exact.close()
        bounded.close()
