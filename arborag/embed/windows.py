"""Long-text windows and normalisation shared by every embedder (local model or a server).

:func:`long_text_windows` cuts a text over a model's limit into token windows;
:func:`text_windows` adds the prefix rule (a chunk's header repeated at the start of every
window); :func:`l2_normalise` is the one normalisation of vectors. No model, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["WINDOW_SLACK", "l2_normalise", "long_text_windows", "text_windows"]

#: Tokens kept free in a window besides [CLS]/[SEP]: a window's text re-tokenized on its own can
#: differ from the document's tokens at a cut inside a word by a piece or two.
WINDOW_SLACK = 4


def long_text_windows(text: str, starts: Sequence[int], ends: Sequence[int], max_len: int, overlap: int) -> list[str]:
    """The window texts of ``text`` given its token offsets (no special tokens): ``[text]`` when
    it fits in ``max_len`` (special tokens included), else consecutive windows of
    ``max_len - 2 - slack`` tokens whose starts advance by that minus ``overlap``; the last
    window ends at the text's last token."""
    n = len(starts)
    width = max(1, max_len - 2 - WINDOW_SLACK)
    if n <= max_len - 2:
        return [text]
    step = max(1, width - max(0, min(overlap, width - 1)))
    out: list[str] = []
    first = 0
    while True:
        last = min(first + width, n) - 1
        out.append(text[int(starts[first]) : int(ends[last])])
        if last >= n - 1:
            return out
        first += step


def text_windows(text: str, offsets: Sequence[tuple[int, int]], prefix_chars: int, max_len: int, overlap: int) -> list[str]:
    """The windows of one text over the limit (``len(offsets) > max_len - 2``) given its token
    ``(start, end)`` offsets: plain :func:`long_text_windows`, or with a prefix (its first
    ``prefix_chars`` characters, at most half the limit in tokens) repeated at the start of
    every window of the rest."""
    limit = max_len - 2
    if prefix_chars <= 0:
        return long_text_windows(text, [a for a, _ in offsets], [b for _, b in offsets], max_len, overlap)
    n_pre = sum(1 for a, _ in offsets if a < prefix_chars)
    keep = min(n_pre, limit // 2)
    prefix = (
        text[: offsets[keep - 1][1]] + ("\n\n" if keep < n_pre else text[offsets[keep - 1][1] : prefix_chars]) if keep else ""
    )
    body = [(a - prefix_chars, b - prefix_chars) for a, b in offsets if a >= prefix_chars]
    rest = text[prefix_chars:]
    wins = long_text_windows(rest, [a for a, _ in body], [b for _, b in body], max_len - keep - 1, overlap)
    return [prefix + w for w in wins]


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """float32 rows of unit length (zero rows stay zero)."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (x / norms).astype(np.float32, copy=False)
