"""``--mode multi``: LLM variants (scripted fake), repair, fallbacks to PRF, fusion, MMR, budget."""

from __future__ import annotations

import pytest
from fake_llm_server import FakeLLMServer, error, reply, slow
from helpers.llm import FAST, KEY_ENV, ScriptedFakeChat

from arborag.errors import LLMError, QueryError
from arborag.llm import LLMClient
from arborag.query.multi import MultiHits

Q = "Where was the author of Xanadu born?"


def _ids(hits):
    return [h.node_id for h in hits]


def test_searchers_multi_offline_uses_prf(hops_index):
    hits = hops_index.search(Q, mode="multi", budget=40)
    assert isinstance(hits, MultiHits)
    tr = hits.trace
    assert tr.source == "prf" and tr.status == "ok"
    # the question, then up to 3 PRF variants (an expansion equal to an earlier one is dropped)
    assert 3 <= len(tr.variants) <= 4
    assert len({v.sparse for v in tr.variants}) == len(tr.variants)
    assert tr.variants[0].sparse == Q and not tr.variants[0].lucene
    for v in tr.variants[1:]:
        assert v.lucene and "^" in v.sparse and v.text.startswith(Q)
    # expansion terms come from the question and its top-10 feedback hits, and do expand it
    from arborag.query.prf import terms

    feedback = hops_index.search(Q, mode="hybrid", budget=None, k=10)
    allowed = set(terms(Q)).union(*(terms(h.text) for h in feedback))
    sent = [{t.split("^")[0] for t in v.sparse.split()} for v in tr.variants[1:]]
    assert all(words <= allowed for words in sent)
    assert any(words - set(terms(Q)) for words in sent)
    assert sum(h.n_tokens for h in hits) <= 40 and hits
    assert tr.usage.calls == 0


def test_searchers_multi_fuses_every_ranking_with_rrf(hops_index):
    from arborag.query.fusion import rrf

    n = len(hops_index)
    hits = hops_index.search(Q, mode="multi", budget=None, k=n, candidates=n)
    variants = hits.trace.variants
    rankings = [
        _ids(hops_index.search(v.sparse, mode="hybrid", budget=None, k=n, lucene=v.lucene,
                               vector=hops_index.embed_queries([v.text])[0]))
        for v in variants
    ]
    expected = rrf(rankings, k=hops_index.config.query.rrf_k)
    assert _ids(hits) == [i for i, _ in expected]
    assert [h.score for h in hits] == pytest.approx([s for _, s in expected])


def test_searchers_multi_budget_and_k(hops_index):
    for budget in (12, 25, 60):
        hits = hops_index.search(Q, mode="multi", budget=budget)
        assert 0 < sum(h.n_tokens for h in hits) <= budget
    assert len(hops_index.search(Q, mode="multi", budget=None, k=2)) == 2


def test_searchers_multi_llm_variants(hops_index):
    fake = ScriptedFakeChat('{"variants": ["Xanadu novel author", "Mira Solberg birthplace", "Where was Xanadu born"]}')
    hits = hops_index.search(Q, mode="multi", budget=40, llm=fake, n_variants=3)
    tr = hits.trace
    assert tr.source == "llm" and tr.status == "ok"
    assert [v.text for v in tr.variants] == [Q, "Xanadu novel author", "Mira Solberg birthplace", "Where was Xanadu born"]
    assert all(not v.lucene for v in tr.variants)
    assert fake.tags == ["query-variants@v1"]
    assert "Question: " + Q in fake.calls[0][1][-1]["content"] and "3 different" in fake.calls[0][1][-1]["content"]
    assert tr.usage.calls == 1 and tr.usage.tokens_in > 0


def test_searchers_multi_malformed_json_is_repaired(hops_index):
    fake = ScriptedFakeChat('Sure!\n```json\n{"variants": ["Mira Solberg birthplace", "Xanadu novel author",],}\n```')
    tr = hops_index.search(Q, mode="multi", budget=40, llm=fake).trace
    assert tr.source == "llm" and tr.status == "repaired"
    assert [v.text for v in tr.variants[1:]] == ["Mira Solberg birthplace", "Xanadu novel author"]


def test_searchers_multi_extra_variants_are_cut_and_repeats_dropped(hops_index):
    fake = ScriptedFakeChat('["a one", "' + Q + '", "b two", "c three", "d four"]')
    tr = hops_index.search(Q, mode="multi", budget=40, llm=fake, n_variants=2).trace
    assert [v.text for v in tr.variants[1:]] == ["a one", "b two"]


@pytest.mark.parametrize("answer", ["I am sorry, I cannot do that.", LLMError("fake-chat", "http 500 (4 attempts)")])
def test_searchers_multi_bad_llm_falls_back_to_prf(hops_index, answer):
    fake = ScriptedFakeChat(answer)
    hits = hops_index.search(Q, mode="multi", budget=40, llm=fake)
    tr = hits.trace
    assert tr.source == "prf" and tr.status.startswith("fallback:")
    assert len(tr.variants) >= 3 and all(v.lucene for v in tr.variants[1:])
    assert tr.usage.failures == 1 and tr.usage.events
    assert hits


def test_searchers_multi_server_500s_retried_then_prf(hops_index, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test")
    with FakeLLMServer(model="fake-model") as srv:
        srv.script("Question:", error(500))
        client = LLMClient(model="fake-model", base_url=srv.base_url, api_key_env=KEY_ENV, retries=2, **FAST)
        tr = hops_index.search(Q, mode="multi", budget=40, llm=client).trace
        assert len(srv.completions()) == 3  # first attempt + 2 retries
    assert tr.source == "prf" and "http 500 (3 attempts)" in tr.status
    assert client.stats.retries == 2 and client.stats.failures == 1


def test_searchers_multi_timeout_then_prf_and_recovery(hops_index, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test")
    with FakeLLMServer(model="fake-model") as srv:
        srv.script("Question:", slow(2.0), reply('{"variants": ["Mira Solberg birthplace"]}'))
        client = LLMClient(model="fake-model", base_url=srv.base_url, api_key_env=KEY_ENV, retries=0, timeout_s=0.3, **FAST)
        first = hops_index.search(Q, mode="multi", budget=40, llm=client).trace
        second = hops_index.search(Q, mode="multi", budget=40, llm=client).trace
    assert first.source == "prf" and "timeout" in first.status
    assert second.source == "llm" and second.variants[1].text == "Mira Solberg birthplace"


def test_searchers_multi_llm_cache_serves_the_second_query(hops_index, tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test")
    with FakeLLMServer(model="fake-model") as srv:
        srv.script("Question:", reply('{"variants": ["Mira Solberg birthplace"]}'))
        client = LLMClient(model="fake-model", base_url=srv.base_url, api_key_env=KEY_ENV, cache_dir=tmp_path, **FAST)
        hops_index.search(Q, mode="multi", budget=40, llm=client)
        again = hops_index.search(Q, mode="multi", budget=40, llm=client).trace
        assert len(srv.completions()) == 1
    assert again.usage.cache_hits == 1 and again.usage.tokens_in == 0


def test_searchers_multi_mmr_reorders_within_the_same_candidates(hops_index):
    n = len(hops_index)
    plain = hops_index.search(Q, mode="multi", budget=None, k=n)
    diverse = hops_index.search(Q, mode="multi", budget=None, k=n, mmr=True)
    assert sorted(_ids(plain)) == sorted(_ids(diverse))
    assert diverse.trace.mmr and not plain.trace.mmr
    assert _ids(plain)[0] == _ids(diverse)[0]  # the best fused hit is picked first either way
    pure_relevance = hops_index.search(Q, mode="multi", budget=None, k=n, mmr=True, mmr_lambda=1.0)
    assert _ids(pure_relevance) == _ids(plain)


def test_searchers_multi_options_checked(hops_index):
    with pytest.raises(QueryError, match="expander"):
        hops_index.search(Q, mode="multi", expander="magic")
    with pytest.raises(QueryError, match="needs an LLM"):
        hops_index.search(Q, mode="multi", expander="llm")
    with pytest.raises(QueryError, match="mmr_lambda"):
        hops_index.search(Q, mode="multi", mmr=True, mmr_lambda=2.0)
    assert len(hops_index.search(Q, mode="multi", n_variants=0, budget=40).trace.variants) == 1


def test_searchers_multi_question_weight_counts_the_question_twice(hops_index):
    from arborag.query.fusion import rrf

    n = len(hops_index)
    hits = hops_index.search(Q, mode="multi", budget=None, k=n, candidates=n, question_weight=2)
    rankings = [
        _ids(hops_index.search(v.sparse, mode="hybrid", budget=None, k=n, lucene=v.lucene,
                               vector=hops_index.embed_queries([v.text])[0]))
        for v in hits.trace.variants
    ]
    expected = rrf([rankings[0], rankings[0], *rankings[1:]], k=hops_index.config.query.rrf_k)
    assert _ids(hits) == [i for i, _ in expected]
