"""The shared answering step (arborag.llm.answering) and ``eval --answer`` through it."""

from __future__ import annotations

import pyarrow as pa
import pytest
from fake_llm_server import FakeLLMServer, error, reply
from helpers.llm import KEY_ENV, ScriptedFakeChat

from arborag.errors import ConfigError, LLMError
from arborag.llm.answering import answer_passages, numbered_context, strip_citations
from arborag.llm.types import Usage

PASSAGES = ["Xanadu is a novel by Mira Solberg.", "Mira Solberg was born in Bergen."]


def test_searchers_answering_statuses():
    ok = answer_passages(ScriptedFakeChat('{"supported": true, "answer": "In Bergen [2][1].", "short": "Bergen", "citations": [2]}'),
                         "Where?", PASSAGES)
    assert ok.status == "answered" and ok.citations == [2, 1] and ok.prediction() == "Bergen"
    no_short = answer_passages(ScriptedFakeChat('{"supported": true, "answer": "Bergen [2].", "citations": [2]}'), "Where?", PASSAGES)
    assert no_short.prediction() == "Bergen."
    refused = answer_passages(ScriptedFakeChat('{"supported": false, "answer": "Not said.", "short": "", "citations": []}'), "Who?", PASSAGES)
    assert refused.status == "refused" and refused.prediction() == ""
    usage = Usage()
    failed = answer_passages(ScriptedFakeChat(LLMError("m", "http 503 (4 attempts)")), "Who?", PASSAGES, usage=usage)
    assert failed.status == "failed" and "503" in failed.answer and failed.prediction() == "" and usage.failures == 1
    garbage = answer_passages(ScriptedFakeChat("{{{"), "Who?", PASSAGES)
    assert garbage.status == "refused" and garbage.warnings
    assert answer_passages(ScriptedFakeChat(), "Who?", []).status == "refused"  # no call without passages


def test_searchers_answering_context_and_markers():
    assert numbered_context(["a  b", "c"], ["T1", ""]) == "[1] (T1) a b\n\n[2] c"
    assert strip_citations("In Bergen [2][1], Norway [3].") == "In Bergen, Norway."


def _queries_and_hits():
    from arborag.storage.schemas import HITS, QUERIES

    queries = pa.Table.from_pylist(
        [{"qid": "q1", "question": "Where was Solberg born?", "answers": ["Bergen"], "gold_ids": [], "gold_texts": [], "type": None},
         {"qid": "q2", "question": "What colour is the sky of Mars?", "answers": ["butterscotch"], "gold_ids": [], "gold_texts": [], "type": None}],
        schema=QUERIES,
    )
    base = {"strategy": "sentence", "system": "multi", "mode": "multi", "budget": 100, "latency_ms": 1.0, "embed_ms": 0.0,
            "node_ids": [], "levels": [], "scores": [], "n_tokens": [], "doc_ids": [], "error": None}
    hits = pa.Table.from_pylist([{**base, "qid": "q1", "texts": PASSAGES}, {**base, "qid": "q2", "texts": PASSAGES}], schema=HITS)
    return queries, hits


def test_searchers_eval_answers_through_ask():
    from arborag.tasks.evaluation.answer import ask_answerer, collect_answers

    queries, hits = _queries_and_hits()
    fake = ScriptedFakeChat('{"supported": true, "answer": "Bergen [2].", "short": "Bergen", "citations": [2]}',
                            '{"supported": false, "answer": "The passages do not say.", "citations": []}')
    answer_many = ask_answerer(fake)
    preds = collect_answers([hits], queries, 100, answer_many)
    assert preds == {("q1", "sentence", "multi", 100): "Bergen", ("q2", "sentence", "multi", 100): ""}
    assert fake.tags == ["answer-with-citations@v2"] * 2
    assert "[1] Xanadu is a novel" in fake.calls[0][1][-1]["content"]
    assert answer_many.stats["answered"] == 1 and answer_many.stats["refused"] == 1


def test_searchers_eval_llm_answerer_styles_against_fake_server(tmp_path, monkeypatch):
    from arborag.config import load_config
    from arborag.tasks.evaluation.answer import collect_answers, llm_answerer

    monkeypatch.setenv(KEY_ENV, "sk-test")
    queries, hits = _queries_and_hits()
    with FakeLLMServer(model="fake-model") as srv:
        srv.script("Question: Where was Solberg born?\n\nReply", reply('{"supported": true, "answer": "Bergen [2]", "short": "Bergen", "citations": [2]}'))
        srv.script("Question: What colour", error(500))
        srv.script("Question: Where was Solberg born?\nAnswer:", reply("Bergen, Norway"))
        cfg = load_config(overrides={"summarize": {"base_url": srv.base_url, "llm_model": "fake-model", "api_key_env": KEY_ENV,
                                                    "retries": 0, "concurrency": 2}})
        ask_preds = collect_answers([hits], queries, 100, llm_answerer(cfg, tmp_path / "a"))
        assert ask_preds[("q1", "sentence", "multi", 100)] == "Bergen"
        assert ask_preds[("q2", "sentence", "multi", 100)] == ""  # a failed call scores as no answer
        short = collect_answers([hits], queries, 100, llm_answerer(cfg, tmp_path / "s", style="short"))
        assert short[("q1", "sentence", "multi", 100)] == "Bergen, Norway"


def test_searchers_eval_answerer_needs_an_llm(monkeypatch):
    from arborag.config import load_config
    from arborag.tasks.evaluation.answer import llm_answerer

    for var in ("ARBORAG_LLM_BASE_URL", "OPENAI_API_KEY", "ARBORAG_SUMMARIZE__BASE_URL", "ARBORAG_SUMMARIZE__BACKEND"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match="ARBORAG_LLM_BASE_URL"):
        llm_answerer(load_config(), None)  # type: ignore[arg-type]
