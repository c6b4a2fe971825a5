"""Readers of text formats: plain text and Markdown, CSV (one document), JSONL (one per record)."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

from arborag.config import IngestConfig
from arborag.errors import IngestError
from arborag.tasks.ingest.decode import decode_text, good_title, normalize_text
from arborag.tasks.ingest.records import MIME_TYPES, Extracted, IngestFailure, SourceFile

__all__ = ["read_csv", "read_jsonl", "read_plain"]

def read_plain(src: SourceFile, raw: bytes, mime: str) -> Extracted:
    text, meta, warnings = decode_text(raw, src.uri)
    text = normalize_text(text)
    title = src.path.stem
    if mime == "text/markdown":
        heading = re.search(r"^#\s+(.+)$", text, flags=re.MULTILINE)
        if heading:
            title = heading.group(1).strip(" #") or title
    return Extracted(src.uri, text, title, mime, meta, tuple(warnings))


def read_csv(src: SourceFile, raw: bytes) -> Extracted:
    """A CSV becomes one document: a line per row, ``column: value; column: value``."""
    text, meta, warnings = decode_text(raw, src.uri)
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


def read_jsonl(src: SourceFile, raw: bytes, cfg: IngestConfig) -> tuple[list[Extracted], list[IngestFailure]]:
    """One document per JSON record (uri ``FILE#L<line>``); a bad record fails alone."""
    text, meta, warnings = decode_text(raw, src.uri)
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
        title = good_title(record.get("title")) or f"{src.path.stem} L{lineno}"
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
