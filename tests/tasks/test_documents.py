"""tasks/documents.py: discovery, readers, normalization, decoding, error rows, idempotent merges."""

from __future__ import annotations

import io
import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest

from arborag.config import IngestConfig
from arborag.errors import IngestError
from arborag.tasks import documents as D
from arborag.tasks.documents import build_documents, decode_bytes, discover_sources, looks_binary, normalize_text

CFG = IngestConfig()
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


# ---------------------------------------------------------------------------------------------
# Helpers that make real files of every format (used by the other ingest test modules too)
# ---------------------------------------------------------------------------------------------
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


def make_docx(title: str, paragraphs: list[str], table: list[list[str]] | None = None) -> bytes:
    from docx import Document

    doc = Document()
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


def _rows(table: pa.Table) -> list[dict]:
    return table.to_pylist()


def _by_uri(table: pa.Table, status: str | None = None) -> dict[str, dict]:
    return {r["uri"]: r for r in _rows(table) if status is None or r["status"] == status}


# ---------------------------------------------------------------------------------------------
# Normalization and decoding
# ---------------------------------------------------------------------------------------------
def test_normalize_keeps_line_breaks_and_collapses_whitespace() -> None:
    raw = "  Title\r\n\r\n\r\n\r\nFirst\tline\u00a0with   spaces  \rsecond\u200b line\n\n\n"
    assert normalize_text(raw) == "Title\n\nFirst line with spaces\nsecond line"


def test_normalize_is_idempotent_and_keeps_cjk_punctuation() -> None:
    raw = "灰姑娘，参加了舞会。\u3000她 跑了！\r\n\r\n\r\nCafe\u0301  ok"
    once = normalize_text(raw)
    assert normalize_text(once) == once
    assert "，" in once and "。" in once and "！" in once
    assert "Café" in once  # NFC composed


def test_decode_utf8_with_invalid_bytes_replaces_and_counts() -> None:
    raw = "naïve café ".encode() + b"\xff\xfe" + " façade".encode()
    dec = decode_bytes(raw)
    assert dec.encoding == "utf-8"
    assert dec.replaced == 2
    assert "naïve café" in dec.text and "\ufffd" in dec.text


def test_decode_legacy_encoding_and_bom() -> None:
    text = "Le cœur a ses raisons que la raison ne connaît point. Ça, c'est l'été à Noël, très français."
    dec = decode_bytes(text.encode("cp1252"))
    assert dec.text == text and dec.replaced == 0
    utf16 = decode_bytes("hello wörld".encode("utf-16"))  # the codec writes a BOM
    assert utf16.text == "hello wörld" and utf16.encoding.startswith("utf-16")


def test_looks_binary() -> None:
    assert looks_binary(bytes(range(256)) * 4)
    assert not looks_binary("plain text\n".encode())
    assert not looks_binary("\ufeffwide".encode("utf-16"))


# ---------------------------------------------------------------------------------------------
# Discovery
# ---------------------------------------------------------------------------------------------
def test_discover_walks_recursively_with_filters(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / ".hidden").mkdir()
    for rel in ("one.txt", "a/two.md", "a/b/three.PDF", "a/b/skip.log", "a/draft-x.txt", ".hidden/no.txt", ".dot.txt"):
        (tmp_path / rel).write_text("x")
    os.symlink(tmp_path / "a", tmp_path / "a" / "b" / "cycle")  # a directory cycle must end
    cfg = IngestConfig(exclude=["draft*"])
    names = [Path(s.uri).relative_to(tmp_path).as_posix() for s in discover_sources([tmp_path], cfg)]
    assert names == ["one.txt", "a/two.md", "a/b/three.PDF"]
    only_md = discover_sources([tmp_path], IngestConfig(include=["*.md"]))
    assert [Path(s.uri).name for s in only_md] == ["two.md"]
    globbed = discover_sources([str(tmp_path / "**" / "*.txt")], CFG)
    assert {Path(s.uri).name for s in globbed} >= {"one.txt", "draft-x.txt"}


def test_discover_rejects_missing_sources(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="no such file"):
        discover_sources([tmp_path / "nope"], CFG)
    with pytest.raises(IngestError, match="matched no files"):
        discover_sources([str(tmp_path / "*.zzz")], CFG)
    with pytest.raises(IngestError, match="file:// URIs"):
        discover_sources(["https://example.com/x.pdf"], CFG)
    (tmp_path / "f.txt").write_text("hi")
    assert discover_sources([f"file://{tmp_path / 'f.txt'}"], CFG)[0].uri == str(tmp_path / "f.txt")


# ---------------------------------------------------------------------------------------------
# Readers
# ---------------------------------------------------------------------------------------------
def test_every_format_is_read(tmp_path: Path) -> None:
    files = write_good_files(tmp_path)
    table, report = build_documents([tmp_path], CFG, now=NOW)
    assert report.ok and report.counts()["added"] == 8  # 6 files + 2 JSONL records
    docs = _by_uri(table, "ok")
    txt = docs[str(files["txt"])]
    assert txt["text"] == "Once upon a time\nthere was a glass slipper.\n\nThe end."
    assert txt["mime"] == "text/plain" and txt["title"] == "story"
    assert txt["doc_id"] == D.hash_text(txt["text"]) and txt["n_chars"] == len(txt["text"])
    assert txt["ingested_at"] == NOW
    assert docs[str(files["md"])]["title"] == "Field notes"
    html = docs[str(files["html"])]
    assert html["title"] == "Harbour news"
    assert "Ships arrive at dawn." in html["text"] and "Gulls follow." in html["text"]
    assert "var x" not in html["text"] and "color" not in html["text"]
    assert "- cod" in html["text"]
    pdf = docs[str(files["pdf"])]
    meta = json.loads(pdf["metadata"])
    assert "Quarterly revenue rose 12 percent." in pdf["text"] and meta["n_pages"] == 2
    assert pdf["text"][meta["page_starts"][1]:].startswith("Page two")
    memo = docs[str(files["docx"])]
    assert memo["title"] == "Budget memo"
    assert "Travel is capped." in memo["text"] and "train | 40" in memo["text"]
    prices = docs[str(files["csv"])]
    assert prices["text"] == "product: kettle; price: 25\nproduct: teapot; price: 18"
    assert json.loads(prices["metadata"])["columns"] == ["product", "price"]
    rec = docs[f"{files['jsonl']}#L1"]
    assert rec["text"] == "Alpha beta gamma." and rec["title"] == "First record"
    assert json.loads(rec["metadata"])["fields"] == {"id": 1, "title": "First record"}
    assert docs[f"{files['jsonl']}#L2"]["title"] == "records L2"


def test_broken_files_become_error_rows_and_the_run_goes_on(tmp_path: Path) -> None:
    good = write_good_files(tmp_path / "good")
    bad = write_bad_files(tmp_path / "bad")
    table, report = build_documents([tmp_path], CFG, now=NOW)
    reasons = {f.uri: f.reason for f in report.failed}
    expect = {
        "empty": "empty file",
        "blank": "empty",
        "binary": "binary file",
        "fake_pdf": "corrupt or unreadable PDF",
        "encrypted": "password is required",
        "fake_docx": "not a readable DOCX",
        "loop": "symlink loop",
    }
    for key, fragment in expect.items():
        assert fragment in reasons[str(bad[key])], (key, reasons.get(str(bad[key])))
    assert len(report.failed) == len(expect)
    errors = _by_uri(table, "error")
    assert set(errors) == {str(bad[k]) for k in expect}
    for row in errors.values():
        assert row["error"] and row["text"] is None and row["doc_id"] == D.error_doc_id(row["uri"])
    ok = _by_uri(table, "ok")
    assert len(ok) == 8 + 1  # every good document plus the invalid-UTF-8 one
    moji = ok[str(bad["invalid_utf8"])]
    assert moji["error"].startswith("warning:") and "U+FFFD" in moji["error"]
    assert json.loads(moji["metadata"])["replaced_chars"] == 3  # \xff, \xfe and a lone \xc3
    assert "Café au lait" in moji["text"] and "\ufffd" in moji["text"]
    assert [w.uri for w in report.warnings] == [str(bad["invalid_utf8"])]
    assert str(good["pdf"]) in ok


def test_too_large_unreadable_and_empty_password_pdf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = tmp_path / "big.txt"
    big.write_text("word " * 1000)
    _, report = build_documents([big], IngestConfig(max_file_mb=0.001))
    assert "too large" in report.failed[0].reason and "max_file_mb" in report.failed[0].reason

    # An empty user password is how many real PDFs are "encrypted": they must read.
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf(["Readable despite encryption."]))))
    writer.encrypt(user_password="", owner_password="owner")
    soft = tmp_path / "soft.pdf"
    with open(soft, "wb") as fh:
        writer.write(fh)
    table, report = build_documents([soft], CFG)
    assert report.ok and "Readable despite encryption." in table.column("text")[0].as_py()

    # Running as root, chmod 000 does not stop reads: simulate the permission error instead.
    secret = tmp_path / "secret.txt"
    secret.write_text("hidden")
    real_open = open

    def guarded_open(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if os.fspath(path) == str(secret):
            raise PermissionError(13, "Permission denied", str(secret))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", guarded_open)
    table, report = build_documents([secret], CFG)
    assert "permission denied" in report.failed[0].reason
    assert table.column("status").to_pylist() == ["error"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode; covered by the simulated test above")
def test_unreadable_file_by_mode(tmp_path: Path) -> None:
    f = tmp_path / "locked.txt"
    f.write_text("hidden")
    f.chmod(0)
    _, report = build_documents([f], CFG)
    assert "permission denied" in report.failed[0].reason


def test_jsonl_records_fail_alone_and_wrong_field_fails_once(tmp_path: Path) -> None:
    f = tmp_path / "mixed.jsonl"
    f.write_text('{"text": "good one"}\nnot json\n[1, 2]\n{"other": 1}\n\n{"text": "good one"}\n', encoding="utf-8")
    table, report = build_documents([f], CFG)
    ok = _by_uri(table, "ok")
    assert list(ok) == [f"{f}#L1"]
    assert json.loads(ok[f"{f}#L1"]["metadata"])["duplicate_uris"] == [f"{f}#L6"]
    assert {x.uri.rsplit("#", 1)[1] for x in report.failed} == {"L2", "L3", "L4"}
    g = tmp_path / "passages.jsonl"
    g.write_text('{"passage": "a"}\n{"passage": "b"}\n', encoding="utf-8")
    table, report = build_documents([g], CFG)
    assert len(report.failed) == 1 and "set ingest.jsonl_text_field" in report.failed[0].reason
    table, report = build_documents([g], IngestConfig(jsonl_text_field="passage"))
    assert report.counts()["added"] == 2


# ---------------------------------------------------------------------------------------------
# Merging: identity, idempotence, fixes and changes
# ---------------------------------------------------------------------------------------------
def test_identical_content_is_one_document(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("Same words.\nSame lines.\n")
    (tmp_path / "b.txt").write_bytes(b"Same   words.\r\nSame lines.")  # same after normalization
    table, report = build_documents([tmp_path], CFG)
    assert table.num_rows == 1
    row = _rows(table)[0]
    meta = json.loads(row["metadata"])
    assert row["uri"] == str(tmp_path / "a.txt")
    assert meta["duplicate_uris"] == [str(tmp_path / "b.txt")]
    assert report.counts()["added"] == 1 and report.counts()["duplicates"] == 1


def test_rerun_changes_nothing(tmp_path: Path) -> None:
    write_good_files(tmp_path / "good")
    write_bad_files(tmp_path / "bad")
    first, r1 = build_documents([tmp_path], CFG, now=NOW)
    later = datetime(2027, 1, 1, tzinfo=timezone.utc)
    second, r2 = build_documents([tmp_path], CFG, existing=first, now=later)
    assert second.equals(first)
    c = r2.counts()
    assert c["added"] == 0 and c["unchanged"] == 9 and c["failed"] == len(r1.failed)
    assert c["skipped_unchanged_files"] == c["files"] - 2  # all but the symlink loop and the empty file (no bytes)


def test_fixed_failed_and_changed_files(tmp_path: Path) -> None:
    f = tmp_path / "doc.txt"
    f.write_bytes(b"")
    t1, r1 = build_documents([f], CFG, now=NOW)
    assert _rows(t1)[0]["status"] == "error"
    t1b, _ = build_documents([f], CFG, existing=t1)  # still failing: still one error row, same time
    assert t1b.equals(t1)

    f.write_text("Version one.")  # fixed: the document replaces its error row
    t2, r2 = build_documents([f], CFG, existing=t1)
    assert [r["status"] for r in _rows(t2)] == ["ok"] and r2.counts()["added"] == 1

    f.write_bytes(bytes(range(256)) * 8)  # broken again: the document stays, an error row joins it
    t3, r3 = build_documents([f], CFG, existing=t2)
    assert sorted(r["status"] for r in _rows(t3)) == ["error", "ok"]
    assert _by_uri(t3, "ok")[str(f)]["text"] == "Version one."

    f.write_text("Version two.")  # changed content: replaces the old document and the error row
    t4, r4 = build_documents([f], CFG, existing=t3)
    rows = _rows(t4)
    assert [(r["status"], r["text"]) for r in rows] == [("ok", "Version two.")]
    assert r4.counts()["replaced"] == 1 and r4.counts()["added"] == 1


def test_changed_file_keeps_document_still_held_elsewhere(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("Shared text.")
    b.write_text("Shared text.")
    t1, _ = build_documents([tmp_path], CFG)
    a.write_text("New text for a.")
    t2, r2 = build_documents([tmp_path], CFG, existing=t1)
    docs = {r["text"]: r for r in _rows(t2)}
    assert docs["Shared text."]["uri"] == str(b) and "duplicate_uris" not in json.loads(docs["Shared text."]["metadata"])
    assert docs["New text for a."]["uri"] == str(a)
    assert r2.counts()["replaced"] == 0


def test_jsonl_edits_replace_stale_records(tmp_path: Path) -> None:
    f = tmp_path / "r.jsonl"
    f.write_text('{"text": "one"}\n{"text": "two"}\n{"text": "three"}\nbroken\n')
    t1, r1 = build_documents([f], CFG)
    assert r1.counts()["added"] == 3 and r1.counts()["failed"] == 1
    f.write_text('{"text": "one"}\n{"text": "TWO"}\n')  # record 2 changed, 3 and the bad line gone
    t2, r2 = build_documents([f], CFG, existing=t1)
    assert sorted((r["uri"].rsplit("#", 1)[1], r["text"]) for r in _rows(t2)) == [("L1", "one"), ("L2", "TWO")]
    assert r2.counts()["replaced"] == 2 and r2.counts()["unchanged"] == 1


def test_existing_rows_from_other_runs_are_kept(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    (tmp_path / "one" / "x.txt").write_text("First corpus file.")
    (tmp_path / "two" / "y.txt").write_text("Second corpus file.")
    t1, _ = build_documents([tmp_path / "one"], CFG)
    t2, _ = build_documents([tmp_path / "two"], CFG, existing=t1)
    assert sorted(r["text"] for r in _rows(t2)) == ["First corpus file.", "Second corpus file."]


def test_progress_is_called_per_file(tmp_path: Path) -> None:
    write_good_files(tmp_path)
    ticks: list[int] = []
    build_documents([tmp_path], CFG, progress=ticks.append)
    assert ticks == [1] * 7
