"""Versioned prompts, strict-then-repaired structured replies, and their fallbacks (arborag.llm)."""

from __future__ import annotations

import pytest
from fake_llm_server import FakeLLMServer, error, reply
from helpers.llm import FAST, KEY_ENV, ScriptedFakeChat

from arborag.errors import BackendUnavailable, LLMError
from arborag.llm import LLMClient
from arborag.llm.prompts import PROMPTS, QUERY_VARIANTS, RAPTOR_SUMMARY, Prompt, get_prompt, register
from arborag.llm.structured import (
    CitedAnswer,
    QueryVariants,
    Rewrite,
    SubQuestions,
    Verdict,
    ask_structured,
    extract_json,
    parse_reply,
)
from arborag.llm.types import Usage


def test_searchers_prompts_are_registered_with_versions():
    assert PROMPTS["raptor-summary"] is RAPTOR_SUMMARY
    assert RAPTOR_SUMMARY.tag == "raptor-summary@raptor-v1"
    assert get_prompt("query-variants").tag == "query-variants@v1"
    with pytest.raises(KeyError, match="known"):
        get_prompt("no-such-prompt")
    with pytest.raises(ValueError, match="already registered"):
        register(Prompt(name="query-variants", version="v1", user="other {question}"))
    msgs = QUERY_VARIANTS.messages(n=3, question="Who?")
    assert msgs[0]["role"] == "system" and "Question: Who?" in msgs[-1]["content"]


def test_searchers_summarizer_prompt_unchanged():
    from arborag.tasks.summarize.llm import RAPTOR_PROMPT, RAPTOR_SYSTEM, build_messages

    assert RAPTOR_SYSTEM == "You are a helpful assistant."
    assert build_messages(["a\nb", "c"]) == [
        {"role": "system", "content": RAPTOR_SYSTEM},
        {"role": "user", "content": RAPTOR_PROMPT.format(context="a b\n\nc")},
    ]


def test_searchers_prompt_version_is_part_of_the_cache_key(tmp_path):
    client = LLMClient(model="m", base_url="http://127.0.0.1:9/v1", cache_dir=tmp_path)
    msgs = QUERY_VARIANTS.messages(n=3, question="q")
    params = {"max_tokens": 10, "temperature": 0.0}
    plain = client.cache_key(msgs, params)
    v1 = client.cache_key(msgs, params, "query-variants@v1")
    v2 = client.cache_key(msgs, params, "query-variants@v2")
    assert len({plain, v1, v2}) == 3
    assert client.cache_key(msgs, params, "query-variants@v1") == v1


@pytest.mark.parametrize(
    ("text", "status", "variants"),
    [
        ('{"variants": ["a", "b"]}', "ok", ["a", "b"]),
        ('```json\n{"variants": ["a", "b",],}\n```', "repaired", ["a", "b"]),
        ('Here you go: ["x", "y"] hope it helps', "repaired", ["x", "y"]),
        ('{"queries": ["a", "a", " b "]}', "ok", ["a", "b"]),
        ('{"variants": ["a", "b', "repaired", ["a", "b"]),  # truncated mid-string
        ("{'variants': ['single quotes']}", "repaired", ["single quotes"]),
        ("1. first query\n2. second query", "repaired:text", ["first query", "second query"]),
    ],
)
def test_searchers_variants_parsed_or_repaired(text, status, variants):
    parsed = parse_reply(text, QueryVariants)
    assert parsed.status == status
    assert parsed.value is not None and parsed.value.variants == variants
    assert parsed.ok


def test_searchers_unparseable_reply_is_invalid_not_an_exception():
    parsed = parse_reply("I cannot help with that.", QueryVariants)
    assert parsed.value is None and parsed.status.startswith("invalid")
    assert not parsed.ok
    assert parse_reply('{"variants": []}', QueryVariants).value is None  # empty list violates the schema


def test_searchers_other_schemas():
    assert parse_reply('{"questions": []}', SubQuestions).value.questions == []
    assert parse_reply("[1] Who is A?\n[2] Where is B?", SubQuestions).value.questions == ["Who is A?", "Where is B?"]
    assert parse_reply('{"sufficient": "no", "reason": "x"}', Verdict).value.sufficient is False
    assert parse_reply("Yes. The context names him.", Verdict).value.sufficient is True
    assert parse_reply('{"query": "+\\"Ada Lovelace\\" born"}', Rewrite).value.query == '+"Ada Lovelace" born'
    ans = parse_reply('{"supported": true, "answer": "At the ball [2].", "citations": ["[2]", 3, 2]}', CitedAnswer)
    assert ans.value.citations == [2, 3]
    text_ans = parse_reply("She married the prince [1][3].", CitedAnswer)
    assert text_ans.status == "repaired:text" and text_ans.value.citations == [1, 3] and text_ans.value.supported


def test_searchers_extract_json_balances_strings_and_brackets():
    assert extract_json('x {"a": "}{", "b": [1, 2]} y {"c": 1}') == '{"a": "}{", "b": [1, 2]}'
    assert extract_json("no json here") is None


def test_searchers_ask_structured_records_usage_and_falls_back():
    usage = Usage()
    fake = ScriptedFakeChat('{"variants": ["v1", "v2"]}', "garbage", LLMError("fake-chat", "http 500 (4 attempts)"))
    fallback = QueryVariants(variants=["fallback"])
    ok = ask_structured(fake, QUERY_VARIANTS, QueryVariants, fallback=fallback, usage=usage, n=2, question="q")
    assert ok.status == "ok" and ok.value.variants == ["v1", "v2"]
    bad = ask_structured(fake, QUERY_VARIANTS, QueryVariants, fallback=fallback, usage=usage, n=2, question="q")
    assert bad.value is fallback and bad.status.startswith("fallback: invalid")
    down = ask_structured(fake, QUERY_VARIANTS, QueryVariants, fallback=fallback, usage=usage, n=2, question="q")
    assert down.value is fallback and "http 500" in down.status
    assert fake.tags == ["query-variants@v1"] * 3
    assert usage.calls == 2 and usage.failures == 2 and usage.tokens_in > 0
    assert any("http 500" in e for e in usage.events)


def test_searchers_client_retries_500_then_falls_back(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test")
    with FakeLLMServer(model="fake-model") as srv:
        srv.script("Question: flaky", error(500), reply('{"variants": ["after retry"]}'))
        srv.script("Question: down", error(503))
        client = LLMClient(model="fake-model", base_url=srv.base_url, api_key_env=KEY_ENV, retries=2, **FAST)
        usage = Usage()
        fb = QueryVariants(variants=["fb"])
        got = ask_structured(client, QUERY_VARIANTS, QueryVariants, fallback=fb, usage=usage, n=3, question="flaky")
        assert got.value.variants == ["after retry"]
        assert client.stats.retries == 1
        lost = ask_structured(client, QUERY_VARIANTS, QueryVariants, fallback=fb, usage=usage, n=3, question="down")
        assert lost.value is fb and "http 503" in lost.status and "3 attempts" in lost.status
        assert usage.failures == 1


def test_searchers_unreachable_endpoint_falls_back():
    client = LLMClient(model="m", base_url="http://127.0.0.1:9/v1", retries=0, timeout_s=2)
    got = ask_structured(client, QUERY_VARIANTS, QueryVariants, fallback=None, n=3, question="q")
    assert got.value is None and got.status.startswith("fallback: call failed")
    with pytest.raises(BackendUnavailable):
        client.complete([{"role": "user", "content": "x"}], max_tokens=5)
