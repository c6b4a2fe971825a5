"""A bounded index runs its BM25 search on another thread while the ANN search runs: the two
lists overlap in time, and the hits are those of the one-after-the-other search."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from helpers.query import HOP_LINK_ROWS, HOP_SPEC, FakeQueryEmbedder, links_table, publish_snapshot

import arborag.query.index as query_index
from arborag.config import SparseConfig, load_config
from arborag.query import open_index
from arborag.storage.corpus import Corpus
from arborag.storage.tables import write_table


@pytest.fixture()
def corpus(tmp_path: Path) -> Corpus:
    corpus = Corpus(tmp_path / "c")
    corpus.ensure()
    snap = publish_snapshot(corpus, "snap-conc", spec=HOP_SPEC, edges_spec=[], sparse=SparseConfig())
    write_table("links", links_table(HOP_LINK_ROWS), snap / "links.parquet")
    return corpus


def _open(corpus: Corpus, ann_min_rows: int):
    return open_index(corpus.root, embed_query=FakeQueryEmbedder(), config=load_config(overrides={"query": {"ann_min_rows": ann_min_rows}}))


def test_bm25_runs_while_the_dense_search_runs(corpus: Corpus, monkeypatch: pytest.MonkeyPatch) -> None:
    index = _open(corpus, 1)
    assert index.vectors.bounded
    want = index.search("alpha", mode="hop", budget=120)
    bm25_started = threading.Event()
    seen: dict[str, object] = {}
    sparse_ranked, dense_scores = index.sparse_ranked, index.dense_scores

    def slow_sparse(*a, **k):  # a fake: the real BM25 list, announcing that it started
        seen["sparse_thread"] = threading.get_ident()
        bm25_started.set()
        return sparse_ranked(*a, **k)

    def waiting_dense(*a, **k):  # a fake: the real dense list, once BM25 has started (it would wait forever one after the other)
        seen["overlapped"] = bm25_started.wait(timeout=10)
        return dense_scores(*a, **k)

    monkeypatch.setattr(index, "sparse_ranked", slow_sparse)
    monkeypatch.setattr(index, "dense_scores", waiting_dense)
    got = index.search("alpha", mode="hop", budget=120)
    assert seen["overlapped"] is True and seen["sparse_thread"] != threading.get_ident()
    assert [h.node_id for h in got] == [h.node_id for h in want] and [h.score for h in got] == pytest.approx([h.score for h in want])
    index.close()


def test_a_bm25_error_on_the_other_thread_reaches_the_caller(corpus: Corpus, monkeypatch: pytest.MonkeyPatch) -> None:
    from arborag.errors import QueryError

    index = _open(corpus, 1)

    def failing(*a, **k):  # a fake BM25 list that rejects the query
        raise QueryError("alpha", "bad query")

    monkeypatch.setattr(index, "sparse_ranked", failing)
    with pytest.raises(QueryError, match="bad query"):
        index.search("alpha", mode="hop", budget=120)
    index.close()


def test_an_unbounded_index_searches_in_the_caller(corpus: Corpus, monkeypatch: pytest.MonkeyPatch) -> None:
    index = _open(corpus, 10**6)
    assert not index.vectors.bounded
    monkeypatch.setattr(query_index, "_search_pool", lambda: pytest.fail("no thread for an in-memory index"))
    assert index.search("alpha", mode="hop", budget=120)
    index.close()
