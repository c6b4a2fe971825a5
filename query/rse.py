"""Relevant segment extraction (dsRAG RSE, docs/METHODS.md §6.8).

Instead of scattered top-k chunks, RSE returns contiguous runs of chunks ("segments") from the
documents where relevant chunks cluster. Three steps, each a pure function:

1. :func:`chunk_values` — the value of every chunk of every candidate document, from the
   reranked result list (rank = position in that list, 0-based, as dsRAG's ``enumerate``)::

       value = exp(-rank / decay_rate) * relevance - irrelevant_chunk_penalty
       value *= max(n_chars, 700) / 700          # chunk_length_adjustment: the whole value

   A chunk that is not in the list has rank 1000 and relevance 0 (so its value is about
   ``-penalty``) and, as in dsRAG, an unknown length (factor 1). Candidate documents are those
   with a chunk among the first ``top_k_for_document_selection`` results, in order of first
   appearance; a document spans ordinals ``0 .. max retrieved ordinal`` unless its real chunk
   count is given.
2. :func:`best_segments` — greedy: repeatedly pick the run of adjacent chunks of one document
   with the largest sum of values such that the run has ≤ ``max_length`` chunks, starts and ends
   on a non-negative value, overlaps no earlier pick and keeps the total picked length ≤
   ``overall_max_length`` (a candidate that would exceed it is not considered, so the last pick
   may be shorter than it would otherwise be); stop when nothing is left or the best sum is
   < ``minimum_value``. Ties go to the earlier document, then the earlier start, then the shorter
   run (dsRAG's scan order with a strict ``>``); sums within 1e-12 count as equal so the result
   does not depend on floating-point summation order.
3. :func:`stitch_segment` and :func:`fit_segments` — a segment's text is cut from the document
   text from its first chunk's ``start_char`` to its last chunk's ``end_char`` (chunk overlap is
   never repeated, gaps never dropped); segments are then fitted to a token budget.

Each pick costs O(n · max_length) vectorised numpy work over the n candidate chunks.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

__all__ = [
    "MISSING_RANK",
    "REFERENCE_LENGTH",
    "Preset",
    "RSEParams",
    "Segment",
    "best_segments",
    "chunk_values",
    "fit_segments",
    "relevant_segments",
    "stitch_segment",
]

MISSING_RANK = 1000
REFERENCE_LENGTH = 700  # characters of a "standard" chunk (dsRAG)
_TIE = 1e-12


@dataclass(frozen=True, slots=True)
class RSEParams:
    """RSE parameters (dsRAG names). Lengths count chunks."""

    max_length: int
    overall_max_length: int
    minimum_value: float
    irrelevant_chunk_penalty: float
    decay_rate: float
    top_k_for_document_selection: int = 10
    chunk_length_adjustment: bool = True


class Preset(enum.Enum):
    """dsRAG's presets: (max_length, overall_max_length, minimum_value, penalty, decay_rate)."""

    BALANCED = RSEParams(15, 30, 0.5, 0.18, 30, top_k_for_document_selection=10)
    PRECISION = RSEParams(15, 30, 0.7, 0.2, 30, top_k_for_document_selection=10)
    FIND_ALL = RSEParams(40, 200, 0.4, 0.18, 200, top_k_for_document_selection=200)

    @classmethod
    def named(cls, name: str) -> RSEParams:
        """``"balanced"`` / ``"precision"`` / ``"find_all"`` -> its parameters."""
        return cls[name.upper()].value


@dataclass(frozen=True, slots=True)
class Segment:
    """Chunks ``start <= ordinal < end`` of document ``doc_id``; ``score`` = sum of their values
    (higher is better)."""

    doc_id: str
    start: int
    end: int
    score: float

    def __len__(self) -> int:
        return self.end - self.start


def chunk_values(
    doc_ids: Sequence[str],
    ordinals: Sequence[int] | npt.ArrayLike,
    relevance: Sequence[float] | npt.ArrayLike,
    n_chars: Sequence[int] | npt.ArrayLike,
    params: RSEParams,
    *,
    doc_lengths: Mapping[str, int] | None = None,
) -> dict[str, np.ndarray]:
    """Values of every chunk of every candidate document, keyed by doc id in selection order.

    The inputs are the reranked results, best first: result ``i`` is chunk ``ordinals[i]`` of
    ``doc_ids[i]`` with calibrated relevance ``relevance[i]`` (in [0, 1]) and ``n_chars[i]``
    characters. A chunk listed twice keeps its best (first) rank. ``doc_lengths`` gives a
    document's real chunk count (otherwise max retrieved ordinal + 1).
    """
    ords = np.asarray(ordinals, dtype=np.int64)
    rel = np.asarray(relevance, dtype=np.float64)
    chars = np.asarray(n_chars, dtype=np.float64)
    if not (len(doc_ids) == len(ords) == len(rel) == len(chars)):
        raise ValueError("doc_ids, ordinals, relevance and n_chars must have the same length")  # programming error
    selected: list[str] = []
    for d in doc_ids[: params.top_k_for_document_selection]:
        if d not in selected:
            selected.append(d)
    docs = np.asarray(list(doc_ids), dtype=object)
    out: dict[str, np.ndarray] = {}
    for d in selected:
        rows = np.flatnonzero(docs == d)
        length = int(doc_lengths[d]) if doc_lengths and d in doc_lengths else int(ords[rows].max()) + 1
        rank = np.full(length, float(MISSING_RANK))
        r = np.zeros(length)
        scale = np.ones(length)
        keep = rows[::-1]  # assign worst first so the best rank of a repeated chunk wins
        keep = keep[ords[keep] < length]
        rank[ords[keep]] = keep.astype(np.float64)
        r[ords[keep]] = rel[keep]
        if params.chunk_length_adjustment:
            scale[ords[keep]] = np.maximum(chars[keep], REFERENCE_LENGTH) / REFERENCE_LENGTH
        out[d] = (np.exp(-rank / params.decay_rate) * r - params.irrelevant_chunk_penalty) * scale
    return out


def best_segments(values: Mapping[str, np.ndarray], params: RSEParams) -> list[Segment]:
    """dsRAG's greedy best-non-overlapping-segment selection (see the module docs), in pick order."""
    docs = list(values)
    if not docs:
        return []
    v = np.concatenate([np.asarray(values[d], dtype=np.float64) for d in docs])
    n = len(v)
    doc_of = np.repeat(np.arange(len(docs)), [len(values[d]) for d in docs])
    offset = np.concatenate([[0], np.cumsum([len(values[d]) for d in docs])])
    prefix = np.concatenate([[0.0], np.cumsum(v)])
    nonneg = v >= 0
    taken = np.zeros(n, dtype=bool)
    picks: list[Segment] = []
    total = 0
    max_len = max(1, params.max_length)
    while total < params.overall_max_length:
        remaining = params.overall_max_length - total
        taken_prefix = np.concatenate([[0], np.cumsum(taken)])
        best, best_start, best_len = -math.inf, -1, -1
        for length in range(1, min(max_len, remaining, n) + 1):
            s = np.arange(n - length + 1)
            e = s + length  # exclusive
            ok = nonneg[s] & nonneg[e - 1] & (doc_of[s] == doc_of[e - 1]) & (taken_prefix[e] == taken_prefix[s])
            if not ok.any():
                continue
            sums = np.where(ok, prefix[e] - prefix[s], -math.inf)
            i = int(np.argmax(sums))  # first maximum = earliest start among exact ties
            top = float(sums[i])
            if top > best + _TIE:
                best, best_start, best_len = top, i, length
            elif top >= best - _TIE:
                # near-tie with a shorter run found earlier: dsRAG's scan keeps the earlier start
                cand = int(np.flatnonzero(sums >= best - _TIE)[0])
                if cand < best_start:
                    best_start, best_len = cand, length
        if best_start < 0 or best < params.minimum_value:
            break
        d = int(doc_of[best_start])
        start = best_start - int(offset[d])
        picks.append(Segment(docs[d], start, start + best_len, best))
        taken[best_start : best_start + best_len] = True
        total += best_len
    return picks


def relevant_segments(
    doc_ids: Sequence[str],
    ordinals: Sequence[int] | npt.ArrayLike,
    relevance: Sequence[float] | npt.ArrayLike,
    n_chars: Sequence[int] | npt.ArrayLike,
    params: RSEParams | str = "balanced",
    *,
    doc_lengths: Mapping[str, int] | None = None,
) -> list[Segment]:
    """:func:`chunk_values` then :func:`best_segments`; ``params`` may be a preset name."""
    p = Preset.named(params) if isinstance(params, str) else params
    return best_segments(chunk_values(doc_ids, ordinals, relevance, n_chars, p, doc_lengths=doc_lengths), p)


def stitch_segment(
    segment: Segment,
    doc_text: str,
    start_chars: Sequence[int] | npt.ArrayLike,
    end_chars: Sequence[int] | npt.ArrayLike,
) -> tuple[int, int, str]:
    """``(start_char, end_char, text)`` of a segment, cut from the document text.

    ``start_chars[o]``/``end_chars[o]`` are the offsets of the document's chunk with ordinal
    ``o``. The text runs from the smallest start to the largest end of the segment's chunks, so
    overlapping chunks are not repeated and characters between chunks are not dropped.
    """
    a = np.asarray(start_chars, dtype=np.int64)[segment.start : segment.end]
    b = np.asarray(end_chars, dtype=np.int64)[segment.start : segment.end]
    if len(a) != len(segment):
        raise IndexError(f"segment {segment} runs past the document's {len(np.asarray(start_chars))} chunks")
    lo, hi = int(a.min()), int(b.max())
    return lo, hi, doc_text[lo:hi]


def _trim(segment: Segment, values: np.ndarray) -> Segment | None:
    """Drop the lower-valued end chunk; ``None`` when nothing is left."""
    if len(segment) <= 1:
        return None
    first, last = values[segment.start], values[segment.end - 1]
    if first < last:
        return replace(segment, start=segment.start + 1, score=segment.score - float(first))
    return replace(segment, end=segment.end - 1, score=segment.score - float(last))


def fit_segments(
    segments: Sequence[Segment],
    cost: Callable[[Segment], int],
    budget: int | None,
    *,
    values: Mapping[str, np.ndarray] | None = None,
) -> list[Segment]:
    """The segments that fit in ``budget`` tokens, best score first.

    ``cost(segment)`` is the token count of its stitched text. Like the other modes, a segment
    that would overflow is skipped and later smaller ones may still fit; with ``values`` (from
    :func:`chunk_values`) an overflowing segment is first trimmed, lower-valued end chunk first,
    and kept if a non-empty run with a positive score fits. ``budget=None`` keeps everything.
    """
    ranked = sorted(segments, key=lambda s: -s.score)
    if budget is None:
        return ranked
    out: list[Segment] = []
    used = 0
    for seg in ranked:
        cur = _first_fit(seg, cost, budget - used, values)
        if cur is None or (cur is not seg and cur.score <= 0):
            continue
        out.append(cur)
        used += cost(cur)
        if used >= budget:
            break
    return out


def _first_fit(seg: Segment, cost: Callable[[Segment], int], room: int, values: Mapping[str, np.ndarray] | None) -> Segment | None:
    """The first of ``seg``, then its successive trims (:func:`_trim`), that costs ≤ ``room``.

    Each trim drops a chunk, so the cost never grows along the sequence: a binary search finds the
    first fit with O(log length) calls of ``cost`` (a tokenization of the stitched text) instead of
    one per trimmed chunk."""
    if cost(seg) <= room:
        return seg
    if values is None:
        return None
    seq: list[Segment] = [seg]
    while (nxt := _trim(seq[-1], values[seq[-1].doc_id])) is not None:
        seq.append(nxt)
    lo, hi = 1, len(seq)  # the answer lies in [lo, hi); hi = nothing fits
    while lo < hi:
        mid = (lo + hi) // 2
        if cost(seq[mid]) <= room:
            hi = mid
        else:
            lo = mid + 1
    return seq[lo] if lo < len(seq) else None
