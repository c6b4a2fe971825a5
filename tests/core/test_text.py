"""arborag/text.py: one set of sentence, clause and CJK rules for every stage."""

from __future__ import annotations

from arborag.text import CJK_CHAR, CJK_RUN, CLAUSE_PATTERN, SENTENCE_PATTERN, sentence_ends, split_sentences


def _cuts(pattern, text: str) -> list[int]:
    return [m.end() for m in pattern.finditer(text)]


def test_sentence_ends_keep_closing_quotes_and_skip_decimals() -> None:
    text = 'He said "Stop." Then 3.14 rose! 她跑了。」下一句\nNew line'
    pieces = split_sentences(text)
    assert pieces == ['He said "Stop."', "Then 3.14 rose!", "她跑了。」", "下一句", "New line"]
    assert _cuts(SENTENCE_PATTERN, "Wait… what? Yes") == [5, 11]


def test_abbreviations_and_initials_are_glued_back() -> None:
    assert split_sentences("Dr. Smith met J. K. Rowling, e.g. in 1999. It rained.") == [
        "Dr. Smith met J. K. Rowling, e.g. in 1999.",
        "It rained.",
    ]


def test_the_chunkers_sentence_ends_skip_abbreviations_and_initials_also_across_one_line_break() -> None:
    text = "Dr. Smith met J. K. Rowling, e.g. in 1999. It rained.\nSee Apple Inc.\nNext"
    # the pattern cuts after "Dr.", "J.", "K.", "e.g." and "Inc." too
    assert _cuts(SENTENCE_PATTERN, text) == [3, 16, 19, 33, 42, 53, 54, 68, 69]
    assert sentence_ends(text) == [42, 53, 54]  # "... 1999." | " It rained." | "\n" | "See Apple Inc.\nNext"
    # a blank line after an abbreviation still ends the sentence
    assert sentence_ends("See Apple Inc.\n\nNext") == [15, 16]  # "See Apple Inc.\n" | "\n" | "Next"
    assert sentence_ends("Why? Because! Done.") == [4, 13]  # (the text's end is no cut)


def test_clauses_and_cjk_ranges() -> None:
    assert _cuts(CLAUSE_PATTERN, "a, b;c: d，e、f") == [2, 7, 10, 12]
    for ch in "漢かカ한ᄀ々豈𠀀":
        assert CJK_CHAR.fullmatch(ch), ch
    for ch in "aé1，":
        assert not CJK_CHAR.fullmatch(ch), ch
    assert CJK_RUN.findall("abc 東京タワー def") == ["東京タワー"]
