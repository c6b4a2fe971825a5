"""``--mode segments`` end to end on a tiny hand-made snapshot (tests/helpers/segments.py).

Expected selections are worked out by hand from the chunk cosines (0.995, 0.981, 0.970, 0.958
for chunks 3, 2, 1, 4 of d1; 0 for the rest), Beta(0.4, 0.4) calibration and the dsRAG value
function: with the balanced preset the values of chunks 3, 2, 1, 4 are 0.749, 0.669, 0.619,
0.573 and every other chunk is -0.18.
"""

from __future__ import annotations

import pytest

from arborag.errors import QueryError
from arborag.query import open_index
from arborag.query.segments import leaf_layout
from arborag.tokenizer import count_tokens
from tests.helpers.segments import D1_SPANS, D1_TEXT, D2_TEXT, FakeQueryEmbedder, publish_segments_snapshot


@pytest.fixture()
def index(tmp_path):
    corpus = publish_segments_snapshot(tmp_path / "c")
    return open_index(corpus.root, embed_query=FakeQueryEmbedder())


def test_segments_stitch_overlapping_and_gapped_chunks_from_the_document_text(index):
    trace: dict = {}
    hits = index.search("alpha", mode="segments", budget=None, trace=trace)
    assert [h.node_id for h in hits] == ["seg:d1:1-4"]  # chunks 1..4; the -0.18 neighbours stay out
    h = hits[0]
    lo, hi = D1_SPANS[1][0], D1_SPANS[4][1]
    assert (h.start_char, h.end_char) == (lo, hi)
    assert h.text == D1_TEXT[lo:hi]
    # chunk 2 overlaps chunk 1 by 6 characters and 9 characters lie between chunks 3 and 4:
    naive = "".join(D1_TEXT[a:b] for a, b in D1_SPANS[1:5])
    assert len(naive) == len(h.text) + 6 - 9 and naive != h.text
    assert D1_TEXT[D1_SPANS[3][1]:D1_SPANS[4][0]] in h.text  # the gap is kept
    assert h.text.count("Sentence 02") == 1  # the overlap is not repeated
    assert h.doc_ids == ("d1",) and h.level == 0 and h.title == "First document"
    assert h.chunk_ids == ("d1-c1", "d1-c2", "d1-c3", "d1-c4")
    assert h.n_tokens == count_tokens(h.text)
    assert h.score == pytest.approx(0.7491 + 0.6686 + 0.6190 + 0.5729, abs=2e-3)
    assert "Document context" not in h.text  # headers are never context text
    assert trace["reranker"] == "cosine" and trace["picked"][0][:3] == ("d1", 1, 5)


def test_segments_whole_document_when_every_chunk_is_relevant(index):
    hits = index.search("beta", mode="segments", budget=None)
    assert [(h.node_id, h.text) for h in hits] == [("seg:d2:0-3", D2_TEXT)]


def test_segments_budget_is_respected_by_trimming_the_lower_valued_end(index):
    whole = count_tokens(D1_TEXT[D1_SPANS[1][0]:D1_SPANS[3][1]])
    inner = count_tokens(D1_TEXT[D1_SPANS[2][0]:D1_SPANS[3][1]])
    assert inner <= 25 < whole  # the premise of the hand-worked trim below
    hits = index.search("alpha", mode="segments", budget=25)
    # 1..4 overflows: drop chunk 4 (0.573 < 0.619), then chunk 1 (0.619 < 0.749): chunks 2..3 fit
    assert [h.node_id for h in hits] == ["seg:d1:2-3"]
    assert sum(h.n_tokens for h in hits) <= 25
    assert hits[0].text == D1_TEXT[D1_SPANS[2][0]:D1_SPANS[3][1]]
    for budget in (5, 12, 40, 500):
        got = index.search("alpha", mode="segments", budget=budget)
        assert sum(h.n_tokens for h in got) <= budget
        assert all(h.n_tokens == count_tokens(h.text) for h in got)


def test_segments_presets_and_parameter_overrides_pass_through(index):
    # one-chunk segments: balanced (minimum 0.5) takes all four, best first; precision (minimum
    # 0.7, penalty 0.2) only chunk 3 (0.729); chunk 2 would be 0.649 < 0.7
    bal = index.search("alpha", mode="segments", budget=None, preset="balanced", max_length=1)
    assert [h.node_id for h in bal] == ["seg:d1:3-3", "seg:d1:2-2", "seg:d1:1-1", "seg:d1:4-4"]
    prec = index.search("alpha", mode="segments", budget=None, preset="precision", max_length=1)
    assert [h.node_id for h in prec] == ["seg:d1:3-3"]
    fa = index.search("alpha", mode="segments", budget=None, preset="find_all", max_length=1, minimum_value=0.65)
    assert [h.node_id for h in fa] == ["seg:d1:3-3", "seg:d1:2-2", "seg:d1:1-1"]  # find_all: 0.749, 0.693, 0.666 (0.640 < 0.65)
    trace: dict = {}
    index.search("alpha", mode="segments", budget=None, preset="find_all", trace=trace)
    assert trace["preset"] == "find_all"


def test_segments_default_preset_comes_from_the_config(tmp_path):
    from arborag.config import load_config

    corpus = publish_segments_snapshot(tmp_path / "c")
    cfg = load_config(overrides={"segments": {"preset": "precision"}})
    ix = open_index(corpus.root, config=cfg, embed_query=FakeQueryEmbedder())
    trace: dict = {}
    assert [h.node_id for h in ix.search("alpha", mode="segments", budget=None, max_length=1, trace=trace)] == ["seg:d1:3-3"]
    assert trace["preset"] == "precision"


def test_segments_bad_options_are_clear_errors(index):
    with pytest.raises(QueryError, match="unknown segments preset 'greedy'.*balanced, precision, find_all"):
        index.search("alpha", mode="segments", preset="greedy")
    with pytest.raises(QueryError, match="takes no option colour"):
        index.search("alpha", mode="segments", colour="red")
    with pytest.raises(QueryError, match="level 0"):
        index.search("alpha", mode="segments", levels=[1])


def test_segments_doc_filter_and_layout(index):
    assert [h.node_id for h in index.search("alpha", mode="segments", budget=None, doc_ids=["d2"])] == []
    layout = leaf_layout(index)
    assert layout.position["d1-c4"] == ("d1", 4) and "s1" not in layout.position  # summaries are not chunks
    assert list(layout.docs["d1"].start_chars) == [a for a, _ in D1_SPANS]


def test_segments_on_a_snapshot_without_chunk_offsets_says_to_rebuild(tmp_path):
    from arborag.storage.corpus import Corpus
    from tests.helpers.query import publish_snapshot

    corpus = Corpus(tmp_path / "old").ensure()
    publish_snapshot(corpus, "s-old")  # nodes and vectors only, as snapshots were before chunks.parquet
    ix = open_index(corpus.root, embed_query=FakeQueryEmbedder())
    with pytest.raises(QueryError, match="no chunk offsets.*arborag build"):
        ix.search("alpha", mode="segments")


def test_segments_budget_holds_when_the_fast_token_estimate_is_off(index, monkeypatch):
    import arborag.query.segments as seg_mod

    exact = index.search("alpha", mode="segments", budget=25)
    monkeypatch.setattr(seg_mod, "_span_counter", lambda ix, texts: (lambda doc_id, lo, hi: 1))  # a badly low estimate
    hits = index.search("alpha", mode="segments", budget=25)
    assert sum(h.n_tokens for h in hits) <= 25
    assert [h.node_id for h in hits] == [h.node_id for h in exact] == ["seg:d1:2-3"]  # the exact refit
