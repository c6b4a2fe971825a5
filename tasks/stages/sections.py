"""Stage ``sections``: documents → the ``sections`` table (docs/METHODS.md §1, §3), between ingest and segment.

``sections.strategy``:

- ``none`` — an empty table; segmentation runs over whole documents (chunk ids as before);
- ``structural`` — :func:`arborag.tasks.segment.sections.structural_sections` (offline): the headings a
  source records about itself, else blank-line blocks grouped to ``sections.target_chars``;
- ``semantic`` — :class:`arborag.tasks.segment.semantic.SemanticSectioner` over the LLM of
  ``summarize.*`` (every repair rule of docs/METHODS.md §3.6; a failed window becomes one section).

With ``sections.summaries`` each section gets ``"This section is about: …"`` (the LLM when
``context.llm``, else its lead sentences). The sections of a document tile its text exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa

from arborag.config import ArboragConfig
from arborag.progress import progress_bar
from arborag.storage.frames import frame
from arborag.tasks.stage_context import StageContext, StageSummary, table_fingerprint
from arborag.tasks.stages.doc_context import HeaderStats, llm_complete, section_summary
from arborag.tasks.segment.sections import DocInput, Section, build_sections, metadata_of, structural_sections
from arborag.tasks.segment.semantic import Complete, SemanticSectioner

__all__ = ["SectionsSummary", "doc_inputs", "make_sectioner", "run_sections", "sections_for"]

_RAW_MIMES = ("application/pdf", "text/html", "application/vnd.openxmlformats-officedocument.wordprocessingml.document")


def doc_inputs(documents: pa.Table) -> Iterator[DocInput]:
    """A :class:`DocInput` per ``ok`` document. Sources ingested before ingest recorded their
    headings (no ``headings`` in the metadata) are read again from ``uri`` when still there."""
    ok = frame(documents).filter(pl.col("status") == "ok").select(["doc_id", "uri", "mime", "metadata", "text"])
    for doc_id, uri, mime, meta_json, text in ok.iter_rows():
        meta = metadata_of(meta_json)
        raw = None
        if mime in _RAW_MIMES and "headings" not in meta:
            try:
                raw = Path(uri).read_bytes()
            except OSError:
                raw = None
        yield DocInput(doc_id, text or "", mime, meta, raw)


def make_sectioner(config: ArboragConfig, complete: Complete | None) -> Callable[[DocInput], list[Section]]:
    """The sectioner of ``sections.strategy`` (not ``none``)."""
    cfg = config.sections
    if cfg.strategy == "semantic":
        assert complete is not None
        return SemanticSectioner(complete, max_line_chars=cfg.max_line_chars, window_chars=cfg.window_chars,
                                 min_avg_chars=cfg.min_avg_chars)
    return lambda doc: structural_sections(doc, target_chars=cfg.target_chars)


def _safe(sectioner: Callable[[DocInput], list[Section]], fallback: Callable[[DocInput], list[Section]]) -> Callable[[DocInput], list[Section]]:
    """A broken source structure (unreadable outline bytes, ...) falls back to blocks, never fails the run."""

    def run(doc: DocInput) -> list[Section]:
        try:
            return sectioner(doc)
        except Exception:  # parsers of PDF/DOCX/HTML raise many types
            return fallback(doc)

    return run


def sections_for(
    documents: pa.Table,
    config: ArboragConfig,
    *,
    complete: Complete | None = None,
    progress: Callable[[int], None] | None = None,
    stats: HeaderStats | None = None,
    sectioner: Callable[[DocInput], list[Section]] | None = None,
) -> pa.Table:
    """The SECTIONS rows of every ok document (pure; ``complete`` for semantic / LLM summaries;
    ``sectioner`` defaults to :func:`make_sectioner`)."""
    cfg = config.sections
    if cfg.strategy == "none":
        return build_sections([], strategy="none")
    blocks = lambda doc: structural_sections(DocInput(doc.doc_id, doc.text), target_chars=cfg.target_chars)  # noqa: E731
    sectioner = sectioner or make_sectioner(config, complete)
    if cfg.strategy == "structural":
        sectioner = _safe(sectioner, blocks)
    summary_llm = complete if config.context.llm else None

    def one(doc: DocInput) -> list[Section]:
        secs = sectioner(doc)
        if cfg.summaries:
            secs = [_with_summary(doc.text, s, summary_llm, stats) for s in secs]
        if progress is not None:
            progress(1)
        return secs

    return build_sections(doc_inputs(documents), strategy=cfg.strategy, sectioner=one)


def _with_summary(text: str, s: Section, complete: Complete | None, stats: HeaderStats | None) -> Section:
    from dataclasses import replace

    body = text[s.start_char : s.end_char][:48_000]
    return replace(s, summary=section_summary(body, section_title=s.title, complete=complete, stats=stats))


@dataclass(frozen=True)
class SectionsSummary(StageSummary):
    """What a sections run did (``runs.counts`` key ``sections``); the three window counts are
    the semantic sectioner's, recorded only when it ran (None otherwise)."""

    table: str
    strategy: str
    sections: int
    documents: int  # documents with at least one section
    llm_calls: int
    llm_failures: int
    failed_windows: int | None
    collapsed_windows: int | None
    invalid_answers: int | None
    written: bool
    fingerprint: str

    def counts(self) -> dict[str, Any]:
        semantic = ("failed_windows", "collapsed_windows", "invalid_answers")
        return {k: v for k, v in self.fields().items() if k not in semantic or v is not None}


def run_sections(ctx: StageContext) -> SectionsSummary:
    """Section the ok documents with ``sections.strategy``; write the ``sections`` table."""
    corpus, config = ctx.corpus, ctx.config
    documents = corpus.read("documents")
    needs_llm = config.sections.strategy == "semantic" or (config.sections.summaries and config.context.llm)
    complete = llm_complete(config, corpus.cache_dir / "llm", why=f"sections.strategy={config.sections.strategy}") if needs_llm else None
    stats = HeaderStats()
    sectioner = make_sectioner(config, complete) if config.sections.strategy != "none" else None
    n_docs = documents.num_rows
    with progress_bar(f"sections ({config.sections.strategy})", n_docs, enabled=ctx.progress and config.sections.strategy != "none") as advance:
        table = sections_for(documents, config, complete=complete, progress=advance, stats=stats, sectioner=sectioner)
    semantic = sectioner.stats if isinstance(sectioner, SemanticSectioner) else None
    existing = corpus.read("sections")
    written = ctx.write_if_changed("sections", table, existing)
    return SectionsSummary(
        table=str(corpus.table_path("sections")),
        strategy=config.sections.strategy,
        sections=table.num_rows,
        documents=len(set(table.column("doc_id").to_pylist())),
        llm_calls=stats.llm_calls + (semantic.calls if semantic else 0),
        llm_failures=stats.llm_failures + (len(semantic.failures) if semantic else 0),
        failed_windows=semantic.failed_windows if semantic else None,
        collapsed_windows=semantic.collapsed_windows if semantic else None,
        invalid_answers=semantic.invalid_answers if semantic else None,
        written=written,
        fingerprint=table_fingerprint(corpus.table_path("sections")),
    )
