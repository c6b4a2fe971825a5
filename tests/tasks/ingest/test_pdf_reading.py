"""PDF reading: PDFium's text with pypdf as the fallback, parser warnings named by file, garbled pages flagged."""

from __future__ import annotations

import importlib.util
import io
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from arborag.errors import IngestError
from arborag.tasks.ingest.formats_doc import read_pdf
from arborag.tasks.ingest.garble import garble_counts, garbled_pages
from arborag.tasks.ingest.records import SourceFile
from helpers.ingest import make_pdf

#: the tests of PDFium's text need pypdfium2, a main dependency (pip install -e . installs it)
needs_pdfium = pytest.mark.skipif(importlib.util.find_spec("pypdfium2") is None, reason="pypdfium2 is not installed: pip install pypdfium2")

CLEAN = "\n".join(["The company reported strong sales for the quarter and expects growth next year."] * 6)
DAMAGED = "\n".join(["The tota l for the pe riod rose and the capit al was low."] * 5)


def _read(path: Path, raw: bytes):  # type: ignore[no-untyped-def]
    return read_pdf(SourceFile(path, str(path)), raw)


def _written_by_pypdf(pages: list[str]) -> bytes:
    """``make_pdf``'s file rewritten by pypdf's writer (a cross-reference table and trailer as real files have)."""
    from pypdf import PdfReader, PdfWriter

    buf = io.BytesIO()
    PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf(pages)))).write(buf)
    return buf.getvalue()


def test_split_and_glued_words_are_counted() -> None:
    g = garble_counts("The tota l for the pe riod rose; membershipsaccounted for most of it.")
    assert (g.split, g.glued) == (2, 1)
    clean = garble_counts("Regulation S applies to the total for the period; memberships accounted for most.")
    assert (clean.split, clean.glued) == (0, 0)


def test_only_a_damaged_page_is_flagged() -> None:
    flagged = garbled_pages([CLEAN, DAMAGED, CLEAN])
    assert [i for i, _ in flagged] == [1]
    assert flagged[0][1] > 100


@needs_pdfium
def test_pdfium_reads_the_text_and_a_garbled_page_is_named(tmp_path: Path) -> None:
    path = tmp_path / "report.pdf"
    doc = _read(path, make_pdf([CLEAN, DAMAGED]))
    assert doc.metadata["extractor"] == "pypdfium2"
    assert doc.metadata["n_pages"] == 2 and doc.metadata["garbled_pages"] == 1
    assert [w for w in doc.warnings if "garbled" in w] and all("page 2 " in w for w in doc.warnings if "garbled" in w)
    assert "strong sales" in doc.text and "pe riod" in doc.text


@needs_pdfium
def test_pypdf_reads_when_pypdfium2_is_missing_or_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = make_pdf([CLEAN, "Second page."])
    by_pdfium = _read(tmp_path / "a.pdf", raw)
    monkeypatch.setitem(sys.modules, "pypdfium2", None)  # import fails: not installed
    missing = _read(tmp_path / "a.pdf", raw)
    monkeypatch.undo()
    import pypdfium2

    def broken_document(*args: object, **kwargs: object) -> None:
        raise pypdfium2.PdfiumError("Failed to load document")

    monkeypatch.setattr(pypdfium2, "PdfDocument", broken_document)
    failing = _read(tmp_path / "a.pdf", raw)
    assert by_pdfium.metadata["extractor"] == "pypdfium2"
    assert missing.metadata["extractor"] == failing.metadata["extractor"] == "pypdf"
    assert missing.text == failing.text == by_pdfium.text
    assert missing.metadata["page_starts"] == by_pdfium.metadata["page_starts"]


@needs_pdfium
def test_a_truncated_pdf_is_read_with_its_parser_warnings(tmp_path: Path) -> None:
    path = tmp_path / "cut.pdf"
    doc = _read(path, _written_by_pypdf([CLEAN])[:-6])  # "%%EOF\n" cut off
    assert doc.metadata["extractor"] == "pypdfium2" and "strong sales" in doc.text
    assert "PDF: EOF marker not found" in doc.warnings
    assert any("pypdf cannot read the file's structure" in w for w in doc.warnings)
    # the pypdf logger is as it was
    assert logging.getLogger("pypdf").propagate and not logging.getLogger("pypdf").handlers


def test_an_unreadable_pdf_error_keeps_the_parser_messages(tmp_path: Path) -> None:
    path = tmp_path / "cut.pdf"
    with pytest.raises(IngestError) as err:
        _read(path, _written_by_pypdf([CLEAN])[:-30])  # the trailer is gone too: PDFium cannot read it either
    assert err.value.uri == str(path) and "corrupt or unreadable PDF" in err.value.reason
    assert "EOF marker not found" in err.value.reason


@needs_pdfium
def test_stderr_names_the_file_in_every_pdf_warning(tmp_path: Path) -> None:
    path = tmp_path / "cut.pdf"
    path.write_bytes(_written_by_pypdf([CLEAN])[:-6])
    code = (
        "import sys; from pathlib import Path;"
        "from arborag.tasks.ingest.formats_doc import read_pdf;"
        "from arborag.tasks.ingest.records import SourceFile;"
        "p = Path(sys.argv[1]); read_pdf(SourceFile(p, str(p)), p.read_bytes())"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert any("EOF marker not found" in line for line in lines), done.stderr
    assert all(str(path) in line for line in lines), done.stderr


@needs_pdfium
def test_warnings_are_not_logged_when_the_caller_silenced_pypdf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    raw = _written_by_pypdf([CLEAN])[:-6]
    # pypdf's logger as a fresh process has it (a CLI command run earlier in this process may have silenced it)
    monkeypatch.setattr(logging.getLogger("pypdf"), "level", logging.NOTSET)
    with caplog.at_level(logging.WARNING, logger="arborag.ingest"):
        loud = _read(tmp_path / "cut.pdf", raw)
    assert any(r.name == "arborag.ingest" and str(tmp_path / "cut.pdf") in r.getMessage() for r in caplog.records)
    caplog.clear()
    monkeypatch.setattr(logging.getLogger("pypdf"), "level", logging.ERROR)  # as `arborag ingest` sets it
    with caplog.at_level(logging.WARNING, logger="arborag.ingest"):
        quiet = _read(tmp_path / "cut.pdf", raw)
    assert not [r for r in caplog.records if r.name == "arborag.ingest"]
    assert quiet.warnings == loud.warnings  # still the document's warnings
    assert logging.getLogger("pypdf").level == logging.ERROR
