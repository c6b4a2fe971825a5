"""Reading one source file: its bytes (with a reason when they cannot be had) and the reader per format."""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import replace

from arborag.config import IngestConfig
from arborag.errors import IngestError
from arborag.hashing import hash_json
from arborag.tasks.ingest.formats_doc import read_docx, read_html, read_pdf
from arborag.tasks.ingest.formats_text import read_csv, read_jsonl, read_plain
from arborag.tasks.ingest.records import MIME_TYPES, READER_VERSION, Extracted, IngestFailure, SourceFile

__all__ = ["load_bytes", "load_bytes_stat", "read_source", "reader_key"]

# Formats whose characters are (almost) all text: their byte size bounds their length.
_PLAIN_TEXT = {".txt", ".text", ".md", ".markdown"}
_OVERSIZE_HINT = " (raise the limit, or set ingest.oversize=truncate to keep the first part)"

def load_bytes(src: SourceFile, cfg: IngestConfig) -> bytes:
    """The file's bytes, or an :class:`IngestError` saying why they cannot be had."""
    return load_bytes_stat(src, cfg)[0]


def load_bytes_stat(src: SourceFile, cfg: IngestConfig) -> tuple[bytes, os.stat_result]:
    """:func:`load_bytes` and the file's ``os.stat`` taken just before its bytes were read."""
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
    if cfg.oversize == "error" and path.suffix.lower() in _PLAIN_TEXT and st.st_size > 4 * cfg.max_chars:
        # no text encoding packs a character in more than 4 bytes: refused before reading a byte
        raise IngestError(uri, f"too large: {st.st_size / 1048576:.1f} MB of text is over ingest.max_chars={cfg.max_chars:,} characters" + _OVERSIZE_HINT)
    try:
        with open(path, "rb") as fh:
            return fh.read(limit + 1), st
    except PermissionError:
        raise IngestError(uri, "permission denied: cannot read the file (check its permissions)") from None
    except OSError as exc:
        raise IngestError(uri, f"cannot read: {exc.strerror or exc}") from None


def read_source(src: SourceFile, cfg: IngestConfig, raw: bytes | None = None) -> tuple[list[Extracted], list[IngestFailure]]:
    """Read one file into documents (several for JSONL) and per-record failures.

    Raises:
        IngestError: the whole file cannot be read (``.reason`` says why).
    """
    if raw is None:
        raw = load_bytes(src, cfg)
    suffix = src.path.suffix.lower()
    mime = MIME_TYPES.get(suffix, "text/plain")
    docs: list[Extracted]
    failures: list[IngestFailure]
    if suffix == ".pdf":
        docs, failures = [read_pdf(src, raw)], []
    elif suffix == ".docx":
        docs, failures = [read_docx(src, raw)], []
    elif suffix in (".html", ".htm"):
        docs, failures = [read_html(src, raw)], []
    elif suffix == ".csv":
        docs, failures = [read_csv(src, raw)], []
    elif suffix in (".jsonl", ".ndjson"):
        docs, failures = read_jsonl(src, raw, cfg)
    else:  # .txt, .md and any explicitly named file: text if it decodes as text
        docs, failures = [read_plain(src, raw, mime)], []
    kept: list[Extracted] = []
    for doc in docs:
        if len(doc.text) - doc.text.count(" ") - doc.text.count("\n") < cfg.min_chars:
            failures.append(IngestFailure(doc.uri, "empty: no text after normalization"))
        else:
            try:
                kept.append(_within_limits(doc, cfg))
            except IngestError as exc:
                failures.append(IngestFailure(doc.uri, exc.reason))
    if not kept and len(failures) == 1 and failures[0].uri == src.uri:
        raise IngestError(src.uri, failures[0].reason)
    return kept, failures


def _within_limits(doc: Extracted, cfg: IngestConfig) -> Extracted:
    """``doc`` if it is within ``ingest.max_chars`` and ``max_tokens``; else an IngestError
    (``oversize = "error"``) or its first part with a warning (``oversize = "truncate"``)."""
    text, cut = doc.text, ""
    if len(text) > cfg.max_chars:
        if cfg.oversize == "error":
            raise IngestError(doc.uri, f"too long: {len(text):,} characters > ingest.max_chars={cfg.max_chars:,}" + _OVERSIZE_HINT)
        text, cut = text[: cfg.max_chars].rstrip(), f"truncated to ingest.max_chars={cfg.max_chars:,} characters (of {len(doc.text):,})"
    if len(text) > cfg.max_tokens:  # a token covers at least one character: a shorter text cannot be over
        from arborag.tokenizer import get_tokenizer

        tokenizer = get_tokenizer()
        n_tokens = tokenizer.count(text)
        if n_tokens > cfg.max_tokens:
            if cfg.oversize == "error":
                raise IngestError(doc.uri, f"too long: {n_tokens:,} tokens > ingest.max_tokens={cfg.max_tokens:,}" + _OVERSIZE_HINT)
            text = tokenizer.truncate(text, cfg.max_tokens).rstrip()
            cut = f"truncated to ingest.max_tokens={cfg.max_tokens:,} tokens (of {n_tokens:,})"
    return replace(doc, text=text, warnings=(*doc.warnings, cut)) if cut else doc


def reader_key(cfg: IngestConfig) -> str:
    """What, besides the bytes, decides a file's documents (the per-file skip key)."""
    return hash_json([READER_VERSION, cfg.jsonl_text_field, cfg.min_chars, cfg.max_file_mb, cfg.max_chars, cfg.max_tokens, cfg.oversize])[:16]
