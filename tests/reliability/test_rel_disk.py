"""Disk full and read-only corpus: a real tmpfs (mounting needs root; skipped otherwise).

A corpus is built on a small tmpfs; then the tmpfs is filled up and a build that has new work
runs: it must fail with a clear error (no traceback) and leave the previous tables, manifest
and snapshot as they were. Then the tmpfs is remounted read-only: a build fails clearly, and
queries still work (readers write nothing).
"""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from helpers.reliability import HOTPOT_CORPUS, cli, cli_env, iter_files, write_hotpot_docs

pytestmark = [pytest.mark.reliability, pytest.mark.slow, pytest.mark.shared_data]


def _mount(point: Path, *opts: str) -> bool:
    return subprocess.run(["mount", *opts, str(point)], capture_output=True).returncode == 0


@pytest.fixture
def tmpfs(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    point = tmp_path / "mnt"
    point.mkdir()
    if not _mount(point, "-t", "tmpfs", "-o", "size=48m", "tmpfs"):
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield point
    finally:
        if subprocess.run(["umount", str(point)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(point)], capture_output=True)


def _digest(root: Path) -> dict[str, str]:
    """Content hashes of every file that readers depend on: tables, manifest, snapshots."""
    out = {}
    for path in iter_files(root / "tables", root / "snapshots", root / "manifest.json"):
        out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _fill(point: Path) -> None:
    """Fill the file system to the last byte (a few files, so nothing else fits)."""
    n = 0
    for size in (1 << 20, 1 << 12, 1):
        while True:
            try:
                with open(point / f"filler-{n}", "wb") as fh:
                    fh.write(b"\0" * size)
                    fh.flush()
                    os.fsync(fh.fileno())
                n += 1
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                (point / f"filler-{n}").unlink(missing_ok=True)
                break


def test_disk_full_then_read_only(tmpfs, tmp_path) -> None:
    if not HOTPOT_CORPUS.is_file():
        pytest.skip(f"needs {HOTPOT_CORPUS}")
    src = tmp_path / "src"
    write_hotpot_docs(src, 12, start=700)
    corpus = tmpfs / "corpus"
    first = cli("build", str(src), "--corpus", str(corpus), "--no-prefect", env=cli_env())
    assert first.returncode == 0, first.output[-3000:]
    before = _digest(corpus)
    assert "manifest.json" in before

    write_hotpot_docs(src, 12, start=712)  # new work for the next build
    _fill(tmpfs)
    full = cli("build", str(src), "--corpus", str(corpus), "--no-prefect", env=cli_env())
    print(f"\nRELIABILITY disk full: rc={full.returncode} stderr={full.stderr.strip()[-300:]!r}")
    assert full.returncode == 1, full.output[-3000:]
    assert "Traceback" not in full.output, full.output[-3000:]
    assert "space" in full.stderr.lower(), full.stderr[-2000:]
    assert _digest(corpus) == before, "a failed write changed the previous tables or snapshot"

    for filler in tmpfs.glob("filler-*"):
        filler.unlink()
    assert subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], capture_output=True).returncode == 0
    ro = cli("build", str(src), "--corpus", str(corpus), "--no-prefect", env=cli_env())
    print(f"RELIABILITY read-only: rc={ro.returncode} stderr={ro.stderr.strip()[-300:]!r}")
    assert ro.returncode == 1, ro.output[-3000:]
    assert "Traceback" not in ro.output, ro.output[-3000:]
    assert "read-only" in ro.stderr.lower(), ro.stderr[-2000:]
    assert _digest(corpus) == before
    q = cli("query", "dice", "--corpus", str(corpus), "--mode", "hybrid", env=cli_env())  # dense + sparse
    assert q.returncode == 0 and "Traceback" not in q.output, q.output[-3000:]
