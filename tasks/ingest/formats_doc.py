"""Readers of document formats: HTML (BeautifulSoup), PDF (pypdfium2, else pypdf), DOCX (python-docx)."""

from __future__ import annotations

import io
import logging
import re
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from arborag.errors import IngestError
from arborag.tasks.ingest.decode import decode_text, good_title, normalize_text
from arborag.tasks.ingest.garble import garbled_pages
from arborag.tasks.ingest.records import MIME_TYPES, Extracted, SourceFile

__all__ = ["pdf_outline", "read_docx", "read_html", "read_pdf", "table_row_lines"]

_HTML_DROP = ("script", "style", "noscript", "template", "svg", "head", "iframe", "object")
_HTML_BLOCKS = (
    "p", "div", "section", "article", "main", "header", "footer", "nav", "aside", "h1", "h2", "h3",
    "h4", "h5", "h6", "ul", "ol", "dl", "dt", "dd", "table", "thead", "tbody", "tr", "pre",
    "blockquote", "figure", "figcaption", "form", "fieldset", "address", "hr",
)


def read_html(src: SourceFile, raw: bytes) -> Extracted:
    head = raw[:4096].decode("ascii", errors="ignore")
    declared = re.search(r"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", head, flags=re.IGNORECASE)
    text, meta, warnings = decode_text(raw, src.uri, declared=declared.group(1) if declared else None)
    from bs4 import BeautifulSoup

    try:
        soup = BeautifulSoup(text, "html.parser")
    except Exception as exc:  # the parser is lenient; anything it still rejects is a bad file
        raise IngestError(src.uri, f"cannot parse HTML: {exc}") from None
    title_tag = soup.find("title")
    title = good_title(title_tag.get_text()) if title_tag else None
    if title is None and (h1 := soup.find("h1")) is not None:
        title = good_title(h1.get_text())
    headings = [[" ".join(h.get_text(" ").split()), int(h.name[1]), None] for h in soup.find_all(["h1", "h2", "h3", "h4", "h5", "h6"])]
    for tag in soup(_HTML_DROP):
        tag.decompose()
    for br in soup.find_all("br"):
        br.replace_with("\n")
    for li in soup.find_all("li"):
        li.insert_before("\n- ")
        li.insert_after("\n")
    for tab in soup.find_all("table"):
        if tab.find("table") is None:  # a table of tables is layout: its cells stay cells
            _html_table_rows(tab)
    for cell in soup.find_all(["td", "th"]):
        cell.insert_after("\t")
    for tag in soup.find_all(_HTML_BLOCKS):
        tag.insert_before("\n\n")
        tag.insert_after("\n\n")
    body = normalize_text(soup.get_text())
    meta = {**meta, "headings": [h for h in headings if h[0]]}  # for the structural sectioner
    return Extracted(src.uri, body, title or src.path.stem, MIME_TYPES[".html"], meta, tuple(warnings))


_YEAR = re.compile(r"^(?:19|20)\d\d$")  # a year names a column (financial tables)
_NUMERIC_CELL = re.compile(r"^[\s(\-–—$€£¥%.,\d)*]*$")


def _is_numeric_cell(cell: str) -> bool:
    return bool(_NUMERIC_CELL.match(cell)) and any(ch.isdigit() for ch in cell)


def _header_like(cells: list[str]) -> bool:
    """A row that reads as column names: at least two cells, none a figure, none over eight words
    or ending like a sentence."""
    filled = [c for c in cells if c]
    return len(filled) >= 2 and not any((_is_numeric_cell(c) and not _YEAR.match(c)) or len(c.split()) > 8
                                        or c.endswith((".", "!", "?")) for c in filled)


def table_row_lines(header: list[str] | None, rows: list[list[str]]) -> list[str]:
    """The lines a table becomes. Under a header row every data row is one line that carries its
    column names — "Name; Column: value; Column: value" (a cell under an empty column name, such
    as the row-name column, stands alone), so a row chunk stays searchable and readable without
    the header line. Without a header row: the cells joined with " | ". Empty cells and lone
    currency signs are dropped; ``header[i]`` names column ``i`` of every row."""
    out: list[str] = []
    for row in rows:
        parts: list[str] = []
        for i, cell in enumerate(row):
            if not cell or cell in {"$", "€", "£", "¥", "%", ")"}:
                continue
            name = header[i] if header is not None and i < len(header) else ""
            parts.append(f"{name}: {cell}" if name and name != cell else cell)
        if parts:
            out.append(("; " if header is not None else " | ").join(parts))
    return out


def _table_header(grid: list[list[str]], marked: bool) -> list[str] | None:
    """Column names of a table's first row: when it is marked as a header (``<th>``/``<thead>``),
    or when it reads as column names and a later row holds a figure."""
    if len(grid) < 2:
        return None
    first = grid[0]
    if marked and sum(1 for c in first if c) >= 1:
        return first
    if _header_like(first) and any(_is_numeric_cell(c) for row in grid[1:] for c in row):
        return first
    return None


def _html_table_rows(tab: Any) -> None:
    """Replace an HTML table (no table inside it) by its rows as lines (:func:`table_row_lines`),
    its caption first; column spans are expanded so each value meets its column's name."""
    grid: list[list[str]] = []
    spread: list[str] = []  # the first row with each name repeated over its column span
    marked = False
    for tr in tab.find_all("tr"):
        cells = tr.find_all(["td", "th"])
        row: list[str] = []
        names: list[str] = []
        for cell in cells:
            text = " ".join(cell.get_text(" ").split())
            try:
                span = max(1, min(50, int(cell.get("colspan") or 1)))
            except ValueError:
                span = 1
            row.extend([text, *[""] * (span - 1)])
            names.extend([text] * span)
        if not any(row):
            continue
        if not grid:
            marked = bool(cells) and (all(c.name == "th" for c in cells) or tr.find_parent("thead") is not None)
            spread = names
        grid.append(row)
    if not grid:
        return
    header = _table_header([spread, *grid[1:]], marked)
    caption = tab.find("caption")
    lines = ([" ".join(caption.get_text(" ").split())] if caption is not None else [])
    lines += table_row_lines(header, grid[1:] if header is not None else grid)
    tab.replace_with("\n\n" + "\n".join(line for line in lines if line) + "\n\n")


def read_pdf(src: SourceFile, raw: bytes) -> Extracted:
    """A PDF's text, page by page, by pypdfium2 (PDFium) — pypdf when pypdfium2 is not installed
    or cannot read the file; title, outline and decryption by pypdf. PDFium has the fewest split
    and glued words and is ~18x faster than pypdf (benchmarks/results/pdf_extractors.md).

    What a parser reports about a file (pypdf logs "EOF marker not found" and the like) becomes
    a warning of the document; so does every page whose words look cut or run together
    (:func:`~arborag.tasks.ingest.garble.garbled_pages`), by page number, counted in the
    metadata as ``garbled_pages``. The warnings are logged with the file's uri (logger
    ``arborag.ingest``) unless the caller silenced pypdf's warnings (``arborag ingest`` does, and
    prints the documents' warnings with their files instead).
    """
    with _parser_messages() as messages:
        text_pages = _pdfium_pages(raw)
        try:
            pages, title, outline = _pypdf_read(src, raw, text_pages is None)
        except IngestError:
            raise
        except Exception as exc:  # pypdf signals broken files with many exception types
            if text_pages is None:
                said = "; ".join(dict.fromkeys(messages))
                raise IngestError(src.uri, f"corrupt or unreadable PDF ({type(exc).__name__}: {exc})" + (f"; the parser said: {said}" if said else "")) from None
            messages.append(f"pypdf cannot read the file's structure, so it has no title or outline ({type(exc).__name__}: {exc})")
            pages, title, outline = text_pages, None, []
        extractor = "pypdf" if text_pages is None else "pypdfium2"
        pages = [normalize_text(p) for p in (pages if text_pages is None else text_pages)]
    warnings = [f"PDF: {m}" for m in dict.fromkeys(messages)][:_MAX_PDF_MESSAGES]
    garbled = garbled_pages(pages)
    warnings += [
        f"page {i + 1} looks garbled ({score:.0f} split or glued words per 1,000 words): its words may be cut or run "
        "together; search may miss them (try another copy of the file, or a PDF printed from the source)"
        for i, score in garbled
    ]
    if logging.getLogger("pypdf").isEnabledFor(logging.WARNING):  # a caller that silenced pypdf prints the warnings itself
        for w in warnings:
            _log.warning("%s: %s", src.uri, w)
    text, starts = "", []
    for page_text in pages:
        if page_text and text:
            text += "\n\n"
        starts.append(len(text))
        text += page_text
    meta: dict[str, Any] = {
        "n_pages": len(pages), "page_starts": starts, "headings": outline, "extractor": extractor,
        "garbled_pages": len(garbled),
    }
    if not text.strip():
        raise IngestError(src.uri, "no extractable text (a scanned or image-only PDF? OCR is not supported)")
    return Extracted(src.uri, text, title or src.path.stem, MIME_TYPES[".pdf"], meta, tuple(warnings))


_log = logging.getLogger("arborag.ingest")
#: at most this many distinct parser messages per file become warnings (a broken file can log hundreds)
_MAX_PDF_MESSAGES = 5
# PDFium is not thread-safe: one document at a time
_PDFIUM_LOCK = threading.Lock()


def _pypdf_read(src: SourceFile, raw: bytes, with_text: bool) -> tuple[list[str], str | None, list[list[Any]]]:
    """pypdf's page texts (only when ``with_text``), title and outline; decrypts an empty user password."""
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(raw))
    if reader.is_encrypted:
        try:
            opened = reader.decrypt("")  # many PDFs are "encrypted" with an empty user password
        except Exception as exc:  # pypdf raises several types for unsupported crypto
            raise IngestError(src.uri, f"encrypted PDF that cannot be opened: {exc}") from None
        if not opened:
            raise IngestError(src.uri, "encrypted PDF: a password is required (decrypt it, e.g. `qpdf --decrypt`, then ingest)")
    pages = [page.extract_text() or "" for page in reader.pages] if with_text else []
    info = reader.metadata
    title = good_title(info.get("/Title")) if info else None
    return pages, title, pdf_outline(reader)


def _pdfium_pages(raw: bytes) -> list[str] | None:
    """Every page's text by PDFium, or None when pypdfium2 is not installed or cannot read the file."""
    try:
        import pypdfium2 as pdfium
    except ImportError:
        return None
    with _PDFIUM_LOCK:
        try:
            pdf = pdfium.PdfDocument(raw)
        except Exception:  # PdfiumError for broken or password-protected files: pypdf says why
            return None
        try:
            out = []
            for i in range(len(pdf)):
                page = pdf[i]
                textpage = page.get_textpage()
                out.append(textpage.get_text_range())
                textpage.close()
                page.close()
            return out
        except Exception:  # a page PDFium cannot parse: let pypdf read the whole file
            return None
        finally:
            pdf.close()


class _Collect(logging.Handler):
    def __init__(self, into: list[str], thread: int) -> None:
        super().__init__(logging.WARNING)
        self.into, self.thread = into, thread

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.into.append(" ".join(record.getMessage().split()))


@contextmanager
def _parser_messages() -> Iterator[list[str]]:
    """The warnings pypdf logs (``logging``) or issues (``warnings``) meanwhile, collected instead
    of printed without the file's name (on this thread; the logger's level and handlers are restored)."""
    caught: list[str] = []
    logger = logging.getLogger("pypdf")
    handler = _Collect(caught, threading.get_ident())
    propagate, level = logger.propagate, logger.level
    logger.addHandler(handler)
    logger.propagate = False
    if logger.getEffectiveLevel() > logging.WARNING:
        logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings(record=True) as issued:
            warnings.simplefilter("always")
            yield caught
        caught.extend(" ".join(str(w.message).split()) for w in issued)
    finally:
        logger.removeHandler(handler)
        logger.propagate, logger.level = propagate, level


def read_docx(src: SourceFile, raw: bytes) -> Extracted:
    try:
        from docx import Document
        from docx.table import Table
        from docx.text.paragraph import Paragraph

        doc = Document(io.BytesIO(raw))
        parts: list[str] = []
        headings: list[list[Any]] = []
        n_tables = 0
        for block in doc.iter_inner_content():
            if isinstance(block, Paragraph):
                parts.append(block.text)
                level = _docx_heading_level(block)
                if level is not None and block.text.strip():
                    headings.append([" ".join(block.text.split()), level, None])
            elif isinstance(block, Table):
                n_tables += 1
                parts.append("")
                grid: list[list[str]] = []
                for row in block.rows:
                    cells: list[str] = []
                    seen: set[int] = set()
                    for cell in row.cells:  # merged cells repeat: keep each once (its column stays)
                        cells.append("" if id(cell._tc) in seen else " ".join(cell.text.split()))
                        seen.add(id(cell._tc))
                    if any(cells):
                        grid.append(cells)
                header = _docx_header(grid)
                parts.extend(table_row_lines(header, grid[1:] if header is not None else grid))
                parts.append("")
        title = good_title(doc.core_properties.title)
    except Exception as exc:  # zipfile, lxml and python-docx errors all mean a broken file
        raise IngestError(src.uri, f"not a readable DOCX file ({type(exc).__name__}: {exc})") from None
    text = normalize_text("\n".join(parts))
    return Extracted(src.uri, text, title or src.path.stem, MIME_TYPES[".docx"], {"n_tables": n_tables, "headings": headings})


def _docx_header(grid: list[list[str]]) -> list[str] | None:
    """A DOCX table marks no header row: its first row is one when it reads as column names
    (:func:`_header_like`) and the table has another row."""
    return grid[0] if len(grid) >= 2 and _header_like(grid[0]) else None


def _docx_heading_level(paragraph: Any) -> int | None:
    """0 for a ``Title`` paragraph, N for ``Heading N``, else None."""
    style = (paragraph.style.name if paragraph.style is not None else "") or ""
    if style == "Title":
        return 0
    m = re.fullmatch(r"Heading (\d)", style)
    return int(m.group(1)) if m else None


def pdf_outline(reader: Any) -> list[list[Any]]:
    """``[title, level, page_index]`` of every outline (bookmark) entry, in outline order; a
    broken outline is no outline (the sectioner falls back to blocks)."""
    out: list[list[Any]] = []

    def walk(items: list[Any], level: int) -> None:
        for item in items:
            if isinstance(item, list):
                walk(item, level + 1)
                continue
            page = reader.get_destination_page_number(item)
            title = " ".join(str(getattr(item, "title", "") or "").split())
            if title and page is not None and page >= 0:
                out.append([title, level, int(page)])

    try:
        walk(list(reader.outline), 1)
    except Exception:  # pypdf raises many types for malformed outlines
        return []
    return out
