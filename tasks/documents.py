"""The ``documents`` stage: find source files, read them robustly, and keep one row per document.

The pure entry point is :func:`build_documents` (contract in docs/ARCHITECTURE.md). It walks the
sources, reads every file, and merges what it read into the existing ``documents`` table:

- ``doc_id`` is the content hash of the *normalized* text (:func:`normalize_text`: whitespace
  runs become one space, line breaks are kept), so identical content is one document wherever it
  was found; the other places are listed in ``metadata.duplicate_uris``.
- A file that cannot be read becomes a row with ``status = "error"`` and a reason in ``error``,
  keyed by its uri; the run goes on. A document read before is never dropped because its file
  fails now (both rows stay until the file is fixed).
- A file whose bytes and reader settings did not change since it was read is not parsed again,
  so re-running an ingest is cheap and changes nothing.
- Decoding never fails on a text file: invalid bytes become U+FFFD, and the row says so
  (``status = "ok"``, ``error = "warning: ..."``, ``metadata.replaced_chars``).

Formats and the libraries that read them: ``.txt``/``.md`` (charset-normalizer for the encoding),
``.html`` (BeautifulSoup, stdlib parser), ``.pdf`` (pypdf), ``.docx`` (python-docx), ``.csv``
(stdlib ``csv``), ``.jsonl`` (one document per record). See docs/INGESTION.md.
"""

from __future__ import annotations

import codecs
import csv
import errno
import fnmatch
import glob
import io
import json
import os
import re
import stat
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pyarrow as pa

from arborag.config import IngestConfig
from arborag.errors import IngestError
from arborag.hashing import hash_bytes, hash_json, hash_text
from arborag.storage.schemas import DOCUMENTS

__all__ = [
    "MIME_TYPES",
    "READER_VERSION",
    "DecodedText",
    "Extracted",
    "IngestFailure",
    "IngestReport",
    "SourceFile",
    "build_documents",
    "decode_bytes",
    "discover_sources",
    "error_doc_id",
    "looks_binary",
    "normalize_text",
    "read_source",
]

#: Bumped whenever a reader's output can change for the same bytes; part of the per-file skip key.
READER_VERSION = "readers-v1"

MIME_TYPES: dict[str, str] = {
    ".txt": "text/plain",
    ".text": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".pdf": "application/pdf",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".csv": "text/csv",
    ".jsonl": "application/jsonl",
    ".ndjson": "application/jsonl",
}

_MAX_REPORTED_FAILURES = 100  # failures listed in IngestReport.as_dict(); the count is exact


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SourceFile:
    """One file to read: where it is and the uri it is recorded under (absolute path)."""

    path: Path
    uri: str


@dataclass(frozen=True, slots=True)
class Extracted:
    """A document read from a source: normalized text plus what we know about it."""

    uri: str
    text: str
    title: str
    mime: str
    metadata: dict[str, Any]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class IngestFailure:
    """A source (file or JSONL record) that could not be read, and why."""

    uri: str
    reason: str


@dataclass(slots=True)
class IngestReport:
    """What one :func:`build_documents` call did. Counts are of document uris, not bytes.

    ``added``: new doc_ids; ``unchanged``: doc_ids read again with the same content;
    ``duplicates``: (uri, doc_id) whose content was already a document under another uri;
    ``replaced``: doc_ids dropped because no source holds their content any more (the file
    changed); ``failed``: sources recorded with status=error; ``warnings``: documents read with
    a warning (e.g. invalid bytes replaced).
    """

    files: int = 0
    added: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    duplicates: list[tuple[str, str]] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    failed: list[IngestFailure] = field(default_factory=list)
    warnings: list[IngestFailure] = field(default_factory=list)
    skipped_unchanged_files: int = 0

    @property
    def ok(self) -> bool:
        """True when no source failed."""
        return not self.failed

    def counts(self) -> dict[str, int]:
        return {
            "files": self.files,
            "added": len(self.added),
            "unchanged": len(self.unchanged),
            "duplicates": len(self.duplicates),
            "replaced": len(self.replaced),
            "failed": len(self.failed),
            "warnings": len(self.warnings),
            "skipped_unchanged_files": self.skipped_unchanged_files,
        }

    def as_dict(self) -> dict[str, Any]:
        """Small JSON-able summary: the counts plus the first failures and warnings with reasons."""
        return {
            **self.counts(),
            "failures": [{"uri": f.uri, "reason": f.reason} for f in self.failed[:_MAX_REPORTED_FAILURES]],
            "warning_list": [{"uri": w.uri, "reason": w.reason} for w in self.warnings[:_MAX_REPORTED_FAILURES]],
        }


# ---------------------------------------------------------------------------------------------
# Text: normalization and decoding
# ---------------------------------------------------------------------------------------------
_LINEBREAKS = {ord(c): "\n" for c in "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}
# Invisible characters that only break hashing and matching: zero-width space, BOM / zero-width
# no-break space, soft hyphen, word joiner. (ZWJ/ZWNJ carry meaning in some scripts: kept.)
_DROP = {ord(c): None for c in "\u200b\ufeff\u00ad\u2060"}
# Other C0/C1 control characters (tab and newline are whitespace, handled below).
_DROP.update({c: None for c in range(0x00, 0x20) if c not in (0x09, 0x0A)})
_DROP.update({c: None for c in range(0x7F, 0xA0) if c != 0x85})
_HSPACE = re.compile(r"[^\S\n]+")
_BLANKS = re.compile(r"\n{3,}")


def normalize_text(text: str) -> str:
    """Normalize whitespace, keeping line breaks; the result is what ``doc_id`` hashes.

    Unicode NFC; every line-break convention becomes ``\\n``; control and zero-width characters
    go; runs of other whitespace (tabs, NBSP, ideographic space) become one space; lines are
    stripped; at most one blank line in a row; no leading/trailing blank lines. Idempotent.
    NFKC is deliberately not used: it would turn CJK full-width punctuation (``，``) into ASCII,
    which the segmenters treat as different delimiters.
    """
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n"))
    text = text.translate(_LINEBREAKS).translate(_DROP)
    text = _HSPACE.sub(" ", text)
    text = "\n".join(line.strip(" ") for line in text.split("\n"))
    return _BLANKS.sub("\n\n", text).strip("\n")


@dataclass(frozen=True, slots=True)
class DecodedText:
    """Decoded text, the encoding used, and how many characters were replaced by U+FFFD."""

    text: str
    encoding: str
    replaced: int


_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_CONTROL_BYTES = bytes(b for b in range(32) if b not in (9, 10, 12, 13, 27)) + b"\x7f"


def _bom(raw: bytes) -> tuple[str, int] | None:
    for bom, enc in _BOMS:
        if raw.startswith(bom):
            return enc, len(bom)
    return None


def looks_binary(raw: bytes) -> bool:
    """True for bytes that are not text: NUL bytes or > 5% control bytes in the first 8 KiB.

    Text with a UTF-16/32 byte order mark is never binary (its NULs are part of the encoding).
    """
    if _bom(raw) is not None:
        return False
    sample = raw[:8192]
    if not sample:
        return False
    if b"\x00" in sample:
        return True
    controls = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
    return controls / len(sample) > 0.05


def decode_bytes(raw: bytes, *, declared: str | None = None) -> DecodedText:
    """Decode bytes to text; never raises. Invalid bytes become U+FFFD and are counted.

    Order: a byte order mark; ``declared`` (e.g. an HTML ``<meta charset>``) when Python knows
    it; strict UTF-8; UTF-8 with replacement when the bytes are mostly valid UTF-8 (real
    multi-byte sequences outnumber the invalid bytes: a UTF-8 file with a few corrupt bytes,
    not a legacy encoding); charset-normalizer's best guess; UTF-8 with replacement.
    """
    bom = _bom(raw)
    if bom is not None:
        enc, skip = bom
        text = raw[skip:].decode(enc, errors="replace")
        return DecodedText(text, enc, text.count("\ufffd"))
    if declared:
        try:
            codec = codecs.lookup(declared).name
        except LookupError:
            codec = None
        if codec is not None:
            text = raw.decode(codec, errors="replace")
            return DecodedText(text, codec, text.count("\ufffd"))
    try:
        return DecodedText(raw.decode("utf-8"), "utf-8", 0)
    except UnicodeDecodeError:
        pass
    lenient = raw.decode("utf-8", errors="replace")
    replaced = lenient.count("\ufffd") - raw.count(b"\xef\xbf\xbd")
    multibyte_ok = sum(1 for ch in lenient if ord(ch) > 127 and ch != "\ufffd")
    if multibyte_ok > 0 and multibyte_ok >= replaced:
        return DecodedText(lenient, "utf-8", replaced)
    from charset_normalizer import from_bytes

    best = from_bytes(raw).best()
    if best is not None and best.encoding:
        try:
            text = raw.decode(best.encoding, errors="replace")
        except LookupError:  # a codec name Python does not know: fall through
            pass
        else:
            return DecodedText(text, codecs.lookup(best.encoding).name, text.count("\ufffd"))
    return DecodedText(lenient, "utf-8", replaced)


# ---------------------------------------------------------------------------------------------
# Discovery
# ---------------------------------------------------------------------------------------------
_GLOB_CHARS = re.compile(r"[*?\[]")


def _uri(path: str | Path) -> str:
    return os.path.abspath(os.fspath(path))


def _matches(name: str, rel: str, patterns: Iterable[str]) -> bool:
    name_l, rel_l = name.lower(), rel.lower()
    return any(fnmatch.fnmatchcase(name_l, p.lower()) or fnmatch.fnmatchcase(rel_l, p.lower()) for p in patterns)


def _walk(root: Path, cfg: IngestConfig, skip: set[str]) -> list[SourceFile]:
    """Files under ``root`` matching ``cfg.include`` and not ``cfg.exclude``; hidden entries skipped.

    Directory symlinks are followed once: a directory already visited (same device + inode)
    is not entered again, so symlink cycles end.
    """
    out: list[SourceFile] = []
    seen_dirs: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        try:
            st = os.stat(dirpath)
        except OSError:
            dirnames[:] = []
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen_dirs or os.path.realpath(dirpath) in skip:
            dirnames[:] = []
            continue
        seen_dirs.add(key)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if not _matches(name, rel, cfg.include) or _matches(name, rel, cfg.exclude):
                continue
            out.append(SourceFile(Path(full), _uri(full)))
    return out


def discover_sources(
    sources: Sequence[str | Path], cfg: IngestConfig, *, skip: Sequence[str | Path] = ()
) -> list[SourceFile]:
    """Expand sources into files, in a stable order (sorted within each source).

    A source is a file (read whatever its name), a folder (walked recursively; file names must
    match ``cfg.include`` and not ``cfg.exclude``; hidden files and folders are skipped), a glob
    pattern (``docs/**/*.pdf``), or a ``file://`` URI. Folders in ``skip`` (e.g. the corpus
    itself) are not entered.

    Raises:
        IngestError: a source does not exist, a glob matches nothing, or a URI scheme is not
            supported. Nothing has been read at that point, so the caller can stop cleanly.
    """
    skip_set = {os.path.realpath(s) for s in skip}
    out: list[SourceFile] = []
    for source in sources:
        text = os.fspath(source)
        if text.startswith("file://"):
            text = text[len("file://"):]
        elif re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]+://", text):
            raise IngestError(text, "only local paths and file:// URIs can be ingested; download remote files first")
        path = Path(text).expanduser()
        if os.path.lexists(path):
            if path.is_dir():
                out.extend(_walk(path, cfg, skip_set))
            else:  # a file, or a broken/looping symlink: reading records why it fails
                out.append(SourceFile(path, _uri(path)))
            continue
        if _GLOB_CHARS.search(text):
            matches = sorted(glob.glob(os.path.expanduser(text), recursive=True))
            files = [m for m in matches if not os.path.isdir(m)]
            if not files:
                raise IngestError(text, "the pattern matched no files; check the pattern (quote it so the shell does not expand it)")
            out.extend(SourceFile(Path(m), _uri(m)) for m in files)
            continue
        raise IngestError(text, "no such file or folder; check the path")
    unique: dict[str, SourceFile] = {}
    for src in out:
        unique.setdefault(src.uri, src)
    return list(unique.values())


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------
def _load_bytes(src: SourceFile, cfg: IngestConfig) -> bytes:
    """The file's bytes, or an :class:`IngestError` saying why they cannot be had."""
    path, uri = src.path, src.uri
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise IngestError(uri, "symlink loop: the link points (through other links) back to itself") from None
        if exc.errno == errno.ENOENT and os.path.islink(path):
            raise IngestError(uri, f"broken symlink: target {os.readlink(path)!r} does not exist") from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise IngestError(uri, "permission denied: cannot access the file (check its permissions)") from None
        raise IngestError(uri, f"cannot access: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise IngestError(uri, "is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise IngestError(uri, "not a regular file (device, socket or pipe)")
    limit = int(cfg.max_file_mb * 1024 * 1024)
    if st.st_size > limit:
        raise IngestError(
            uri, f"too large: {st.st_size / 1048576:.1f} MB > ingest.max_file_mb={cfg.max_file_mb:g} (raise the limit to read it)"
        )
    if st.st_size == 0:
        raise IngestError(uri, "empty file (0 bytes)")
    try:
        with open(path, "rb") as fh:
            return fh.read(limit + 1)
    except PermissionError:
        raise IngestError(uri, "permission denied: cannot read the file (check its permissions)") from None
    except OSError as exc:
        raise IngestError(uri, f"cannot read: {exc.strerror or exc}") from None


def _good_title(candidate: object) -> str | None:
    """A metadata title worth keeping: has words, is not a file name or a tool's placeholder."""
    if not isinstance(candidate, str):
        return None
    title = " ".join(candidate.split())
    if len(re.findall(r"[^\W\d_]", title)) < 3 or len(title) > 300:
        return None
    low = title.lower()
    if low.startswith(("microsoft word", "untitled")) or re.search(r"\.(docx?|pdf|txt|html?)$", low):
        return None
    return title


def _decode_text(raw: bytes, uri: str, *, declared: str | None = None) -> tuple[str, dict[str, Any], list[str]]:
    if looks_binary(raw):
        raise IngestError(uri, "binary file: not text (NUL or control bytes); convert it to a supported format")
    dec = decode_bytes(raw, declared=declared)
    meta: dict[str, Any] = {"encoding": dec.encoding}
    warnings: list[str] = []
    if dec.replaced:
        meta["replaced_chars"] = dec.replaced
        warnings.append(f"{dec.replaced} invalid byte sequence(s) replaced with U+FFFD (decoded as {dec.encoding})")
    return dec.text, meta, warnings


def _read_plain(src: SourceFile, raw: bytes, mime: str) -> Extracted:
    text, meta, warnings = _decode_text(raw, src.uri)
    text = normalize_text(text)
    title = src.path.stem
    if mime == "text/markdown":
        heading = re.search(r"^#\s+(.+)$", text, flags=re.MULTILINE)
        if heading:
            title = heading.group(1).strip(" #") or title
    return Extracted(src.uri, text, title, mime, meta, tuple(warnings))


_HTML_DROP = ("script", "style", "noscript", "template", "svg", "head", "iframe", "object")
_HTML_BLOCKS = (
    "p", "div", "section", "article", "main", "header", "footer", "nav", "aside", "h1", "h2", "h3",
    "h4", "h5", "h6", "ul", "ol", "dl", "dt", "dd", "table", "thead", "tbody", "tr", "pre",
    "blockquote", "figure", "figcaption", "form", "fieldset", "address", "hr",
)


def _read_html(src: SourceFile, raw: bytes) -> Extracted:
    head = raw[:4096].decode("ascii", errors="ignore")
    declared = re.search(r"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", head, flags=re.IGNORECASE)
    text, meta, warnings = _decode_text(raw, src.uri, declared=declared.group(1) if declared else None)
    from bs4 import BeautifulSoup

    try:
        soup = BeautifulSoup(text, "html.parser")
    except Exception as exc:  # the parser is lenient; anything it still rejects is a bad file
        raise IngestError(src.uri, f"cannot parse HTML: {exc}") from None
    title_tag = soup.find("title")
    title = _good_title(title_tag.get_text()) if title_tag else None
    if title is None and (h1 := soup.find("h1")) is not None:
        title = _good_title(h1.get_text())
    for tag in soup(_HTML_DROP):
        tag.decompose()
    for br in soup.find_all("br"):
        br.replace_with("\n")
    for li in soup.find_all("li"):
        li.insert_before("\n- ")
        li.insert_after("\n")
    for cell in soup.find_all(["td", "th"]):
        cell.insert_after("\t")
    for tag in soup.find_all(_HTML_BLOCKS):
        tag.insert_before("\n\n")
        tag.insert_after("\n\n")
    body = normalize_text(soup.get_text())
    return Extracted(src.uri, body, title or src.path.stem, MIME_TYPES[".html"], meta, tuple(warnings))


def _read_pdf(src: SourceFile, raw: bytes) -> Extracted:
    from pypdf import PdfReader

    try:
        reader = PdfReader(io.BytesIO(raw))
        if reader.is_encrypted:
            try:
                opened = reader.decrypt("")  # many PDFs are "encrypted" with an empty user password
            except Exception as exc:  # pypdf raises several types for unsupported crypto
                raise IngestError(src.uri, f"encrypted PDF that cannot be opened: {exc}") from None
            if not opened:
                raise IngestError(src.uri, "encrypted PDF: a password is required (decrypt it, e.g. `qpdf --decrypt`, then ingest)")
        pages = [normalize_text(page.extract_text() or "") for page in reader.pages]
        info = reader.metadata
        title = _good_title(info.get("/Title")) if info else None
    except IngestError:
        raise
    except Exception as exc:  # pypdf signals broken files with many exception types
        raise IngestError(src.uri, f"corrupt or unreadable PDF ({type(exc).__name__}: {exc})") from None
    text, starts = "", []
    for page_text in pages:
        if page_text and text:
            text += "\n\n"
        starts.append(len(text))
        text += page_text
    meta: dict[str, Any] = {"n_pages": len(pages), "page_starts": starts}
    if not text.strip():
        raise IngestError(src.uri, "no extractable text (a scanned or image-only PDF? OCR is not supported)")
    return Extracted(src.uri, text, title or src.path.stem, MIME_TYPES[".pdf"], meta)


def _read_docx(src: SourceFile, raw: bytes) -> Extracted:
    try:
        from docx import Document
        from docx.table import Table
        from docx.text.paragraph import Paragraph

        doc = Document(io.BytesIO(raw))
        parts: list[str] = []
        n_tables = 0
        for block in doc.iter_inner_content():
            if isinstance(block, Paragraph):
                parts.append(block.text)
            elif isinstance(block, Table):
                n_tables += 1
                parts.append("")
                for row in block.rows:
                    cells, seen = [], set()
                    for cell in row.cells:  # merged cells repeat: keep each once
                        if id(cell._tc) in seen:
                            continue
                        seen.add(id(cell._tc))
                        cells.append(" ".join(cell.text.split()))
                    parts.append(" | ".join(cells))
                parts.append("")
        title = _good_title(doc.core_properties.title)
    except Exception as exc:  # zipfile, lxml and python-docx errors all mean a broken file
        raise IngestError(src.uri, f"not a readable DOCX file ({type(exc).__name__}: {exc})") from None
    text = normalize_text("\n".join(parts))
    return Extracted(src.uri, text, title or src.path.stem, MIME_TYPES[".docx"], {"n_tables": n_tables})


def _read_csv(src: SourceFile, raw: bytes) -> Extracted:
    """A CSV becomes one document: a line per row, ``column: value; column: value``."""
    text, meta, warnings = _decode_text(raw, src.uri)
    sample = text[:8192]
    try:
        dialect: Any = csv.Sniffer().sniff(sample, delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    try:
        rows = list(csv.reader(io.StringIO(text), dialect))
    except csv.Error as exc:
        raise IngestError(src.uri, f"malformed CSV: {exc}") from None
    rows = [r for r in rows if any(cell.strip() for cell in r)]
    if not rows:
        raise IngestError(src.uri, "CSV has no rows")
    if len(rows) == 1:
        raise IngestError(src.uri, "CSV has a header row but no data rows")
    header = [h.strip() or f"column_{i + 1}" for i, h in enumerate(rows[0])]
    lines = []
    for row in rows[1:]:
        pairs = []
        for i, value in enumerate(row):
            name = header[i] if i < len(header) else f"column_{i + 1}"
            if value.strip():
                pairs.append(f"{name}: {value.strip()}")
        lines.append("; ".join(pairs))
    body = normalize_text("\n".join(lines))
    meta.update({"columns": header, "n_rows": len(rows) - 1, "delimiter": getattr(dialect, "delimiter", ",")})
    return Extracted(src.uri, body, src.path.stem, MIME_TYPES[".csv"], meta, tuple(warnings))


def _scalar_fields(record: dict[str, Any], skip: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key == skip:
            continue
        if isinstance(value, str):
            out[key] = value if len(value) <= 200 else value[:200] + "…"
        elif isinstance(value, (int, float, bool)) or value is None:
            out[key] = value
    return out


def _read_jsonl(src: SourceFile, raw: bytes, cfg: IngestConfig) -> tuple[list[Extracted], list[IngestFailure]]:
    """One document per JSON record (uri ``FILE#L<line>``); a bad record fails alone."""
    text, meta, warnings = _decode_text(raw, src.uri)
    key = cfg.jsonl_text_field
    docs: list[Extracted] = []
    failures: list[IngestFailure] = []
    fields_seen: set[str] = set()
    n_records = 0
    missing: list[IngestFailure] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        uri = f"{src.uri}#L{lineno}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            failures.append(IngestFailure(uri, f"invalid JSON on line {lineno}: {exc.msg}"))
            continue
        if not isinstance(record, dict):
            failures.append(IngestFailure(uri, f"line {lineno} is not a JSON object"))
            continue
        n_records += 1
        fields_seen.update(record)
        value = record.get(key)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = "\n".join(value)
        if not isinstance(value, str):
            missing.append(IngestFailure(uri, f"record has no string field {key!r} (set ingest.jsonl_text_field)"))
            continue
        body = normalize_text(value)
        title = _good_title(record.get("title")) or f"{src.path.stem} L{lineno}"
        rec_meta = {**meta, "line": lineno, "fields": _scalar_fields(record, key)}
        docs.append(Extracted(uri, body, title, MIME_TYPES[".jsonl"], rec_meta, tuple(warnings)))
    if n_records and not docs and len(missing) == n_records:
        # The field name is wrong for the whole file: one error, not one per record.
        raise IngestError(
            src.uri,
            f"no record has a string field {key!r}; fields seen: {sorted(fields_seen)[:20]} (set ingest.jsonl_text_field)",
        )
    if not docs and not failures and not missing:
        raise IngestError(src.uri, "JSONL file has no records")
    return docs, failures + missing


def read_source(src: SourceFile, cfg: IngestConfig, raw: bytes | None = None) -> tuple[list[Extracted], list[IngestFailure]]:
    """Read one file into documents (several for JSONL) and per-record failures.

    Raises:
        IngestError: the whole file cannot be read (``.reason`` says why).
    """
    if raw is None:
        raw = _load_bytes(src, cfg)
    suffix = src.path.suffix.lower()
    mime = MIME_TYPES.get(suffix, "text/plain")
    docs: list[Extracted]
    failures: list[IngestFailure]
    if suffix == ".pdf":
        docs, failures = [_read_pdf(src, raw)], []
    elif suffix == ".docx":
        docs, failures = [_read_docx(src, raw)], []
    elif suffix in (".html", ".htm"):
        docs, failures = [_read_html(src, raw)], []
    elif suffix == ".csv":
        docs, failures = [_read_csv(src, raw)], []
    elif suffix in (".jsonl", ".ndjson"):
        docs, failures = _read_jsonl(src, raw, cfg)
    else:  # .txt, .md and any explicitly named file: text if it decodes as text
        docs, failures = [_read_plain(src, raw, mime)], []
    kept: list[Extracted] = []
    for doc in docs:
        if len(doc.text) - doc.text.count(" ") - doc.text.count("\n") < cfg.min_chars:
            failures.append(IngestFailure(doc.uri, "empty: no text after normalization"))
        else:
            kept.append(doc)
    if not kept and len(failures) == 1 and failures[0].uri == src.uri:
        raise IngestError(src.uri, failures[0].reason)
    return kept, failures


# ---------------------------------------------------------------------------------------------
# Merging into the documents table
# ---------------------------------------------------------------------------------------------
def error_doc_id(uri: str) -> str:
    """The doc_id of an error row: stable per uri, so a failing file keeps one row."""
    return hash_text(f"error\x00{uri}")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


_RECORD_URI = re.compile(r"(.+)#L\d+")


def _file_of(uri: str) -> str:
    """The file a uri belongs to: itself, or the file of a JSONL record uri ``FILE#L<n>``."""
    m = _RECORD_URI.fullmatch(uri)
    return m.group(1) if m else uri


@dataclass(slots=True)
class _Doc:
    row: dict[str, Any]
    meta: dict[str, Any]
    uris: dict[str, str | None]  # uri -> sha of the source bytes it was read from; first = primary
    dirty: bool = False


class _DocumentState:
    """The documents table as mutable state: ok docs by doc_id, error rows by uri."""

    def __init__(self, table: pa.Table, report: IngestReport) -> None:
        self.docs: dict[str, _Doc] = {}
        self.errors: dict[str, dict[str, Any]] = {}
        self.by_uri: dict[str, str] = {}
        self.report = report
        self.passthrough: list[dict[str, Any]] = []  # rows we do not manage (unknown status)
        self.by_file: dict[str, set[str]] = {}  # file uri -> uris it produced (ok or error)
        for row in table.to_pylist():
            try:
                meta = json.loads(row["metadata"]) if row["metadata"] else {}
            except json.JSONDecodeError:
                meta = {}
            if not isinstance(meta, dict):
                meta = {}
            if row["status"] == "error":
                self.errors[row["uri"]] = {**row, "_meta": meta}
                self._track(row["uri"])
            elif row["status"] == "ok":
                found = meta.get("source_sha")
                shas: dict[str, str | None] = found if isinstance(found, dict) else {}
                uris: dict[str, str | None] = {row["uri"]: shas.get(row["uri"])}
                for other in meta.get("duplicate_uris") or []:
                    uris[other] = shas.get(other)
                doc = _Doc(row, meta, uris)
                self.docs[row["doc_id"]] = doc
                for uri in uris:
                    self.by_uri[uri] = row["doc_id"]
                    self._track(uri)
            else:
                self.passthrough.append(row)

    # -- queries -----------------------------------------------------------------------------
    def _track(self, uri: str) -> None:
        self.by_file.setdefault(_file_of(uri), set()).add(uri)

    def _untrack(self, uri: str) -> None:
        if uri not in self.by_uri and uri not in self.errors:
            self.by_file.get(_file_of(uri), set()).discard(uri)

    def owned(self, file_uri: str) -> set[str]:
        """Every uri (document or error row) that ``file_uri`` produced before."""
        return set(self.by_file.get(file_uri, ()))

    def unchanged(self, file_uri: str, sha: str, reader: str) -> bool:
        """True when every row this file produced before came from these exact bytes and reader."""
        owned = self.owned(file_uri)
        if not owned:
            return False
        for uri in owned:
            if uri in self.errors:
                meta = self.errors[uri]["_meta"]
                if meta.get("source_sha") != sha or meta.get("reader") != reader:
                    return False
            if uri in self.by_uri:
                doc = self.docs[self.by_uri[uri]]
                if doc.uris.get(uri) != sha or doc.meta.get("reader") != reader:
                    return False
        for uri in sorted(owned):
            if uri in self.by_uri:
                self.report.unchanged.append(self.by_uri[uri])
            if uri in self.errors:
                self.report.failed.append(IngestFailure(uri, self.errors[uri]["error"] or "unknown error"))
        return True

    # -- updates -----------------------------------------------------------------------------
    def detach(self, uri: str) -> None:
        """Forget ``uri``: drop its error row; remove it from its document (dropping the
        document when no uri holds that content any more)."""
        self.errors.pop(uri, None)
        doc_id = self.by_uri.pop(uri, None)
        self._untrack(uri)
        if doc_id is None:
            return
        doc = self.docs[doc_id]
        doc.uris.pop(uri, None)
        doc.dirty = True
        if not doc.uris:
            del self.docs[doc_id]
            self.report.replaced.append(doc_id)

    def fail(self, uri: str, reason: str, *, sha: str | None, reader: str, now: datetime, mime: str | None) -> None:
        """Record (or keep) the error row of ``uri``. Documents read before are not touched."""
        self.report.failed.append(IngestFailure(uri, reason))
        old = self.errors.get(uri)
        meta = {"source_sha": sha, "reader": reader}
        if old is not None and old["error"] == reason and old["_meta"] == meta:
            return
        title = uri.rsplit("/", 1)[-1]
        self.errors[uri] = {
            "doc_id": error_doc_id(uri),
            "uri": uri,
            "title": title,
            "mime": mime,
            "n_chars": None,
            "text": None,
            "metadata": _dumps(meta),
            "ingested_at": old["ingested_at"] if old is not None and old["error"] == reason else now,
            "status": "error",
            "error": reason,
            "_meta": meta,
        }
        self._track(uri)

    def add(self, doc: Extracted, *, sha: str, reader: str, now: datetime) -> None:
        """Record that ``doc.uri`` holds ``doc.text`` now (replacing its error row, if any)."""
        self._add(doc, sha=sha, reader=reader, now=now)
        self._track(doc.uri)

    def _add(self, doc: Extracted, *, sha: str, reader: str, now: datetime) -> None:
        self.errors.pop(doc.uri, None)
        doc_id = hash_text(doc.text)
        current = self.by_uri.get(doc.uri)
        if current == doc_id:
            held = self.docs[doc_id]
            if held.uris.get(doc.uri) != sha or held.meta.get("reader") != reader:
                held.uris[doc.uri] = sha  # same text from other bytes (CRLF -> LF) or a newer reader
                held.meta["reader"] = reader
                held.dirty = True
            self.report.unchanged.append(doc_id)
            return
        if current is not None:
            self.detach(doc.uri)
        if doc_id in self.docs:
            held = self.docs[doc_id]
            held.uris[doc.uri] = sha
            held.dirty = True
            self.by_uri[doc.uri] = doc_id
            self.report.duplicates.append((doc.uri, doc_id))
            return
        meta = {**doc.metadata, "reader": reader}
        if doc.warnings:
            meta["warnings"] = list(doc.warnings)
            for w in doc.warnings:
                self.report.warnings.append(IngestFailure(doc.uri, w))
        row = {
            "doc_id": doc_id,
            "uri": doc.uri,
            "title": doc.title,
            "mime": doc.mime,
            "n_chars": len(doc.text),
            "text": doc.text,
            "metadata": None,
            "ingested_at": now,
            "status": "ok",
            "error": ("warning: " + "; ".join(doc.warnings)) if doc.warnings else None,
        }
        self.docs[doc_id] = _Doc(row, meta, {doc.uri: sha}, dirty=True)
        self.by_uri[doc.uri] = doc_id
        self.report.added.append(doc_id)

    def apply_file(self, file_uri: str, docs: list[Extracted], failures: list[IngestFailure], *, sha: str,
                   reader: str, now: datetime, mime: str) -> None:
        """Replace everything ``file_uri`` produced before by what it produced now."""
        produced = {d.uri for d in docs} | {f.uri for f in failures}
        for uri in sorted(self.owned(file_uri) - produced):
            self.detach(uri)
        for doc in docs:
            self.add(doc, sha=sha, reader=reader, now=now)
        for failure in failures:
            self.fail(failure.uri, failure.reason, sha=sha, reader=reader, now=now, mime=mime)

    # -- output ------------------------------------------------------------------------------
    def to_table(self) -> pa.Table:
        rows: list[dict[str, Any]] = []
        for doc in self.docs.values():
            row = dict(doc.row)
            if doc.dirty or row["metadata"] is None:
                primary = doc.row["uri"] if doc.row["uri"] in doc.uris else min(doc.uris)
                row["uri"] = primary
                meta = dict(doc.meta)
                meta["source_sha"] = {u: doc.uris[u] for u in sorted(doc.uris)}
                others = sorted(u for u in doc.uris if u != primary)
                if others:
                    meta["duplicate_uris"] = others
                else:
                    meta.pop("duplicate_uris", None)
                row["metadata"] = _dumps(meta)
            rows.append(row)
        for err in self.errors.values():
            rows.append({k: v for k, v in err.items() if k != "_meta"})
        rows.extend(self.passthrough)
        rows.sort(key=lambda r: (r["uri"], r["status"], r["doc_id"]))
        return pa.Table.from_pylist(rows, schema=DOCUMENTS)


def _reader_key(cfg: IngestConfig) -> str:
    """What, besides the bytes, decides a file's documents (the per-file skip key)."""
    return hash_json([READER_VERSION, cfg.jsonl_text_field, cfg.min_chars, cfg.max_file_mb])[:16]


def build_documents(
    sources: Sequence[str | Path],
    cfg: IngestConfig,
    *,
    existing: pa.Table | None = None,
    progress: Callable[[int], None] | None = None,
    now: datetime | None = None,
) -> tuple[pa.Table, IngestReport]:
    """Read ``sources`` and merge them into ``existing``; return the full new documents table.

    Existing rows are kept. A file whose bytes did not change since it was last read is not
    parsed again. A file that now fails keeps its earlier documents and gains an error row; a
    file that now reads replaces its error row; a file whose content changed replaces the
    document it held (unless another uri still holds that content). ``progress(1)`` is called
    per file. ``now`` (UTC) stamps new rows; defaults to the current time.

    Raises:
        IngestError: a source does not exist (see :func:`discover_sources`); nothing is read.
    """
    files = discover_sources(sources, cfg)
    stamp = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    report = IngestReport(files=len(files))
    state = _DocumentState(existing if existing is not None else DOCUMENTS.empty_table(), report)
    reader = _reader_key(cfg)
    for src in files:
        mime = MIME_TYPES.get(src.path.suffix.lower(), "text/plain")
        try:
            raw = _load_bytes(src, cfg)
        except IngestError as exc:
            state.fail(src.uri, exc.reason, sha=None, reader=reader, now=stamp, mime=mime)
        else:
            sha = hash_bytes(raw)
            if state.unchanged(src.uri, sha, reader):
                report.skipped_unchanged_files += 1
            else:
                try:
                    docs, failures = read_source(src, cfg, raw)
                except IngestError as exc:
                    state.fail(src.uri, exc.reason, sha=sha, reader=reader, now=stamp, mime=mime)
                else:
                    state.apply_file(src.uri, docs, failures, sha=sha, reader=reader, now=stamp, mime=mime)
        if progress is not None:
            progress(1)
    return state.to_table(), report
