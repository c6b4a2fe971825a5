"""Text rules shared by every stage: where sentences and clauses end, which characters are CJK.

One set of rules, used by the segmenters (``sentence`` chunking), the extractive summarizer and
the sparse index's analysis:

- **Sentence ends** (:data:`SENTENCE_PATTERN`): ASCII ``. ? !`` (and ``…``) followed by
  whitespace, closing quotes/brackets kept in the sentence; CJK ``。？！…`` (no space follows
  them in Chinese) with their closing brackets ``”’」』）``; and every line break. "3.14" is not
  cut (no whitespace after the period). Abbreviations followed by a space ("Mr. Smith") are
  cut by the pattern, as in the RAPTOR reference code, but not by :func:`sentence_ends` (the
  ``sentence`` chunker's cuts) or :func:`split_sentences` (the summarizer's sentences): after
  a common abbreviation ("Dr.", "e.g.") or an initial ("J." of "J. K. Rowling") the sentence
  goes on, also across a single line break (a PDF breaks lines wherever the page is full: "the
  largest U.S." | "beauty retailer" is one sentence). (Before the chunker used it, 23 of 1,813
  HotpotQA leaves ended after one, e.g. "... Merian C." then "Cooper, the co-directors ...":
  benchmarks/results/abbreviations.md.)
- **Clause ends** (:data:`CLAUSE_PATTERN`): ``, ; :`` followed by whitespace, and CJK ``，；：、``;
  only used inside a sentence that is too long.
- **CJK characters** (:data:`CJK_RANGES`): Han (unified, extension A, B-G, compatibility),
  kana, Hangul (syllables and Jamo) and the iteration marks ``々〆〇``. :data:`WIDE_RANGES` are
  the full-width ASCII and half-width katakana forms that width folding maps back.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "CJK_CHAR",
    "CJK_RANGES",
    "CJK_RUN",
    "CLAUSE_PATTERN",
    "SENTENCE_PATTERN",
    "WIDE_RANGES",
    "sentence_ends",
    "split_sentences",
]

CJK_RANGES: Final = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3005-\u3007"  # 々 〆 〇
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30ff"  # Katakana
    "\u3130-\u318f"  # Hangul compatibility Jamo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\uac00-\ud7af"  # Hangul syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\U00020000-\U0003134f"  # CJK extensions B-G
)
WIDE_RANGES: Final = "\uff01-\uff5e\uff65-\uff9f"  # full-width ASCII, half-width katakana
CJK_CHAR: Final = re.compile(f"[{CJK_RANGES}]")
CJK_RUN: Final = re.compile(f"[{CJK_RANGES}]+")

# (The leading lookahead is only a speed-up: it lets the regex engine skip to candidate
# characters, 2-3x faster than trying each alternative at every position.)
SENTENCE_PATTERN: Final = re.compile(
    r"(?=[.?!…。？！\n\r\u2028\u2029])"
    r"(?:[.?!…]+[\"'”’)\]]*(?=\s)"
    r"|[。？！…]+[”’」』）]*"
    r"|[\n\r\u2028\u2029])"
)
CLAUSE_PATTERN: Final = re.compile(r"[,;:](?=\s)|[，；：、]")

_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr vs etc no nos mt ft gen col lt capt sgt rev hon gov sen rep pres "
    "inc ltd co corp dept univ fig vol pp ed eds approx est jan feb mar apr jun jul aug sep sept "
    "oct nov dec e.g i.e u.s u.k a.m p.m".split()
)
_LAST_WORD = re.compile(r"(\S+)\.[\"'”’)\]]*$")
_DOTTED_LETTERS = re.compile(r"(?:[^\W\d_]\.)+[^\W\d_]")


def _ends_with_abbreviation(piece: str) -> bool:
    m = _LAST_WORD.search(piece)
    if not m:
        return False
    word = m.group(1).lstrip("(\"'“‘[").lower()
    # "Dr.", "e.g.", initials such as "J." in "J. K. Rowling", and letters with periods ("U.S.A.")
    return word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()) or bool(_DOTTED_LETTERS.fullmatch(word))


_LINE_BREAKS: Final = frozenset("\n\r\u2028\u2029")


def sentence_ends(text: str) -> list[int]:
    """Character positions just after each sentence end of ``text``: the ends of
    :data:`SENTENCE_PATTERN` but those after an abbreviation or an initial (the sentence goes
    on), also across one line break: a PDF's lines break wherever the page is full ("the largest
    U.S.\nbeauty retailer" is one sentence); a blank line after one still ends it. The
    ``sentence`` chunker cuts here (tasks/segment/windows.py)."""
    out: list[int] = []
    prev = 0
    n = len(text)
    for m in SENTENCE_PATTERN.finditer(text):
        end = m.end()
        if text[end - 1] in _LINE_BREAKS:
            soft = end < n and text[end] not in _LINE_BREAKS and text[max(prev, end - 2) : end - 1] not in _LINE_BREAKS
            if soft and _ends_with_abbreviation(text[max(prev, end - 64) : end - 1].rstrip(" \t")):
                continue
        elif _ends_with_abbreviation(text[max(prev, end - 64) : end]):
            continue
        out.append(end)
        prev = end
    return out


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text`` (stripped, non-empty), in order, cut at :data:`SENTENCE_PATTERN`
    — but not after common abbreviations ("Dr.", "e.g.") or initials ("J. K. Rowling"). Unlike
    :func:`sentence_ends` it glues across any line breaks after one, a blank line too ("Apple
    Inc.\n\nNext" is one sentence here); making the summarizer's sentences the chunker's would
    change summaries, so it is left for a change that re-measures them.
    """
    out: list[str] = []
    glue = False
    start = 0
    for end in [m.end() for m in SENTENCE_PATTERN.finditer(text)] + [len(text)]:
        piece = text[start:end].strip()
        start = end
        if not piece:
            continue
        if glue and out:
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
        glue = _ends_with_abbreviation(piece)
    return out
