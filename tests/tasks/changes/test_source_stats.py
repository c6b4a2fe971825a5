"""The stat record that lets an update skip reading unchanged source files (tasks/changes/source_stats.py).

Every test plans real files with the plan's own functions (``build_documents``, ``plan_documents``)
and compares the plan that skipped files with the plan of a full read.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

from arborag.config import ArboragConfig
from arborag.tasks.changes import source_stats
from arborag.tasks.ingest.readers import reader_key
from arborag.tasks.stage_context import table_fingerprint
from arborag.tasks.stages.documents import build_documents
from arborag.tasks.stages.plan import plan_documents
from arborag.storage.tables import atomic_write_parquet

CFG = ArboragConfig()
READER = reader_key(CFG.ingest)
TEXTS = {
    "a.txt": "Alpacas graze on the high plains of the Andes in small family herds.\n",
    "b.txt": "The lighthouse keeper logged every passing ship in a leather-bound book.\n",
    "c.md": "# Notes\n\nCopper turns green as it weathers, a patina called verdigris.\n",
    "d.txt": "Alpacas graze on the high plains of the Andes in small family herds.\n",  # a duplicate of a.txt
}


def _files(src: Path) -> list[str]:
    return sorted(str(p) for p in src.iterdir())


def _built(tmp_path: Path, *, racy: float = 0.0, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, pa.Table, str]:
    """Sources, a cache folder, the documents table of a first read and its content hash (the
    table written as a corpus would write it), with the record of that read."""
    monkeypatch.setattr(source_stats, "RACY_S", racy)
    src, cache = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    cache.mkdir()
    for name, text in TEXTS.items():
        (src / name).write_text(text, encoding="utf-8")
    (src / "bin.txt").write_bytes(b"\x00\x01\x02\x03" * 64)  # reads, then fails as binary: an error row
    time.sleep(0.02)  # the files' times strictly before the stats that record them
    stats: list[tuple[str, os.stat_result, int]] = []
    table, report = build_documents(_files(src), CFG.ingest, stats=stats, discovered=True)
    assert len(report.failed) == 1 and len(stats) == 5
    path = tmp_path / "documents.parquet"
    atomic_write_parquet(table, path)
    digest = table_fingerprint(path)
    source_stats.write_record(cache, source_stats.stat_rows(stats), documents_hash=digest, reader=READER)
    return src, cache, table, digest


def _plans(src: Path, cache: Path, table: pa.Table, digest: str) -> tuple[set[str], object, object]:
    """(files skipped, the plan that skipped them, the plan of a full read)."""
    skip = set(source_stats.skippable(cache, table, digest, _files(src), READER)["uri"].to_list())
    fast = plan_documents(table, _files(src), CFG, prune=True, discovered=True, skip=skip)
    full = plan_documents(table, _files(src), CFG, prune=True, discovered=True)
    return skip, fast, full


def _same(fast: object, full: object) -> None:
    # equal but for when new rows were read (each plan stamps its own "now")
    assert fast.documents.drop_columns(["ingested_at"]).equals(full.documents.drop_columns(["ingested_at"]))  # type: ignore[attr-defined]
    assert fast.diff.counts == full.diff.counts  # type: ignore[attr-defined]
    assert [f.uri for f in fast.report.failed] == [f.uri for f in full.report.failed]  # type: ignore[attr-defined]


def test_unchanged_files_are_skipped_and_the_plan_equals_a_full_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, cache, table, digest = _built(tmp_path, monkeypatch=monkeypatch)
    skip, fast, full = _plans(src, cache, table, digest)
    # every file that read ok, its duplicate included; not the one whose failure must be reported again
    assert skip == {str(src / n) for n in TEXTS}
    _same(fast, full)
    assert fast.report.files == full.report.files == 5  # type: ignore[attr-defined]
    assert fast.report.skipped_unchanged_files == full.report.skipped_unchanged_files == 5  # type: ignore[attr-defined]
    assert fast.diff.counts["unchanged"] == 4 and fast.diff.counts["failed"] == 1  # type: ignore[attr-defined]


def test_a_rewrite_with_the_same_size_and_mtime_is_still_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, cache, table, digest = _built(tmp_path, monkeypatch=monkeypatch)
    b = src / "b.txt"
    before = os.stat(b)
    text = TEXTS["b.txt"].replace("ship", "boat")  # the same number of bytes
    assert len(text) == len(TEXTS["b.txt"])
    time.sleep(0.02)
    b.write_text(text, encoding="utf-8")
    os.utime(b, ns=(before.st_atime_ns, before.st_mtime_ns))  # mtime set back, as `touch -d` / `cp -p` would
    now = os.stat(b)
    assert (now.st_size, now.st_mtime_ns) == (before.st_size, before.st_mtime_ns) and now.st_ctime_ns != before.st_ctime_ns
    skip, fast, full = _plans(src, cache, table, digest)
    assert str(b) not in skip and fast.diff.counts["changed"] == 1  # type: ignore[attr-defined]
    _same(fast, full)


def test_new_deleted_and_renamed_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, cache, table, digest = _built(tmp_path, monkeypatch=monkeypatch)
    (src / "e.txt").write_text("Salt flats shine like snow under the desert sun at noon.\n", encoding="utf-8")
    (src / "c.md").unlink()
    (src / "b.txt").rename(src / "b2.txt")
    skip, fast, full = _plans(src, cache, table, digest)
    assert skip == {str(src / "a.txt"), str(src / "d.txt")}
    _same(fast, full)
    counts = fast.diff.counts  # type: ignore[attr-defined]
    assert counts["added"] == 2 and counts["deleted"] == 2


def test_a_file_changed_within_the_racy_window_is_not_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the default window every file just written is read again: its times are within
    RACY_S of the stat that recorded it (a write in the same clock tick would not show)."""
    src, cache, table, digest = _built(tmp_path, racy=source_stats.RACY_S, monkeypatch=monkeypatch)
    assert source_stats.RACY_S == 2.0
    skip, fast, full = _plans(src, cache, table, digest)
    assert skip == set()
    _same(fast, full)


def test_a_record_of_another_table_or_reader_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, cache, table, digest = _built(tmp_path, monkeypatch=monkeypatch)
    files = _files(src)
    assert source_stats.skippable(cache, table, digest, files, READER).height == 4
    assert source_stats.skippable(cache, table, "another table", files, READER).height == 0
    assert source_stats.skippable(cache, table, digest, files, reader_key(CFG.ingest.model_copy(update={"min_chars": 3}))).height == 0
    source_stats.record_path(cache).write_bytes(b"not parquet")  # torn: read everything
    assert source_stats.skippable(cache, table, digest, files, READER).height == 0


def test_a_record_that_cannot_be_written_does_not_fail_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, cache, table, digest = _built(tmp_path, monkeypatch=monkeypatch)
    rows = source_stats.skippable(cache, table, digest, _files(src), READER)
    (tmp_path / "no").write_text("a file where the cache folder would be", encoding="utf-8")
    assert source_stats.write_record(tmp_path / "no" / "cache", rows, documents_hash=digest, reader=READER) is False
    cache.chmod(0o500)  # a read-only cache folder: the atomic write cannot create its temp file
    try:
        if not os.access(cache, os.W_OK):  # (root writes there anyway)
            assert source_stats.write_record(cache, rows, documents_hash="another table", reader=READER) is False
        # the old record still describes its own table only
        assert source_stats.skippable(cache, table, digest, _files(src), READER).height == 4
    finally:
        cache.chmod(0o700)


def test_the_update_says_how_many_files_it_read() -> None:
    from arborag.cli.common import console
    from arborag.cli.update import _print_plan

    with console.capture() as out:
        _print_plan({"added": 23, "unchanged": 2295, "files": 2318, "files_read": 23}, estimate=False)
    assert "read 23 of 2,318 source files: the other 2,295 have the size, times and inode" in " ".join(out.get().split())
    with console.capture() as out:
        _print_plan({"added": 2, "files": 2, "files_read": 2}, estimate=False)
    assert "source files" not in out.get()  # every file read: nothing to say
