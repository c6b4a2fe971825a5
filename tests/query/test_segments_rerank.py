"""Rerankers wired into ``--mode segments`` and ``--mode rerank`` (tiny snapshot of
tests/helpers/segments.py): Beta-CDF calibration with scipy, a cross-encoder (a tiny
**randomly initialised** BERT built in the test: its scores mean nothing, the test checks the
plumbing), and the LLM scorer through a scripted fake chat LLM (``ScriptedFakeChat``) and through
the real client against the fake OpenAI-compatible server (``FakeLLMServer``), with malformed
ratings and timeouts falling back to cosine and being recorded.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import beta

from arborag.config import load_config
from arborag.errors import ConfigError, LLMError, QueryError
from arborag.query import open_index
from arborag.query.rerank import (
    ClientComplete,
    CrossEncoderReranker,
    LLMReranker,
    calibrate,
    reranker_from_config,
    score_relevance,
)
from tests.fake_llm_server import FakeLLMServer, reply, slow
from tests.helpers.llm import ScriptedFakeChat
from tests.helpers.segments import FakeQueryEmbedder, make_tiny_cross_encoder, publish_segments_snapshot

# the dense order of the 12 leaves for "alpha": d1 chunks 3, 2, 1, 4, then the cosine-0 ties by row
DENSE_ORDER = ["d1-c3", "d1-c2", "d1-c1", "d1-c4", "d1-c0", "d1-c5", "d1-c6", "d1-c7", "d2-c0", "d2-c1", "d2-c2", "d2-c3"]
COSINES = [0.99504, 0.98058, 0.97014, 0.95783] + [0.0] * 8


@pytest.fixture()
def corpus(tmp_path):
    return publish_segments_snapshot(tmp_path / "c")


def _open(corpus, **overrides):
    return open_index(corpus.root, config=load_config(overrides=overrides), embed_query=FakeQueryEmbedder())


def test_segments_calibration_uses_the_configured_beta_shape(corpus):
    rel = score_relevance(None, "q", ["a", "b", "c"], [0.2, 0.5, 0.9])
    assert rel.relevance == pytest.approx(beta.cdf([0.2, 0.5, 0.9], 0.4, 0.4))
    ix = _open(corpus, rerank={"a": 0.5, "b": 2.0})
    hits = ix.search("alpha", mode="rerank", budget=None, k=4)
    assert [h.node_id for h in hits] == DENSE_ORDER[:4]  # cosine keeps the dense order
    assert [h.score for h in hits] == pytest.approx(beta.cdf(COSINES[:4], 0.5, 2.0), abs=1e-4)


def test_segments_rerank_mode_respects_the_budget_and_leaves_only(corpus):
    ix = _open(corpus)
    for budget in (10, 25, 60):
        hits = ix.search("alpha", mode="rerank", budget=budget)
        assert hits and sum(h.n_tokens for h in hits) <= budget
        assert all(h.level == 0 for h in hits)
    with pytest.raises(QueryError, match="level 0"):
        ix.search("alpha", mode="rerank", levels=[1])


def test_segments_llm_scorer_malformed_and_timeouts_fall_back_to_cosine(corpus):
    ix = _open(corpus)
    fake = ScriptedFakeChat(
        "9",                                           # d1-c3
        "It is quite relevant, I would say.",          # d1-c2: malformed -> cosine
        LLMError("fake-chat", "timed out (4 attempts)"),  # d1-c1: the client's timeout -> cosine
        "8",                                           # d1-c4
        *["0"] * 8,
    )
    rr = LLMReranker(ClientComplete(fake), model="fake-chat")
    trace: dict = {}
    hits = ix.search("alpha", mode="segments", budget=None, rerank=rr, trace=trace)
    assert [h.node_id for h in hits] == ["seg:d1:1-4"]
    assert trace["reranker"] == "llm:fake-chat:rerank-v1" and trace["fallback"] == 2
    assert len(trace["rerank_failures"]) == 2
    assert "malformed" in trace["rerank_failures"][0] and "timed out" in trace["rerank_failures"][1]
    assert len(fake.calls) == 12 and fake.tags[0] == "rerank-relevance@rerank-v1"
    prompt = fake.calls[0][1][-1]["content"]
    assert "Query: alpha" in prompt and "Sentence 03" in prompt and "Document context" in prompt  # header + text is rated

    # the same ratings in --mode rerank: scores are calibrated LLM ratings, cosine where they failed
    fake2 = ScriptedFakeChat("9", "no number here", TimeoutError("read timed out"), "8", *["0"] * 8)
    hits = ix.search("alpha", mode="rerank", budget=None, k=4, rerank=LLMReranker(ClientComplete(fake2), model="fake-chat"))
    want = {"d1-c3": beta.cdf(0.9, 0.4, 0.4), "d1-c4": beta.cdf(0.8, 0.4, 0.4),
            "d1-c2": beta.cdf(COSINES[1], 0.4, 0.4), "d1-c1": beta.cdf(COSINES[2], 0.4, 0.4)}
    assert [h.node_id for h in hits] == sorted(want, key=lambda n: -want[n])
    assert [h.score for h in hits] == pytest.approx(sorted(want.values(), reverse=True), abs=1e-4)


def test_segments_llm_scorer_through_the_client_and_a_fake_server(corpus):
    with FakeLLMServer(model="fake-model", default=reply("0")) as srv:
        srv.script("Sentence 03", reply("9"))
        srv.script("Sentence 02", slow(3.0, "9"))  # later than the client's timeout
        srv.script("Sentence 01", reply("relevant!"))
        srv.script("part 4.", reply("7"))
        ix = _open(corpus, summarize={"base_url": srv.base_url, "llm_model": "fake-model", "timeout_s": 0.5, "retries": 0},
                   rerank={"kind": "llm"})
        trace: dict = {}
        hits = ix.search("alpha", mode="segments", budget=None, trace=trace)
        assert [h.node_id for h in hits] == ["seg:d1:1-4"]
        assert trace["fallback"] == 2 and len(trace["rerank_failures"]) == 2
        assert any("malformed" in f for f in trace["rerank_failures"])
        assert any("LLMError" in f for f in trace["rerank_failures"])  # the timeout, as the client reports it
        assert len(srv.completions()) >= 12


def test_segments_cross_encoder_from_the_config(corpus, tmp_path):
    model = make_tiny_cross_encoder(tmp_path / "tiny-ce")
    ix = _open(corpus, rerank={"kind": "cross_encoder", "model_path": str(model), "top_n": 4})
    hits = ix.search("alpha", mode="rerank", budget=None, k=12)
    # the top 4 dense candidates were rescored by the model; the calibrated scores are sigmoid -> Beta CDF of its logits
    ce = CrossEncoderReranker(model)
    texts = [f"Document context: the following excerpt is from a document titled 'd1'.\n\n{ix.vectors.texts[ix.vectors.row_of[n]]}"
             for n in DENSE_ORDER[:4]]
    want = dict(zip(DENSE_ORDER[:4], calibrate(ce.rerank("alpha", texts), "cross_encoder")))
    got = {h.node_id: h.score for h in hits}
    assert {n: got[n] for n in want} == pytest.approx(want, abs=1e-4)
    assert all(0.0 <= h.score <= 1.0 for h in hits) and len(hits) == 12
    assert np.all(np.diff([h.score for h in hits]) <= 1e-12)  # best calibrated relevance first
    seg = ix.search("alpha", mode="segments", budget=None)
    assert all(h.node_id.startswith("seg:") for h in seg)


def test_segments_reranker_config_errors_say_what_to_do():
    with pytest.raises(ConfigError, match="model_path"):
        reranker_from_config(load_config(overrides={"rerank": {"kind": "cross_encoder"}}))
    with pytest.raises(ConfigError, match="no LLM is configured"):
        reranker_from_config(load_config(overrides={"rerank": {"kind": "llm"}, "summarize": {"base_url": None, "backend": "extractive"}}))
    assert reranker_from_config(load_config()) is None  # cosine: the stored full-chunk vectors
