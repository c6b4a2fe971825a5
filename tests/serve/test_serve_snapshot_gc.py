"""The reader guarantee: a real `arborag serve` process answers from a snapshot; a newer
one is published and gc runs with a policy that would remove the served one — the server keeps
answering from it with no error until it moves to the new one, and the old one goes at the first
gc after that. Then the race itself: publishes and gc right after each while a client loop runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import CINDERELLA, QUESTION, free_port

from arborag.config import ArboragConfig, RetentionConfig
from arborag.storage.corpus import Corpus
from arborag.storage.leases import live_leases
from arborag.storage.snapshots import collect_garbage

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
#: keep only the published snapshot, no grace window: everything else goes unless a reader holds it
ONLY_PUBLISHED = RetentionConfig(keep_last=1, keep_days=None, grace_s=0, auto=False)
NO_AUTO_GC = ArboragConfig(retention=RetentionConfig(auto=False))  # the tests run gc themselves


def _published(corpus: Path) -> str:
    return json.loads((corpus / "manifest.json").read_text())["snapshot"]


def _update(sources: list[Path], corpus: Path) -> str:
    from arborag.flows.update import run_update

    out = run_update([str(s) for s in sources], corpus, NO_AUTO_GC, use_prefect=False, progress=False)
    return str(out["snapshot"])


@contextlib.contextmanager
def serving(corpus: Path, log_path: Path, *extra: str):
    """`arborag serve` on 127.0.0.1 in its own process (started here, stopped by its pid)."""
    port = free_port()
    log = open(log_path, "w")
    script = Path(sys.executable).parent / "arborag"
    proc = subprocess.Popen([str(script), "serve", "--corpus", str(corpus), "--port", str(port), "--embed-threads", "1",
                             "--log-level", "warning", "--snapshot-idle", "1", *extra], cwd=str(REPO), stdout=log,
                            stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            try:
                if httpx.get(base + "/health", timeout=5).json().get("status") == "ok":
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "arborag serve did not start"
            time.sleep(0.3)
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.fixture()
def server(corpus_copy: Path, tmp_path: Path):
    with serving(corpus_copy, tmp_path / "serve.log") as running:
        yield running


def test_gc_never_pulls_the_served_snapshot_away(corpus_copy: Path, lighthouse_file: Path, server) -> None:
    base, _ = server
    corpus = Corpus(corpus_copy)
    a = _published(corpus_copy)
    with httpx.Client(base_url=base, timeout=120) as c:
        assert c.post("/search", json={"text": QUESTION, "budget": 300}).json()["snapshot"] == a
        assert [r["holder"] for r in live_leases(corpus)[a]] == ["serve"]
        b = _update([CINDERELLA, lighthouse_file], corpus_copy)  # publish a newer snapshot
        assert b != a and _published(corpus_copy) == b
        report = collect_garbage(corpus, ONLY_PUBLISHED)  # the policy would remove a ...
        assert a not in [r["id"] for r in report.removed] and "lease" in " ".join(report.kept[a]), report.to_dict()
        assert (corpus_copy / "snapshots" / a / "info.json").is_file()  # ... but the server holds it
        for mode in ("auto", "collapsed", "traversal", "sparse"):  # and it still answers from it, files intact
            r = c.post("/search", json={"text": QUESTION, "mode": mode, "budget": 300, "snapshot": a})
            assert r.status_code == 200 and r.json()["snapshot"] == a and r.json()["hits"], (mode, r.text)
        # the next request without a snapshot moves the server to the new one
        moved = c.post("/search", json={"text": "lighthouse keeper storm", "budget": 300})
        assert moved.status_code == 200 and moved.json()["snapshot"] == b
        deadline = time.monotonic() + 30  # let go once no request used it for --snapshot-idle (1 s)
        while a in live_leases(corpus) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert a not in live_leases(corpus)
        report = collect_garbage(corpus, ONLY_PUBLISHED)  # now it may go
        assert [r["id"] for r in report.removed] == [a]
        gone = c.post("/search", json={"text": QUESTION, "snapshot": a})
        assert gone.status_code == 404 and b in gone.json()["detail"]
        assert c.post("/search", json={"text": QUESTION, "budget": 300}).json()["snapshot"] == b


def test_publish_and_gc_under_a_client_loop(corpus_copy: Path, lighthouse_file: Path, tmp_path: Path, server) -> None:
    """Three publishes, each followed at once by gc keeping only the published snapshot, while
    a client loop searches: every request answers, from one of the published snapshots."""
    base, _ = server
    corpus = Corpus(corpus_copy)
    published = [_published(corpus_copy)]
    answers: list[tuple[int, str | None]] = []
    failures: list[str] = []
    stop = threading.Event()

    def client_loop() -> None:
        bodies = [{"text": QUESTION, "budget": 400}, {"text": "lighthouse storm lamp", "mode": "traversal", "budget": 400},
                  {"text": "slipper midnight", "mode": "collapsed", "budget": 400}]
        deadline = time.monotonic() + 600  # bounded in time and count
        with httpx.Client(base_url=base, timeout=120) as c:
            for i in range(20000):
                if stop.is_set() or time.monotonic() > deadline:
                    return
                try:
                    r = c.post("/search", json=bodies[i % len(bodies)])
                    answers.append((r.status_code, r.json().get("snapshot")))
                except Exception as exc:  # noqa: BLE001 - every failure counts
                    failures.append(repr(exc))
                time.sleep(0.05)

    extra = tmp_path / "extra.txt"
    loop = threading.Thread(target=client_loop, name="client-loop")
    loop.start()
    removed: list[str] = []
    try:
        for i, sources in enumerate(([CINDERELLA, lighthouse_file], [CINDERELLA], [CINDERELLA, extra])):
            if i == 2:
                extra.write_text("The ferry crossed the grey fjord at dawn, carrying mail and two goats.\n", encoding="utf-8")
            published.append(_update(sources, corpus_copy))
            removed += [r["id"] for r in collect_garbage(corpus, ONLY_PUBLISHED).removed]
            time.sleep(1.0)
    finally:
        stop.set()
        loop.join(timeout=180)
    assert not failures, failures[:3]
    assert answers and all(code == 200 for code, _ in answers), [a for a in answers if a[0] != 200][:5]
    assert {s for _, s in answers} <= set(published) and {s for _, s in answers} >= {published[0], published[-1]}
    assert removed, "gc removed nothing: the test did not exercise removal"
    assert len(set(published)) == 4


def test_a_server_pinned_to_a_snapshot_keeps_it_through_publishes_and_gc(corpus_copy: Path, lighthouse_file: Path,
                                                                          tmp_path: Path) -> None:
    """`arborag serve --snapshot ID` answers from ID only; newer publishes and gc do not touch it."""
    corpus = Corpus(corpus_copy)
    a = _published(corpus_copy)
    b = _update([CINDERELLA, lighthouse_file], corpus_copy)
    with serving(corpus_copy, tmp_path / "serve.log", "--snapshot", a[:10]) as (base, proc):
        _pinned_checks(corpus, corpus_copy, base, proc, a, b)


def _pinned_checks(corpus: Corpus, corpus_copy: Path, base: str, proc: subprocess.Popen, a: str, b: str) -> None:
    report = collect_garbage(corpus, ONLY_PUBLISHED)
    assert a not in [r["id"] for r in report.removed] and (corpus_copy / "snapshots" / a / "info.json").is_file()
    with httpx.Client(base_url=base, timeout=120) as c:
        assert c.get("/health").json()["snapshot"] == a
        for mode in ("auto", "traversal", "sparse"):
            r = c.post("/search", json={"text": QUESTION, "mode": mode, "budget": 300})
            assert r.status_code == 200 and r.json()["snapshot"] == a, r.text
        assert c.post("/search", json={"text": "lighthouse keeper", "budget": 300, "snapshot": b}).json()["snapshot"] == b
    proc.send_signal(signal.SIGINT)  # the server stops: its leases go with it ...
    proc.wait(timeout=60)
    assert a not in live_leases(corpus)
    assert [r["id"] for r in collect_garbage(corpus, ONLY_PUBLISHED).removed] == [a]  # ... and so may the snapshot


def test_serve_pinned_to_an_unknown_snapshot_says_what_exists(corpus_copy: Path) -> None:
    script = Path(sys.executable).parent / "arborag"
    out = subprocess.run([str(script), "serve", "--corpus", str(corpus_copy), "--port", str(free_port()), "--no-warm",
                          "--snapshot", "snap-nope"], cwd=str(REPO), capture_output=True, text=True, timeout=300,
                         env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"})
    assert out.returncode != 0 and "snap-nope" in out.stderr and _published(corpus_copy) in out.stderr
