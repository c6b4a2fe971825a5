"""A summary of a non-empty cluster is never empty, and the extractive summarizer never "falls back".

Clusters of table rows or figures hold no sentence to quote and no label line: the extractive
summarizer gives their leading lines within the budget. With no LLM configured nothing is a
fallback (a fallback marks the snapshot as not final: every later build would summarize again).
"""

from __future__ import annotations

from arborag.config import SummarizeConfig
from arborag.tasks.summarize.extractive import ExtractiveSummarizer
from arborag.tasks.tree.build import _safe_summaries
from arborag.tokenizer import get_tokenizer

# Rows of the vote table of a real 8-K (figures only: no sentence, no label line)
ROWS = [
    "54,760,830 5,184,437 10,721,716 6,884,223\n54,484,293 16,105,005 77,685 6,884,223",
    "54,193,921 5,396,141 11,076,921 6,884,223\n$ 3,226.8 | 15.6% | 37.6%",
]


def test_a_cluster_of_table_rows_gets_its_leading_rows() -> None:
    s = ExtractiveSummarizer(SummarizeConfig(max_tokens=100))
    out = s.summarize(ROWS).text
    assert out.startswith("54,760,830 5,184,437 10,721,716 6,884,223; 54,484,293 16,105,005")
    assert "$ 3,226.8 | 15.6% | 37.6%" in out and get_tokenizer().count(out) <= 100
    assert s.summarize(ROWS).text == out  # deterministic


def test_leading_rows_are_cut_to_the_budget_and_marked() -> None:
    s = ExtractiveSummarizer(SummarizeConfig(max_tokens=12))
    out = s.summarize(ROWS * 5).text
    assert out.startswith("54,760,830") and out.endswith(" …") and get_tokenizer().count(out) <= 12


def test_only_an_all_empty_cluster_has_an_empty_summary() -> None:
    s = ExtractiveSummarizer(SummarizeConfig(max_tokens=20))
    assert s.summarize(["", "  \n "]).text == ""
    assert s.summarize(["\n", "- 12 -"]).text == "- 12 -"  # a page number: still something real


def test_extractive_results_are_final_never_fallbacks() -> None:
    cfg = SummarizeConfig(max_tokens=50)
    results = _safe_summaries(ExtractiveSummarizer(cfg), [ROWS, ["Cinderella lost a slipper at the ball."]], ExtractiveSummarizer(cfg))
    assert [r.status for r in results] == ["ok", "ok"]
    assert all(r.text.strip() for r in results)
