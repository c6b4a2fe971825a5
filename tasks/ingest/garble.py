"""How garbled extracted PDF text is: words split in two ("tota l", "pe riod") and words glued
together ("membershipsaccounted"), counted against a word list.

A PDF holds glyphs at positions, not words; an extractor guesses the spaces from the gaps
between glyphs, and on some files it guesses wrong. Both kinds of damage reach the sparse index
(BM25 finds neither "total" in "tota l" nor "accounted" in "membershipsaccounted") and the
labels. The counts (per 1,000 words) compare extractors (benchmarks/pdf_extractors.py) and flag
a page that is still garbled after extraction (:func:`garbled_pages`).

Definitions (words are the runs of ASCII letters, lower-cased):

- **known word**: in the word list, or so after dropping one inflection ending ("-s", "-es",
  "-ed", "-d", "-ing", "-ly") that leaves 4+ letters ("riod" is not "rio" + "d"), or "-ies",
  "-ied" for "-y"; one-letter words other than "a" and "i" are never known. The default list
  is the whole-word entries of the embedder's WordPiece vocabulary (21,745 words, shipped with
  the model package: nothing downloaded).
- **split word**: two words on one line with only spaces between them, the second in lower
  case, not both known, whose concatenation is known ("tota l" -> "total", not "Regulation S").
  Counted once per pair.
- **glued word**: a lower-case word of at least :data:`GLUED_MIN_LETTERS` letters, not known,
  that is the concatenation of two known words of at least 3 letters each
  ("membershipsaccounted"; names such as "Sarbanes" are not tested).

A page's score (:func:`garbled_pages`) also counts as known every word of 8+ letters that occurs
at least twice in the document: a compound the list lacks ("stockholders", "undersigned") recurs,
while two words run together by accident rarely do.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

__all__ = [
    "GARBLE_THRESHOLD",
    "GLUED_MIN_LETTERS",
    "PAGE_MIN_DAMAGED",
    "PAGE_MIN_WORDS",
    "Garble",
    "Lexicon",
    "default_lexicon",
    "document_lexicon",
    "garble_counts",
    "garbled_pages",
    "words_of",
]

#: the shortest word tested for being two glued words
GLUED_MIN_LETTERS: Final = 8
#: a page with fewer words is never flagged (a cover page or a page of figures: too few to judge)
PAGE_MIN_WORDS: Final = 50
#: nor a page with fewer split + glued words (two compounds missing from the list on a short
#: signature page score 40 per 1,000 words)
PAGE_MIN_DAMAGED: Final = 3
#: split + glued words per 1,000 words above which a page is flagged as garbled. Measured on the
#: FinanceBench PDFs (benchmarks/results/pdf_extractors.md, "worst page"): with the document's
#: recurring words added to the list, no page of any of the three extractors scores over 6.4
#: (terms the list lacks, e.g. "multichannel"); a page with one word in five cut in two scores
#: ~200.
GARBLE_THRESHOLD: Final = 25.0

_WORD: Final = re.compile(r"[A-Za-z]+")
_SAME_LINE_GAP: Final = re.compile(r"[ \t]+")
_ENDINGS: Final = ("s", "es", "ed", "d", "ing", "ly")
_Y_ENDINGS: Final = ("ies", "ied")  # "inventories" -> "inventory"


@dataclass(frozen=True, slots=True)
class Lexicon:
    """A word list (lower-case) and the rule for what counts as a known word."""

    words: frozenset[str]

    def known(self, word: str) -> bool:
        w = word.lower()
        if len(w) == 1:
            return w in ("a", "i")
        if w in self.words:
            return True
        if any(w.endswith(e) and len(w) - len(e) >= 4 and w[: -len(e)] in self.words for e in _ENDINGS):
            return True
        return any(w.endswith(e) and w[: -len(e)] + "y" in self.words for e in _Y_ENDINGS)

    def extended(self, more: Iterable[str]) -> Lexicon:
        return Lexicon(self.words | frozenset(w.lower() for w in more if len(w) > 1))


@lru_cache(maxsize=1)
def default_lexicon() -> Lexicon:
    """The whole-word (alphabetic, ASCII, 2+ letters, plus "a" and "i") entries of the
    embedder's WordPiece vocabulary."""
    from tokenizers import Tokenizer

    from arborag.tokenizer import default_tokenizer_path

    vocab = Tokenizer.from_file(str(default_tokenizer_path())).get_vocab()
    return Lexicon(frozenset(w for w in vocab if w.isascii() and w.isalpha() and (len(w) > 1 or w in ("a", "i"))))


def words_of(text: str) -> list[str]:
    """The words of ``text`` as the counts see them (runs of ASCII letters)."""
    return _WORD.findall(text)


@dataclass(frozen=True, slots=True)
class Garble:
    """Words, split words and glued words of a text (definitions in the module docstring)."""

    words: int
    split: int
    glued: int

    def per_1000(self, n: int) -> float:
        return 1000.0 * n / self.words if self.words else 0.0

    @property
    def split_rate(self) -> float:
        return self.per_1000(self.split)

    @property
    def glued_rate(self) -> float:
        return self.per_1000(self.glued)

    @property
    def score(self) -> float:
        """Split plus glued words per 1,000 words."""
        return self.per_1000(self.split + self.glued)


def _is_glued(word: str, lex: Lexicon) -> bool:
    if len(word) < GLUED_MIN_LETTERS or not word.islower() or lex.known(word):
        return False
    return any(lex.known(word[:i]) and lex.known(word[i:]) for i in range(3, len(word) - 2))


def garble_counts(text: str, lexicon: Lexicon | None = None) -> Garble:
    """Count the words, split words and glued words of ``text``."""
    lex = lexicon or default_lexicon()
    matches = list(_WORD.finditer(text))
    split = glued = 0
    i = 0
    while i < len(matches):
        a = matches[i].group()
        if i + 1 < len(matches):
            nxt = matches[i + 1]
            b = nxt.group()
            if (
                _SAME_LINE_GAP.fullmatch(text, matches[i].end(), nxt.start())
                and b[0].islower()
                and not (lex.known(a) and lex.known(b))
                and lex.known(a + b)
            ):
                split += 1
                i += 2
                continue
        glued += _is_glued(a, lex)
        i += 1
    return Garble(len(matches), split, glued)


def document_lexicon(pages: list[str], lexicon: Lexicon | None = None) -> Lexicon:
    """``lexicon`` (default: :func:`default_lexicon`) plus every word of
    :data:`GLUED_MIN_LETTERS`+ letters that occurs at least twice in ``pages``."""
    counts = Counter(w.lower() for page in pages for w in _WORD.findall(page) if len(w) >= GLUED_MIN_LETTERS)
    return (lexicon or default_lexicon()).extended(w for w, n in counts.items() if n >= 2)


def garbled_pages(pages: list[str], lexicon: Lexicon | None = None, *, threshold: float = GARBLE_THRESHOLD) -> list[tuple[int, float]]:
    """``(page index, score)`` of every page of at least :data:`PAGE_MIN_WORDS` words and
    :data:`PAGE_MIN_DAMAGED` split or glued words whose :attr:`Garble.score` is over ``threshold``; the word list is extended by the document's
    recurring long words (module docstring)."""
    lex = document_lexicon(pages, lexicon)
    out = []
    for i, page in enumerate(pages):
        g = garble_counts(page, lex)
        if g.words >= PAGE_MIN_WORDS and g.split + g.glued >= PAGE_MIN_DAMAGED and g.score > threshold:
            out.append((i, g.score))
    return out
