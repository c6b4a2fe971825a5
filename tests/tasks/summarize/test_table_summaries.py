"""Summaries of clusters without a whole sentence (tasks/summarize/extractive.py ``table_sentence``):
one sentence naming the table's caption, columns and rows, never a list of lines."""

from __future__ import annotations

from arborag.config import SummarizeConfig
from arborag.tasks.evaluation.readability import fragmented
from arborag.tasks.summarize.extractive import ExtractiveSummarizer
from arborag.tokenizer import get_tokenizer

VOTES = [
    "Voting results\nNominee: Jane Doe; For: 1,234,567; Against: 5,432; Abstain: 1,001\n"
    "Nominee: John Roe; For: 1,111,111; Against: 6,000; Abstain: 900",
    "Nominee: Ann Poe; For: 1,200,000; Against: 4,000; Abstain: 700",
]


def test_rows_with_headers_give_caption_columns_and_row_names_in_one_sentence() -> None:
    out = ExtractiveSummarizer(SummarizeConfig(max_tokens=80)).summarize(VOTES).text
    assert out == ("Table 'Voting results' with columns Nominee, For, Against and Abstain; "
                   "rows include Jane Doe, John Roe and Ann Poe.")
    assert not fragmented(out)


def test_cell_separated_rows_without_header_name_their_rows() -> None:
    out = ExtractiveSummarizer(SummarizeConfig(max_tokens=60)).summarize(
        ["Segment results\nFootwear | 1,200 | 1,100\nApparel | 300 | 280"]).text
    assert out == "Table 'Segment results' with rows Footwear and Apparel."


def test_labels_without_figures_are_described_not_listed() -> None:
    out = ExtractiveSummarizer(SummarizeConfig(max_tokens=60)).summarize(["Investor Relations\nJane Doe\nChief Financial Officer"]).text
    assert out == "This part covers Investor Relations, Jane Doe and Chief Financial Officer."
    assert "Table and heading lines" not in out


def test_table_sentence_keeps_to_the_budget_and_stays_whole() -> None:
    rows = "\n".join(f"Nominee: Person Number{i}; For: {i},000; Against: {i}0" for i in range(40))
    s = ExtractiveSummarizer(SummarizeConfig(max_tokens=30))
    out = s.summarize(["Board election\n" + rows]).text
    assert get_tokenizer().count(out) <= 30
    assert out.startswith("Table 'Board election' with columns Nominee, For and Against; rows include Person Number0")
    assert out.endswith(".") and not fragmented(out)


def test_prose_clusters_are_unchanged_by_table_rows_elsewhere() -> None:
    # a cluster with a whole sentence is summarized from its sentences, never described as a table
    s = ExtractiveSummarizer(SummarizeConfig(max_tokens=80))
    out = s.summarize(["The board elected three directors at the annual meeting.", *VOTES]).text
    assert out == "The board elected three directors at the annual meeting."


def test_rows_of_figures_are_named_by_their_leading_words() -> None:
    # a PDF table's rows: a name, then figures (fewer than half of the characters letters)
    rows = ["Alan D. Feldman 54,760,830 5,184,437 10,721,716 6,884,223\n"
            "Richard A. Johnson 54,484,293 16,105,005 77,685 6,884,223", "3,226.8 15.6%"]
    out = ExtractiveSummarizer(SummarizeConfig(max_tokens=60)).summarize(rows).text
    assert out == "Figures are given for Alan D. Feldman and Richard A. Johnson."


def test_row_names_drop_the_figures_that_follow_them() -> None:
    rows = ["Selling, general and administrative expenses 762,706 23.6% 649,968 23.8%\nOperating income\n"
            "Merchandise inventories (104,233) (331,003)"]
    out = ExtractiveSummarizer(SummarizeConfig(max_tokens=60)).summarize(rows).text
    assert out == ("Figures are given for Selling, general and administrative expenses, Operating income "
                   "and Merchandise inventories.")


def test_headings_with_a_number_keep_it() -> None:
    out = ExtractiveSummarizer(SummarizeConfig(max_tokens=60)).summarize(["FORM 8-K\nWashington, D.C. 20549\nExhibit 2"]).text
    assert out == "This part covers FORM 8-K, Washington, D.C. 20549 and Exhibit 2."
