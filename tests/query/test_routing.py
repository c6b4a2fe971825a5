"""Document routing (``query/routing.py``): document-level BM25, the margin rule, the prior on
the routed documents' leaves, and the default modes ranking through it over a real snapshot."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers.query import FakeQueryEmbedder, publish_snapshot, unit

from arborag.config import ArboragConfig, SparseConfig
from arborag.query import open_index
from arborag.query.routing import document_bm25, document_names, document_terms, leading_documents, route_boost, without_names
from arborag.storage.sparse.analysis import tokens
from arborag.storage.corpus import Corpus


def _terms():
    # document 0 names "ulta"; every document speaks of "repurchases"
    docs = [
        [("ulta", "beauti", "annual", "result"), ("repurchas", "stock", "ulta")],
        [("best", "buy", "quarter"), ("repurchas", "stock", "share")],
        [("pepsico", "vote"), ("repurchas", "board")],
    ]
    return document_terms(docs, np.array([0, 0, 1, 1, 2, 2, -1]))


def test_a_name_one_document_holds_scores_that_document_only() -> None:
    s = document_bm25(_terms(), ["ulta"])
    assert s[0] > 0 and s[1] == 0 and s[2] == 0


def test_a_term_every_document_holds_weighs_less_than_a_name() -> None:
    t = _terms()
    everywhere, name = document_bm25(t, ["repurchas"]), document_bm25(t, ["ulta"])
    assert 0 < everywhere[0] < name[0]
    assert document_bm25(t, ["absent"]).tolist() == [0.0, 0.0, 0.0]


def test_a_repeated_query_term_counts_once() -> None:
    t = _terms()
    assert document_bm25(t, ["ulta", "ulta"]).tolist() == document_bm25(t, ["ulta"]).tolist()


@pytest.mark.parametrize(("scores", "max_docs", "expected"), [
    ([10.0, 3.0, 2.0], 2, [0]),          # one clear leader
    ([3.0, 10.0, 9.0, 2.0], 2, [1, 2]),  # two leaders, then a gap: both (codes sorted)
    ([10.0, 9.0, 8.5], 2, []),           # no gap within two: nothing stands out
    ([10.0, 9.0, 2.0], 1, []),           # the gap comes after more documents than allowed
    ([10.0], 2, []),                     # one document: nothing to tell apart
    ([0.0, 0.0, 0.0], 2, []),            # no term matched
    ([10.0, 0.0], 2, [0]),               # every other document scores nothing
])
def test_the_margin_rule(scores: list[float], max_docs: int, expected: list[int]) -> None:
    assert leading_documents(np.array(scores), ratio=1.5, max_docs=max_docs).tolist() == expected


def test_the_boost_reaches_only_the_routed_documents_leaves() -> None:
    doc_of_row = np.array([0, 0, 1, 1, 2, 2, -1])
    boost = route_boost(doc_of_row, np.array([6, 0, 2, 5, 1]), np.array([0, 2]), 0.7)
    assert boost.tolist() == [0.0, 0.7, 0.0, 0.7, 0.7]
    assert route_boost(doc_of_row, np.array([0, 1]), np.zeros(0, dtype=np.int64), 0.7).tolist() == [0.0, 0.0]


def test_the_names_are_the_terms_only_routed_documents_hold() -> None:
    t = _terms()
    assert document_names(t, ["ulta", "repurchas", "stock"], np.array([0])) == {"ulta"}
    assert document_names(t, ["ulta", "best", "stock"], np.array([0, 1])) == {"ulta", "best", "stock"}
    assert document_names(t, ["ulta"], np.zeros(0, dtype=np.int64)) == frozenset()


def test_the_words_of_the_names_leave_the_sparse_query() -> None:
    assert without_names("Ulta Beauty's stock repurchases", frozenset({"ulta", "beauti"}), tokens) == "stock repurchases"
    assert without_names("What is (USA) - up?", frozenset({"usa"}), tokens) == "What is - up?"  # a word with no token stays
    assert without_names("Ulta stock", frozenset(), tokens) == "Ulta stock"


class FakeRoutingEmbedder(FakeQueryEmbedder):
    """Test double: the question's vector is the vector of leaf "bestbuy" (the other document)."""

    table = {**FakeQueryEmbedder.table, "ulta stock repurchases": unit(0, 1, 0, 0)}


# d1 is the document the question names (leaf "ulta"); its leaf "buyback" does not repeat the name,
# and d2's leaf "bestbuy" is the dense favourite with the same topic words
SPEC = [
    ("ulta", 0, unit(1, 0, 0, 0), 40, ["d1"]),
    ("buyback", 0, unit(0, 0, 1, 0), 40, ["d1"]),
    ("bestbuy", 0, unit(0, 1, 0, 0), 40, ["d2"]),
    ("stores", 0, unit(0, 0, 0.6, 0.8), 40, ["d2"]),
    ("pepsico", 0, unit(0, 0, 0, 1), 40, ["d3"]),
]
TEXTS = "{} stock repurchases this quarter"


def _index(tmp_path: Path, weight: float):
    corpus = Corpus(tmp_path / f"c{weight}")
    corpus.ensure()
    publish_snapshot(corpus, "snap", spec=SPEC, edges_spec=[], text=TEXTS, sparse=SparseConfig())
    config = ArboragConfig()
    config = config.model_copy(update={"query": config.query.model_copy(update={"route_weight": weight})})
    return open_index(corpus.root, config=config, embed_query=FakeRoutingEmbedder())


@pytest.mark.parametrize("mode", ["hop", "auto"])
def test_the_named_documents_leaves_are_read_first(tmp_path: Path, mode: str) -> None:
    question = "ulta stock repurchases"
    plain = _index(tmp_path, 0.0).search(question, mode=mode, budget=80)
    routed = _index(tmp_path, 2.0).search(question, mode=mode, budget=80)
    assert {h.node_id for h in plain} == {"ulta", "bestbuy"}  # without routing the other document's leaf takes budget
    assert {h.node_id for h in routed} == {"ulta", "buyback"}


def test_no_leading_document_leaves_the_ranking_as_it_was(tmp_path: Path) -> None:
    question = "alpha"  # matches no leaf's words: no document stands out
    plain = _index(tmp_path, 0.0).search(question, mode="hop", budget=200)
    routed = _index(tmp_path, 1.0).search(question, mode="hop", budget=200)
    assert [(h.node_id, h.score) for h in routed] == [(h.node_id, h.score) for h in plain]


class FakeNamesEmbedder(FakeQueryEmbedder):
    """Test double: the question's vector is orthogonal to every leaf (BM25 decides)."""

    table = {**FakeQueryEmbedder.table, "ulta repurchases": unit(0, 0, 0, 1)}


# d1: its cover page repeats the company's name, its other leaf holds the repurchases; d2 and d3 other filings
NAMES_SPEC = [
    ("ulta ulta ulta beauty cover", 0, unit(1, 0, 0, 0), 40, ["d1"]),
    ("fourth quarter share repurchases", 0, unit(0, 1, 0, 0), 40, ["d1"]),
    ("best buy repurchases store count", 0, unit(0, 0, 1, 0), 40, ["d2"]),
    ("pepsico vote results", 0, unit(0, 0, 1, 0), 40, ["d3"]),
]


@pytest.mark.parametrize("mode", ["hop", "auto"])
def test_within_the_routed_document_the_passage_outranks_the_name(tmp_path: Path, mode: str) -> None:
    corpus = Corpus(tmp_path / "c")
    corpus.ensure()
    publish_snapshot(corpus, "snap", spec=NAMES_SPEC, edges_spec=[], text="{}", sparse=SparseConfig())
    index = open_index(corpus.root, embed_query=FakeNamesEmbedder())
    question = "ulta repurchases"
    kept = index.search(question, mode=mode, budget=40, lucene=True)  # a Lucene query is searched as written: the name stays
    assert [h.node_id for h in kept] == ["ulta ulta ulta beauty cover"]
    spent = index.search(question, mode=mode, budget=40)
    assert [h.node_id for h in spent] == ["fourth quarter share repurchases"]
