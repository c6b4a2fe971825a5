"""One mode, one score scale: ``auto`` (and every mode fusing through ``Index.fused_scores``)
scores on the scale of its fusion whether BM25 finds the question's words or not."""

from __future__ import annotations

import pytest
from helpers.query import FakeQueryEmbedder, publish_snapshot

from arborag.config import SparseConfig
from arborag.query import open_index
from arborag.storage.corpus import Corpus


@pytest.fixture()
def index(tmp_path):
    corpus = Corpus(tmp_path / "c").ensure()
    publish_snapshot(corpus, "s1", sparse=SparseConfig())  # texts "text of a" ...: no node holds the word "alpha"
    ix = open_index(corpus.root, embed_query=FakeQueryEmbedder())
    yield ix
    ix.close()


def test_rrf_without_bm25_hits_scores_reciprocal_ranks_like_the_dense_path(index) -> None:
    rows, _ = index.sparse_ranked("alpha", n=10)
    assert rows.size == 0  # the premise: BM25 finds nothing
    k = index.config.query.rrf_k
    no_hits = index.search("alpha", mode="auto", fusion="rrf", budget=None, k=6)
    dense_only = index.search("alpha", mode="auto", fusion="rrf", sparse=False, budget=None, k=6)
    assert [(h.node_id, h.score) for h in no_hits] == [(h.node_id, h.score) for h in dense_only]
    assert [h.score for h in no_hits] == pytest.approx([1.0 / (k + r) for r in range(1, 7)])


def test_rrf_with_bm25_hits_stays_on_the_same_scale(index) -> None:
    k = index.config.query.rrf_k
    hits = index.search("text", mode="auto", fusion="rrf", budget=None, k=6, vector=FakeQueryEmbedder.table["alpha"])
    assert hits and all(0 < h.score <= 1.0 / (k + 1) for h in hits)


@pytest.mark.parametrize("fusion", ["zscore", "minmax"])
def test_normalized_fusions_without_bm25_hits_equal_the_dense_path(index, fusion: str) -> None:
    no_hits = index.search("alpha", mode="auto", fusion=fusion, budget=None, k=6)
    dense_only = index.search("alpha", mode="auto", fusion=fusion, sparse=False, budget=None, k=6)
    assert [(h.node_id, h.score) for h in no_hits] == [(h.node_id, h.score) for h in dense_only]
