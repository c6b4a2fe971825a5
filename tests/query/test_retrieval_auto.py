"""The default ``auto`` mode on a hand-made snapshot (dense + BM25 over leaves, fused), its
options, and the thematic questions' loader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers.query import EDGES_SPEC, NODES_SPEC, FakeQueryEmbedder, publish_snapshot

from arborag.config import ArboragConfig, SparseConfig
from arborag.errors import QueryError
from arborag.query import open_index
from arborag.query.auto import adaptive_weight, ancestor_best
from arborag.storage.corpus import Corpus

# node ids carry words (the text of a node is its id), so BM25 has something to rank:
# "alpha" names a and s1 only; "beta" names d and s2
NAMES = {"a": "a-alpha", "b": "b", "c": "c", "d": "d-beta", "e": "e", "f": "f", "s1": "s1-alpha", "s2": "s2-beta", "r": "r"}


@pytest.fixture()
def corpus_dir(tmp_path):
    corpus = Corpus(tmp_path / "c").ensure()
    spec = [(NAMES[i], lvl, v, n, docs) for i, lvl, v, n, docs in NODES_SPEC]
    edges = [(NAMES[p], NAMES[c], pr, lv) for p, c, pr, lv in EDGES_SPEC]
    publish_snapshot(corpus, "snap-auto", spec=spec, edges_spec=edges, text="{}", sparse=SparseConfig(backend="embedded"))
    return corpus.root


def _index(corpus_dir):
    return open_index(corpus_dir, embed_query=FakeQueryEmbedder())


def test_retrieval_auto_is_the_default_and_returns_leaves_only(corpus_dir):
    index = _index(corpus_dir)
    assert ArboragConfig().query.mode == "hop"  # auto + a hop through the links; a snapshot without links is auto
    hits = index.search("alpha", budget=1000)  # no mode: hop, here with no links table
    assert hits and {h.level for h in hits} == {0}
    assert [h.node_id for h in hits] == [h.node_id for h in index.search("alpha", mode="auto", budget=1000)]
    assert hits[0].node_id == "a-alpha"  # best by dense (cos 1.0) and the only leaf BM25 finds
    assert all(hits[i].score >= hits[i + 1].score for i in range(len(hits) - 1))
    assert sum(h.n_tokens for h in hits) <= 1000


def test_retrieval_auto_uses_bm25_as_well_as_dense(corpus_dir):
    index = _index(corpus_dir)
    dense_only = index.search("beta", mode="auto", budget=80, sparse=False)
    fused = index.search("beta", mode="auto", budget=80)
    # dense alone ranks d then e (cos 1.0, 0.994); d-beta is also the only BM25 match: both put it first
    assert dense_only[0].node_id == fused[0].node_id == "d-beta"
    # with the dense list flattened (weight 0), BM25 decides: only d-beta has a BM25 score
    assert index.search("beta", mode="auto", budget=40, dense_weight=0.0)[0].node_id == "d-beta"


def test_retrieval_auto_fills_the_budget_best_first(corpus_dir):
    hits = _index(corpus_dir).search("alpha", mode="auto", budget=130)
    assert sum(h.n_tokens for h in hits) == 120  # three 40-token leaves; a fourth would overflow


@pytest.mark.parametrize("options", [{"fusion": "rrf"}, {"fusion": "minmax"}, {"dense_weight": "adaptive"}, {"tree": "boost"},
                                     {"summaries": "dedup"}, {"sparse": False}])
def test_retrieval_auto_options_run(corpus_dir, options):
    hits = _index(corpus_dir).search("alpha", mode="auto", budget=200, **options)
    assert hits and sum(h.n_tokens for h in hits) <= 200


def test_retrieval_auto_summaries_never_with_their_children(corpus_dir):
    hits = _index(corpus_dir).search("alpha", mode="auto", budget=1000, summaries="dedup", summary_share=1.0)
    ids = {h.node_id for h in hits}
    children = {"s1-alpha": {"a-alpha", "b", "c"}, "s2-beta": {"d-beta", "e", "f"}, "r": {"s1-alpha", "s2-beta"}}
    chosen = [p for p in children if p in ids]
    assert chosen, f"no summary was selected, so nothing was checked: {ids}"
    assert any(h.level > 0 for h in hits)
    for parent in chosen:
        assert not (children[parent] & ids), (parent, ids)
    # and leaves the summaries did not cover are still there: the budget is not left empty
    assert ids - set(chosen), ids


def test_retrieval_auto_rejects_unknown_options(corpus_dir):
    with pytest.raises(QueryError, match="no option"):
        _index(corpus_dir).search("alpha", mode="auto", budget=100, nope=1)
    with pytest.raises(QueryError, match="fusion"):
        _index(corpus_dir).search("alpha", mode="auto", budget=100, fusion="max")


def test_retrieval_hybrid_takes_a_fusion_option(corpus_dir):
    index = _index(corpus_dir)
    for fusion in ("rrf", "minmax", "zscore"):
        hits = index.search("alpha", mode="hybrid", budget=300, fusion=fusion)
        assert hits and sum(h.n_tokens for h in hits) <= 300
    with pytest.raises(QueryError, match="takes no options"):
        index.search("alpha", mode="collapsed", budget=300, fusion="rrf")


def test_retrieval_ancestor_best_reaches_grandchildren(corpus_dir):
    index = _index(corpus_dir)
    v = index.vectors
    scores = np.full(len(v), -np.inf)
    scores[v.row_of["r"]] = 0.9
    scores[v.row_of["s1-alpha"]] = 0.2
    best = ancestor_best(index, scores)
    assert best[v.row_of["a-alpha"]] == 0.9 and best[v.row_of["s1-alpha"]] == 0.9 and best[v.row_of["r"]] == -np.inf


def test_retrieval_adaptive_weight_trusts_the_peaked_list():
    peaked = np.array([10.0, 1.0, 1.1, 0.9, 1.0])
    flat = np.array([1.0, 0.99, 0.98, 0.97, 0.96])
    assert adaptive_weight(peaked, flat, 5) > 0.5 > adaptive_weight(flat, peaked, 5)


def test_retrieval_thematic_questions_resolve_to_single_passages(shared_data: Path):
    from arborag.tasks.evaluation.datasets import THEMATIC_FILE, load_thematic

    ds = load_thematic(shared_data)
    n = sum(1 for line in THEMATIC_FILE.read_text(encoding="utf-8").splitlines() if line.strip())
    assert ds.queries.num_rows == n >= 10
    assert all(g for g in ds.queries.column("gold_ids").to_pylist())
    assert set(ds.queries.column("type").to_pylist()) == {"thematic-single", "thematic-multi"}
    assert ds.match == "doc" and len(ds.files) == 47


def test_retrieval_auto_without_a_sparse_index_falls_back_to_dense(tmp_path, caplog):
    corpus = Corpus(tmp_path / "nosparse").ensure()
    publish_snapshot(corpus, "snap-dense")  # no sparse index in this snapshot
    index = open_index(corpus.root, embed_query=FakeQueryEmbedder())
    with caplog.at_level("WARNING", logger="arborag.query.auto"):
        hits = index.search("alpha", budget=130)
    assert [h.node_id for h in hits] == ["a", "b", "c"]  # dense order over leaves
    assert "dense list only" in caplog.text
