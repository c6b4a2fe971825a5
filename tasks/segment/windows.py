"""The five non-LLM segmentation algorithms, on token offset arrays (docs/METHODS.md §3).

Every function here works on one document that has already been tokenized **once**:
``starts``/``ends`` are the int64 character offsets of its ``L`` tokens
(:meth:`arborag.tokenizer.Tokenizer.offsets`, non-decreasing). A window is a half-open range of
token indices ``[a, b)``; :mod:`arborag.tasks.stages.chunks` turns it into the character span
``text[starts[a]:ends[b - 1]]``. No function re-tokenizes text or loops over characters in
Python: delimiters are found with compiled regular expressions (C), character positions are
mapped to token indices with :func:`numpy.searchsorted` (:func:`locate`), window ends are found by
monotone pointers or bisection over prefix arrays, so each segmenter costs O(n) in the text
length (plus O(k log m) bisection for k windows over m units, done in C).

Units and boundaries
    A *unit boundary* is a token index ``k`` (0 < k < L) such that a delimiter occurrence ends
    at or before ``starts[k]`` and after the previous token started — i.e. the first token at
    or after the character just past the delimiter. Boundaries are de-duplicated, so a stretch
    with no tokens (the blank between two line breaks, trailing spaces) never forms a unit of
    its own: *units always hold at least one token*. The array ``[0, k1, k2, …, L]`` is at the
    same time the prefix sum of the units' token counts (unit ``u`` has
    ``bounds[u + 1] - bounds[u]`` tokens).

Characters the tokenizer splits into several tokens (a Hangul syllable becomes 2–3 jamo
pieces sharing one character offset) can never be cut: boundaries between such tokens are
dropped ("clean" cuts only, see :func:`clean_cuts`).
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from functools import lru_cache
from itertools import pairwise

import numpy as np
import numpy.typing as npt

from arborag.text import CLAUSE_PATTERN, SENTENCE_PATTERN, sentence_ends

__all__ = [
    "CLAUSE_PATTERN",
    "RCS_SEPARATORS",
    "SENTENCE_PATTERN",
    "clean_cuts",
    "dds_windows",
    "delimiter_cuts",
    "dfs_windows",
    "ffs_windows",
    "locate",
    "rcs_ranges",
    "sentence_windows",
    "unit_bounds",
]

IntArray = npt.NDArray[np.int64]

# Sentence and clause ends (SENTENCE_PATTERN, CLAUSE_PATTERN) are the house rules of arborag.text.

# LangChain RecursiveCharacterTextSplitter's default separators, strongest first.
RCS_SEPARATORS: tuple[str, ...] = ("\n\n", "\n", " ", "")


@lru_cache(maxsize=32)
def _literal_pattern(delimiters: tuple[str, ...]) -> re.Pattern[str]:
    """One regex matching any delimiter; longer delimiters are tried first ("\\n\\n" before "\\n")."""
    ordered = sorted(dict.fromkeys(delimiters), key=len, reverse=True)
    return re.compile("|".join(re.escape(d) for d in ordered))


def delimiter_cuts(
    text: str, delimiters: Sequence[str] | re.Pattern[str], start: int = 0, end: int | None = None
) -> IntArray:
    """Character positions just after each delimiter occurrence in ``text[start:end]``.

    ``delimiters`` is a list of literal strings (matched leftmost, longest first, without
    overlap — like a scanner that tries the longest delimiter at each position) or a compiled
    pattern. One pass of the regex engine: O(n).
    """
    if isinstance(delimiters, re.Pattern):
        pattern = delimiters
    else:
        if not delimiters:
            return np.zeros(0, dtype=np.int64)
        pattern = _literal_pattern(tuple(delimiters))
    stop = len(text) if end is None else end
    return np.fromiter((m.end() for m in pattern.finditer(text, start, stop)), dtype=np.int64)


def locate(sorted_values: IntArray, keys: IntArray, block: int = 1 << 12) -> IntArray:
    """``np.searchsorted(sorted_values, keys, side="left")``, fast for non-decreasing ``keys``.

    Sorted keys are searched in blocks of ``block``; each block only within the slice of
    ``sorted_values`` that its own first key and the next block's first key bound. The same
    answer as one big searchsorted, but the binary searches stay in a small, cache-resident
    slice instead of probing the whole (tens of MB) offset array per key, which keeps the cost
    proportional to the input size on large documents. Unsorted keys take the plain path.
    """
    if len(keys) <= block or bool(np.any(keys[1:] < keys[:-1])):
        return np.searchsorted(sorted_values, keys, side="left").astype(np.int64)
    lo = np.searchsorted(sorted_values, keys[::block], side="left").tolist()
    hi = [*lo[1:], len(sorted_values)]
    out = np.empty(len(keys), dtype=np.int64)
    for i, (a, b) in enumerate(zip(lo, hi, strict=True)):
        part = slice(i * block, (i + 1) * block)
        out[part] = np.searchsorted(sorted_values[a:b], keys[part], side="left") + a
    return out


def clean_cuts(starts: IntArray, ends: IntArray) -> npt.NDArray[np.bool_]:
    """``clean[k]`` (k = 0 … L) is True when a cut before token ``k`` splits no character.

    Only false between tokens that share a character (e.g. the jamo pieces of one Hangul
    syllable), which must stay in the same chunk.
    """
    clean = np.ones(len(starts) + 1, dtype=np.bool_)
    if len(starts) > 1:
        clean[1:-1] = starts[1:] >= ends[:-1]
    return clean


def unit_bounds(starts: IntArray, clean: npt.NDArray[np.bool_], cuts: IntArray) -> IntArray:
    """Token-index boundaries ``[0, …, L]`` of the units that the character ``cuts`` delimit.

    Each cut maps to the first token starting at or after it; duplicates (units without
    tokens) and unclean positions are dropped. ``cuts`` must be sorted (as delimiter_cuts
    returns them). O(c log L) comparisons for c cuts, in C, in cache-sized blocks.
    """
    n = len(starts)
    ks = locate(starts, cuts)
    ks = ks[(ks > 0) & (ks < n)]
    ks = np.concatenate((np.zeros(1, np.int64), ks[clean[ks]], np.full(1, n, np.int64)))
    return ks[np.concatenate(([True], ks[1:] != ks[:-1]))]  # sorted: drop repeats in one pass


def ffs_windows(n_tokens: int, window: int, step: int) -> tuple[IntArray, IntArray]:
    """Fixed-size windows: ``W_i = [(i-1)s, min((i-1)s + w, L))`` for ``i = 1 … N``.

    ``N = ceil((L - w) / s) + 1`` windows, or one window when ``L <= w``. Needs ``s <= w`` for
    every token to be covered (checked by the caller). Pure arithmetic: O(N).
    """
    if n_tokens == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    count = 1 if n_tokens <= window else -(-(n_tokens - window) // step) + 1
    a = np.arange(count, dtype=np.int64) * step
    return a, np.minimum(a + window, n_tokens)


def dfs_windows(bounds: IntArray, window: int, step: int) -> tuple[IntArray, IntArray]:
    """Dynamic-fixed windows: start every ``s`` tokens; the end extends from ``start + w`` to
    the next unit boundary, so no unit is cut at the end of a window.

    The first window whose end reaches ``L`` is the last one. One vectorised search of the
    sorted targets ``a + w`` in ``bounds`` (:func:`locate`): O(N log m) comparisons in C.
    """
    n_tokens = int(bounds[-1])
    if n_tokens == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    a = np.arange(0, n_tokens, step, dtype=np.int64)
    b = bounds[locate(bounds, np.minimum(a + window, n_tokens))]
    last = int(np.argmax(b == n_tokens))  # b is non-decreasing and its last value is L
    return a[: last + 1], b[: last + 1]


def dds_windows(bounds: IntArray, window: int, step: int) -> tuple[IntArray, IntArray]:
    """Dynamic-dynamic windows over units: a window accumulates whole units from unit ``i`` until
    it holds ``>= w`` tokens (or the text ends); the next window starts ``s`` units later.

    Two monotone pointers over the unit prefix array ``bounds``: ``i`` (first unit) and ``j``
    (one past the last unit) only move forward, so the cost is O(m) for m units — not the
    paper's O(m·n²) re-counting. When a window holds fewer than ``s`` units (a few huge units
    already reach ``w``), the next window starts right after it instead, so no unit is skipped.
    Every window has ``>= w`` tokens except the last, which ends at ``L``.
    """
    b = bounds.tolist()
    m = len(b) - 1
    if m <= 0 or b[-1] == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    out_a: list[int] = []
    out_b: list[int] = []
    i, j = 0, 1
    while True:
        j = max(j, i + 1)
        goal = b[i] + window
        while j < m and b[j] < goal:
            j += 1
        out_a.append(b[i])
        out_b.append(b[j])
        if j == m:
            break
        i = min(i + step, j)
    return np.asarray(out_a, np.int64), np.asarray(out_b, np.int64)


def _token_cuts(lo: int, hi: int, limit: int, clean: npt.NDArray[np.bool_]) -> list[int]:
    """Cut token range ``[lo, hi)`` into pieces of at most ``limit`` tokens at clean positions.

    Each cut is the last clean position within ``limit`` tokens; only a run of unclean
    positions longer than ``limit`` (one character with more tokens than the limit) forces a
    longer piece. O(hi - lo) in the worst case, O((hi - lo) / limit) normally.
    """
    cuts: list[int] = []
    pos = lo
    while hi - pos > limit:
        cut = pos + limit
        while cut > pos and not clean[cut]:
            cut -= 1
        if cut == pos:
            cut = pos + limit + 1
            while cut < hi and not clean[cut]:
                cut += 1
            if cut >= hi:
                break
        cuts.append(cut)
        pos = cut
    return cuts


def sentence_windows(
    text: str, starts: IntArray, ends: IntArray, max_tokens: int
) -> tuple[IntArray, IntArray]:
    """RAPTOR leaves: sentences packed greedily into chunks of at most ``max_tokens`` tokens.

    1. Sentence boundaries from :func:`~arborag.text.sentence_ends` (one regex pass, mapped to
       tokens): :data:`SENTENCE_PATTERN`'s ends but those after an abbreviation or an initial.
    2. A sentence longer than the limit is cut at clause boundaries (:data:`CLAUSE_PATTERN`),
       and a clause still longer than the limit at token boundaries. Its pieces are packed
       among themselves: an over-long sentence starts a new chunk and the sentence after it
       starts another one (the RAPTOR reference code also chunks them separately).
    3. Greedy packing: a chunk takes pieces while they fit; the piece that would overflow
       starts the next chunk. Done by bisection over the piece boundary array (a jump per
       chunk, not per sentence).

    Chunks are contiguous and disjoint and every token is in exactly one chunk. O(n) for the
    regex passes plus O(c log p) for c chunks over p pieces.
    """
    n = len(starts)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    clean = clean_cuts(starts, ends)
    sent = unit_bounds(starts, clean, np.asarray(sentence_ends(text), dtype=np.int64))
    sizes = np.diff(sent)
    long_ids = np.flatnonzero(sizes > max_tokens)
    pieces = sent
    hard = np.array([0, n], dtype=np.int64)
    if len(long_ids):
        extra: list[IntArray] = []
        for u in long_ids.tolist():
            lo, hi = int(sent[u]), int(sent[u + 1])
            cuts = delimiter_cuts(text, CLAUSE_PATTERN, int(starts[lo]), int(ends[hi - 1]))
            clauses = unit_bounds(starts, clean, cuts)
            clauses = clauses[(clauses > lo) & (clauses < hi)]
            edges = [lo, *clauses.tolist(), hi]
            split: list[int] = []
            for c0, c1 in pairwise(edges):
                split.extend(_token_cuts(c0, c1, max_tokens, clean))
            extra.append(np.asarray(clauses.tolist() + split, dtype=np.int64))
        pieces = np.unique(np.concatenate([sent, *extra]))
        hard = np.unique(np.concatenate((hard, sent[long_ids], sent[long_ids + 1])))
    p = pieces.tolist()
    out_a: list[int] = []
    out_b: list[int] = []
    for h0, h1 in pairwise(hard.tolist()):
        i = bisect_left(p, h0)
        last = bisect_left(p, h1, i)
        while i < last:
            j = bisect_right(p, p[i] + max_tokens, i + 1, last + 1) - 1
            j = max(j, i + 1)  # a single piece over the limit (an uncuttable character)
            out_a.append(p[i])
            out_b.append(p[j])
            i = j
    return np.asarray(out_a, np.int64), np.asarray(out_b, np.int64)


@lru_cache(maxsize=8)
def _separator_pattern(separator: str) -> re.Pattern[str]:
    return re.compile(re.escape(separator))


def rcs_ranges(text: str, starts: IntArray, chunk_size: int, overlap: int) -> tuple[IntArray, IntArray]:
    """LangChain's ``RecursiveCharacterTextSplitter`` (keep_separator="start", strip_whitespace),
    with lengths measured in the document's tokens and real character offsets recorded.

    The algorithm is LangChain's, step for step:

    * ``split(range, separators)``: take the first separator present in the range ("" always
      is); cut the range just *before* each occurrence (the separator starts the next piece);
      drop empty pieces.
    * Pieces with fewer than ``chunk_size`` tokens are *good*; runs of good pieces are merged;
      a piece with ``>= chunk_size`` tokens flushes the run and is split recursively with the
      remaining separators (or, at the "" level, emitted as it is).
    * ``merge``: append pieces while the total stays ``<= chunk_size``; when the next piece
      would overflow, emit the current run (whitespace-stripped, skipped if empty) and drop
      pieces from its front while the total is ``> overlap`` — or still overflows with the new
      piece — so the next chunk starts with up to ``overlap`` tokens of the previous one.

    What makes it fast: a range's length is ``T[b] - T[a]`` where ``T`` maps a character
    position to the number of tokens starting before it (:func:`locate` on the token starts,
    vectorised over all pieces of a level) instead of re-tokenizing each piece;
    and ``merge`` jumps from chunk to chunk by bisection over the pieces' prefix counts (both
    the overflow point and the overlap pop are monotone), so Python work is per chunk, not
    per word. Separator positions come from one regex pass per range and level.

    Difference from LangChain (by design): a piece's length is the number of *document* tokens
    starting in it. At the "\\n\\n", "\\n" and " " levels pieces start at whitespace, where
    WordPiece tokenization of the piece alone is identical, so lengths — and chunks — match
    LangChain with the same tokenizer exactly. At the "" level — a piece of ``>= chunk_size``
    tokens without spaces or line breaks (a long URL, Latin words glued to Chinese), or a
    whole text without any — LangChain counts each *character* tokenized alone
    (``"python"`` = 6), we count real tokens (``"python"`` = 1), so our chunks there hold up to
    ``chunk_size`` real tokens where LangChain's hold up to ``chunk_size`` characters. For CJK
    characters (one token each) the two agree. A stripped chunk in which no token starts
    (control or format characters only, e.g. ``"\\x1b"``, which LangChain would emit) is dropped.

    Returns the chunks' character ranges ``(starts, ends)`` in document order (they overlap).
    """
    out_s: list[int] = []
    out_e: list[int] = []
    last_level = len(RCS_SEPARATORS) - 1

    def emit(a: int, b: int) -> None:
        piece = text[a:b]
        left = len(piece) - len(piece.lstrip())
        if left == len(piece):
            return
        s, e = a + left, b - (len(piece) - len(piece.rstrip()))
        if int(np.searchsorted(starts, e, "left")) == int(np.searchsorted(starts, s, "left")):
            return  # no token starts here (control or format characters only): nothing to embed
        out_s.append(s)
        out_e.append(e)

    def merge(bounds: list[int], tok: list[int], lo: int, hi: int) -> None:
        # pieces lo … hi-1; piece k is text[bounds[k]:bounds[k+1]] with tok[k+1]-tok[k] tokens
        i = j = lo  # the current chunk is pieces [i, j)
        while True:
            k = bisect_right(tok, tok[i] + chunk_size, j + 1, hi + 1)
            if k > hi:
                break
            jp = k - 1  # adding piece jp would overflow
            if jp > i:
                emit(bounds[i], bounds[jp])
                keep_from = max(tok[jp] - overlap, min(tok[jp + 1] - chunk_size, tok[jp]))
                i = bisect_left(tok, keep_from, i, jp)
            j = jp + 1
        if hi > i:
            emit(bounds[i], bounds[hi])

    def split(a: int, b: int, level: int) -> None:
        while RCS_SEPARATORS[level] and text.find(RCS_SEPARATORS[level], a, b) < 0:
            level += 1
        sep = RCS_SEPARATORS[level]
        if sep:
            occ = np.fromiter(
                (m.start() for m in _separator_pattern(sep).finditer(text, a, b)), dtype=np.int64
            )
            edges = np.concatenate((np.full(1, a, np.int64), occ[occ > a], np.full(1, b, np.int64)))
        else:
            edges = np.arange(a, b + 1, dtype=np.int64)
        toks = locate(starts, edges)
        big = np.flatnonzero(np.diff(toks) >= chunk_size).tolist()
        bounds, tok = edges.tolist(), toks.tolist()
        lo = 0
        for g in big:
            if g > lo:
                merge(bounds, tok, lo, g)
            if level == last_level:
                out_s.append(bounds[g])  # LangChain appends such a piece unstripped
                out_e.append(bounds[g + 1])
            else:
                split(bounds[g], bounds[g + 1], level + 1)
            lo = g + 1
        if len(bounds) - 1 > lo:
            merge(bounds, tok, lo, len(bounds) - 1)

    if text:
        split(0, len(text), 0)
    return np.asarray(out_s, np.int64), np.asarray(out_e, np.int64)
