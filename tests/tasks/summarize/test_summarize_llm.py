"""tasks/summarize/llm.py: OpenAISummarizer (and the client under it) against a local fake OpenAI server.

Backoff delays are made tiny through constructor options; nothing here leaves 127.0.0.1 except
the ``llm``-marked test, which talks to the endpoint in ARBORAG_LLM_BASE_URL when it is set.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time

import pytest
from fake_llm_server import FakeLLMServer, error, reply, slow
from helpers.llm import FAST, KEY_ENV, SECRET, api_key, server  # noqa: F401 (fixtures)

from arborag.config import SummarizeConfig
from arborag.errors import BackendUnavailable, LLMError
from arborag.tokenizer import get_tokenizer
from arborag.tasks.summarize.extractive import ExtractiveSummarizer
from arborag.tasks.summarize.llm import RAPTOR_PROMPT, OpenAISummarizer, build_messages

CLUSTERS = [
    ["Alpha one. The first cluster talks about rivers.", "Rivers flow to the sea."],
    ["Beta two. The second cluster is about mountains.", "Mountains are tall."],
    ["Gamma three. The third cluster covers deserts.", "Deserts are dry."],
]



def make_cfg(srv: FakeLLMServer | None, **kw) -> SummarizeConfig:
    base = {
        "backend": "openai",
        "base_url": srv.base_url if srv else None,
        "llm_model": "fake-model",
        "api_key_env": KEY_ENV,
        "timeout_s": 5.0,
        "retries": 3,
        "concurrency": 2,
        "max_tokens": 120,
    }
    base.update(kw)
    return SummarizeConfig(**base)


def make_summarizer(srv, cache_dir=None, *, cfg=None, **opts) -> OpenAISummarizer:
    cfg = cfg or make_cfg(srv)
    return OpenAISummarizer(cfg, cache_dir=cache_dir, fallback=ExtractiveSummarizer(cfg), **{**FAST, **opts})


def test_normal_replies_keep_order_and_send_the_raptor_prompt(server):
    summ = make_summarizer(server)
    seen: list[int] = []
    out = summ.summarize_many(CLUSTERS, progress=seen.append)
    assert [r.status for r in out] == ["ok", "ok", "ok"]
    for r, cluster in zip(out, CLUSTERS):
        assert r.text.startswith("fake summary of: ")
        assert r.text.endswith(cluster[-1] + ":")  # the reply echoes the end of *this* cluster's prompt
    assert sum(seen) == 3
    reqs = server.completions()
    assert len(reqs) == 3
    body = reqs[0].body
    assert body["model"] == "fake-model"
    assert body["max_tokens"] == 120
    assert body["temperature"] == 0.0
    assert body["messages"][0] == {"role": "system", "content": "You are a helpful assistant."}
    prompts = sorted(r.last_message for r in reqs)
    assert prompts[0] == RAPTOR_PROMPT.format(context="\n\n".join(CLUSTERS[0]))
    assert reqs[0].headers["authorization"] == f"Bearer {SECRET}"
    assert summ.name == "openai:fake-model/raptor-v1/120"
    c = summ.counters()
    assert (c["llm_calls"], c["llm_cache_hits"], c["llm_failures"], c["summaries_fallback"]) == (3, 0, 0, 0)


def test_timeout_then_success(server):
    server.script("Beta two", slow(3.0), reply("beta summary"))
    summ = make_summarizer(server, cfg=make_cfg(server, timeout_s=0.4))
    t0 = time.monotonic()
    out = summ.summarize_many(CLUSTERS)
    assert time.monotonic() - t0 < 2.5  # did not wait for the slow reply
    assert [r.status for r in out] == ["ok", "ok", "ok"]
    assert out[1].text == "beta summary"
    assert len(server.completions("Beta two")) == 2
    assert summ.counters()["llm_retries"] == 1


def test_500s_are_retried(server):
    server.script("Alpha one", error(500), error(502), error(503), reply("alpha summary"))
    summ = make_summarizer(server)
    out = summ.summarize_many(CLUSTERS)
    assert out[0].status == "ok" and out[0].text == "alpha summary"
    assert len(server.completions("Alpha one")) == 4
    c = summ.counters()
    assert c["llm_retries"] == 3 and c["llm_failures"] == 0


@pytest.mark.parametrize(("header", "value", "wait_s"), [("retry_after", "1", 1.0), ("retry_after_ms", "400", 0.4)])
def test_429_waits_for_retry_after(server, header, value, wait_s):
    server.script("Gamma three", error(429, **{header: value}), reply("gamma summary"))
    summ = make_summarizer(server)  # backoff alone would wait ~1 ms
    out = summ.summarize_many(CLUSTERS)
    assert out[2].status == "ok" and out[2].text == "gamma summary"
    first, second = server.completions("Gamma three")
    assert second.received_at - first.received_at >= wait_s * 0.9


def test_permanent_failure_falls_back_and_others_still_use_the_llm(server, caplog):
    server.script("Beta two", error(500, message="model exploded"))
    cfg = make_cfg(server, retries=2)
    summ = make_summarizer(server, cfg=cfg)
    with caplog.at_level(logging.WARNING, logger="arborag.llm"):
        out = summ.summarize_many(CLUSTERS)
    assert out[1].status.startswith("fallback:")
    assert "http 500" in out[1].status and "3 attempts" in out[1].status
    expected = ExtractiveSummarizer(cfg).summarize_many([CLUSTERS[1]])[0].text
    assert out[1].text == expected  # the extractive summary, not an error message
    assert "exploded" not in out[1].text and "Error" not in out[1].text
    for i in (0, 2):
        assert out[i].status == "ok" and out[i].text.startswith("fake summary of: ")
    assert len(server.completions("Beta two")) == 3
    c = summ.counters()
    assert (c["llm_failures"], c["summaries_fallback"], c["llm_calls"]) == (1, 1, 2)
    assert "retry 1/2" in caplog.text


def test_empty_reply_counts_as_failure_and_is_not_cached(server, tmp_path):
    server.script("Alpha one", reply("   \n "))
    out = make_summarizer(server, tmp_path / "llm").summarize_many(CLUSTERS)
    assert out[0].status == "fallback:empty reply" and out[0].text.strip()
    assert [r.status for r in out[1:]] == ["ok", "ok"]
    again = make_summarizer(server, tmp_path / "llm")
    again.summarize_many(CLUSTERS)
    assert len(server.completions("Alpha one")) == 2  # asked again: an empty reply is not cached
    assert again.counters()["llm_cache_hits"] == 2


def test_empty_cluster_goes_to_fallback_without_a_call(server):
    out = make_summarizer(server).summarize_many([["  ", ""], CLUSTERS[0]])
    assert out[0].status == "fallback:empty input"
    assert out[1].status == "ok"
    assert len(server.completions()) == 1


def test_cache_second_identical_call_makes_no_request(server, tmp_path):
    cache = tmp_path / "cache" / "llm"
    first = make_summarizer(server, cache).summarize_many(CLUSTERS)
    n = len(server.completions())
    assert n == 3
    shards = list(cache.glob("calls-*.jsonl"))
    assert len(shards) == 1
    records = [json.loads(line) for line in shards[0].read_text(encoding="utf-8").splitlines()]
    assert len(records) == 3 and all("key" in r and "text" in r for r in records)

    summ = make_summarizer(server, cache)  # a new process would do the same: read from disk
    second = summ.summarize_many(CLUSTERS)
    assert len(server.completions()) == n  # no HTTP request at all
    assert [r.text for r in second] == [r.text for r in first]
    assert all(r.status == "ok" and r.tokens_in == 0 and r.tokens_out == 0 for r in second)
    c = summ.counters()
    assert (c["llm_cache_hits"], c["llm_calls"], c["tokens_in"], c["tokens_out"]) == (3, 0, 0, 0)

    # Another model, prompt or max_tokens is another key.
    other = make_summarizer(server, cache, cfg=make_cfg(server, max_tokens=60))
    other.summarize_many(CLUSTERS[:1])
    assert len(server.completions()) == n + 1


def test_duplicate_clusters_in_one_batch_are_sent_once(server):
    summ = make_summarizer(server)
    out = summ.summarize_many([CLUSTERS[0], CLUSTERS[0]])
    assert out[0].text == out[1].text and len(server.completions()) == 1
    assert out[1].tokens_in == 0  # spent once


def test_token_accounting_from_usage_and_from_our_tokenizer(server):
    server.script("Alpha one", reply("alpha summary", prompt_tokens=111, completion_tokens=22))
    server.script("Beta two", reply("beta summary words here", usage=False))
    summ = make_summarizer(server)
    out = summ.summarize_many(CLUSTERS[:2])
    assert (out[0].tokens_in, out[0].tokens_out) == (111, 22)
    tok = get_tokenizer()
    msgs = build_messages(CLUSTERS[1])
    assert out[1].tokens_in == sum(tok.count(m["content"]) for m in msgs)
    assert out[1].tokens_out == tok.count("beta summary words here")
    c = summ.counters()
    assert c["tokens_in"] == 111 + out[1].tokens_in
    assert c["tokens_out"] == 22 + out[1].tokens_out
    assert (summ.tokens_in, summ.tokens_out) == (c["tokens_in"], c["tokens_out"])


@pytest.mark.parametrize("bound", [1, 3])
def test_concurrency_bound_is_respected(server, bound):
    server.default = reply(delay_s=0.3)
    clusters = [[f"Cluster number {i} about topic {i}."] for i in range(2 * bound + 1)]
    summ = make_summarizer(server, cfg=make_cfg(server, concurrency=bound))
    out = summ.summarize_many(clusters)
    assert all(r.status == "ok" for r in out)
    assert server.max_in_flight <= bound  # never more than the bound...
    assert server.max_in_flight >= min(bound, 2)  # ...and really in parallel


def test_api_key_never_appears_in_logs_repr_errors_or_cache(server, tmp_path, caplog):
    server.script("Alpha one", error(500), reply("ok"))
    server.script("unauthorized", error(401, echo_auth=True))
    cache = tmp_path / "llm"
    summ = make_summarizer(server, cache)
    with caplog.at_level(logging.DEBUG):  # every logger, openai's and httpx's included
        summ.summarize_many(CLUSTERS)
        with pytest.raises(LLMError) as info:  # a rejected key stops the batch: no silent fallback
            summ.summarize_many([["unauthorized request"], ["Delta four."]])
    err = info.value
    assert "http 401" in err.reason and KEY_ENV in err.reason  # says which variable to fix
    assert server.completions("unauthorized")[0].headers["authorization"] == f"Bearer {SECRET}"
    texts = [caplog.text, str(err), repr(err), err.reason, repr(summ), repr(summ.client), str(summ.counters())]
    texts += [p.read_text(encoding="utf-8") for p in cache.glob("*")]
    for text in texts:
        assert SECRET not in text
    assert "***" in err.reason  # the server echoed the key back; we scrubbed it
    assert caplog.records  # logging was on


def test_unreachable_endpoint_raises_backend_unavailable(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    cfg = make_cfg(None, base_url=f"http://127.0.0.1:{port}/v1", retries=1)
    summ = make_summarizer(None, cfg=cfg)
    with pytest.raises(BackendUnavailable) as info:
        summ.summarize_many(CLUSTERS)
    assert info.value.url == f"http://127.0.0.1:{port}/v1"
    assert "connection error" in info.value.hint and "ARBORAG_LLM_BASE_URL" in info.value.hint


def test_missing_key_for_a_local_server_uses_a_placeholder(server, monkeypatch):
    monkeypatch.delenv(KEY_ENV)
    out = make_summarizer(server).summarize_many(CLUSTERS[:1])
    assert out[0].status == "ok"
    assert server.completions()[0].headers["authorization"] == "Bearer sk-no-key-required"


@pytest.mark.llm
def test_real_endpoint(tmp_path):
    """Runs against a real OpenAI-compatible server: ARBORAG_LLM_BASE_URL (+ ARBORAG_LLM_MODEL)."""
    base_url = os.environ.get("ARBORAG_LLM_BASE_URL")
    if not base_url:
        pytest.skip("ARBORAG_LLM_BASE_URL is not set (start a local server, see docs/LLM.md)")
    cfg = SummarizeConfig(
        backend="openai",
        base_url=base_url,
        llm_model=os.environ.get("ARBORAG_LLM_MODEL", "gpt-4o-mini"),
        max_tokens=60,
        timeout_s=float(os.environ.get("ARBORAG_LLM_TIMEOUT_S", "300")),
        concurrency=1,
        retries=1,
    )
    summ = OpenAISummarizer(cfg, cache_dir=tmp_path, fallback=ExtractiveSummarizer(cfg))
    clusters = [
        [
            "The Nile is the longest river in Africa and flows north into the Mediterranean Sea.",
            "Its two main tributaries are the White Nile and the Blue Nile, which meet at Khartoum.",
        ]
    ]
    out = summ.summarize_many(clusters)
    assert out[0].status == "ok", out[0].status
    assert out[0].text.strip()
    assert out[0].tokens_out > 0
    again = OpenAISummarizer(cfg, cache_dir=tmp_path, fallback=ExtractiveSummarizer(cfg)).summarize_many(clusters)
    assert again[0].text == out[0].text  # cached
