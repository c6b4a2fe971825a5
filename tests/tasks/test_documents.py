"""tasks/stages/documents.py: the readers of every format, error rows and idempotent merges."""

from __future__ import annotations

import io
import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from helpers.ingest import make_pdf, write_bad_files, write_good_files

from arborag.config import IngestConfig
from arborag.tasks.stages import documents as D
from arborag.tasks.stages.documents import build_documents

CFG = IngestConfig()
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def _rows(table: pa.Table) -> list[dict]:
    return table.to_pylist()


def _by_uri(table: pa.Table, status: str | None = None) -> dict[str, dict]:
    return {r["uri"]: r for r in _rows(table) if status is None or r["status"] == status}


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
    assert "Travel is capped." in memo["text"] and "item: train; cost: 40" in memo["text"]
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
