"""AutoContext chunk headers (dsRAG, docs/METHODS.md §4): document title, document summary, optional
section summaries, composed into the ``chunks.header`` column.

The header, with ``{x}`` filled in and each part's trailing whitespace removed::

    Document context: the following excerpt is from a document titled '{title}'. {doc_summary}

    Section context: this excerpt is from the section titled '{section}'. {section_summary}

A part whose title is empty is left out (no document title -> the header starts with the
section part; no section title -> no blank line and no section part).

- **Title** (:func:`document_title`): the metadata title unless it is only the file name
  (what ingest falls back to), else the first Markdown heading in the first ~4k tokens, else
  the LLM over the first ~4k tokens, else the metadata title / file stem anyway.
- **Document summary** (:func:`document_summary`): the LLM over the first ~8k tokens, answering
  "This document is about: …"; offline (or when the call fails) the lead sentences of the text
  after its title lines (:func:`lead_summary`), with the same prefix.
- **Section summary** (:func:`section_summary`): "This section is about: …", the same way.

LLM calls go through an injected :class:`~arborag.tasks.segment.semantic.Complete`; a call that
raises an ``ArboragError`` falls back to the offline path and is counted in
:class:`HeaderStats`. :func:`chunk_headers` composes all headers of a chunks table with polars
joins and string expressions (no Python loop over chunks).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from arborag.errors import ArboragError, ConfigError
from arborag.storage.frames import frame
from arborag.tasks.segment.semantic import Complete
from arborag.tasks.stage_context import StageSummary

if TYPE_CHECKING:
    from pathlib import Path

    from arborag.config import ArboragConfig
    from arborag.tasks.stage_context import StageContext

__all__ = [
    "DOC_PART",
    "DocContextSummary",
    "DOC_SUMMARY_PREFIX",
    "PROMPT_VERSION",
    "SECTION_PART",
    "SECTION_SUMMARY_PREFIX",
    "HeaderStats",
    "build_doc_context",
    "top_heading",
    "chunk_headers",
    "headers_enabled",
    "llm_complete",
    "run_doc_context",
    "compose_header",
    "document_summary",
    "document_title",
    "lead_summary",
    "section_summary",
]

PROMPT_VERSION = "autocontext-v1"  # part of the headers' cache key with the model name
DOC_PART = "Document context: the following excerpt is from a document titled '{title}'. {summary}"
SECTION_PART = "Section context: this excerpt is from the section titled '{section}'. {summary}"
DOC_SUMMARY_PREFIX = "This document is about: "
SECTION_SUMMARY_PREFIX = "This section is about: "

TITLE_PROMPT = (
    "What is the title of the document below? If it has no explicit title, write a short, "
    "descriptive one. Answer with the title only, in the document's language.\n\n{text}\n\nTitle:"
)
SUMMARY_PROMPT = (
    "Say in one short sentence what the {kind} below is about. Answer in the form "
    '"{prefix}…", in the document\'s language, and nothing else.\n\n{context}{text}'
)
Truncate = Callable[[str, int], str]


@dataclass
class HeaderStats:
    llm_calls: int = 0
    llm_failures: int = 0


def _truncate(text: str, max_tokens: int) -> str:
    from arborag.tokenizer import get_tokenizer

    return get_tokenizer().truncate(text, max_tokens)


def compose_header(title: str, doc_summary: str = "", section: str = "", section_summary: str = "") -> str:
    """The exact header template (module docs)."""
    parts = []
    if title.strip():
        parts.append(DOC_PART.format(title=title.strip(), summary=doc_summary.strip()).rstrip())
    if section.strip():
        parts.append(SECTION_PART.format(section=section.strip(), summary=section_summary.strip()).rstrip())
    return "\n\n".join(parts)


# -- titles -----------------------------------------------------------------------------------
_ATX = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", flags=re.MULTILINE)


def _clean_title(answer: str, limit: int = 150) -> str:
    line = next((ln for ln in answer.strip().splitlines() if ln.strip()), "")
    line = re.sub(r"^\s*(title\s*:\s*)", "", line, flags=re.IGNORECASE).strip().strip("\"'“”‘’*#").strip()
    return line[:limit]


def document_title(
    text: str,
    *,
    metadata_title: str | None = None,
    uri: str | None = None,
    complete: Complete | None = None,
    max_tokens: int = 4000,
    truncate: Truncate = _truncate,
    stats: HeaderStats | None = None,
    heading: str | None = None,
) -> tuple[str, str]:
    """``(title, source)`` with source ``metadata`` | ``heading`` | ``llm`` | ``fallback``.

    ``heading``: the source's own top heading when ingest recorded one (HTML ``h1``, DOCX
    ``Title``, a PDF's first outline entry); used after the metadata title, before Markdown."""
    stem = PurePosixPath(uri.rstrip("/")).stem if uri else ""
    meta = (metadata_title or "").strip()
    recorded = " ".join((heading or "").split())
    if meta and meta != stem and any(ch.isalpha() for ch in meta):  # not the file name, not an accession number
        return meta, "metadata"
    if recorded:
        return recorded, "heading"
    head = truncate(text, max_tokens)
    if m := _ATX.search(head):
        return m.group(1).strip(), "heading"
    if complete is not None:
        answer = _ask(complete, TITLE_PROMPT.format(text=head), 40, stats)
        if answer and (title := _clean_title(answer)):
            return title, "llm"
    return (meta or stem or "untitled"), "fallback"


# -- summaries --------------------------------------------------------------------------------
# a sentence ends at . ! ? (+ closing quotes/brackets) before whitespace, or at a CJK stop: "$3.2" is not cut
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"'”’)\]])\s+|(?<=[。！？])")


def lead_summary(text: str, *, title: str = "", max_chars: int = 240) -> str:
    """The first sentences of ``text`` (after heading/title lines), at most ``max_chars``."""
    body: list[str] = []
    skipped: list[str] = []
    lines = [ln.strip() for ln in text.split("\n")]
    for k, s in enumerate(lines):
        if not s or s.startswith("#") or s.casefold() == title.strip().casefold():
            continue
        after = next((x for x in lines[k + 1 : k + 3] if x), "")
        continues = bool(after) and (after[:1].islower() or after[:1].isdigit())  # a wrapped line of prose
        if len(s) < 60 and not re.search(r"[.!?。！？:;,]$", s) and s[:1].isupper() and not continues:
            skipped.append(s)  # a short title-like line (a heading of HTML, DOCX or PDF text)
            continue
        body.append(s)
        if sum(len(b) for b in body) > 4 * max_chars:
            break
    flat = " ".join(body or skipped[:1])
    out = ""
    for piece in _SENTENCE_END.split(flat):
        sent = piece.strip()
        if not sent:
            continue
        if out and len(out) + 1 + len(sent) > max_chars:
            break
        out = f"{out}{'' if out.endswith(('。', '！', '？')) else ' '}{sent}".strip()
    if len(out) > max_chars:
        out = out[:max_chars].rsplit(" ", 1)[0] + "…"
    return out


def _ask(complete: Complete, prompt: str, max_tokens: int, stats: HeaderStats | None) -> str | None:
    if stats is not None:
        stats.llm_calls += 1
    try:
        return complete(prompt, max_tokens=max_tokens)
    except ArboragError:
        if stats is not None:
            stats.llm_failures += 1
        return None


def _with_prefix(answer: str, prefix: str) -> str:
    s = " ".join(answer.strip().strip('"').split())
    key = prefix.strip().rstrip(":").casefold()
    if s.casefold().startswith(key):
        s = s[len(key) :].lstrip(" :")
    return prefix + s if s else ""


def _summary(text: str, *, kind: str, prefix: str, context: str, complete: Complete | None,
             max_tokens: int, truncate: Truncate, stats: HeaderStats | None, title: str) -> str:
    if complete is not None:
        prompt = SUMMARY_PROMPT.format(kind=kind, prefix=prefix, context=context, text=truncate(text, max_tokens))
        answer = _ask(complete, prompt, 80, stats)
        if answer and (out := _with_prefix(answer, prefix)):
            return out
    lead = lead_summary(text, title=title)
    return prefix + lead if lead else ""


def document_summary(
    text: str, *, title: str = "", complete: Complete | None = None, max_tokens: int = 8000,
    truncate: Truncate = _truncate, stats: HeaderStats | None = None,
) -> str:
    """``"This document is about: …"`` (LLM over the first ~8k tokens, or the lead sentences)."""
    context = f"Document title: {title}\n\n" if title else ""
    return _summary(text, kind="document", prefix=DOC_SUMMARY_PREFIX, context=context, complete=complete,
                    max_tokens=max_tokens, truncate=truncate, stats=stats, title=title)


def section_summary(
    text: str, *, doc_title: str = "", section_title: str = "", complete: Complete | None = None,
    max_tokens: int = 4000, truncate: Truncate = _truncate, stats: HeaderStats | None = None,
) -> str:
    """``"This section is about: …"`` for one section's text."""
    context = (f"Document title: {doc_title}\n" if doc_title else "") + (f"Section title: {section_title}\n\n" if section_title else "")
    return _summary(text, kind="section", prefix=SECTION_SUMMARY_PREFIX, context=context, complete=complete,
                    max_tokens=max_tokens, truncate=truncate, stats=stats, title=section_title)


# -- the header column ------------------------------------------------------------------------
def _part(template: str, name: pl.Expr, summary: pl.Expr) -> pl.Expr:
    head, rest = template.split("{", 1)  # "...titled '" | "title}'. {summary}"
    mid = rest.split("}", 1)[1].split("{summary}", 1)[0]
    return pl.concat_str([pl.lit(head), name, pl.lit(mid), summary]).str.strip_chars_end()


def chunk_headers(chunks: pa.Table, documents: pa.Table, sections: pa.Table | None = None) -> pa.Array:
    """The ``header`` of every chunk, in the chunks' row order.

    ``chunks``: ``doc_id``, ``section_id`` (may be null). ``documents``: ``doc_id``, ``title``,
    ``summary``. ``sections``: ``section_id``, ``title``, ``summary`` (optional). Same text as
    :func:`compose_header` row by row.
    """
    c = frame(chunks.select(["doc_id", "section_id"])).with_row_index("_row")
    d = frame(documents.select(["doc_id", "title", "summary"])).rename({"title": "_dt", "summary": "_ds"})
    joined = c.join(d.unique("doc_id", keep="first"), on="doc_id", how="left")
    if sections is not None and sections.num_rows:
        s = frame(sections.select(["section_id", "title", "summary"])).rename({"title": "_st", "summary": "_ss"})
        joined = joined.join(s.unique("section_id", keep="first"), on="section_id", how="left")
    else:
        joined = joined.with_columns(_st=pl.lit(None, pl.String), _ss=pl.lit(None, pl.String))
    clean = {k: pl.col(k).fill_null("").str.strip_chars() for k in ("_dt", "_ds", "_st", "_ss")}
    joined = joined.with_columns(**clean)
    doc = pl.when(pl.col("_dt") != "").then(_part(DOC_PART, pl.col("_dt"), pl.col("_ds")))
    sec = pl.when(pl.col("_st") != "").then(_part(SECTION_PART, pl.col("_st"), pl.col("_ss")))
    header = pl.concat_str([doc, sec], separator="\n\n", ignore_nulls=True).fill_null("")
    out = joined.sort("_row").select(header.alias("header"))
    return out.to_arrow().column("header").combine_chunks().cast(pa.string())


# -- the doc_context table and its stage ------------------------------------------------------
def headers_enabled(config: "ArboragConfig") -> bool:
    """``context.headers``, where None means: on exactly when sections are on."""
    on = config.context.headers
    return (config.sections.strategy != "none") if on is None else bool(on)


def llm_complete(config: "ArboragConfig", cache_dir: "Path | None", *, why: str) -> Complete:
    """A :class:`Complete` over the LLM of ``summarize.*`` (calls cached under ``cache_dir``).

    Raises ConfigError when no endpoint is configured (``why`` says which setting asked for it).
    """
    cfg = config.summarize
    if not cfg.base_url:
        raise ConfigError(
            f"{why} needs an LLM: set summarize.base_url (or ARBORAG_LLM_BASE_URL) to an OpenAI-compatible endpoint, "
            "or use the offline default"
        )
    from arborag.llm import LLMClient

    client = LLMClient.from_config(cfg, cache_dir=cache_dir)

    def complete(prompt: str, /, *, max_tokens: int) -> str:
        return client.complete([{"role": "user", "content": prompt}], max_tokens=max_tokens).text

    return complete


def _head(text: str, max_tokens: int) -> str:
    """A character prefix long enough to hold ``max_tokens`` tokens (tokenizing 5 MB to keep 8k tokens is waste)."""
    return text[: max_tokens * 12]


def top_heading(metadata: str | dict[str, Any] | None) -> str | None:
    """The first of the highest-level headings ingest recorded (``metadata["headings"]``), if
    it is a ``Title`` or level-1 heading."""
    from arborag.tasks.segment.sections import metadata_of

    rows = [r for r in metadata_of(metadata).get("headings") or [] if isinstance(r, list) and len(r) >= 2 and str(r[0]).strip()]
    if not rows:
        return None
    top = min(int(r[1]) for r in rows)
    return str(next(r[0] for r in rows if int(r[1]) == top)) if top <= 1 else None


def build_doc_context(
    documents: pa.Table,
    *,
    complete: Complete | None = None,
    title_tokens: int = 4000,
    summary_tokens: int = 8000,
    stats: HeaderStats | None = None,
) -> pa.Table:
    """One ``doc_context`` row (doc_id, title, title_source, summary) per ``ok`` document of a
    DOCUMENTS table: :func:`document_title` and :func:`document_summary` (LLM when ``complete``)."""
    from arborag.storage.schemas import DOC_CONTEXT

    docs = documents.filter(pc.equal(documents.column("status"), "ok")).select(["doc_id", "uri", "title", "text", "metadata"])
    rows: dict[str, list[Any]] = {n: [] for n in DOC_CONTEXT.names}
    cols = ("doc_id", "uri", "title", "text", "metadata")
    for doc_id, uri, meta_title, text, meta in zip(*(docs.column(c).to_pylist() for c in cols)):
        text = text or ""
        title, source = document_title(_head(text, title_tokens), metadata_title=meta_title, uri=uri, complete=complete,
                                       max_tokens=title_tokens, stats=stats, heading=top_heading(meta))
        summary = document_summary(_head(text, summary_tokens), title=title, complete=complete, max_tokens=summary_tokens, stats=stats)
        for name, value in zip(DOC_CONTEXT.names, (doc_id, title, source, summary)):
            rows[name].append(value)
    return pa.Table.from_pydict(rows, schema=DOC_CONTEXT)


@dataclass(frozen=True)
class DocContextSummary(StageSummary):
    """What a context run did; recorded as it is (``runs.counts`` key ``context``)."""

    documents: int
    llm_calls: int
    llm_failures: int
    written: bool
    fingerprint: str


def run_doc_context(ctx: "StageContext") -> DocContextSummary:
    """Stage ``context``: the ``doc_context`` table (empty when headers are off)."""
    from arborag.tasks.stage_context import table_fingerprint

    corpus = ctx.corpus
    existing = corpus.read("doc_context")
    stats = HeaderStats()
    if headers_enabled(ctx.config):
        complete = llm_complete(ctx.config, corpus.cache_dir / "llm", why="context.llm") if ctx.config.context.llm else None
        table = build_doc_context(corpus.read("documents"), complete=complete, title_tokens=ctx.config.context.title_tokens,
                                  summary_tokens=ctx.config.context.summary_tokens, stats=stats)
    else:
        table = existing.schema.empty_table()
    written = ctx.write_if_changed("doc_context", table, existing)
    return DocContextSummary(documents=table.num_rows, llm_calls=stats.llm_calls, llm_failures=stats.llm_failures,
                             written=written, fingerprint=table_fingerprint(corpus.table_path("doc_context")))
