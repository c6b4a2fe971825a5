"""The ``sections`` table: structural sectioning (offline default) and the shared line machinery.

A section is a run of whole lines of a document's normalized text (``text.split("\\n")``):
``start_line``..``end_line`` (0-based, **inclusive**), with ``start_char``/``end_char`` so that
the sections of a document tile ``[0, len(text))`` exactly — chunking inside sections never
drops or repeats a character. ``section_id = short_id(doc_id, strategy, start_line, end_line)``.

The structural sectioner (:func:`structural_sections`) uses what the source says about its own
structure, first match wins:

- **PDF** (raw bytes): the outline/bookmarks (``pypdf`` ``reader.outline``); an entry starts a
  section at the line of its title on its page (or the page's first line), using the
  document's ``page_starts`` metadata written at ingest.
- **DOCX** (raw bytes): paragraphs styled ``Title`` / ``Heading N``.
- **HTML** (raw bytes): ``<h1>``–``<h6>``.
- **Markdown** (the text itself): ATX (``# Title``) and setext (``===`` / ``---``) headings,
  outside fenced code blocks.
- otherwise, or when fewer than 2 headings are found: **blocks** — blank-line separated blocks
  grouped until ``target_chars``, titled by their first Markdown heading or first line.

Headings from raw bytes are found in the text by their whitespace-normalized, case-folded line
(in order, each search starting after the previous find; a heading not found is skipped). Text
before the first heading becomes its own section (titled by its first line) unless it is blank;
a heading with no body merges into the next section (titles joined with " — ").

Ingest records the headings of HTML, DOCX and PDF sources in ``documents.metadata``
(``"headings": [[title, level, page], ...]``, page null except for PDF outlines), so the
sectioner needs no source bytes; for a document ingested before that, the stage reads the
source file again when it still exists.

The rows are ``storage.schemas.SECTIONS`` (:data:`SECTIONS_SCHEMA` is the same object).
:func:`run_sections` is the ``sections`` stage: ``sections.strategy`` = ``none`` (empty table),
``structural`` or ``semantic`` (the LLM of ``summarize.*``, :mod:`arborag.tasks.segment.semantic`),
optionally with a summary per section (:func:`arborag.tasks.stages.doc_context.section_summary`).
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from arborag.hashing import short_id
from arborag.storage.schemas import SECTIONS

__all__ = [
    "SECTIONS_SCHEMA",
    "DocInput",
    "Heading",
    "Section",
    "block_sections",
    "block_title",
    "build_sections",
    "docx_headings",
    "html_headings",
    "line_starts",
    "locate_headings",
    "markdown_headings",
    "metadata_of",
    "pdf_headings",
    "sections_from_headings",
    "short_title",
    "structural_sections",
]

SECTIONS_SCHEMA = SECTIONS  # one schema, in storage/schemas.py
MAX_TITLE_CHARS = 100


@dataclass(frozen=True, slots=True)
class Section:
    """Lines ``start_line..end_line`` (inclusive) = characters ``[start_char, end_char)``."""

    start_line: int
    end_line: int
    start_char: int
    end_char: int
    title: str
    summary: str = ""


@dataclass(frozen=True, slots=True)
class Heading:
    line: int  # 0-based line of the text where the heading stands
    title: str
    level: int = 1


@dataclass(frozen=True, slots=True)
class DocInput:
    """What a sectioner sees of one document (a row of ``documents`` + optional source bytes)."""

    doc_id: str
    text: str
    mime: str | None = None
    metadata: dict[str, Any] | None = None
    raw: bytes | None = None


# -- lines ------------------------------------------------------------------------------------
def line_starts(text: str) -> list[int]:
    """Character offset of every line of ``text.split("\\n")`` (one entry per line)."""
    return [0] + [m.end() for m in re.finditer("\n", text)]


def _norm(s: str) -> str:
    return " ".join(s.split()).casefold()


def short_title(line: str, limit: int = MAX_TITLE_CHARS) -> str:
    """A title from a line: Markdown marks stripped, whitespace collapsed, cut at a word."""
    t = " ".join(line.strip().lstrip("#").strip().strip("#").split())
    if len(t) <= limit:
        return t
    cut = t[:limit].rsplit(" ", 1)[0]
    return (cut if len(cut) > limit // 2 else t[:limit]) + "…"


def sections_from_headings(text: str, headings: Sequence[Heading]) -> list[Section]:
    """Sections that start at each heading (sorted, one per line) and tile the whole text."""
    lines = text.split("\n")
    starts = line_starts(text)
    n = len(lines)
    heads = sorted({h.line: h for h in headings if 0 <= h.line < n}.values(), key=lambda h: h.line)
    bounds: list[tuple[int, str, bool]] = []  # (first line, title, is a heading section)
    first = heads[0].line if heads else n
    if any(line.strip() for line in lines[:first]) or not heads:
        pre = next((ln for ln in lines[:first] if ln.strip()), "")
        bounds.append((0, short_title(pre), False))
    for i, h in enumerate(heads):
        bounds.append((0 if (i == 0 and not bounds) else h.line, short_title(h.title), True))
    out: list[Section] = []
    for i, (a, title, _) in enumerate(bounds):
        b = bounds[i + 1][0] - 1 if i + 1 < len(bounds) else n - 1
        end_char = starts[b + 1] if b + 1 < n else len(text)
        out.append(Section(a, b, starts[a], end_char, title))
    # a heading with no body merges into the section after it
    merged: list[Section] = []
    pending: Section | None = None
    for k, (sec, (_, _, is_head)) in enumerate(zip(out, bounds)):
        if pending is not None:
            sec = replace(sec, start_line=pending.start_line, start_char=pending.start_char,
                          title=short_title(f"{pending.title} — {sec.title}"))
            pending = None
        bodyless = is_head and not any(ln.strip() for ln in lines[sec.start_line + 1 : sec.end_line + 1])
        if bodyless and k + 1 < len(out):
            pending = sec
            continue
        merged.append(sec)
    return merged


# -- heading finders --------------------------------------------------------------------------
_ATX = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^(```|~~~)")
_SETEXT = re.compile(r"^(=+|-+)\s*$")


def markdown_headings(text: str) -> list[Heading]:
    """ATX and setext headings outside fenced code blocks."""
    out: list[Heading] = []
    fenced = False
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        if m := _ATX.match(line):
            out.append(Heading(i, m.group(2), len(m.group(1))))
        elif i > 0 and _SETEXT.match(line) and lines[i - 1].strip() and not _ATX.match(lines[i - 1]):
            if out and out[-1].line == i - 1:
                continue
            out.append(Heading(i - 1, lines[i - 1], 1 if line.startswith("=") else 2))
    return out


def locate_headings(text: str, titled: Iterable[tuple[str, int]], *, prefix: bool = False) -> list[Heading]:
    """Find ``(title, level)`` pairs in the text's lines, in order (see the module docs)."""
    index: dict[str, list[int]] = {}
    norm_lines = [_norm(ln) for ln in text.split("\n")]
    for i, key in enumerate(norm_lines):
        index.setdefault(key, []).append(i)
    out: list[Heading] = []
    cursor = 0
    for title, level in titled:
        key = _norm(title)
        if not key:
            continue
        rows = index.get(key, [])
        j = bisect_left(rows, cursor)
        found = rows[j] if j < len(rows) else None
        if found is None and prefix:
            found = next((i for i in range(cursor, len(norm_lines)) if norm_lines[i].startswith(key)), None)
        if found is not None:
            out.append(Heading(found, title.strip(), level))
            cursor = found + 1
    return out


def html_headings(raw: bytes) -> list[tuple[str, int]]:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(raw, "html.parser")
    return [(h.get_text(" "), int(h.name[1])) for h in soup.find_all(["h1", "h2", "h3", "h4", "h5", "h6"])]


def docx_headings(raw: bytes) -> list[tuple[str, int]]:
    from docx import Document

    out: list[tuple[str, int]] = []
    for p in Document(io.BytesIO(raw)).paragraphs:
        style = (p.style.name if p.style is not None else "") or ""
        if style == "Title":
            out.append((p.text, 0))
        elif m := re.fullmatch(r"Heading (\d)", style):
            out.append((p.text, int(m.group(1))))
    return out


def pdf_headings(raw: bytes) -> list[tuple[str, int, int]]:
    """``(title, level, page_index)`` of every outline entry, in outline order — the outline
    walk ingest records in ``documents.metadata`` (:func:`arborag.tasks.ingest.formats_doc.pdf_outline`),
    so a sectioner reading the file and one reading the record see the same headings."""
    from pypdf import PdfReader

    from arborag.tasks.ingest.formats_doc import pdf_outline

    return [(title, level, page) for title, level, page in pdf_outline(PdfReader(io.BytesIO(raw)))]


def _pdf_to_headings(text: str, entries: list[tuple[str, int, int]], page_starts: Sequence[int] | None) -> list[Heading]:
    if not page_starts:
        return locate_headings(text, [(t, lvl) for t, lvl, _ in entries], prefix=True)
    starts = line_starts(text)
    norm_lines = [_norm(ln) for ln in text.split("\n")]
    out: list[Heading] = []
    for title, level, page in entries:
        if page >= len(page_starts):
            continue
        lo = bisect_right(starts, page_starts[page]) - 1
        hi = bisect_left(starts, page_starts[page + 1]) if page + 1 < len(page_starts) else len(starts)
        key = _norm(title)
        line = next((i for i in range(lo, hi) if key and norm_lines[i].startswith(key)), lo)
        out.append(Heading(line, title.strip(), level))
    return out


# -- blocks fallback --------------------------------------------------------------------------
def _heading_like(line: str) -> bool:
    """A short line that reads like a heading: starts with a capital, mostly letters, at most
    12 words, not ending like a sentence or a clause."""
    t = line.strip()
    if not (3 <= len(t) <= 80) or not t[0].isupper() or t[-1] in ".,;:" or len(t.split()) > 12:
        return False
    chars = [c for c in t if not c.isspace()]
    return sum(c.isalpha() for c in chars) >= 0.6 * len(chars)


def block_title(block: Sequence[str], *, look: int = 12, skip: frozenset[str] = frozenset()) -> str:
    """A block's title: its first Markdown heading; else, among its first ``look`` non-empty
    lines, the first heading-like line of two or more words, else of one word; else its first
    line. Lines whose normalized form is in ``skip`` (running page headers) are never titles."""
    md = next((m.group(2) for ln in block if (m := _ATX.match(ln))), None)
    if md:
        return md
    lines = [ln for ln in block if ln.strip()][:look]
    like = [ln for ln in lines if _heading_like(ln) and _norm(ln) not in skip]
    if like:
        return next((ln for ln in like if len(ln.split()) >= 2), like[0])
    wordy = [ln for ln in lines if sum(c.isalpha() for c in ln) >= 3 and _norm(ln) not in skip]  # not a page number
    return (wordy or lines or [""])[0]


def block_sections(text: str, *, target_chars: int = 4000) -> list[Section]:
    """Blank-line blocks grouped until ``target_chars`` (text with no blank lines: lines, cut once
    a group reaches 1.5 x ``target_chars``); titled by :func:`block_title`."""
    lines = text.split("\n")
    heads: list[Heading] = []
    size, start, fresh = 0, 0, True
    for i, line in enumerate(lines):
        if fresh and line.strip():
            start, fresh = i, False
        size += len(line) + 1
        boundary = not line.strip() or i == len(lines) - 1
        if not fresh and ((boundary and size >= target_chars) or size >= 1.5 * target_chars):
            heads.append(Heading(start, "", 1))
            size, fresh = 0, True
    group_starts = [h.line for h in heads] or [0]
    # a short line repeated 3+ times is a running header/footer ("Table of Contents" on every page)
    counts = Counter(_norm(ln) for ln in lines if 0 < len(ln.strip()) <= 80)
    running = frozenset(k for k, n in counts.items() if n >= 3)
    titled: list[Heading] = []
    for k, a in enumerate(group_starts):
        b = group_starts[k + 1] if k + 1 < len(group_starts) else len(lines)
        titled.append(Heading(0 if k == 0 else a, block_title(lines[a:b], skip=running), 1))
    return sections_from_headings(text, titled)


# -- the structural sectioner -----------------------------------------------------------------
def structural_sections(doc: DocInput, *, target_chars: int = 4000) -> list[Section]:
    """Sections of one document from its own structure (see the module docs)."""
    text, mime, raw = doc.text, (doc.mime or ""), doc.raw
    heads: list[Heading] = []
    recorded = (doc.metadata or {}).get("headings")
    if isinstance(recorded, list) and recorded and raw is None:
        heads = _recorded_headings(text, recorded, mime, (doc.metadata or {}).get("page_starts"))
    elif raw is not None and mime == "application/pdf":
        heads = _pdf_to_headings(text, pdf_headings(raw), (doc.metadata or {}).get("page_starts"))
    elif raw is not None and mime.endswith("wordprocessingml.document"):
        heads = locate_headings(text, docx_headings(raw))
    elif raw is not None and mime == "text/html":
        heads = locate_headings(text, html_headings(raw))
    if len(heads) < 2 and mime in ("text/markdown", "text/html", ""):
        heads = markdown_headings(text)
    if len(heads) < 2:
        return block_sections(text, target_chars=target_chars)
    return sections_from_headings(text, heads)


def _recorded_headings(text: str, recorded: list[Any], mime: str, page_starts: Sequence[int] | None) -> list[Heading]:
    """Headings recorded at ingest (``[title, level, page]``) located in the text."""
    rows = [(str(r[0]), int(r[1]), r[2] if len(r) > 2 else None) for r in recorded if isinstance(r, list) and len(r) >= 2]
    if mime == "application/pdf" and rows and all(isinstance(p, int) for _, _, p in rows):
        return _pdf_to_headings(text, [(t, lvl, p) for t, lvl, p in rows if isinstance(p, int)], page_starts)
    return locate_headings(text, [(t, lvl) for t, lvl, _ in rows])


def build_sections(
    docs: Iterable[DocInput],
    *,
    strategy: str = "structural",
    sectioner: Callable[[DocInput], list[Section]] | None = None,
) -> pa.Table:
    """The ``sections`` rows of many documents, conformed to :data:`SECTIONS_SCHEMA`."""
    fn = sectioner or structural_sections
    cols: dict[str, list[Any]] = {f.name: [] for f in SECTIONS_SCHEMA}
    for doc in docs:
        for k, s in enumerate(fn(doc)):
            row = (doc.doc_id, short_id(doc.doc_id, strategy, s.start_line, s.end_line), k, s.start_line,
                   s.end_line, s.title, s.summary, s.start_char, s.end_char, strategy)
            for name, value in zip(cols, row):
                cols[name].append(value)
    return pa.Table.from_pydict(cols, schema=SECTIONS_SCHEMA)


def metadata_of(value: str | dict[str, Any] | None) -> dict[str, Any]:
    """``documents.metadata`` (a JSON string) as a dict; ``{}`` when absent or unreadable."""
    if isinstance(value, dict):
        return value
    try:
        out = json.loads(value) if value else {}
    except json.JSONDecodeError:
        return {}
    return out if isinstance(out, dict) else {}
