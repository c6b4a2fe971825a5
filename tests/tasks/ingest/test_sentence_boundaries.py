"""Abbreviations and initials never end a sentence, on one line or across a PDF's line break."""

from __future__ import annotations

import pytest

from arborag.text import sentence_ends, split_sentences


def _pieces(text: str) -> list[str]:
    ends = sentence_ends(text)
    return [p.strip() for p in (text[a:b] for a, b in zip([0, *ends], [*ends, len(text)])) if p.strip()]


# (text as a PDF's lines break it, the sentences it holds)
CASES = [
    ("Ulta Beauty is the largest U.S.\nbeauty retailer and the premier beauty destination. It grew.",
     ["Ulta Beauty is the largest U.S.\nbeauty retailer and the premier beauty destination.", "It grew."]),
    ("See Note No.\n5 to the statements. Then more.", ["See Note No.\n5 to the statements.", "Then more."]),
    ("Foot Locker Corp.\nand its subsidiaries reported. Next.", ["Foot Locker Corp.\nand its subsidiaries reported.", "Next."]),
    ("PepsiCo, Inc.\nfiled the report. Next.", ["PepsiCo, Inc.\nfiled the report.", "Next."]),
    ("Signed by J. R.\nSmith for the board. Next.", ["Signed by J. R.\nSmith for the board.", "Next."]),
    ("Costs, e.g.\nfreight, rose. Next.", ["Costs, e.g.\nfreight, rose.", "Next."]),
    ("Made in the U.S.A. by the company. Next.", ["Made in the U.S.A. by the company.", "Next."]),
]


@pytest.mark.parametrize(("text", "sentences"), CASES)
def test_the_chunker_does_not_cut_after_an_abbreviation_or_initial(text: str, sentences: list[str]) -> None:
    assert _pieces(text) == sentences


@pytest.mark.parametrize(("text", "sentences"), CASES)
def test_the_summarizer_does_not_cut_after_an_abbreviation_or_initial(text: str, sentences: list[str]) -> None:
    assert split_sentences(text) == [" ".join(s.split()) if "\n" in s else s for s in sentences]


def test_a_blank_line_or_a_plain_word_still_ends_a_sentence() -> None:
    assert _pieces("We sell in the U.S.\n\nNext paragraph.") == ["We sell in the U.S.", "Next paragraph."]
    assert _pieces("Sales rose.\nCosts fell.") == ["Sales rose.", "Costs fell."]
    assert _pieces("Ulta Beauty is the largest\nU.S. beauty retailer.") == ["Ulta Beauty is the largest", "U.S. beauty retailer."]
