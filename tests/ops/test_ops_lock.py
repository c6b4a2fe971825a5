"""The corpus writer lock (arborag.storage.lock): owner record, waiting, --no-wait, stale locks.

The other writer is always a real separate process (a lock is re-entrant within a process).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from arborag.errors import CorpusLockedError
from arborag.storage.lock import LOCK_NAME, LockOwner, corpus_lock, lock_path, read_lock, stale_reason
from helpers.ops import hold_lock, stop
from helpers.reliability import PYTHON, REPO, cli, cli_env, wait_for


def _write_record(corpus: Path, **fields) -> Path:
    corpus.mkdir(parents=True, exist_ok=True)
    rec = {"pid": 1, "host": socket.gethostname(), "started": "2026-01-01T00:00:00+00:00", "purpose": "build", "token": "x"} | fields
    path = corpus / LOCK_NAME
    path.write_text(json.dumps(rec))
    return path


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_ops_lock_record_while_held_and_gone_after(tmp_path: Path) -> None:
    corpus = tmp_path / "c"
    with corpus_lock(corpus, purpose="update") as me:
        owner = read_lock(corpus)
        assert owner is not None and owner.pid == os.getpid() and owner.host == socket.gethostname()
        assert owner.purpose == "update" and owner.token == me.token and owner.started
        assert stale_reason(owner, lock_path(corpus)) is None
        with corpus_lock(corpus, purpose="build"):  # re-entrant in one process: no self-deadlock
            assert read_lock(corpus).token == me.token
        assert read_lock(corpus).token == me.token  # the inner exit did not release
    assert read_lock(corpus) is None and not lock_path(corpus).exists()


def test_ops_lock_no_wait_fails_fast_naming_the_owner(tmp_path: Path) -> None:
    corpus = tmp_path / "c"
    with hold_lock(corpus, purpose="build") as (holder, _):
        t0 = time.monotonic()
        with pytest.raises(CorpusLockedError) as info:
            with corpus_lock(corpus, wait=False, purpose="update"):
                pytest.fail("took a lock another process holds")
        assert time.monotonic() - t0 < 2
        msg = str(info.value)
        assert f"pid {holder.pid} on {socket.gethostname()}" in msg and "(build)" in msg and "--no-wait" in msg
        assert info.value.lock_file == str(lock_path(corpus))
        assert read_lock(corpus).pid == holder.pid  # the failed attempt left the holder's lock alone


def test_ops_lock_waits_with_a_message_then_takes_it(tmp_path: Path) -> None:
    corpus = tmp_path / "c"
    seen: list[LockOwner] = []
    with hold_lock(corpus, purpose="build") as (holder, release):
        threading.Timer(1.5, release.touch).start()
        t0 = time.monotonic()
        with corpus_lock(corpus, purpose="update", on_wait=seen.append, poll=0.1) as me:
            waited = time.monotonic() - t0
            assert read_lock(corpus).token == me.token
    assert waited >= 1.0, "the second writer did not wait for the first"
    assert len(seen) == 1 and seen[0].pid == holder.pid and seen[0].purpose == "build"
    assert f"pid {holder.pid} on {socket.gethostname()} since " in seen[0].describe()


def test_ops_lock_timeout_raises_after_waiting(tmp_path: Path) -> None:
    corpus = tmp_path / "c"
    with hold_lock(corpus):
        t0 = time.monotonic()
        with pytest.raises(CorpusLockedError, match="still locked after waiting"):
            with corpus_lock(corpus, timeout=0.8, on_wait=lambda o: None, poll=0.1):
                pass
        assert 0.7 < time.monotonic() - t0 < 5


def test_ops_lock_default_wait_message_on_stderr(tmp_path: Path) -> None:
    corpus = tmp_path / "c"
    code = "import sys; from arborag.storage.lock import corpus_lock\nwith corpus_lock(sys.argv[1], timeout=0.5):\n    pass"
    with hold_lock(corpus, purpose="build") as (holder, _):
        done = subprocess.run([PYTHON, "-c", code, str(corpus)], capture_output=True, text=True, env=cli_env(), timeout=120)
    assert done.returncode != 0
    assert f"waiting for the lock held by pid {holder.pid} on {socket.gethostname()} since" in done.stderr
    assert "(build)" in done.stderr and "CorpusLockedError" in done.stderr


def test_ops_lock_stale_dead_pid_same_host_is_taken_over(tmp_path: Path, caplog) -> None:
    corpus = tmp_path / "c"
    path = _write_record(corpus, pid=_dead_pid())
    assert "no longer running" in stale_reason(read_lock(corpus), path)
    with corpus_lock(corpus, wait=False) as me:
        assert read_lock(corpus).token == me.token
    assert "removed a stale corpus lock" in caplog.text


def test_ops_lock_stale_reused_pid_and_reboot(tmp_path: Path) -> None:
    corpus = tmp_path / "c"
    # a live pid that now belongs to another process (start time differs)
    path = _write_record(corpus, pid=os.getppid(), proc_start=1)
    assert "now another process" in stale_reason(read_lock(corpus), path)
    # taken before the machine rebooted
    path = _write_record(corpus, pid=os.getppid(), boot_id="not-this-boot")
    assert "rebooted" in stale_reason(read_lock(corpus), path)
    # a live pid with no start time recorded is alive
    path = _write_record(corpus, pid=os.getppid())
    assert stale_reason(read_lock(corpus), path) is None


def test_ops_lock_other_host_uses_max_age(tmp_path: Path) -> None:
    corpus = tmp_path / "c"
    path = _write_record(corpus, host="another-host.example", pid=os.getpid())
    assert stale_reason(read_lock(corpus), path, max_age=60) is None
    with pytest.raises(CorpusLockedError, match="another-host.example"):
        with corpus_lock(corpus, wait=False, max_age=60):
            pass
    old = time.time() - 120
    os.utime(path, (old, old))
    assert "has not refreshed it" in stale_reason(read_lock(corpus), path, max_age=60)
    with corpus_lock(corpus, wait=False, max_age=60) as me:
        assert read_lock(corpus).token == me.token


def test_ops_lock_kill9_holder_leaves_a_stale_lock_the_next_writer_takes(tmp_path: Path) -> None:
    corpus = tmp_path / "c"
    with hold_lock(corpus, purpose="build") as (holder, _):
        holder.kill()  # SIGKILL: no cleanup; not reaped yet (a zombie) while we look
        assert wait_for(lambda: _zombie(holder.pid), timeout=10)
        assert lock_path(corpus).exists()
        with corpus_lock(corpus, wait=False, purpose="build") as me:
            assert read_lock(corpus).token == me.token


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2:].split()[0] == "Z"


def test_ops_lock_heartbeat_and_release_only_our_own(tmp_path: Path) -> None:
    corpus = tmp_path / "c"
    with corpus_lock(corpus, heartbeat=0.1) as me:
        path = lock_path(corpus)
        old = time.time() - 1000
        os.utime(path, (old, old))
        assert wait_for(lambda: time.time() - path.stat().st_mtime < 100, timeout=5), "no heartbeat"
        # someone removed ours as stale and took it: our exit must not delete theirs
        _write_record(corpus, pid=os.getppid(), token="theirs")
    assert read_lock(corpus).token == "theirs"


def test_ops_lock_unreadable_record_is_stale_once_old(tmp_path: Path) -> None:
    corpus = tmp_path / "c"
    corpus.mkdir()
    path = corpus / LOCK_NAME
    path.write_text("{not json")
    owner = read_lock(corpus)
    assert owner.pid == -1 and stale_reason(owner, path) is None  # maybe being written right now
    old = time.time() - 60
    os.utime(path, (old, old))
    with corpus_lock(corpus, wait=False) as me:
        assert read_lock(corpus).token == me.token


@pytest.mark.parametrize("record", ["[1, 2]", '"build"', "7", '{"host": "h"}', '{"pid": null}'])
def test_ops_lock_record_of_another_shape_reads_as_unreadable(tmp_path: Path, record: str) -> None:
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / LOCK_NAME).write_text(record)
    owner = read_lock(corpus)
    assert owner is not None and owner.pid == -1 and owner.purpose == "unreadable lock record"


def test_ops_lock_cli_build_and_ingest_no_wait(tmp_path: Path) -> None:
    corpus = tmp_path / "c"
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("A short document about rivers and boats.\n")
    with hold_lock(corpus, purpose="update") as (holder, _):
        for args in (["build", str(src), "--corpus", str(corpus), "--no-prefect", "--no-wait"],
                     ["ingest", str(src), "--corpus", str(corpus), "--no-prefect", "--no-wait"]):
            proc = cli(*args, timeout=300)
            assert proc.returncode == 1, proc.output
            assert f"pid {holder.pid}" in proc.stderr and "(update)" in proc.stderr, proc.output
    assert not (corpus / "tables" / "documents.parquet").exists(), "a refused writer wrote the corpus"
