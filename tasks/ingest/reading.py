"""Reading-order text: a document without hard wraps, with an offset map back to its text.

Plain-text files, e-books and PDFs are hard-wrapped: a sentence runs over several lines, and a
PDF may split a word with a hyphen at a line end ("conti-\\nnued"). Chunking or summarizing that
text as it is cuts sentences at every line break. :func:`reading_view` builds the text a person
reads instead:

- a line break *inside a paragraph* becomes a space (same length: offsets do not move);
- a word split by a hyphen at a line end is joined ("conti-\\nnued" → "continued"): a lowercase
  letter, ``-``, the line break, a lowercase letter. The ``-`` and the line break are dropped
  from the view; in Chinese or Japanese text a wrapped line's break is dropped (no space is
  inserted) — the only characters the view drops;
- every other line break stays: blank lines (paragraphs), headings (Markdown ``#``, setext
  underlines, short title-case lines without closing punctuation), list items, table-like lines
  (mostly digits and symbols, cells separated by ``|`` or tabs), fenced code, and a short line
  ending a sentence followed by a capitalised one (a paragraph end without a blank line).

Whether a line is "short" is measured against the document's own line width (the 90th
percentile of its line lengths): a wrapped line fills the width, a paragraph's last line does
not. A document is hard-wrapped when it has at least three lines and that width is 30-160
characters. A document whose lines are not wrapped (one paragraph per line) keeps its line breaks
unless a line clearly continues (it ends without closing punctuation and the next one starts
in lowercase).

:class:`ReadingView` holds the view and the map: ``view.original_span(a, b)`` gives the
``[start, end)`` of the original text that view characters ``[a, b)`` come from, so chunk
offsets (and with them citations and ``segments``) keep pointing at the exact original text.
The map is stored compactly — one entry per dropped hyphen — not one integer per character.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl

from arborag.text import CJK_CHAR

__all__ = [
    "LINE_RECORD_MIMES",
    "READING_VIEW_VERSION",
    "ReadingView",
    "is_boilerplate",
    "is_heading_like",
    "is_summary_sentence",
    "is_table_like",
    "is_whole_sentence",
    "reading_view",
    "reading_views",
]

IntArray = npt.NDArray[np.int64]

# enters the chunk ids of documents whose view differs from their text: bump when the rules change
READING_VIEW_VERSION = "reading-v1"
# documents whose lines are records, not wrapped prose (ingest turns a CSV row into one line)
LINE_RECORD_MIMES = frozenset({"text/csv"})

_NOT_LETTER = re.compile(r"[\W\d_]+")
_HEADING_MD = re.compile(r"^#{1,6}\s|^(=+|-+)$|^```")
_LIST_ITEM = re.compile(r"^(?:[-*•·–—▪◦]|\d{1,3}[.)]|\(?[a-zA-Z]\)|\(\d{1,3}\))\s")
_CLOSING = "\"'”’)]»"
_SENTENCE_END = re.compile(r"[.?!…:;。？！][" + re.escape(_CLOSING) + r"]*$")
_CONTINUES = re.compile(r"[,\-–—(\[\w]$")
_WORD = re.compile(r"[^\W_][\w'’.&$%-]*", re.UNICODE)
_SMALL = frozenset("a an and as at by for from in of on or the to vs with per".split())


def is_table_like(line: str) -> bool:
    """A line of a table or a figure rather than prose: cells separated by ``|`` or tabs, or
    fewer than half of its non-space characters letters (numbers, currency, percentages)."""
    s = line.strip()
    if not s:
        return False
    if " | " in s or "\t" in s or s.startswith("|"):
        return True
    visible = len("".join(s.split()))
    letters = len(_NOT_LETTER.sub("", s))  # (regex and join run in C: no loop over characters here)
    return letters < 0.5 * visible


def is_heading_like(line: str, *, table: bool | None = None) -> bool:
    """A heading or a title line: a Markdown heading, or up to 20 words, no closing sentence
    punctuation, and (small words aside) every word capitalised or a number. ``table``: the
    line's :func:`is_table_like`, when already known."""
    s = line.strip()
    if not s:
        return False
    if _HEADING_MD.match(s):
        return True
    if _SENTENCE_END.search(s) or s.endswith(",") or (is_table_like(s) if table is None else table):
        return False
    words = _WORD.findall(s)
    if not words or len(words) > 20:
        return False
    content = [w for w in words if w.lower() not in _SMALL]
    if not content:
        return False
    capital = sum(1 for w in content if w[0].isupper() or w[0].isdigit() or w[0] in "$%")
    return capital == len(content)


_OPENING = "\"'“‘([¿¡«"
_WHOLE_END = re.compile(r"[.?!…。？！][" + re.escape(_CLOSING) + r"]*$")
_BOILERPLATE = re.compile(
    r"https?://|www\.|\S+@\S+\.\w|\bpage \d+( of \d+)?\b|all rights reserved|©|\bcopyright\b"
    r"|forward-looking statements?|safe harbor|press release"
    # the signature and certification formulas of SEC filings
    r"|duly caused this report to be signed|hereunto duly authorized|pursuant to 18 u\.s\.c"
    r"|pursuant to the requirements of the securities exchange act|shall not be deemed .?filed",
    re.IGNORECASE,
)


def is_whole_sentence(sentence: str) -> bool:
    """A complete sentence as a reader sees one: no line break, starts like a sentence (a
    capital, a digit, an opening quote or bracket, or a script without case such as Chinese)
    and ends with sentence-final punctuation (closing quotes and brackets allowed)."""
    s = sentence.strip()
    if not s or "\n" in s or not _WHOLE_END.search(s):
        return False
    first = s.lstrip(_OPENING)[:1]
    return bool(first) and (first.isupper() or first.isdigit() or (first.isalpha() and not first.islower()))


def is_boilerplate(sentence: str) -> bool:
    """Links, e-mail addresses, page numbers, copyright and forward-looking-statement notices,
    the signature and certification formulas of SEC filings."""
    return bool(_BOILERPLATE.search(sentence))


def is_summary_sentence(sentence: str) -> bool:
    """Material for an extractive summary: a whole sentence of at least three words (or six
    characters of a script written without spaces), not a table row, not boilerplate."""
    s = sentence.strip()
    if not is_whole_sentence(s) or is_table_like(s) or is_boilerplate(s):
        return False
    return len(s.split()) >= 3 or len(CJK_CHAR.findall(s)) >= 6


def _structural(s: str, table: bool) -> bool:
    return table or bool(_HEADING_MD.match(s)) or bool(_LIST_ITEM.match(s))


def _table_lines(stripped: list[str]) -> list[bool]:
    """:func:`is_table_like` of every line at once (polars string kernels, not a Python loop)."""
    ser = pl.Series("line", stripped, dtype=pl.String)
    visible = ser.str.count_matches(r"\S")
    letters = ser.str.count_matches(r"\p{L}")
    cells = ser.str.contains(r" \| |\t|^\|")
    return ((visible > 0) & ((letters < 0.5 * visible) | cells)).to_list()


@dataclass(frozen=True, slots=True)
class ReadingView:
    """``text`` (the view) and where its characters come from in the original text.

    View characters at index ``>= cut[k]`` sit ``shift[k]`` characters further on in the original
    (``cut`` sorted, ``shift`` cumulative). Every view character is the original character at its
    mapped position, except a joined line break, which is a space in the view.
    """

    text: str
    original_length: int
    cut: IntArray
    shift: IntArray

    def to_original(self, positions: IntArray) -> IntArray:
        """Original offsets of view character positions (vectorised)."""
        pos = np.asarray(positions, dtype=np.int64)
        if len(self.cut) == 0:
            return pos.copy()
        k = np.searchsorted(self.cut, pos, side="right") - 1
        return pos + np.where(k >= 0, self.shift[np.maximum(k, 0)], 0)

    def original_spans(self, starts: IntArray, ends: IntArray) -> tuple[IntArray, IntArray]:
        """``[start, end)`` in the original text of view spans ``[starts, ends)`` (non-empty):
        from the first character's origin to one past the last character's origin, so a span
        never begins or ends on a dropped hyphen."""
        a = np.asarray(starts, dtype=np.int64)
        b = np.asarray(ends, dtype=np.int64)
        return self.to_original(a), self.to_original(np.maximum(b - 1, a)) + 1

    def original_span(self, start: int, end: int) -> tuple[int, int]:
        a, b = self.original_spans(np.array([start]), np.array([end]))
        return int(a[0]), int(b[0])

    def to_view(self, positions: IntArray) -> IntArray:
        """View position of original offsets: the first view character at or after each (a
        dropped hyphen maps to the character that follows it)."""
        pos = np.asarray(positions, dtype=np.int64)
        if len(self.cut) == 0:
            return pos.copy()
        orig_cut = self.cut + self.shift  # original offset of the first character after each drop
        k = np.searchsorted(orig_cut, pos, side="right") - 1
        view = pos - np.where(k >= 0, self.shift[np.maximum(k, 0)], 0)
        # an offset inside a dropped run ("-\n") maps to the view character just after it
        nxt = np.append(self.cut, np.iinfo(np.int64).max)[k + 1]
        return np.minimum(view, nxt)


def _width(lengths: list[int]) -> int:
    """The document's line width: ``int(np.percentile(filled, 90))`` over the non-empty lines'
    lengths — numpy's linear method step by step in Python floats (the same IEEE operations, so
    the same value), without numpy's per-call overhead (one call per document)."""
    filled = sorted(n for n in lengths if n > 0)
    if not filled:
        return 0
    n = len(filled)
    at = (n - 1) * 0.9  # numpy: virtual index (n - 1) * q, q = 90 / 100
    if at >= n - 1:
        return int(filled[-1])
    lo = math.floor(at)
    gamma = at - lo
    a, b = filled[lo], filled[lo + 1]
    diff = b - a
    value = b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma  # numpy's _lerp
    return int(value)


KEEP, SPACE, JOIN_HYPHEN, JOIN_DROP = 0, 1, 2, 3
_ORDINAL = re.compile(r"(st|nd|rd|th)\b")


def _cjk(ch: str) -> bool:
    return bool(ch) and bool(CJK_CHAR.match(ch) or ch in "。，、；：？！…（）「」『』《》“”")


def _joins(lines: list[str], *, stripped: list[str] | None = None, table: list[bool] | None = None) -> list[int]:
    """What becomes of the break between ``lines[i]`` and ``lines[i + 1]``: :data:`KEEP` it,
    a :data:`SPACE` (a hard wrap), :data:`JOIN_HYPHEN` (drop ``-`` and the break: a split
    word) or :data:`JOIN_DROP` (drop the break: Chinese and Japanese wrap without spaces, and a
    PDF's ordinal superscript "1\\nst" is one word). ``stripped`` / ``table``: the lines stripped
    and their :func:`_table_lines`, when the caller has them (:func:`reading_views`)."""
    stripped = [ln.strip() for ln in lines] if stripped is None else stripped
    width = _width([len(s) for s in stripped])
    # hard-wrapped text has lines of a bounded width; one paragraph per line has not
    wrapped = 30 <= width <= 160 and sum(1 for s in stripped if s) >= 3
    table = _table_lines(stripped) if table is None else table
    structural = [_structural(s, t) for s, t in zip(stripped, table, strict=True)]
    heading = [is_heading_like(s, table=t) for s, t in zip(stripped, table, strict=True)]
    out = []
    for i in range(len(lines) - 1):
        a, b = stripped[i], stripped[i + 1]
        ends_sentence = bool(_SENTENCE_END.search(a))
        # a wrapped sentence whose last line is a date or a number ("... ended January\n29, 2022.")
        tail = structural[i + 1] and table[i + 1] and bool(_SENTENCE_END.search(b)) and len(b) < 20
        if not a or not b:
            out.append(KEEP)
            continue
        if a[-1].isdigit() and _ORDINAL.match(b) and len(a) <= 4:
            out.append(JOIN_DROP)  # an ordinal's superscript on a line of its own: "1\nst" -> "1st"
            continue
        b_lower = b[0].islower()
        # a line that stops mid-sentence before a lowercase word goes on, whatever it looks
        # like: a title-case run of a wrapped sentence, or a list item's wrapped text
        goes_on = not ends_sentence and a[-1] != ":" and b_lower and not structural[i + 1] and not table[i]
        if not goes_on and (structural[i] or (structural[i + 1] and not (tail and not ends_sentence)) or heading[i]):
            out.append(KEEP)
            continue
        if _cjk(a[-1]) and _cjk(b[0]):
            # CJK text wraps anywhere and without spaces; a line ending a sentence may end a paragraph
            out.append(KEEP if ends_sentence else JOIN_DROP)
            continue
        if a[-1] == ";" and b_lower:
            join = True  # an enumeration inside one sentence ("...costs;\nour ability to ...")
        elif not ends_sentence and b_lower:
            join = True  # the sentence clearly goes on
        elif heading[i + 1] and ends_sentence:
            join = False  # a title after a finished sentence
        elif wrapped and len(a) >= 0.6 * width:
            join = True  # a full line of a wrapped paragraph
        else:
            # a short line: it ends a paragraph unless it stops mid-sentence
            join = not ends_sentence and bool(_CONTINUES.search(a)) and not heading[i + 1]
        if not join:
            out.append(KEEP)
        elif len(a) > 1 and a[-1] == "-" and a[-2].islower() and b_lower and lines[i].endswith("-") and lines[i + 1][:1] == b[:1]:
            out.append(JOIN_HYPHEN)
        else:
            out.append(SPACE)
    return out


def reading_view(text: str, *, wrapped: bool = True) -> ReadingView:
    """The reading-order view of ``text`` (see the module docs). O(n) in the text length.

    ``wrapped=False``: the text's lines are records (a CSV file's rows), never joined — the view
    is the text itself."""
    if "\n" not in text or not wrapped:
        return _as_is(text)
    lines = text.split("\n")
    return _view(text, lines, _joins(lines))


def reading_views(texts: Sequence[str], wrapped: Sequence[bool]) -> list[ReadingView]:
    """:func:`reading_view` of every text (``wrapped[i]`` for ``texts[i]``), the same views: the
    table-like test of all their lines runs as one polars pass instead of one per text (the
    segment stage reads thousands of short documents)."""
    split = [t.split("\n") if w and "\n" in t else None for t, w in zip(texts, wrapped, strict=True)]
    stripped = [None if lines is None else [ln.strip() for ln in lines] for lines in split]
    table = _table_lines([s for st in stripped if st is not None for s in st])
    out: list[ReadingView] = []
    at = 0
    for text, lines, st in zip(texts, split, stripped, strict=True):
        if lines is None or st is None:
            out.append(_as_is(text))
            continue
        out.append(_view(text, lines, _joins(lines, stripped=st, table=table[at : at + len(lines)])))
        at += len(lines)
    return out


def _as_is(text: str) -> ReadingView:
    return ReadingView(text, len(text), np.zeros(0, np.int64), np.zeros(0, np.int64))


def _view(text: str, lines: list[str], joins: list[int]) -> ReadingView:
    """The view of ``text`` (split into ``lines``) given what becomes of each line break."""
    kinds = joins + [KEEP]
    parts: list[str] = []
    cut: list[int] = []
    shift: list[int] = []
    dropped = 0
    view_len = 0
    last = len(lines) - 1
    for i, (line, kind) in enumerate(zip(lines, kinds, strict=True)):
        if kind == SPACE:
            piece = line + " "
        elif kind in (JOIN_HYPHEN, JOIN_DROP):
            piece = line[:-1] if kind == JOIN_HYPHEN else line
            dropped += 2 if kind == JOIN_HYPHEN else 1
        else:
            piece = line + ("\n" if i < last else "")
        parts.append(piece)
        view_len += len(piece)
        if kind in (JOIN_HYPHEN, JOIN_DROP):
            cut.append(view_len)
            shift.append(dropped)
    return ReadingView("".join(parts), len(text), np.asarray(cut, np.int64), np.asarray(shift, np.int64))
