"""Real files of every ingest format, good and bad (used by the ingest, flow and CLI tests)."""

from __future__ import annotations

from collections.abc import Sequence

import io
import json
import os
from pathlib import Path

__all__ = ["make_docx", "make_encrypted_pdf", "make_pdf", "write_bad_files", "write_good_files"]


def _pdf_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def make_pdf(pages: list[str]) -> bytes:
    """A small, valid PDF with one text line per entry of ``pages`` (Helvetica)."""
    objects: dict[int, bytes] = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    }
    page_ids = []
    next_id = 4
    for text in pages:
        pid, cid = next_id, next_id + 1
        next_id += 2
        lines = text.split("\n")
        ops = "BT /F1 12 Tf 14 TL 72 720 Td " + " ".join(f"({_pdf_string(line)}) Tj T*" for line in lines) + " ET"
        stream = ops.encode("latin-1")
        objects[pid] = (
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {cid} 0 R >>"
        ).encode()
        objects[cid] = b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream"
        page_ids.append(pid)
    kids = " ".join(f"{p} 0 R" for p in page_ids)
    objects[2] = f"<< /Type /Pages /Kids [{kids}] /Count {len(page_ids)} >>".encode()
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = {}
    for num in sorted(objects):
        offsets[num] = out.tell()
        out.write(b"%d 0 obj\n" % num + objects[num] + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for num in sorted(objects):
        out.write(b"%010d 00000 n \n" % offsets[num])
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref))
    return out.getvalue()


def make_encrypted_pdf(pages: list[str], password: str = "secret") -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf(pages))))
    writer.encrypt(user_password=password, owner_password="owner")
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()


def make_docx(title: str | None, paragraphs: Sequence[str] = (), table: Sequence[Sequence[str]] | None = None) -> bytes:
    """A DOCX with a title heading (none when ``title`` is None), paragraphs and an optional table."""
    from docx import Document

    doc = Document()
    if title is not None:
        doc.core_properties.title = title
        doc.add_heading(title, level=1)
    for p in paragraphs:
        doc.add_paragraph(p)
    if table:
        t = doc.add_table(rows=len(table), cols=len(table[0]))
        for i, row in enumerate(table):
            for j, value in enumerate(row):
                t.cell(i, j).text = value
    buf = io.BytesIO()
    doc.save(buf)
    return buf.getvalue()


def write_good_files(folder: Path) -> dict[str, Path]:
    """One small, readable file of every supported format."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "txt": folder / "story.txt",
        "md": folder / "notes.md",
        "html": folder / "page.html",
        "pdf": folder / "report.pdf",
        "docx": folder / "memo.docx",
        "csv": folder / "prices.csv",
        "jsonl": folder / "records.jsonl",
    }
    files["txt"].write_text("Once upon a time\r\nthere was a  glass slipper.\r\n\r\n\r\nThe end.\r\n", encoding="utf-8")
    files["md"].write_text("# Field notes\n\nThe heron   waits.\n\n- one\n- two\n", encoding="utf-8")
    files["html"].write_text(
        "<html><head><title>Harbour news</title><style>p{color:red}</style><script>var x=1;</script></head>"
        "<body><h1>Harbour</h1><p>Ships <b>arrive</b> at dawn.</p><p>Gulls follow.</p>"
        "<ul><li>cod</li><li>herring</li></ul><table><tr><td>a</td><td>b</td></tr></table></body></html>",
        encoding="utf-8",
    )
    files["pdf"].write_bytes(make_pdf(["Quarterly revenue rose 12 percent.", "Page two talks about margins."]))
    files["docx"].write_bytes(make_docx("Budget memo", ["Travel is capped.", "Hotels need approval."], [["item", "cost"], ["train", "40"]]))
    files["csv"].write_text("product,price\nkettle,25\nteapot,18\n", encoding="utf-8")
    files["jsonl"].write_text(
        json.dumps({"id": 1, "title": "First record", "text": "Alpha beta gamma."}) + "\n"
        + json.dumps({"id": 2, "text": "Delta epsilon."}) + "\n",
        encoding="utf-8",
    )
    return files


def write_bad_files(folder: Path) -> dict[str, Path]:
    """Files that cannot be read, one per failure kind (plus an invalid-UTF-8 file that can)."""
    folder.mkdir(parents=True, exist_ok=True)
    rnd = bytes((i * 167 + 13) % 256 for i in range(4096))  # deterministic "random" bytes
    files = {
        "empty": folder / "empty.txt",
        "blank": folder / "blank.md",
        "binary": folder / "blob.txt",
        "fake_pdf": folder / "fake.pdf",
        "encrypted": folder / "locked.pdf",
        "fake_docx": folder / "broken.docx",
        "loop": folder / "loop.txt",
        "invalid_utf8": folder / "mojibake.txt",
    }
    files["empty"].write_bytes(b"")
    files["blank"].write_text("   \n\t\n  \n", encoding="utf-8")
    files["binary"].write_bytes(rnd)
    files["fake_pdf"].write_bytes(rnd)
    files["encrypted"].write_bytes(make_encrypted_pdf(["Top secret numbers."]))
    files["fake_docx"].write_bytes(b"PK\x03\x04 not really a zip")
    os.symlink("loop.txt", files["loop"])
    files["invalid_utf8"].write_bytes("Café au lait, naïve façade: ".encode() + b"\xff\xfe broken \xc3 bytes here.\n")
    return files
