"""Query API over a hand-made snapshot: collapsed, traversal, filters, budgets, publishing.

The snapshot (tests/helpers/query.py) is written with the real storage functions (Parquet +
LanceDB) from synthetic nodes, so every expected hit can be worked out by hand. The query
embedder is a named fake that maps a query word to a fixed unit vector.
"""

from __future__ import annotations

import json

import pytest
from helpers.query import NODES_SPEC, FakeQueryEmbedder, publish_snapshot

from arborag.errors import NotBuiltError, QueryError
from arborag.query import Hit, open_index
from arborag.storage.corpus import Corpus


@pytest.fixture()
def corpus_dir(tmp_path):
    corpus = Corpus(tmp_path / "c").ensure()
    publish_snapshot(corpus, "snap-test")
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
    hits = _index(corpus_dir).search("alpha", mode="collapsed", budget=110)
    assert [h.node_id for h in hits] == ["a", "s1"]


def test_levels_filter_gives_the_flat_baseline(corpus_dir):
    hits = _index(corpus_dir).search("beta", mode="collapsed", budget=1000, levels=[0])
    assert {h.level for h in hits} == {0}
    assert [h.node_id for h in hits][:2] == ["d", "e"]


def test_doc_filter(corpus_dir):
    hits = _index(corpus_dir).search("alpha", mode="collapsed", budget=1000, doc_ids=["d2"])
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
    old_reader = _index(corpus_dir)
    old_hits = [(h.node_id, h.text) for h in old_reader.search("alpha", mode="collapsed", budget=1000)]

    # a second build: leaves only (no tree), other texts
    publish_snapshot(corpus, "snap-two", spec=[n for n in NODES_SPEC if n[1] == 0], edges_spec=[], text="second {}")

    after = json.loads(corpus.manifest_path.read_text())
    assert after["snapshot"] == "snap-two" and after["published_at"] >= before["published_at"]
    assert corpus.published_dir() == corpus.snapshots_dir / "snap-two"
    # one os.replace each (the manifest, then published.duckdb): no temporary file, no staging folder left behind
    assert sorted(p.name for p in corpus.root.iterdir() if p.is_file()) == ["manifest.json", "published.duckdb"]
    assert sorted(p.name for p in corpus.snapshots_dir.iterdir()) == ["snap-test", "snap-two"]
    # new readers see the new snapshot ...
    new_reader = _index(corpus_dir)
    assert new_reader.snapshot == "snap-two" and len(new_reader) == 6 and new_reader.top_level == 0
    assert {h.text for h in new_reader.search("alpha", mode="collapsed", budget=1000)} <= {f"second {n}" for n in "abcdef"}
    # ... while the old snapshot stays whole: a reader opened before the switch still answers from it
    assert (corpus.snapshots_dir / "snap-test" / "info.json").exists()
    assert [(h.node_id, h.text) for h in old_reader.search("alpha", mode="collapsed", budget=1000)] == old_hits
    assert old_reader.snapshot == "snap-test" and len(old_reader) == len(NODES_SPEC)
    # and switching back is the same atomic manifest swap, without copying
    corpus.publish_existing("snap-test", {"build_key": "k"})
    assert _index(corpus_dir).snapshot == "snap-test"
