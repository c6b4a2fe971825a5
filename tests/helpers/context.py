"""Makers of small structured source files for the context (sections + headers) tests.

Each maker writes a real file of its format, with the structure the structural sectioner reads:
Markdown headings, HTML ``<h1>``-``<h6>``, DOCX ``Heading N`` styles (python-docx), a PDF with an
outline/bookmarks (pypdf's writer, ``add_outline_item``).
"""

from __future__ import annotations

import io
from pathlib import Path

__all__ = ["MD_TEXT", "HTML_TEXT", "write_structured_corpus", "docx_with_headings", "pdf_with_outline"]

MD_TEXT = """# Glass Slipper Handbook

The handbook explains how the royal household cares for glass footwear.

## Cleaning the slipper

Rinse the slipper in warm water. Dry it with a soft cloth so that no spots remain.
Never use a brush: glass scratches easily.

## Storing the slipper

Keep the slipper in a velvet box, away from the kitchen hearth and its ashes.
"""

HTML_TEXT = """<html><head><title>Pumpkin Coach Manual</title></head><body>
<h1>Pumpkin Coach Manual</h1>
<p>This manual covers the care of enchanted pumpkin coaches.</p>
<h2>Before midnight</h2>
<p>Drive carefully. The coach is fragile and the horses are really mice.</p>
<h2>After midnight</h2>
<p>The coach turns back into a pumpkin. Store it in a cool cellar.</p>
</body></html>
"""

DOCX_SECTIONS = [
    ("Stepsisters Report", 0, None),
    ("Background", 1, "The stepsisters lived in the house of the rich man and were proud of their fine clothes."),
    ("The ball", 1, "At the ball the stepsisters tried on the slipper, but it did not fit either of them."),
]

PDF_PAGES = [
    ["Royal Ball Accounts", "The palace spent a great deal on the ball this year."],
    ["Music and dancing", "The orchestra played waltzes until midnight."],
    ["Food and wine", "The kitchen served roast goose and lentils."],
]


def docx_with_headings() -> bytes:
    """A DOCX with a ``Title`` paragraph and two ``Heading 1`` sections (python-docx)."""
    from docx import Document

    doc = Document()
    for text, level, body in DOCX_SECTIONS:
        doc.add_heading(text, level=level)
        if body:
            doc.add_paragraph(body)
    buf = io.BytesIO()
    doc.save(buf)
    return buf.getvalue()


def pdf_with_outline() -> bytes:
    """A three-page PDF (Helvetica text) with one outline entry per page (pypdf's writer)."""
    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    w = PdfWriter()
    font = DictionaryObject({NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1"),
                             NameObject("/BaseFont"): NameObject("/Helvetica")})
    font_ref = w._add_object(font)
    for lines in PDF_PAGES:
        page = w.add_blank_page(612, 792)
        page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): DictionaryObject({NameObject("/F1"): font_ref})})
        stream = DecodedStreamObject()
        stream.set_data(("BT /F1 12 Tf 72 720 Td 14 TL " + " ".join(f"({t}) '" for t in lines) + " ET").encode())
        page[NameObject("/Contents")] = w._add_object(stream)
    for i, lines in enumerate(PDF_PAGES):
        w.add_outline_item(title=lines[0], page_number=i)
    buf = io.BytesIO()
    w.write(buf)
    return buf.getvalue()


def write_structured_corpus(folder: Path) -> dict[str, Path]:
    """One file per format in ``folder``: handbook.md, coach.html, sisters.docx, ball.pdf."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "md": folder / "handbook.md",
        "html": folder / "coach.html",
        "docx": folder / "sisters.docx",
        "pdf": folder / "ball.pdf",
    }
    files["md"].write_text(MD_TEXT, encoding="utf-8")
    files["html"].write_text(HTML_TEXT, encoding="utf-8")
    files["docx"].write_bytes(docx_with_headings())
    files["pdf"].write_bytes(pdf_with_outline())
    return files
