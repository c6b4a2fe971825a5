"""A reader lease's renew and release on two threads (storage/leases.py): the release always wins.

``arborag serve`` renews its leases on a timer thread while a request thread may release one (the
server moved to a newer snapshot). A renew that had passed its "still held?" check when the
release deleted the record used to write it again: a lease nobody held, live until its expiry,
which kept gc off that snapshot (a flaky tests/serve run showed it).
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from arborag.serve.state import Snapshot
from arborag.storage.leases import Lease


class _Records:
    """A corpus's record store, in memory: what a lease writes through."""

    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}

    def put_record(self, rel: str, obj: dict[str, Any]) -> None:
        self.records[rel] = dict(obj)

    def delete_record(self, rel: str) -> None:
        self.records.pop(rel, None)


def test_a_release_during_a_renew_leaves_no_record() -> None:
    store = _Records()
    lease = Lease(store, "snap-x", holder="test", ttl_s=60)  # type: ignore[arg-type]
    lease.renew()  # held: its record is written
    assert len(store.records) == 1
    write = store.put_record
    releaser = threading.Thread(target=lease.release)

    def write_while_another_thread_releases(rel: str, obj: dict[str, Any]) -> None:
        releaser.start()
        releaser.join(timeout=0.5)  # the release runs to its end here unless the renew holds it back
        write(rel, obj)

    store.put_record = write_while_another_thread_releases  # type: ignore[method-assign]
    lease.renew()
    releaser.join()
    assert lease.released and store.records == {}
    with pytest.raises(RuntimeError, match="was released"):
        lease.renew()


def test_the_servers_timer_skips_a_lease_a_request_released_meanwhile() -> None:
    class Racing:
        """Looks held when checked, is released by the time it is renewed."""

        def __init__(self, released_after_check: bool) -> None:
            self.checks, self.late = 0, released_after_check

        @property
        def released(self) -> bool:
            self.checks += 1
            return self.late and self.checks > 1

        def renew(self) -> None:
            raise RuntimeError("lease on snap-x was released; acquire a new one")

    snap = Snapshot.__new__(Snapshot)  # the opened index is all renew() reads
    snap.index = SimpleNamespace(lease=Racing(released_after_check=True))
    snap.renew()  # nothing to renew, nothing raised
    snap.index = SimpleNamespace(lease=Racing(released_after_check=False))
    with pytest.raises(RuntimeError):  # a renew failing on a lease still held is an error
        snap.renew()
