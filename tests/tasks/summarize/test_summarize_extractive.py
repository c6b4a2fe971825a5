"""Summarizers (tasks/summarize/extractive.py): the extractive default and make_summarizer."""

from __future__ import annotations

import sys
import types

import pytest

from arborag.config import SummarizeConfig
from arborag.tokenizer import get_tokenizer
from arborag.tasks.summarize import make_summarizer
from arborag.tasks.summarize.extractive import ExtractiveSummarizer, split_sentences
from arborag.tasks.summarize.types import Summarizer, SummaryResult

CLUSTER = [
    "The Eiffel Tower is a wrought-iron lattice tower in Paris. It was designed by the company of "
    "Gustave Eiffel. Locals first criticised its design. It opened in 1889 for the World's Fair.",
    "Gustave Eiffel was a French civil engineer. His company built the Eiffel Tower in Paris for the "
    "1889 World's Fair. He also worked on the Statue of Liberty. He died in 1923.",
    "The tower is 330 metres tall. It was the tallest man-made structure in the world until 1930. "
    "Paris welcomes millions of visitors to the tower every year. The weather was nice.",
    "Act 1",
] * 3  # repeated texts: repeated sentences must not be picked twice


def _positions(summary: str, texts: list[str]) -> list[tuple[int, int]]:
    """(child, sentence) position of every summary sentence in the input."""
    where: dict[str, tuple[int, int]] = {}
    for ci, t in enumerate(texts):
        for si, s in enumerate(split_sentences(t)):
            where.setdefault(s, (ci, si))
    return [where[s] for s in split_sentences(summary)]


@pytest.mark.parametrize("max_tokens", [10, 40, 150])
def test_extractive_is_within_budget_in_order_and_deterministic(max_tokens):
    s = ExtractiveSummarizer(SummarizeConfig(max_tokens=max_tokens))
    a = s.summarize_many([CLUSTER])[0]
    b = ExtractiveSummarizer(SummarizeConfig(max_tokens=max_tokens)).summarize_many([list(CLUSTER)])[0]
    assert a == b
    assert a.status == "ok" and a.text
    assert get_tokenizer().count(a.text) <= max_tokens
    if max_tokens >= 40:  # whole sentences only (10 tokens may force a truncated sentence)
        pos = _positions(a.text, CLUSTER)
        assert pos == sorted(pos), "sentences must keep their original order"
        assert len(set(pos)) == len(pos)


def test_extractive_prefers_central_sentences():
    s = ExtractiveSummarizer(SummarizeConfig(max_tokens=40))
    text = s.summarize(CLUSTER).text
    assert "Eiffel" in text
    assert "weather" not in text and "Act 1" not in text


def test_extractive_short_cluster_is_kept_whole():
    s = ExtractiveSummarizer(SummarizeConfig(max_tokens=150))
    texts = ["Cinderella lost a slipper.", "The prince searched the kingdom."]
    assert s.summarize(texts).text == "Cinderella lost a slipper. The prince searched the kingdom."


def test_extractive_handles_empty_and_cjk_and_overlong_sentences():
    s = ExtractiveSummarizer(SummarizeConfig(max_tokens=20))
    assert s.summarize([]).text == ""
    assert s.summarize(["", "   "]).text == ""
    cjk = ["灰姑娘失去了一只水晶鞋。王子找遍了整个王国。", "王子找到了灰姑娘。他们结婚了。"] * 4
    out = s.summarize(cjk).text
    assert out and get_tokenizer().count(out) <= 20
    long_sentence = "Word " + " ".join(["word"] * 300) + "."
    out = s.summarize([long_sentence]).text
    assert out.startswith("Word word") and out.endswith(" …") and get_tokenizer().count(out) <= 20
    # no whole sentence at all: one sentence naming the row labels, within the budget
    out = s.summarize(["Net sales\n$\n3,226.8\nComparable sales\n15.6%", "Gross profit\n37.6%"]).text
    assert out == "Figures are given for Net sales, Comparable sales and Gross profit."
    assert get_tokenizer().count(out) <= 20


def test_summarize_many_progress_and_protocol():
    s = ExtractiveSummarizer()
    seen: list[int] = []
    res = s.summarize_many([CLUSTER[:2], CLUSTER[2:4]], progress=seen.append)
    assert len(res) == 2 and sum(seen) == 2
    assert all(isinstance(r, SummaryResult) and r.tokens_in == 0 for r in res)
    assert isinstance(s, Summarizer)
    assert s.name == "extractive-v4/150"


def test_make_summarizer_extractive():
    s = make_summarizer(SummarizeConfig(max_tokens=120), cache_dir=None, embedder=None)
    assert isinstance(s, ExtractiveSummarizer) and s.name == "extractive-v4/120"


def test_make_summarizer_openai_is_imported_lazily_with_an_extractive_fallback(monkeypatch, tmp_path):
    calls = {}

    class FakeOpenAISummarizer:  # stands in for tasks.summarize.llm.OpenAISummarizer
        def __init__(self, cfg, *, cache_dir, fallback):
            calls.update(cfg=cfg, cache_dir=cache_dir, fallback=fallback)
            self.name = "fake"

    fake_module = types.ModuleType("arborag.tasks.summarize.llm")
    fake_module.OpenAISummarizer = FakeOpenAISummarizer
    monkeypatch.setitem(sys.modules, "arborag.tasks.summarize.llm", fake_module)
    cfg = SummarizeConfig(backend="openai", max_tokens=100)
    s = make_summarizer(cfg, cache_dir=tmp_path, embedder=None)
    assert isinstance(s, FakeOpenAISummarizer)
    assert calls["cfg"] is cfg and calls["cache_dir"] == tmp_path
    assert isinstance(calls["fallback"], ExtractiveSummarizer) and calls["fallback"].max_tokens == 100


def test_split_sentences_keeps_abbreviations_and_initials():
    text = "In 2003, Dr. Kogan met J. K. Rowling. They talked, e.g. about books! Why?\nNext line 王子。公主。"
    assert split_sentences(text) == [
        "In 2003, Dr. Kogan met J. K. Rowling.",
        "They talked, e.g. about books!",
        "Why?",
        "Next line 王子。",
        "公主。",
    ]
