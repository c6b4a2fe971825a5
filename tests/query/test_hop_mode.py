"""``--mode hop`` over a real published snapshot (Parquet + LanceDB + tantivy) with a links table.

Five leaves in three documents; the question's vector finds d1's leaves, one of which names
document d2 ("Delta Works"). ``auto`` fills the third place with d3's leaf (closer to the
question); ``hop`` follows the title link into d2 instead. With no links the mode is ``auto``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers.query import HOP_LINK_ROWS, HOP_SPEC, FakeQueryEmbedder, links_table, publish_snapshot

from arborag.config import SparseConfig
from arborag.errors import QueryError
from arborag.query import hop, open_index
from arborag.storage.corpus import Corpus
from arborag.storage.tables import write_table

@pytest.fixture()
def index(tmp_path: Path):
    corpus = Corpus(tmp_path / "c")
    corpus.ensure()
    snap = publish_snapshot(corpus, "snap-hop", spec=HOP_SPEC, edges_spec=[], sparse=SparseConfig())
    write_table("links", links_table(HOP_LINK_ROWS), snap / "links.parquet")
    idx = open_index(corpus.root, embed_query=FakeQueryEmbedder())
    yield idx
    idx.close()


def _docs(hits) -> list[str]:
    return [h.doc_ids[0] for h in hits]


def test_hop_follows_the_title_link_into_the_named_document(index) -> None:
    auto = index.search("alpha", mode="auto", budget=120)
    hopped = index.search("alpha", mode="hop", budget=120, seeds=2, hop_weight=2.0)
    assert [h.node_id for h in auto] == ["a", "b", "c"]
    assert _docs(hopped)[:2] == ["d1", "d1"] and _docs(hopped)[2] == "d2"
    # the walk never re-scores the seeds' own document, and without it hop is auto
    none = index.search("alpha", mode="hop", budget=120, walk="none")
    assert [h.node_id for h in none] == [h.node_id for h in auto]
    assert [h.score for h in none] == pytest.approx([h.score for h in auto])


def test_kinds_all_also_arrives_through_shared_names(index) -> None:
    graph = hop.link_graph(index)
    rows = np.arange(5, dtype=np.int64)
    scores = np.array([2.0, 1.9, 0.5, -1.0, -1.0])
    title = hop.hop_scores(graph, rows, scores, seeds=2, kinds="title")
    assert title.tolist() == pytest.approx([0, 0, 0, 1, 1])  # d2's leaves, through the title link only
    ppr = hop.hop_scores(graph, rows, scores, seeds=2, walk="ppr")
    assert ppr[3] > 0 and ppr[4] > 0 and ppr[:3].tolist() == [0, 0, 0]
    assert hop.hop_scores(graph, rows, scores, seeds=0).tolist() == [0] * 5


def test_a_snapshot_without_links_answers_as_auto(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "c")
    corpus.ensure()
    publish_snapshot(corpus, "snap-nolinks", spec=HOP_SPEC, edges_spec=[], sparse=SparseConfig())
    idx = open_index(corpus.root, embed_query=FakeQueryEmbedder())
    try:
        assert [h.node_id for h in idx.search("alpha", mode="hop", budget=120)] == [h.node_id for h in idx.search("alpha", budget=120)]
        assert hop.link_graph(idx).n_edges == 0
    finally:
        idx.close()


def test_bad_options_are_refused_with_what_to_do(index) -> None:
    with pytest.raises(QueryError, match="kinds"):
        index.search("alpha", mode="hop", kinds="everything")
    with pytest.raises(QueryError, match="levels must include 0"):
        index.search("alpha", mode="hop", levels=[1])
