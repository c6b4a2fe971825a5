"""The classifier of benchmarks/summary_quality.py on hand-made summaries: heading/row lists,
fragments and prose."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"


def _module():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("summary_quality_under_test", BENCH / "summary_quality.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


sq = _module()


def test_heading_and_row_lists_are_lists() -> None:
    assert sq.is_list("Table and heading lines: Net sales; Gross profit.")
    assert sq.is_list("Net Sales; Gross Profit; Operating Income; 3,226.8")  # title-case items
    assert sq.is_list("3,226.8 15.6% 447.6 (0.1%) 19.2% total")  # mostly numbers
    assert sq.is_list("UNITED STATES\nFORM 8-K\nCurrent Report of the Company")


def test_prose_and_table_sentences_are_not_lists() -> None:
    assert not sq.is_list("Real estate activity included 12 new stores located in Garden Grove, CA; Glendale, AZ; "
                          "Hartford, CT; and Boise, ID.")
    assert not sq.is_list("Table 'Voting results' with columns Nominee, For and Against; rows include Jane Doe and John Roe.")
    assert not sq.is_list("Operating income increased 19.2% to $447.6 million in the fourth quarter.")
    assert not sq.is_list("")


def test_label_items() -> None:
    assert sq.is_label_item("Cash and Cash Equivalents")
    assert sq.is_label_item("2023")
    assert not sq.is_label_item("Cash increased in the quarter.")
    assert not sq.is_label_item("our reliance on key vendors")


def test_classify_counts_empty_lists_and_fragments() -> None:
    out = sq.classify([
        "",
        "Net Sales; Gross Profit; Operating Income",
        "services and technologies; our focus on services",  # starts lower-case, no closing punctuation
        "The board met twice.",
        "The board met\ntwice.",  # a line break inside
    ])
    assert (out["summaries"], out["empty"], out["lists"], out["fragments"]) == (5, 1, 1, 3)
    # the title-case list has no closing punctuation either: a list and a fragment
    assert out["list_share"] == 0.2 and out["fragment_share"] == 0.6
