"""Evidence found (tasks/evaluation/evidence.py) on hand-made evidence and contexts."""

from __future__ import annotations

import pyarrow as pa
import pytest

from arborag.tasks.evaluation.evidence import (
    MIN_FIGURE_NGRAM_SHARE,
    MIN_FIGURE_SHARE,
    MIN_NGRAM_SHARE,
    evidence_coverage,
    evidence_found,
    evidence_found_counts,
    figures,
)

# a passage in the style of a 10-Q: figures in prose and in a flattened table
EVIDENCE = (
    "Revenue in the second quarter was $9,583 million, compared to $10,329 million last year. "
    "Online revenue of $2.8 billion decreased 7.1% on a comparable basis. "
    "Stores open at the end of the quarter: 969 compared to 982."
)
BOILERPLATE = (
    "I certify that this quarterly report fully complies with the requirements of section 13(a) of the "
    "Securities Exchange Act of 1934 and that the information fairly presents the financial condition."
)


# -- figures -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$9,583 million", {"9583"}),
        ("$ 348 and 3.6 % and 4.500%", {"348", "3.6%", "4.5%"}),
        ("0.10 per share, 2.0 billion", {"0.1", "2"}),
        ("June 30, 2022", set()),  # days and years: on every page of a filing
        ("Item 8, footnote (1), 47 stores; but 5%, $7, 969 stores and 2,022 units", {"5%", "7", "969", "2022"}),
        ("model v1.2, code ab12, 10-Q", set()),
        ("", set()),
    ],
)
def test_figures_are_normalised_and_skip_small_integers_and_years(text: str, expected: set[str]) -> None:
    assert figures(text) == expected


def test_same_figure_in_two_notations_is_one() -> None:
    assert figures("$1,234.50") == figures("1234.5") == {"1234.5"}
    assert figures("3.6 %") == figures("3.6%") != figures("3.6")


# -- coverage ----------------------------------------------------------------------------------
def test_whole_evidence_in_context_is_fully_covered() -> None:
    cov = evidence_coverage(EVIDENCE, [BOILERPLATE, EVIDENCE.upper()])
    assert cov.figure_share == 1.0
    assert cov.ngram_share == 1.0
    assert cov.found()


def test_boilerplate_only_context_finds_nothing() -> None:
    cov = evidence_coverage(EVIDENCE, [BOILERPLATE, BOILERPLATE])
    assert cov.figures_found == 0
    assert cov.ngrams_found == 0
    assert not cov.found()
    assert evidence_found([EVIDENCE], [BOILERPLATE]) is False


def test_figures_of_a_reordered_table_count_with_some_of_its_words() -> None:
    # the PDF text of a table: the same figures in another order, one phrase of the passage kept
    table = ("Online revenue of $2.8 billion decreased 7.1% on a comparable basis | Q2 revenue | 9,583 | 10,329 | stores | 969 | 982")
    cov = evidence_coverage(EVIDENCE, [table])
    assert cov.figure_share == 1.0
    assert cov.ngram_share is not None and MIN_FIGURE_NGRAM_SHARE <= cov.ngram_share < MIN_NGRAM_SHARE
    assert evidence_found([EVIDENCE], [table])


def test_figures_repeated_by_another_passage_do_not_count_alone() -> None:
    # an exhibit list naming the same amounts: every figure, none of the passage's words
    exhibits = "Exhibit 4.1: notes of $9,583 and $10,329; 4.2: 2.8 and 7.1 %; 4.3: schedules 969 and 982."
    cov = evidence_coverage(EVIDENCE, [exhibits])
    assert cov.figure_share == 1.0
    assert cov.ngram_share == 0.0
    assert not evidence_found([EVIDENCE], [exhibits])


def test_most_of_the_passage_is_found_a_third_is_not() -> None:
    sentences = EVIDENCE.split(". ")
    first_two = ". ".join(sentences[:2])  # revenue and online revenue: 4 of 6 figures, most 5-grams
    first_one = sentences[0]  # 2 of 6 figures, a quarter of the 5-grams
    assert evidence_coverage(EVIDENCE, [first_two]).figure_share == pytest.approx(4 / 6)
    assert evidence_found([EVIDENCE], [first_two])
    cov = evidence_coverage(EVIDENCE, [first_one])
    assert cov.figure_share == pytest.approx(2 / 6)
    assert cov.figure_share < MIN_FIGURE_SHARE
    assert cov.ngram_share is not None and cov.ngram_share < MIN_NGRAM_SHARE
    assert not evidence_found([EVIDENCE], [first_one])


def test_ngrams_do_not_span_two_hits() -> None:
    words = "alpha beta gamma delta epsilon zeta eta theta".split()
    evidence = " ".join(words)
    split = [" ".join(words[:4]), " ".join(words[4:])]  # every 5-gram crosses the cut
    assert evidence_coverage(evidence, split).ngrams_found == 0
    assert evidence_coverage(evidence, [" ".join(split)]).ngram_share == 1.0


def test_evidence_without_figures_is_judged_by_its_words() -> None:
    evidence = "The shareholder proposal regarding a congruency report on net zero emissions policies was defeated"
    cov = evidence_coverage(evidence, ["Proposal eight: the shareholder proposal regarding a congruency report on net zero emissions"])
    assert cov.figure_share is None
    assert cov.ngram_share is not None and cov.ngram_share >= MIN_NGRAM_SHARE
    assert cov.found()


def test_short_evidence_uses_its_whole_token_run() -> None:
    assert evidence_coverage("net sales rose", ["net sales rose sharply"]).ngram_share == 1.0
    assert evidence_coverage("net sales rose", ["net sales fell"]).ngram_share == 0.0


def test_every_evidence_item_must_be_found() -> None:
    other = "Cash and cash equivalents were $1,093 million at the end of the quarter versus $1,874 million."
    assert evidence_found([EVIDENCE, other], [EVIDENCE]) is False
    assert evidence_found([EVIDENCE, other], [EVIDENCE, other]) is True


def test_no_evidence_text_is_not_scored_and_empty_context_finds_nothing() -> None:
    assert evidence_found([], [EVIDENCE]) is None
    assert evidence_found(["", "  "], [EVIDENCE]) is None
    assert evidence_found([EVIDENCE], []) is False


def test_thresholds_are_parameters() -> None:
    first_one = EVIDENCE.split(". ")[0]
    assert not evidence_found([EVIDENCE], [first_one])
    assert evidence_found([EVIDENCE], [first_one], min_figure_share=0.3)
    assert evidence_found([EVIDENCE], [first_one], min_ngram_share=0.2)


# -- per system and budget -----------------------------------------------------------------------
def test_counts_per_system_and_budget_over_hits_and_queries() -> None:
    queries = pa.table({
        "qid": ["q1", "q2", "q3"],
        "gold_texts": [[EVIDENCE], ["The shareholder proposal regarding a congruency report was defeated by the holders"], []],
    })
    hits = pa.table({
        "qid": ["q1", "q2", "q3", "q1", "q2", "q9"],
        "strategy": ["sentence"] * 6,
        "system": ["hop", "hop", "hop", "flat", "flat", "hop"],
        "budget": [800, 800, 800, 800, 800, 800],
        "texts": [[BOILERPLATE, EVIDENCE], [BOILERPLATE], [EVIDENCE], [BOILERPLATE], None, [EVIDENCE]],
    })
    rows = evidence_found_counts(hits, queries)
    # q3 has no evidence text and q9 is not a question of the set: neither is counted
    assert rows == [
        {"strategy": "sentence", "system": "hop", "budget": 800, "found": 1, "scored": 2},
        {"strategy": "sentence", "system": "flat", "budget": 800, "found": 0, "scored": 2},
    ]


def test_summary_shows_evidence_found_per_system_and_budget() -> None:
    from arborag.storage.schemas import RESULTS
    from arborag.tasks.evaluation.report import render_summary

    base = {c: None for c in RESULTS.names}
    results = pa.Table.from_pylist(
        [{**base, "dataset": "t", "qid": "q1", "strategy": "sentence", "system": sy, "mode": sy, "budget": b, "levels": [0]}
         for sy in ("hop", "flat") for b in (800, 2000)], schema=RESULTS)
    meta = {"dataset": "t", "questions": 10, "default_budget": 2000, "primary_strategy": "sentence"}
    counts = [
        {"strategy": "sentence", "system": "hop", "budget": 800, "found": 5, "scored": 10},
        {"strategy": "sentence", "system": "hop", "budget": 2000, "found": 7, "scored": 10},
        {"strategy": "sentence", "system": "flat", "budget": 2000, "found": 6, "scored": 10},
        {"strategy": "dds", "system": "flat", "budget": 800, "found": 1, "scored": 10},  # not the primary strategy
    ]
    md = render_summary(results, {**meta, "evidence_found": counts})
    assert "## Evidence found (strategy `sentence`)" in md
    assert "| hop | 5 of 10 | 7 of 10 |" in md
    assert "| flat | – | 6 of 10 |" in md
    assert "1 of 10" not in md
    assert "Evidence found" not in render_summary(results, meta)
