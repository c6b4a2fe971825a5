"""LLM titles through the tree stage's hook (tasks/stages/tree.labelled): a real HTTP client against
tests/fake_llm_server.py (a scripted fake, not a model), and an opt-in test against a real endpoint."""

from __future__ import annotations

import os

import pytest
from fake_llm_server import error, reply
from helpers.llm import FAST, KEY_ENV, api_key, server  # noqa: F401 - fixtures
from test_labels import SUMMARIES, labels_of, tree

from arborag.config import SummarizeConfig
from arborag.tasks.stages.tree import labelled
from arborag.tasks.summarize.extractive import ExtractiveSummarizer
from arborag.tasks.summarize.llm import OpenAISummarizer


def summarizer(base_url: str, **kw) -> OpenAISummarizer:
    cfg = SummarizeConfig(backend="openai", base_url=base_url, llm_model=kw.pop("model", "fake-model"), api_key_env=KEY_ENV,
                          timeout_s=kw.pop("timeout_s", 5.0), retries=1, concurrency=1, max_tokens=60)
    return OpenAISummarizer(cfg, cache_dir=None, fallback=ExtractiveSummarizer(cfg), **kw)


def test_an_llm_summarizer_titles_new_clusters_and_a_failed_call_keeps_the_keyword_title(server) -> None:  # noqa: F811
    server.script("Summary: Apples and orchards.", reply('Title: "Orchards and the Apple Harvest"\nThis group is about fruit.'))
    server.script("Summary: Ships in the harbour.", error(500))
    nodes, edges = tree()
    out = labels_of(labelled(nodes, edges, summarizer(server.base_url, **FAST)))
    assert out["s1"]["title"] == "Orchards and the Apple Harvest" and out["s1"]["title_source"] == "llm"
    assert out["s2"]["title_source"] == "ctfidf" and out["s2"]["title"].count("·") == 2  # the call failed: keyword title
    assert out["r"]["title_source"] == "llm" and out["r"]["title"].startswith("fake summary of:")  # the fake's default reply
    prompts = [r.last_message for r in server.completions()]
    assert {p.split("Summary: ")[1].split("\n")[0] for p in prompts} == {t for _, t in SUMMARIES.values()}
    assert all(p.startswith("Write a title of at most eight words") and "Keywords: " in p for p in prompts)
    assert out["s1"]["keywords"][0] == "apple"  # keywords stay c-TF-IDF's


def test_the_extractive_summarizer_makes_no_llm_call(server) -> None:  # noqa: F811
    nodes, edges = tree()
    out = labels_of(labelled(nodes, edges, ExtractiveSummarizer(None)))
    assert {out[s]["title_source"] for s in SUMMARIES} <= {"ctfidf", "text"} and not server.completions()


@pytest.mark.llm
def test_real_endpoint_titles(tmp_path) -> None:
    """Runs against a real OpenAI-compatible server: ARBORAG_LLM_BASE_URL (+ ARBORAG_LLM_MODEL)."""
    base_url = os.environ.get("ARBORAG_LLM_BASE_URL")
    if not base_url:
        pytest.skip("ARBORAG_LLM_BASE_URL is not set (start a local server, see docs/LLM.md)")
    nodes, edges = tree()
    summ = summarizer(base_url, model=os.environ.get("ARBORAG_LLM_MODEL", "gpt-4o-mini"), timeout_s=300.0)
    out = labels_of(labelled(nodes, edges, summ))
    titled = [s for s in SUMMARIES if out[s]["title_source"] == "llm"]
    assert titled, "the endpoint answered no title"
    for s in titled:
        assert 0 < len(out[s]["title"]) <= 80 and "\n" not in out[s]["title"]
