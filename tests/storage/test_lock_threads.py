"""The corpus writer lock is held by one thread: a second thread of the same process is a second writer."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from arborag.errors import CorpusLockedError
from arborag.storage.lock import corpus_lock, read_lock


def test_second_thread_fails_at_once_without_wait(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    entered: list[bool] = []

    def second() -> None:
        try:
            with corpus_lock(tmp_path, wait=False, purpose="second"):
                entered.append(True)
        except CorpusLockedError as exc:
            errors.append(exc)

    with corpus_lock(tmp_path, purpose="first"):
        t = threading.Thread(target=second)
        t.start()
        t.join(30)
    assert not entered
    assert len(errors) == 1 and "first" in str(errors[0])


def test_second_thread_waits_until_the_first_releases(tmp_path: Path) -> None:
    events: list[str] = []
    waiting = threading.Event()

    def second() -> None:
        with corpus_lock(tmp_path, purpose="second", poll=0.02, on_wait=lambda owner: waiting.set()):
            events.append("second in")
            owner = read_lock(tmp_path)
            events.append(f"owner {owner.purpose if owner else None}")

    with corpus_lock(tmp_path, purpose="first"):
        t = threading.Thread(target=second)
        t.start()
        assert waiting.wait(30), "the second thread did not wait for the lock"
        time.sleep(0.2)
        events.append("first out")
    t.join(30)
    assert events == ["first out", "second in", "owner second"]
    assert read_lock(tmp_path) is None


def test_second_thread_times_out(tmp_path: Path) -> None:
    got: list[BaseException] = []

    def second() -> None:
        with pytest.raises(CorpusLockedError) as info:
            with corpus_lock(tmp_path, timeout=0.3, poll=0.05, on_wait=lambda owner: None):
                pass
        got.append(info.value)

    with corpus_lock(tmp_path, purpose="first"):
        t = threading.Thread(target=second)
        t.start()
        t.join(30)
    assert len(got) == 1


def test_same_thread_is_still_reentrant(tmp_path: Path) -> None:
    with corpus_lock(tmp_path, wait=False, purpose="outer") as outer:
        with corpus_lock(tmp_path, wait=False, purpose="inner") as inner:
            assert inner.token == outer.token
        owner = read_lock(tmp_path)
        assert owner is not None and owner.token == outer.token  # the inner exit keeps the outer's lock
    assert read_lock(tmp_path) is None
