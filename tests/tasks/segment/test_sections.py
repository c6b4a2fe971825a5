"""The structural sectioner (tasks/segment/sections.py) on Markdown, HTML, DOCX and a PDF with an outline.

The DOCX is built in the test with python-docx, the PDF with pypdf's writer (three pages of
Helvetica text and an outline made with ``add_outline_item``); the document text handed to the
sectioner is what ingest extracts from them (pages joined by a blank line, ``page_starts``).
"""

from __future__ import annotations

import io

import pyarrow as pa

from arborag.tasks.segment.sections import (
    SECTIONS_SCHEMA,
    DocInput,
    Section,
    block_sections,
    build_sections,
    line_starts,
    markdown_headings,
    metadata_of,
    structural_sections,
)


def _check_tiling(text: str, secs: list[Section]) -> None:
    """Sections cover every line and every character once, in order."""
    n_lines = len(text.split("\n"))
    assert secs[0].start_line == 0 and secs[-1].end_line == n_lines - 1
    assert secs[0].start_char == 0 and secs[-1].end_char == len(text)
    for a, b in zip(secs, secs[1:]):
        assert b.start_line == a.end_line + 1 and b.start_char == a.end_char
    assert "".join(text[s.start_char : s.end_char] for s in secs) == text
    starts = line_starts(text)
    assert all(starts[s.start_line] == s.start_char for s in secs)


MD = """Preface line before any heading.

# Guide

## Install
Run pip install.

```
# not a heading (code)
```

## Usage
Call it.

Setext Title
============
Body under setext."""


def test_markdown_headings_and_sections() -> None:
    heads = markdown_headings(MD)
    assert [(h.line, h.title, h.level) for h in heads] == [
        (2, "Guide", 1), (4, "Install", 2), (11, "Usage", 2), (14, "Setext Title", 1)
    ]
    secs = structural_sections(DocInput("d", MD, "text/markdown"))
    _check_tiling(MD, secs)
    # "# Guide" has no body: it merges into "Install"; the preface is its own section
    assert [s.title for s in secs] == ["Preface line before any heading.", "Guide — Install", "Usage", "Setext Title"]
    assert [(s.start_line, s.end_line) for s in secs] == [(0, 1), (2, 10), (11, 13), (14, 16)]


def test_html_headings_from_the_raw_page() -> None:
    raw = b"""<html><head><title>T</title></head><body>
    <h1>Quarterly   report</h1><p>Summary para.</p>
    <h2>Revenue</h2><p>Revenue rose.</p><p>A lot.</p>
    <h2>Costs</h2><p>Costs fell.</p></body></html>"""
    # what ingest extracts from it (block tags become blank-line separated paragraphs)
    text = "Quarterly report\n\nSummary para.\n\nRevenue\n\nRevenue rose.\n\nA lot.\n\nCosts\n\nCosts fell."
    secs = structural_sections(DocInput("d", text, "text/html", raw=raw))
    _check_tiling(text, secs)
    assert [s.title for s in secs] == ["Quarterly report", "Revenue", "Costs"]
    assert [s.start_line for s in secs] == [0, 4, 10]


def _docx_bytes() -> tuple[bytes, str]:
    from docx import Document

    doc = Document()
    doc.add_heading("Employee Handbook", level=0)  # style "Title"
    doc.add_paragraph("Welcome to the company.")
    doc.add_heading("Leave", level=1)
    doc.add_paragraph("Twenty days a year.")
    doc.add_paragraph("Leave is a paragraph word too.")  # same words, body style: not a heading
    doc.add_heading("Expenses", level=2)
    doc.add_paragraph("Keep receipts.")
    buf = io.BytesIO()
    doc.save(buf)
    text = "\n".join(p.text for p in doc.paragraphs)
    return buf.getvalue(), text


def test_docx_heading_styles() -> None:
    raw, text = _docx_bytes()
    mime = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    secs = structural_sections(DocInput("d", text, mime, raw=raw))
    _check_tiling(text, secs)
    assert [(s.title, s.start_line, s.end_line) for s in secs] == [
        ("Employee Handbook", 0, 1), ("Leave", 2, 4), ("Expenses", 5, 6)
    ]


def _pdf_bytes(pages: list[list[str]]) -> bytes:
    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    w = PdfWriter()
    font = w._add_object(DictionaryObject({
        NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1"),
        NameObject("/BaseFont"): NameObject("/Helvetica"),
    }))
    for lines in pages:
        page = w.add_blank_page(612, 792)
        page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})})
        stream = DecodedStreamObject()
        stream.set_data(("BT /F1 12 Tf 72 720 Td 14 TL " + " ".join(f"({t}) '" for t in lines) + " ET").encode())
        page[NameObject("/Contents")] = w._add_object(stream)
    w.add_outline_item(title="Annual Report", page_number=0)
    parent = w.add_outline_item(title="Risk Factors", page_number=1)
    w.add_outline_item(title="Financial Statements", page_number=2, parent=parent)
    buf = io.BytesIO()
    w.write(buf)
    return buf.getvalue()


def test_pdf_outline_entries_start_sections() -> None:
    from pypdf import PdfReader

    pages = [
        ["Annual Report", "Intro text here."],
        ["Intro continues on page two.", "Risk Factors", "Risks are many."],
        ["Financial Statements", "Revenue grew."],
    ]
    raw = _pdf_bytes(pages)
    # ingest: pages' text joined by a blank line, page_starts recorded in metadata
    texts = [p.extract_text() for p in PdfReader(io.BytesIO(raw)).pages]
    text, starts = "", []
    for t in texts:
        text += "\n\n" if text else ""
        starts.append(len(text))
        text += t
    meta = metadata_of('{"n_pages": 3, "page_starts": %s}' % starts)
    secs = structural_sections(DocInput("d", text, "application/pdf", metadata=meta, raw=raw))
    _check_tiling(text, secs)
    # "Risk Factors" starts at its title's line on page 2, not at the page start
    assert [(s.title, s.start_line) for s in secs] == [("Annual Report", 0), ("Risk Factors", 4), ("Financial Statements", 7)]
    # without page_starts the titles are found in the text in outline order
    secs2 = structural_sections(DocInput("d", text, "application/pdf", raw=raw))
    assert [(s.title, s.start_line) for s in secs2] == [(s.title, s.start_line) for s in secs]


def test_blank_line_blocks_grouped_to_a_target_size() -> None:
    paras = [f"Paragraph {i} " + "word " * 20 for i in range(6)]  # ~115 chars each
    text = "\n\n".join(paras)
    secs = block_sections(text, target_chars=250)
    _check_tiling(text, secs)
    # each paragraph line is 112 chars (+1 newline), each blank line 1: after paragraphs 0, 1 and
    # their blank lines 114 + 114 = 228 < 250; after paragraph 2 + blank 342 >= 250 -> the group
    # closes at line 5; paragraphs 3, 4, 5 form the second group from line 6.
    assert [s.start_line for s in secs] == [0, 6]
    assert secs[0].title.startswith("Paragraph 0") and secs[1].title.startswith("Paragraph 3")
    assert len(block_sections("one short line", target_chars=250)) == 1
    # plain text without headings falls back to blocks
    assert structural_sections(DocInput("d", text, "text/plain"))[0].title.startswith("Paragraph 0")


def test_build_sections_table_schema_and_ids() -> None:
    docs = [DocInput("d1", MD, "text/markdown"), DocInput("d2", "Just one line.", "text/plain")]
    table = build_sections(docs)
    assert isinstance(table, pa.Table) and table.schema == SECTIONS_SCHEMA
    assert table.column("doc_id").to_pylist() == ["d1"] * 4 + ["d2"]
    assert table.column("ordinal").to_pylist() == [0, 1, 2, 3, 0]
    assert table.column("strategy").to_pylist() == ["structural"] * 5
    ids = table.column("section_id").to_pylist()
    assert len(set(ids)) == 5 and ids == build_sections(docs).column("section_id").to_pylist()
    assert table.column("title").to_pylist()[-1] == "Just one line."
    assert set(SECTIONS_SCHEMA.names) >= {"doc_id", "section_id", "ordinal", "start_line", "end_line", "title", "summary"}
