"""Segmentation stage: documents → chunks (docs/METHODS.md §3), for the five non-LLM strategies.

(Over 500 lines on purpose: the strategy parameters, the per-text segmentation, the table builder
and the runner share the span conventions below, and the reuse key hashes this module's code as
one unit, ``_SEGMENT_CODE``; the algorithms themselves are in :mod:`arborag.tasks.segment.windows`.)

``segment_text`` tokenizes a text once with the one tokenizer and runs a segmenter from
:mod:`arborag.tasks.segment.windows` on the offset arrays; ``build_chunks`` does that for every ``ok``
document of a DOCUMENTS table and returns a CHUNKS table.

Strategies (windows measured in tokens of :func:`arborag.tokenizer.get_tokenizer`):

========  ==============================================================================
sentence  sentences packed greedily into chunks of ≤ ``sentence_max_tokens``; over-long
          sentences cut at clauses, then tokens. Disjoint; every token in exactly one chunk.
ffs       fixed windows of ``ffs_window`` tokens every ``ffs_step`` tokens.
dfs       windows start every ``dfs_step`` tokens; the end extends from ``start + w`` to the
          next delimiter (``cfg.delimiters``).
dds       windows of whole delimiter units with ``>= dds_window`` tokens, starting every
          ``dds_step`` units.
rcs       LangChain's recursive character splitter ("\\n\\n", "\\n", " ", "") with lengths in
          tokens: ``rcs_chunk_size``, ``rcs_overlap``.
========  ==============================================================================

Span conventions (all strategies):

* ``build_chunks`` segments each document's reading-order view (hard wraps joined; see
  :mod:`arborag.tasks.ingest.reading`) and maps the spans back to the original text's offsets;
  the functions below work on whatever text they are given.
* ``text[start:end]`` is the chunk; spans are in document order (``start`` and ``end``
  non-decreasing). Span edges are token edges, so a chunk never begins or ends with
  whitespace (rcs: whitespace-stripped, as LangChain does).
* ``n_tokens`` is the number of the document's tokens that *start* inside ``[start, end)`` —
  read off the single tokenization, never by re-tokenizing the chunk. It equals
  ``tokenizer.count(text[start:end])`` whenever both ends of the span are on word boundaries:
  always for dds (with delimiters that end in whitespace or punctuation, as the defaults do),
  and everywhere except the cuts that can fall inside a word — ffs windows and dfs starts
  (fixed token positions, e.g. just before ``##ing``), sentence's token-level split of an
  over-long clause, and rcs's character level. There a fresh count of the chunk's text can
  differ by the word piece at that edge.
* A character the tokenizer turns into several tokens (a Hangul syllable) is never split by
  sentence/dds/dfs ends; a fixed ffs/dfs position inside such a character makes neighbouring
  windows share it, and ``n_tokens`` counts its pieces where the character starts.
* Empty or whitespace-only text (no tokens) gives no spans.

Complexity: one tokenization per document (the floor, ≈ 5 MB/s on this machine) plus O(n)
array work; see :mod:`arborag.tasks.segment.windows` for each algorithm.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, get_args

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from arborag.config import SegmentConfig, Strategy
from arborag.errors import SegmentationError
from arborag.hashing import hash_bytes, hash_json, short_id
from arborag.progress import progress_bar
from arborag.tokenizer import Tokenizer, get_tokenizer
from arborag.storage.schemas import CHUNKS
from arborag.storage.tables import conform
from arborag.tasks.stage_context import StageContext, StageSummary
from arborag.tasks.build.key import hash_string_columns
from arborag.storage.frames import frame, to_table
from arborag.tasks.ingest.reading import LINE_RECORD_MIMES, READING_VIEW_VERSION, ReadingView, reading_views
from arborag.tasks.segment.windows import (
    IntArray,
    clean_cuts,
    dds_windows,
    delimiter_cuts,
    dfs_windows,
    ffs_windows,
    locate,
    rcs_ranges,
    sentence_windows,
    unit_bounds,
)

__all__ = [
    "STRATEGIES",
    "ChunksSummary",
    "Span",
    "build_chunks",
    "chunks_proof",
    "check_params",
    "chunks_fingerprint",
    "params_hash",
    "run_chunks",
    "segment_offsets",
    "segment_setup",
    "section_spans",
    "segment_text",
    "strategy_params",
    "with_headers",
]

STRATEGIES: tuple[Strategy, ...] = get_args(Strategy)

# progress() is called after this many documents (and once at the end).
_PROGRESS_EVERY = 64
_SLICE_ROWS = _PROGRESS_EVERY  # documents turned into Python strings at a time


@dataclass(frozen=True, slots=True)
class Span:
    """One chunk of a text: ``text[start:end]``, holding ``n_tokens`` of the document's tokens."""

    start: int
    end: int
    n_tokens: int


def strategy_params(strategy: Strategy, cfg: SegmentConfig) -> dict[str, Any]:
    """The parameters that determine ``strategy``'s spans (hashed into chunk ids)."""
    if strategy == "sentence":
        return {"max_tokens": cfg.sentence_max_tokens}
    if strategy == "ffs":
        return {"window": cfg.ffs_window, "step": cfg.ffs_step}
    if strategy == "dfs":
        return {"window": cfg.dfs_window, "step": cfg.dfs_step, "delimiters": list(cfg.delimiters)}
    if strategy == "dds":
        return {"window": cfg.dds_window, "step": cfg.dds_step, "delimiters": list(cfg.delimiters)}
    if strategy == "rcs":
        return {"chunk_size": cfg.rcs_chunk_size, "overlap": cfg.rcs_overlap}
    raise SegmentationError(f"unknown segmentation strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")


def params_hash(strategy: Strategy, cfg: SegmentConfig, tokenizer: Tokenizer | None = None) -> str:
    """Hash of the strategy, its parameters and the tokenizer that measures its windows."""
    tok = tokenizer or get_tokenizer()
    return hash_json({"strategy": strategy, "tokenizer": tok.name, **strategy_params(strategy, cfg)})


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise SegmentationError(message)


def check_params(strategy: Strategy, cfg: SegmentConfig) -> None:
    """Raise :class:`SegmentationError` (saying what to change) if ``strategy`` cannot run with ``cfg``.

    SegmentConfig's own validation already rejects most of these; this also covers configs
    built without validation and the cross-field rule ``step <= window`` of ffs/dfs (a larger
    step would skip the tokens between windows).
    """
    p = strategy_params(strategy, cfg)  # also rejects unknown strategies
    if strategy == "sentence":
        m = p["max_tokens"]
        _require(m >= 1, f"sentence_max_tokens must be >= 1 (got {m}); set segment.sentence_max_tokens to e.g. 100")
    elif strategy in ("ffs", "dfs"):
        w, s = p["window"], p["step"]
        _require(w >= 1, f"{strategy}_window must be >= 1 token (got {w}); set segment.{strategy}_window to e.g. 1024")
        _require(s >= 1, f"{strategy}_step must be >= 1 token (got {s}); set segment.{strategy}_step to e.g. 256")
        _require(
            s <= w,
            f"{strategy}_step ({s}) is larger than {strategy}_window ({w}): the tokens between windows would be "
            f"skipped; set segment.{strategy}_step <= segment.{strategy}_window",
        )
    elif strategy == "dds":
        w, s = p["window"], p["step"]
        _require(w >= 1, f"dds_window must be >= 1 token (got {w}); set segment.dds_window to e.g. 1024")
        _require(s >= 1, f"dds_step must be >= 1 unit (got {s}); set segment.dds_step to e.g. 3")
    else:
        c, o = p["chunk_size"], p["overlap"]
        _require(c >= 1, f"rcs_chunk_size must be >= 1 token (got {c}); set segment.rcs_chunk_size to e.g. 100")
        _require(
            0 <= o < c,
            f"rcs_overlap must be >= 0 and smaller than rcs_chunk_size ({c}), got {o}; lower segment.rcs_overlap",
        )
    if strategy in ("dfs", "dds"):
        bad = [d for d in cfg.delimiters if not isinstance(d, str) or not d]
        _require(not bad, f"segment.delimiters must be non-empty strings; remove {bad!r}")


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while bulk-creating objects that cannot form cycles.

    Span instances are GC-tracked; building a list of hundreds of thousands of them triggers
    repeated full collections whose cost grows with the list, which made span creation
    measurably superlinear (8× the time for 4× the spans on this machine; 4.1× when paused).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _spans(starts: IntArray, a_chars: IntArray, b_chars: IntArray) -> list[Span]:
    """Spans for character ranges (both ends non-decreasing), with n_tokens = the number of
    token starts inside each, found by a vectorised search of the offset array."""
    n = locate(starts, b_chars) - locate(starts, a_chars)
    with _gc_paused():
        return [Span(s, e, k) for s, e, k in zip(a_chars.tolist(), b_chars.tolist(), n.tolist(), strict=True)]


def segment_offsets(
    text: str, starts: IntArray, ends: IntArray, strategy: Strategy, cfg: SegmentConfig
) -> list[Span]:
    """Segment ``text`` given its token offsets (from :meth:`Tokenizer.offsets`). No tokenization."""
    check_params(strategy, cfg)
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.maximum.accumulate(np.asarray(ends, dtype=np.int64))  # guard: keep ends non-decreasing
    n = len(starts)
    if n == 0:
        return []
    if strategy == "rcs":
        a_chars, b_chars = rcs_ranges(text, starts, cfg.rcs_chunk_size, cfg.rcs_overlap)
        return _spans(starts, a_chars, b_chars)
    if strategy == "sentence":
        a, b = sentence_windows(text, starts, ends, cfg.sentence_max_tokens)
    elif strategy == "ffs":
        a, b = ffs_windows(n, cfg.ffs_window, cfg.ffs_step)
    else:
        bounds = unit_bounds(starts, clean_cuts(starts, ends), delimiter_cuts(text, cfg.delimiters))
        if strategy == "dfs":
            a, b = dfs_windows(bounds, cfg.dfs_window, cfg.dfs_step)
        else:
            a, b = dds_windows(bounds, cfg.dds_window, cfg.dds_step)
    return _spans(starts, starts[a], ends[b - 1])


def segment_text(
    text: str, strategy: Strategy, cfg: SegmentConfig, *, tokenizer: Tokenizer | None = None
) -> list[Span]:
    """Split ``text`` into spans with ``strategy``; the text is tokenized exactly once.

    Raises :class:`SegmentationError` for parameters the strategy cannot honour.
    """
    check_params(strategy, cfg)
    starts, ends = (tokenizer or get_tokenizer()).offsets(text)
    return segment_offsets(text, starts, ends, strategy, cfg)


def _sections_by_doc(sections: pa.Table | None) -> dict[str, tuple[list[str], np.ndarray, np.ndarray]]:
    """doc_id -> (section ids, start chars, end chars), sorted by start."""
    if sections is None or sections.num_rows == 0:
        return {}
    df = frame(sections.select(["doc_id", "section_id", "start_char", "end_char"])).sort(["doc_id", "start_char"])
    out: dict[str, tuple[list[str], np.ndarray, np.ndarray]] = {}
    for (doc_id,), part in df.group_by(["doc_id"], maintain_order=True):
        out[str(doc_id)] = (part["section_id"].to_list(), part["start_char"].to_numpy(), part["end_char"].to_numpy())
    return out


def section_spans(
    text: str, starts: IntArray, ends: IntArray, strategy: Strategy, cfg: SegmentConfig,
    bounds: tuple[list[str], np.ndarray, np.ndarray] | None,
) -> list[tuple[Span, str | None]]:
    """``(span, section_id)`` of one document: inside each section when ``cfg.within_sections``
    (a section is segmented like a document of its own; spans shifted back), else over the whole
    text with each span given the section its start falls in. ``bounds=None``: no sections."""
    if bounds is None:
        return [(sp, None) for sp in segment_offsets(text, starts, ends, strategy, cfg)]
    ids, a_chars, b_chars = bounds
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    if not cfg.within_sections:
        spans = segment_offsets(text, starts, ends, strategy, cfg)
        where = np.searchsorted(a_chars, np.fromiter((sp.start for sp in spans), dtype=np.int64, count=len(spans)), side="right") - 1
        return [(sp, ids[max(int(k), 0)]) for sp, k in zip(spans, where)]
    out: list[tuple[Span, str | None]] = []
    lo = np.searchsorted(starts, a_chars, side="left")
    hi = np.searchsorted(starts, b_chars, side="left")
    for sid, a, b, i0, i1 in zip(ids, a_chars.tolist(), b_chars.tolist(), lo.tolist(), hi.tolist()):
        if i1 <= i0:
            continue  # a section with no tokens (blank lines) holds no chunk
        sub_s = starts[i0:i1] - a
        sub_e = np.minimum(ends[i0:i1], b) - a
        for sp in segment_offsets(text[a:b], sub_s, sub_e, strategy, cfg):
            out.append((Span(sp.start + a, sp.end + a, sp.n_tokens), sid))
    return out


def _view_bounds(
    bounds: tuple[list[str], np.ndarray, np.ndarray] | None, view: ReadingView
) -> tuple[list[str], np.ndarray, np.ndarray] | None:
    """Section bounds (original offsets) moved onto the reading view."""
    if bounds is None:
        return None
    ids, a_chars, b_chars = bounds
    return ids, view.to_view(a_chars), view.to_view(b_chars)


_BATCH_CHARS = 1 << 16  # texts tokenized by one call, up to about this many characters


def _offsets(tok: Tokenizer, texts: list[str]) -> list[tuple[IntArray, IntArray]]:
    """``tok.offsets`` of every text, short texts tokenized together (a call per short document
    costs more than its tokens; a long one goes alone, so memory stays bounded)."""
    out: list[tuple[IntArray, IntArray]] = []
    group: list[str] = []
    size = 0
    for text in texts:
        if group and size + len(text) > _BATCH_CHARS:
            out.extend(tok.offsets_many(group))
            group, size = [], 0
        group.append(text)
        size += len(text)
    if group:
        out.extend(tok.offsets_many(group))
    return out


def _ids_hash(strat: Strategy, cfg: SegmentConfig, tok: Tokenizer, sections: pa.Table | None, any_sections: bool) -> str:
    """The params hash in chunk ids: :func:`params_hash`, with the sections' strategies when chunks
    stay inside sections (``any_sections``: some document has sections rows)."""
    phash = params_hash(strat, cfg, tok)
    if any_sections and cfg.within_sections:
        kinds = sorted({str(k) for k in sections.column("strategy").to_pylist()}) if sections is not None else []
        phash = hash_json({"params": phash, "within_sections": kinds})
    return phash


def build_chunks(
    documents: pa.Table,
    cfg: SegmentConfig,
    *,
    strategy: Strategy | None = None,
    tokenizer: Tokenizer | None = None,
    progress: Callable[[int], None] | None = None,
    sections: pa.Table | None = None,
) -> pa.Table:
    """The CHUNKS table of every ``status == "ok"`` document of a DOCUMENTS table.

    ``strategy`` defaults to ``cfg.strategy``. ``chunk_id = short_id(doc_id, strategy,
    params_hash, start, end)`` (so changing a window changes the ids); ``ordinal`` counts from
    0 per document; ``header = ""``. Every document is segmented on its reading-order view
    (:func:`arborag.tasks.ingest.reading.reading_view`: hard wraps joined, split words
    de-hyphenated, structure kept): ``text`` is the view's span — ``doc.text[start:end]`` with
    its wrapped line breaks as spaces (and a split word's ``-`` and break dropped) — and
    ``start``/``end`` are offsets into the *original* ``doc.text``, so citations and segments cut
    the exact source text. A document the view leaves unchanged has ``text ==
    doc.text[start:end]`` and the ids it always had; one it changes hashes the view's version
    into its ids. Without ``sections`` (a
    SECTIONS table) ``section_id = None`` and the ids are what they always were; with sections
    every chunk carries the ``section_id`` it lies in, and with ``cfg.within_sections`` (the
    default) no chunk crosses a section border (the sections strategy then enters the params
    hash, so those ids differ). A document without sections rows is segmented whole.
    Rows with another status (errors) are skipped. ``progress(n)`` receives the number of
    documents (skipped ones included) handled since its previous call; the calls sum to the
    number of rows.
    """
    strat: Strategy = strategy or cfg.strategy
    check_params(strat, cfg)
    tok = tokenizer or get_tokenizer()
    by_doc = _sections_by_doc(sections)
    phash = _ids_hash(strat, cfg, tok, sections, bool(by_doc))
    docs = conform("documents", documents)
    cols: dict[str, list[Any]] = {name: [] for name in CHUNKS.names}
    pending = 0
    for start in range(0, docs.num_rows, _SLICE_ROWS):  # Python strings for one slice at a time
        part = docs.slice(start, _SLICE_ROWS).select(["doc_id", "status", "text", "mime"])
        ok = part.filter(pc.and_(pc.equal(part.column("status"), "ok"), pc.greater(pc.binary_length(part.column("text")), 0)))
        texts = ok.column("text").to_pylist()
        views = reading_views(texts, [mime not in LINE_RECORD_MIMES for mime in ok.column("mime").to_pylist()])
        offsets = _offsets(tok, [view.text for view in views])
        for doc_id, text, view, (t_starts, t_ends) in zip(ok.column("doc_id").to_pylist(), texts, views, offsets, strict=True):
            read = view.text
            pairs = section_spans(read, t_starts, t_ends, strat, cfg, _view_bounds(by_doc.get(doc_id), view))
            a_orig, b_orig = view.original_spans(
                np.fromiter((sp.start for sp, _ in pairs), np.int64, len(pairs)),
                np.fromiter((sp.end for sp, _ in pairs), np.int64, len(pairs)),
            )
            # a document the view changed gets its own id space (its chunk texts differ from the
            # original slices); unwrapped documents keep the ids they always had
            dhash = phash if read == text else hash_json({"params": phash, "view": READING_VIEW_VERSION})
            for ordinal, ((span, section_id), start, end) in enumerate(zip(pairs, a_orig.tolist(), b_orig.tolist(), strict=True)):
                cols["chunk_id"].append(short_id(doc_id, strat, dhash, start, end))
                cols["doc_id"].append(doc_id)
                cols["section_id"].append(section_id)
                cols["ordinal"].append(ordinal)
                cols["start_char"].append(start)
                cols["end_char"].append(end)
                cols["n_tokens"].append(span.n_tokens)
                cols["text"].append(read[span.start : span.end])
                cols["header"].append("")
                cols["strategy"].append(strat)
        pending += part.num_rows  # skipped rows count too
        if progress is not None and pending >= _PROGRESS_EVERY:
            progress(pending)
            pending = 0
    if progress is not None and pending:
        progress(pending)
    return conform("chunks", pa.table(cols, schema=CHUNKS))


# ---------------------------------------------------------------------------------------------
# Stage runner
# ---------------------------------------------------------------------------------------------
def chunks_fingerprint(chunks: pa.Table, strategy: str) -> str:
    """Hash of the chunk ids and headers of one strategy (ids hash doc, strategy, params and
    span; headers are what the segment stage adds besides)."""
    rows = frame(chunks.select(["strategy", "chunk_id", "header"])).filter(pl.col("strategy") == strategy)
    rows = rows.select(["chunk_id", pl.col("header").fill_null("")]).sort("chunk_id")
    return hash_string_columns(rows.to_arrow(), ["chunk_id", "header"])


def with_headers(chunks: pa.Table, doc_context: pa.Table, sections: pa.Table | None) -> pa.Table:
    """``chunks`` with its ``header`` column composed (docs/METHODS.md §4 template) from the documents'
    titles and summaries (a DOC_CONTEXT table) and the chunks' sections (titles, summaries)."""
    from arborag.tasks.stages.doc_context import chunk_headers

    if chunks.num_rows == 0:
        return chunks
    headers = chunk_headers(chunks, doc_context, sections)
    return chunks.set_column(chunks.schema.get_field_index("header"), chunks.schema.field("header"), headers)


# the modules whose code decides a document's chunks: their source enters the reuse key
_SEGMENT_CODE = (
    "arborag.tasks.stages.chunks", "arborag.tasks.segment.windows", "arborag.tasks.ingest.reading",
    "arborag.text", "arborag.tokenizer", "arborag.hashing",
)


def segment_setup(strategy: Strategy, cfg: SegmentConfig, tok: Tokenizer, sections: pa.Table | None) -> str:
    """The run-wide part of the key under which a document's chunks are reused (the per-document
    part is :func:`arborag.tasks.segment.reuse.doc_keys`): the params hash in the chunk ids (strategy,
    parameters, tokenizer name, sections' strategies), ``within_sections``, the reading view's
    version, the tokenizer file and the source of the segmentation code."""
    from importlib import import_module
    from pathlib import Path

    code = [Path(str(import_module(m).__file__)).read_bytes() for m in _SEGMENT_CODE]
    tok_path = getattr(tok, "path", None)
    tok_file = hash_bytes(Path(tok_path).read_bytes()) if tok_path is not None and Path(tok_path).is_file() else None
    return hash_json({
        "ids": _ids_hash(strategy, cfg, tok, sections, sections is not None and sections.num_rows > 0),
        "within_sections": cfg.within_sections, "view": READING_VIEW_VERSION, "tokenizer": [tok.name, tok_file],
        "code": hash_bytes(b"\0".join(code)), "modules": list(_SEGMENT_CODE),
    })


@dataclass(frozen=True)
class ChunksSummary(StageSummary):
    """What a segment run did; recorded as it is (``runs.counts`` key ``segment``)."""

    table: str
    strategy: str
    documents: int  # ok documents
    segmented: int  # documents segmented this run
    reused: int  # documents whose rows were kept
    chunks: int  # rows of ``strategy``
    chunks_total: int  # rows of the table (every strategy)
    tokens: int
    written: bool
    fingerprint: str


def run_chunks(ctx: StageContext, strategy: str) -> ChunksSummary:
    """Segment the ok documents with ``strategy``; replace that strategy's rows of ``chunks``.

    Only documents that are new or whose key changed are segmented
    (:mod:`arborag.tasks.segment.reuse`: content, mime, sections, :func:`segment_setup`); the rows
    of the others are kept as they are, and the rows of documents no longer ok go. The table is
    the one a segmentation of every document gives, byte for byte.

    With ``sections.strategy`` other than ``none`` the ``sections`` table is read and chunks
    carry their ``section_id`` (inside sections unless ``segment.within_sections`` is off); with
    headers on (:func:`arborag.tasks.stages.doc_context.headers_enabled`) the ``header`` column is composed
    from ``doc_context`` and ``sections`` for every row (kept rows too; off: empty). The other
    strategies' rows stay; the table is sorted by (strategy, doc_id, ordinal) and written only
    when it changed (a no-op run leaves the file untouched).
    """
    from arborag.tasks.segment import reuse
    from arborag.tasks.stage_context import table_fingerprint
    from arborag.tasks.stages.doc_context import headers_enabled

    corpus = ctx.corpus
    strat: Strategy = strategy  # type: ignore[assignment]
    check_params(strat, ctx.config.segment)
    docs = frame(corpus.read("documents")).filter(pl.col("status") == "ok")
    existing = corpus.read("chunks")
    sections = corpus.read("sections") if ctx.config.sections.strategy != "none" else None
    setup = segment_setup(strat, ctx.config.segment, get_tokenizer(), sections)
    keys = reuse.doc_keys(docs, sections)
    path = reuse.keys_path(corpus.cache_dir, strategy)
    # one row per document (as ingest writes it) or nothing is reused: a document's rows must be its own
    unique = docs["doc_id"].n_unique() == docs.height
    prior = reuse.read_keys(path, setup=setup, chunks=table_fingerprint(corpus.table_path("chunks"))) if unique else None
    kept_ids = reuse.reusable(keys, prior)
    todo = docs.filter(~pl.col("doc_id").is_in(kept_ids.implode()))
    with progress_bar(f"segment ({strategy})", todo.height, enabled=ctx.progress) as advance:
        fresh = build_chunks(to_table(todo, "documents"), ctx.config.segment, strategy=strat, progress=advance, sections=sections)
    old = frame(existing)
    kept = old.filter((pl.col("strategy") == strategy) & pl.col("doc_id").is_in(kept_ids.implode())).with_columns(header=pl.lit(""))
    new = to_table(pl.concat([kept, frame(fresh)], how="vertical_relaxed"), "chunks")
    if headers_enabled(ctx.config):
        new = with_headers(new, corpus.read("doc_context"), sections)
    merged = (
        pl.concat([old.filter(pl.col("strategy") != strategy), frame(new)], how="vertical_relaxed")
        .sort(["strategy", "doc_id", "ordinal"], maintain_order=True)
    )
    table = to_table(merged, "chunks")
    written = ctx.write_if_changed("chunks", table, existing)
    if unique:
        reuse.write_keys(path, keys, setup=setup, chunks=table_fingerprint(corpus.table_path("chunks")))
    else:
        path.unlink(missing_ok=True)
    return ChunksSummary(
        table=str(corpus.table_path("chunks")),
        strategy=strategy,
        documents=docs.height,
        segmented=todo.height,
        reused=docs.height - todo.height,
        chunks=new.num_rows,
        chunks_total=table.num_rows,
        tokens=int(pc.sum(new.column("n_tokens")).as_py() or 0) if new.num_rows else 0,
        written=written,
        fingerprint=chunks_fingerprint(table, strategy),
    )


def chunks_proof(ctx: StageContext, strategy: str) -> str:
    """What proves a segment run still holds: the :func:`chunks_fingerprint` of ``strategy``'s rows
    (the other strategies' rows of the table may change without touching this one's)."""
    return chunks_fingerprint(ctx.corpus.read("chunks"), strategy)
