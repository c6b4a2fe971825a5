"""Query API over a hand-made snapshot: collapsed, traversal, filters, budgets.

The snapshot here is written with the real storage functions (Parquet + LanceDB) from
synthetic nodes, so every expected hit can be worked out by hand. The query embedder is a
named fake that maps a query word to a fixed unit vector.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from arborag.errors import NotBuiltError, QueryError
from arborag.query import Hit, open_index
from arborag.storage.corpus import Corpus
from arborag.storage.schemas import EDGES, NODES
from arborag.storage.tables import write_table
from arborag.storage.vectors import write_vectors

DIM = 4


def _unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


# leaves a..f, two summaries s1 (a,b,c) and s2 (d,e,f), one root r (s1, s2)
NODES_SPEC = [
    ("a", 0, _unit(1, 0, 0, 0), 40, ["d1"]),
    ("b", 0, _unit(0.9, 0.1, 0, 0), 40, ["d1"]),
    ("c", 0, _unit(0.7, 0.3, 0, 0), 40, ["d1"]),
    ("d", 0, _unit(0, 1, 0, 0), 40, ["d2"]),
    ("e", 0, _unit(0, 0.9, 0.1, 0), 40, ["d2"]),
    ("f", 0, _unit(0, 0, 1, 0), 40, ["d2"]),
    ("s1", 1, _unit(0.95, 0.05, 0, 0), 60, ["d1"]),
    ("s2", 1, _unit(0, 0.7, 0.3, 0), 60, ["d2"]),
    ("r", 2, _unit(0.5, 0.5, 0.2, 0), 80, ["d1", "d2"]),
]
EDGES_SPEC = [("s1", c, 1.0, 1) for c in "abc"] + [("s2", c, 1.0, 1) for c in "def"] + [("r", "s1", 1.0, 2), ("r", "s2", 1.0, 2)]


class FakeQueryEmbedder:
    """Test double: maps known query words to fixed vectors."""

    table = {"alpha": _unit(1, 0, 0, 0), "beta": _unit(0, 1, 0, 0), "gamma": _unit(0, 0, 1, 0)}

    def __call__(self, texts: list[str]) -> np.ndarray:
        return np.stack([self.table[t] for t in texts])


@pytest.fixture()
def corpus_dir(tmp_path):
    corpus = Corpus(tmp_path / "c").ensure()
    nodes = pa.Table.from_pylist(
        [
            {"node_id": i, "level": lvl, "text": f"text of {i}", "n_tokens": nt, "doc_ids": docs,
             "summary_of": None, "summarizer": "leaf" if lvl == 0 else "fake", "summary_status": "leaf" if lvl == 0 else "ok",
             "created_by_run": "t"}
            for i, lvl, _, nt, docs in NODES_SPEC
        ],
        schema=NODES,
    )
    edges = pa.Table.from_pylist([{"parent_id": p, "child_id": c, "probability": pr, "level": lv} for p, c, pr, lv in EDGES_SPEC], schema=EDGES)
    partial = corpus.partial_dir("snap-test")
    write_table("nodes", nodes, partial / "nodes.parquet")
    write_table("edges", edges, partial / "edges.parquet")
    write_vectors(partial / "vectors.lance", nodes, np.stack([v for _, _, v, _, _ in NODES_SPEC]))
    corpus.publish(partial, "snap-test", {"build_key": "k", "corpus_name": "c"})
    return corpus.root


def _index(corpus_dir):
    return open_index(corpus_dir, embed_query=FakeQueryEmbedder())


def test_collapsed_is_best_first_and_respects_budget(corpus_dir):
    hits = _index(corpus_dir).search("alpha", mode="collapsed", budget=150)
    # cosine to e1: a=1.0, s1=0.9986, b=0.9939 ...; 40 + 60 + 40 = 140 <= 150, next (c, 40) would overflow
    assert [h.node_id for h in hits] == ["a", "s1", "b"]
    assert sum(h.n_tokens for h in hits) <= 150
    assert all(isinstance(h, Hit) for h in hits)
    assert hits[0].score >= hits[1].score >= hits[2].score


def test_collapsed_skips_an_overflowing_node_but_fills_with_smaller_ones(corpus_dir):
    # budget 110: a (40) + s1 (60) = 100; b (40) overflows; nothing smaller than 10 exists
    hits = _index(corpus_dir).search("alpha", budget=110)
    assert [h.node_id for h in hits] == ["a", "s1"]


def test_levels_filter_gives_the_flat_baseline(corpus_dir):
    hits = _index(corpus_dir).search("beta", mode="collapsed", budget=1000, levels=[0])
    assert {h.level for h in hits} == {0}
    assert [h.node_id for h in hits][:2] == ["d", "e"]


def test_doc_filter(corpus_dir):
    hits = _index(corpus_dir).search("alpha", budget=1000, doc_ids=["d2"])
    assert hits and all("d2" in h.doc_ids for h in hits)
    assert "a" not in {h.node_id for h in hits}


def test_traversal_descends_from_the_roots(corpus_dir):
    hits = _index(corpus_dir).search("gamma", mode="traversal", k=1, budget=None)
    # root r -> best child for gamma is s2 -> best leaf under s2 is f
    assert [h.node_id for h in sorted(hits, key=lambda h: -h.level)] == ["r", "s2", "f"]


def test_traversal_with_k2_and_budget(corpus_dir):
    hits = _index(corpus_dir).search("alpha", mode="traversal", k=2, budget=120)
    ids = [h.node_id for h in hits]
    assert ids[0] == "a"  # best-first ordering of the selected set
    assert sum(h.n_tokens for h in hits) <= 120


def test_unknown_mode_and_empty_query_are_typed_errors(corpus_dir):
    idx = _index(corpus_dir)
    with pytest.raises(QueryError, match="unknown mode"):
        idx.search("alpha", mode="nope")  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="empty"):
        idx.search("   ")


def test_unbuilt_corpus_says_what_to_do(tmp_path):
    with pytest.raises(NotBuiltError, match="arborag build"):
        open_index(tmp_path / "nothing")


def test_manifest_switch_is_atomic_and_keeps_old_snapshot(corpus_dir):
    corpus = Corpus(corpus_dir)
    before = json.loads(corpus.manifest_path.read_text())
    assert before["snapshot"] == "snap-test"
    assert (corpus.snapshots_dir / "snap-test" / "info.json").exists()
    assert not any(p.name.endswith(".partial") for p in corpus.snapshots_dir.iterdir())
