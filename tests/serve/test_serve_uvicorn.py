"""A real uvicorn on 127.0.0.1 (random free port): search over HTTP, and the snapshot hot swap
under a client loop (a new build is published, then the manifest is flipped back and forth)."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pyarrow.parquet as pq
from conftest import CINDERELLA, QUESTION, build

from arborag.serve import create_app


def _node_ids(corpus, snapshot: str) -> set[str]:
    return set(pq.read_table(corpus / "snapshots" / snapshot / "nodes.parquet", columns=["node_id"]).column(0).to_pylist())


def test_real_server_answers_on_loopback(built_corpus, embedders, run_server):
    base = run_server(create_app(built_corpus, embedders=embedders, token="tok"))
    assert base.startswith("http://127.0.0.1:")
    with httpx.Client(base_url=base, timeout=60) as c:
        assert c.get("/health").json()["status"] == "ok"
        assert c.post("/search", json={"text": QUESTION}).status_code == 401
        r = c.post("/search", json={"text": QUESTION, "mode": "hybrid", "budget": 500}, headers={"Authorization": "Bearer tok"})
        assert r.status_code == 200 and r.json()["hits"] and r.json()["tokens"] <= 500
        assert c.get("/").status_code == 200 and "text/html" in c.get("/").headers["content-type"]


def test_hot_swap_under_load(corpus_copy, lighthouse_file, embedders, run_server):
    """Publish a new build, then flip between the two snapshots, while a client queries:
    zero errors, every answer from one complete snapshot, the old snapshot released."""
    app = create_app(corpus_copy, embedders=embedders)
    holder = app.state.holder
    base = run_server(app)
    first = json.loads((corpus_copy / "manifest.json").read_text())["snapshot"]
    stop = threading.Event()
    answers: list[tuple[int, str | None, list[str]]] = []
    failures: list[str] = []

    def client_loop() -> None:
        deadline = time.monotonic() + 240  # bounded in time ...
        bodies = [{"text": QUESTION, "budget": 600}, {"text": "slipper lamp rocks", "mode": "sparse", "budget": 600},
                  {"text": "lighthouse keeper storm", "mode": "hybrid", "budget": 600}]
        with httpx.Client(base_url=base, timeout=60) as c:
            for i in range(5000):  # ... and in count
                if stop.is_set() or time.monotonic() > deadline:
                    return
                try:
                    r = c.post("/search", json=bodies[i % len(bodies)])
                    body = r.json()
                    answers.append((r.status_code, body.get("snapshot"), [h["node_id"] for h in body.get("hits", [])]))
                except Exception as exc:  # noqa: BLE001 - every failure is counted
                    failures.append(repr(exc))

    loop = threading.Thread(target=client_loop, name="client-loop")
    loop.start()
    try:
        time.sleep(1.0)
        second = build([CINDERELLA, lighthouse_file], corpus_copy)  # publishes while the loop runs
        assert second != first
        deadline = time.monotonic() + 60
        while holder.current.id != second and time.monotonic() < deadline:
            time.sleep(0.1)
        from arborag.storage.corpus import Corpus

        corpus = Corpus(corpus_copy)
        for i in range(6):  # flip back and forth between the two sealed snapshots
            target = first if i % 2 == 0 else second
            info = json.loads((corpus.snapshots_dir / target / "info.json").read_text())
            corpus.publish_existing(target, info)
            time.sleep(0.6)
    finally:
        stop.set()
        loop.join(timeout=120)

    assert not failures, failures[:3]
    assert answers and all(status == 200 for status, _, _ in answers), [a for a in answers if a[0] != 200][:3]
    nodes = {s: _node_ids(corpus_copy, s) for s in (first, second)}
    seen = {snap for _, snap, _ in answers}
    assert seen == {first, second}, seen
    for _, snap, ids in answers:
        assert ids and set(ids) <= nodes[snap]  # every hit from the snapshot the answer names
    # answers naming the new snapshot include the new document's nodes (a complete new snapshot)
    assert any(set(ids) - nodes[first] for _, snap, ids in answers if snap == second)
    assert holder.swaps >= 7 and first in holder.released and second in holder.released
    assert holder.current.id == second  # the last flip
