"""``--mode segments``: relevant segment extraction (dsRAG RSE, docs/METHODS.md §6.8) over a snapshot.

Instead of scattered top-k leaves, the mode returns contiguous runs of chunks ("segments") from
the documents where relevant chunks cluster:

1. the ``candidates`` best leaves by cosine (``segments.candidates``, **200**), rescored by the
   configured reranker and calibrated to [0, 1] (:func:`arborag.query.rerank.leaf_candidates`:
   cosine against the full-chunk vectors offline, a cross-encoder or an LLM when configured);
2. RSE (:mod:`arborag.query.rse`) with a preset (``preset="balanced" | "precision" |
   "find_all"``, default ``segments.preset``; any :class:`~arborag.query.rse.RSEParams` field
   may be overridden as an option, e.g. ``max_length=5``): chunk values from rank and relevance,
   then the greedy best non-overlapping runs;
3. each segment's text is cut from the **document** text, from its first chunk's ``start_char``
   to its last chunk's ``end_char`` (:func:`~arborag.query.rse.stitch_segment`), so chunk overlap
   is never repeated and characters between chunks are never dropped; the header of a chunk is
   never part of it;
4. the segments are fitted to the token budget, best first (an overflowing segment is trimmed at
   its lower-valued end; :func:`~arborag.query.rse.fit_segments`). ``budget=None`` keeps every
   segment RSE picked (bounded by the preset's ``overall_max_length``).

A segment is one :class:`~arborag.query.index.Hit`: ``node_id`` ``"seg:<doc_id>:<first>-<last>"``
(the chunk ordinals it spans, both inclusive: a name, not a node of the tree), ``level`` 0,
``score`` the RSE value of the segment, ``doc_ids`` its document, ``title`` the document's title,
``start_char``/``end_char`` its offsets in the document text, ``chunk_ids`` its leaves in order.

Chunk positions: a document's leaf chunks sorted by ordinal are positions 0..n-1 (ordinals as
the segmenters write them); RSE runs over positions, the node id names ordinals.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from arborag.errors import QueryError
from arborag.query.rse import Preset, RSEParams, Segment, best_segments, chunk_values, fit_segments, stitch_segment

__all__ = ["DocChunks", "LeafLayout", "PRESETS", "leaf_layout", "search", "segment_node_id"]

PRESETS: tuple[str, ...] = tuple(p.name.lower() for p in Preset)
_PARAM_NAMES = frozenset(f.name for f in fields(RSEParams))


@dataclass(frozen=True, slots=True)
class DocChunks:
    """One document's leaf chunks in ordinal order."""

    chunk_ids: tuple[str, ...]
    ordinals: np.ndarray
    start_chars: np.ndarray
    end_chars: np.ndarray


@dataclass(frozen=True, slots=True)
class LeafLayout:
    """Where every leaf of a snapshot sits: chunk_id -> (doc_id, position), and per document its
    chunks; document texts and titles are read on first use."""

    position: dict[str, tuple[str, int]]
    docs: dict[str, DocChunks]


_LAYOUTS: weakref.WeakKeyDictionary[Any, LeafLayout] = weakref.WeakKeyDictionary()
_DOCS: weakref.WeakKeyDictionary[Any, tuple[dict[str, str], dict[str, str]]] = weakref.WeakKeyDictionary()


def leaf_layout(index: Any) -> LeafLayout:
    """The :class:`LeafLayout` of ``index``'s leaf chunks (``Index.leaf_chunks()``), built once.

    Only chunks that are leaves of the snapshot count (a corpus's working ``chunks`` table may hold
    other strategies' chunks too)."""
    cached = _LAYOUTS.get(index)
    if cached is not None:
        return cached
    import polars as pl

    leaves = set(np.asarray(index.vectors.node_ids, dtype=object)[np.asarray(index.vectors.levels) == 0].tolist())
    t = pl.DataFrame(index.leaf_chunks().select(["chunk_id", "doc_id", "ordinal", "start_char", "end_char"]))
    t = t.filter(pl.col("chunk_id").is_in(list(leaves))).unique("chunk_id", keep="first").sort(["doc_id", "ordinal", "start_char"])
    position: dict[str, tuple[str, int]] = {}
    docs: dict[str, DocChunks] = {}
    for (doc_id,), g in t.group_by(["doc_id"], maintain_order=True):
        ids = tuple(g.get_column("chunk_id").to_list())
        docs[str(doc_id)] = DocChunks(
            ids,
            g.get_column("ordinal").to_numpy().astype(np.int64),
            g.get_column("start_char").to_numpy().astype(np.int64),
            g.get_column("end_char").to_numpy().astype(np.int64),
        )
        position.update((c, (str(doc_id), i)) for i, c in enumerate(ids))
    layout = LeafLayout(position, docs)
    _LAYOUTS[index] = layout
    return layout


def _doc_texts(index: Any) -> tuple[dict[str, str], dict[str, str]]:
    """(doc_id -> text, doc_id -> title) of the snapshot's documents, read once."""
    cached = _DOCS.get(index)
    if cached is None:
        d = index.documents()
        texts = dict(zip(d.column("doc_id").to_pylist(), d.column("text").to_pylist()))
        cached = ({k: v or "" for k, v in texts.items()}, index.doc_titles())
        _DOCS[index] = cached
    return cached


_TOKENS: weakref.WeakKeyDictionary[Any, dict[str, tuple[np.ndarray, np.ndarray]]] = weakref.WeakKeyDictionary()


def _span_counter(index: Any, texts: dict[str, str]):
    """``count(doc_id, lo, hi)``: tokens of the document's own tokenization that lie inside
    ``[lo, hi)`` (each document tokenized once per index). Equal to counting ``text[lo:hi]``
    except, rarely, by a token at a boundary that splits a word."""
    from arborag.tokenizer import get_tokenizer

    cache = _TOKENS.setdefault(index, {})

    def count(doc_id: str, lo: int, hi: int) -> int:
        if doc_id not in cache:
            cache[doc_id] = get_tokenizer().offsets(texts.get(doc_id, ""))
        starts, ends = cache[doc_id]
        return max(0, int(np.searchsorted(ends, hi, side="right")) - int(np.searchsorted(starts, lo, side="left")))

    return count


def segment_node_id(doc_id: str, doc: DocChunks, seg: Segment) -> str:
    """``"seg:<doc_id>:<first>-<last>"``: the first and last chunk ordinals of the segment."""
    return f"seg:{doc_id}:{int(doc.ordinals[seg.start])}-{int(doc.ordinals[seg.end - 1])}"


def _params(text: str, preset: str | None, default: str, overrides: dict[str, Any]) -> RSEParams:
    name = (preset or default).lower()
    if name not in PRESETS:
        raise QueryError(text, f"unknown segments preset {name!r}; use one of {', '.join(PRESETS)}")
    unknown = sorted(set(overrides) - _PARAM_NAMES)
    if unknown:
        raise QueryError(text, f"mode 'segments' takes no option {', '.join(unknown)}; it takes preset=, rerank=, candidates=, "
                               f"trace= and the RSE parameters {', '.join(sorted(_PARAM_NAMES))}")
    return replace(Preset.named(name), **overrides)


def search(
    index: Any,
    text: str,
    *,
    budget: int | None,
    k: int = 5,
    levels: Sequence[int] | None = None,
    doc_ids: Sequence[str] | None = None,
    vector: np.ndarray | None = None,
    lucene: bool = False,
    preset: str | None = None,
    rerank: Any = None,
    candidates: int | None = None,
    trace: dict | None = None,
    **params: Any,
) -> list[Any]:
    """Relevant segments for ``text`` within ``budget`` tokens (see the module docs).

    ``rerank``: a :class:`~arborag.query.rerank.Reranker`, or ``"cosine"``/``"cross_encoder"``/
    ``"llm"`` (default: ``rerank.kind`` of the config). ``trace`` (a dict) receives the reranker,
    its failures, the candidates and the segments RSE picked before the budget."""
    from arborag.query.hits import Hit
    from arborag.query.rerank import leaf_candidates
    from arborag.tokenizer import count_tokens

    if levels is not None and 0 not in levels:
        raise QueryError(text, "mode 'segments' works on leaf chunks (level 0); drop --levels or include 0")
    cfg = index.config.segments
    p = _params(text, preset, cfg.preset, params)
    layout = leaf_layout(index)
    n = int(candidates or max(cfg.candidates, p.top_k_for_document_selection))
    cand = leaf_candidates(index, text, vector=vector, doc_ids=doc_ids, n=n, rerank=rerank)
    node_ids = index.vectors.node_ids
    where = [layout.position.get(node_ids[r]) for r in cand.rows.tolist()]
    keep = [i for i, w in enumerate(where) if w is not None]
    if where and not keep:
        raise QueryError(text, "the snapshot's leaves have no chunk offsets (chunks.parquet), so segments cannot be cut from "
                               "the documents; rebuild the corpus with `arborag build`")
    c_docs = [where[i][0] for i in keep]  # type: ignore[index]
    c_pos = np.asarray([where[i][1] for i in keep], dtype=np.int64)  # type: ignore[index]
    docs = layout.docs
    c_chars = np.asarray([docs[d].end_chars[o] - docs[d].start_chars[o] for d, o in zip(c_docs, c_pos.tolist())], dtype=np.int64)
    values = chunk_values(c_docs, c_pos, cand.relevance[keep], c_chars, p, doc_lengths={d: len(docs[d].chunk_ids) for d in set(c_docs)})
    picked = best_segments(values, p)
    texts, titles = _doc_texts(index)

    stitched: dict[tuple[str, int, int], tuple[int, int, str, int]] = {}

    def stitch_bounds(seg: Segment) -> tuple[int, int]:
        d = docs[seg.doc_id]
        return int(d.start_chars[seg.start : seg.end].min()), int(d.end_chars[seg.start : seg.end].max())

    def stitch(seg: Segment) -> tuple[int, int, str, int]:
        key = (seg.doc_id, seg.start, seg.end)
        if key not in stitched:
            d = docs[seg.doc_id]
            if seg.doc_id not in texts:
                raise QueryError(text, f"the snapshot has no text for document {seg.doc_id}; rebuild the corpus "
                                       "(`arborag build`) so its snapshot carries documents.parquet")
            lo, hi, body = stitch_segment(seg, texts[seg.doc_id], d.start_chars, d.end_chars)
            stitched[key] = (lo, hi, body, count_tokens(body))
        return stitched[key]

    # Fit with token counts read off each document's tokenization (one per document, cached):
    # bisecting a long segment's trims then costs no tokenizer calls. The fitted segments are
    # then counted exactly; should a boundary token make them overflow, fit again exactly.
    est = _span_counter(index, texts)
    fitted = fit_segments(picked, lambda s: est(s.doc_id, *stitch_bounds(s)), budget, values=values)
    if budget is not None and sum(stitch(s)[3] for s in fitted) > budget:
        fitted = fit_segments(picked, lambda s: stitch(s)[3], budget, values=values)
    if trace is not None:
        trace.update(cand.info, preset=preset or cfg.preset, picked=[(s.doc_id, s.start, s.end, round(s.score, 6)) for s in picked])
    out: list[Any] = []
    for seg in fitted:
        lo, hi, body, n_tok = stitch(seg)
        d = docs[seg.doc_id]
        out.append(Hit(segment_node_id(seg.doc_id, d, seg), 0, float(seg.score), body, (seg.doc_id,), n_tok,
                       title=titles.get(seg.doc_id), start_char=lo, end_char=hi, chunk_ids=d.chunk_ids[seg.start : seg.end]))
    return out
