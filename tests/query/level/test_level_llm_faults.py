"""``--mode level`` against the FAKE OpenAI-compatible server (tests/fake_llm_server.py) through the
real LLMClient: timeouts and 500s mid-search, an unreachable endpoint, and a real endpoint when
ARBORAG_LLM_BASE_URL is set (marker ``llm``)."""

from __future__ import annotations

import os
import socket

import pytest
from fake_llm_server import FakeLLMServer, error, reply, slow
from helpers.level import QUESTION, level_index  # noqa: F401 - fixture
from helpers.llm import FAST, KEY_ENV

from arborag.llm import LLMClient

DECOMPOSE = "atomic sub-questions, each asking"
REWRITE = "Rewrite the question as a Lucene query"
SPARSE_FB = "Query sent:"
HYDE = "that would answer the question, as it might appear"
DENSE_FB = "write a new short"
SUMMARIZE = "state what the passages say"
VERIFY = "Facts found so far"

# read at import: the level_index fixture clears the LLM variables for the fake-server tests
REAL_URL = os.environ.get("ARBORAG_LLM_BASE_URL")
REAL_MODEL = os.environ.get("ARBORAG_LLM_MODEL", "local")


def _client(srv, **kw):
    return LLMClient(model="fake-model", base_url=srv.base_url, api_key_env=KEY_ENV, **{"retries": 1, "timeout_s": 5, **FAST, **kw})


def _script_happy(srv):
    srv.script(DECOMPOSE, reply('{"questions": ["Who wrote the novel Xanadu?", "Where was Mira Solberg born?"]}'))
    srv.script(REWRITE, reply('{"query": "\\"Xanadu\\" novel"}'))
    srv.script(SPARSE_FB, reply('{"sufficient": true}'))
    srv.script(HYDE, reply('{"passage": "Xanadu is a novel by a Norwegian author."}'))
    srv.script(DENSE_FB, reply('{"sufficient": true, "passage": ""}'))
    srv.script(SUMMARIZE, reply("Mira Solberg wrote Xanadu."))
    srv.script(VERIFY, reply('{"sufficient": true, "questions": []}'))


def test_level_500s_mid_search_fall_back_and_finish(level_index):
    with FakeLLMServer(model="fake-model") as srv:
        srv.script(HYDE, error(500))  # every HyDE call fails, also after the retry
        srv.script(SPARSE_FB, reply('{"sufficient": true}'), error(500))  # the first feedback works, then 500s
        _script_happy(srv)
        hits = level_index.search(QUESTION, mode="level", budget=200, llm=_client(srv))
    tr = hits.trace
    assert tr.plan == "llm" and len(tr.sub_questions) == 2
    hyde_calls = [c for c in tr.calls if c.step == "hyde"]
    assert len(hyde_calls) == 2 and all("http 500" in c.error for c in hyde_calls)
    dense = [r for s in tr.sub_questions for r in s.runs if r.searcher == "dense"]
    assert all(r.attempts[0].action == "question" for r in dense)  # HyDE failed: the sub-question itself
    fb = [c for c in tr.calls if c.step == "sparse-feedback"]
    assert fb[0].error is None and "http 500" in fb[1].error
    assert len(srv.completions(HYDE)) == 4  # 2 calls x (1 + 1 retry)
    assert hits and all(s.summary for s in tr.sub_questions)


def test_level_timeout_mid_search_falls_back(level_index):
    with FakeLLMServer(model="fake-model") as srv:
        srv.script(VERIFY, slow(3.0, '{"sufficient": false, "questions": ["x?"]}'))
        _script_happy(srv)
        hits = level_index.search(QUESTION, mode="level", budget=200, llm=_client(srv, timeout_s=0.5, retries=0))
    tr = hits.trace
    verify = [c for c in tr.calls if c.step == "verify"]
    assert len(verify) == 1 and "timeout" in verify[0].error
    assert tr.verdicts[0].enough and "stopped" in tr.verdicts[0].reason
    assert tr.rounds == 1 and hits


def test_level_unreachable_endpoint_runs_the_offline_plan(level_index):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    llm = LLMClient(model="m", base_url=f"http://127.0.0.1:{port}/v1", api_key_env=KEY_ENV, retries=0, timeout_s=2, **FAST)
    hits = level_index.search(QUESTION, mode="level", budget=100, llm=llm)
    tr = hits.trace
    assert tr.plan == "offline" and "unreachable" in tr.notice
    assert len(tr.calls) == 1 and tr.calls[0].step == "decompose"  # nothing asked after the endpoint was found down
    assert [s.text for s in tr.sub_questions] == [QUESTION]
    assert tr.sub_questions[0].runs[0].attempts[0].action == "offline"
    assert hits


def test_level_endpoint_from_config(level_index, monkeypatch):
    """With ARBORAG_LLM_BASE_URL set, the query uses that endpoint without an llm= option."""
    from arborag.config import load_config

    with FakeLLMServer(model="fake-model") as srv:
        _script_happy(srv)
        monkeypatch.setenv("ARBORAG_LLM_BASE_URL", srv.base_url)
        monkeypatch.setenv("ARBORAG_LLM_MODEL", "fake-model")
        monkeypatch.setenv("ARBORAG_SUMMARIZE__API_KEY_ENV", KEY_ENV)
        level_index.config = load_config()
        tr = level_index.search(QUESTION, mode="level", budget=200).trace
        assert tr.plan == "llm" and srv.completions(DECOMPOSE)
        assert tr.tokens_in > 0


@pytest.mark.llm
def test_level_real_endpoint(level_index):
    """A real OpenAI-compatible endpoint (e.g. scripts/local_llm.sh): the trace is complete and nothing crashes."""
    base = REAL_URL
    if not base:
        pytest.skip("ARBORAG_LLM_BASE_URL is not set: no real LLM endpoint to test against (docs/LLM.md)")
    llm = LLMClient(model=REAL_MODEL, base_url=base,
                    timeout_s=float(os.environ.get("ARBORAG_LLM_TIMEOUT_S", "300")), retries=1)
    hits = level_index.search(QUESTION, mode="level", budget=200, llm=llm, max_rounds=2, sparse_rounds=2, dense_rounds=2)
    tr = hits.trace
    assert tr.plan == "llm" and tr.calls and tr.sub_questions
    assert all(c.tokens_in > 0 or c.cached or c.error for c in tr.calls)
    assert hits and sum(h.n_tokens for h in hits) <= 200
