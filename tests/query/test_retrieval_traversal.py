"""Traversal over a forest of per-document trees starts from every root (a regression test).

Document d1 is long (leaves -> two summaries -> a level-2 root); document d2 is short (two
leaves -> one level-1 root); d3 is a single leaf with no parent at all. A query about d2's or
d3's topic must reach their nodes; before the fix traversal started only from the global top
level (level 2, d1's root) and never saw them.
"""

from __future__ import annotations

import pytest
from helpers.query import FakeQueryEmbedder, publish_snapshot, unit

from arborag.query import open_index
from arborag.storage.corpus import Corpus

SPEC = [
    ("a", 0, unit(1, 0, 0, 0), 40, ["d1"]),
    ("b", 0, unit(0.9, 0.1, 0, 0), 40, ["d1"]),
    ("c", 0, unit(0.8, 0, 0, 0.2), 40, ["d1"]),
    ("s1", 1, unit(0.95, 0.05, 0, 0), 60, ["d1"]),
    ("s2", 1, unit(0.8, 0, 0, 0.2), 60, ["d1"]),
    ("r1", 2, unit(0.9, 0.05, 0, 0.1), 80, ["d1"]),
    ("x", 0, unit(0, 1, 0, 0), 40, ["d2"]),
    ("y", 0, unit(0, 0.9, 0.1, 0), 40, ["d2"]),
    ("r2", 1, unit(0, 0.95, 0.05, 0), 60, ["d2"]),
    ("z", 0, unit(0, 0, 1, 0), 40, ["d3"]),
]
EDGES = [("s1", "a", 1.0, 1), ("s1", "b", 1.0, 1), ("s2", "c", 1.0, 1), ("r1", "s1", 1.0, 2), ("r1", "s2", 1.0, 2),
         ("r2", "x", 1.0, 1), ("r2", "y", 1.0, 1)]


@pytest.fixture()
def forest_dir(tmp_path):
    corpus = Corpus(tmp_path / "c").ensure()
    publish_snapshot(corpus, "snap-forest", spec=SPEC, edges_spec=EDGES)
    return corpus.root


def test_retrieval_traversal_reaches_a_short_documents_tree(forest_dir):
    index = open_index(forest_dir, embed_query=FakeQueryEmbedder())
    hits = index.search("beta", mode="traversal", k=1, budget=None)
    # the roots are r1 (L2), r2 (L1) and z (L0): beta picks r2, then its best leaf x
    assert [h.node_id for h in hits] == ["x", "r2"]


def test_retrieval_traversal_reaches_a_parentless_leaf(forest_dir):
    index = open_index(forest_dir, embed_query=FakeQueryEmbedder())
    hits = index.search("gamma", mode="traversal", k=1, budget=None)
    assert hits[0].node_id == "z"


def test_retrieval_roots_are_the_nodes_without_parent(forest_dir):
    index = open_index(forest_dir, embed_query=FakeQueryEmbedder())
    assert sorted(index.vectors.node_ids[r] for r in index.roots()) == ["r1", "r2", "z"]
    leaves = index.vectors.mask(levels=[0])
    assert sorted(index.vectors.node_ids[r] for r in index.roots(leaves)) == ["a", "b", "c", "x", "y", "z"]


def test_retrieval_traversal_level_filter_keeps_working(forest_dir):
    index = open_index(forest_dir, embed_query=FakeQueryEmbedder())
    hits = index.search("alpha", mode="traversal", k=2, budget=None, levels=[0])
    assert {h.level for h in hits} == {0} and hits[0].node_id == "a"
