"""POST /search and GET /nodes on a retained earlier snapshot, GET /snapshots, the 404 for one
that is not retained, and the reader leases the server holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pyarrow.parquet as pq
from conftest import CINDERELLA, QUESTION, build
from test_serve_page import browser_page  # noqa: F401 - the headless Chromium fixture (skips without it)

from arborag.serve import create_app
from arborag.storage.corpus import Corpus
from arborag.storage.leases import live_leases


def _node_ids(corpus, snapshot: str) -> set[str]:
    return set(pq.read_table(corpus / "snapshots" / snapshot / "nodes.parquet", columns=["node_id"]).column(0).to_pylist())


def test_search_a_retained_snapshot_by_name(corpus_copy, lighthouse_file, embedders, run_server):
    first = json.loads((corpus_copy / "manifest.json").read_text())["snapshot"]
    second = build([CINDERELLA, lighthouse_file], corpus_copy)
    assert second != first
    app = create_app(corpus_copy, embedders=embedders)
    base = run_server(app)
    corpus = Corpus(corpus_copy)
    with httpx.Client(base_url=base, timeout=60) as c:
        now = c.post("/search", json={"text": "lighthouse keeper storm", "mode": "sparse", "budget": 400}).json()
        assert now["snapshot"] == second
        for ref in (first, first[:12]):  # full id or a unique prefix
            old = c.post("/search", json={"text": "glass slipper stepmother", "mode": "sparse", "budget": 400, "snapshot": ref})
            assert old.status_code == 200, old.text
            body = old.json()
            assert body["snapshot"] == first and body["hits"]
            assert {h["node_id"] for h in body["hits"]} <= _node_ids(corpus_copy, first)
        dense = c.post("/search", json={"text": QUESTION, "budget": 300, "snapshot": first}).json()
        assert dense["snapshot"] == first and dense["hits"]
        # the server holds a reader lease on both snapshots it has open
        holders = {sid: [r["holder"] for r in recs] for sid, recs in live_leases(corpus).items()}
        assert holders == {first: ["serve"], second: ["serve"]}, holders
        # a node that exists only in the older snapshot
        only_old = sorted(_node_ids(corpus_copy, first) - _node_ids(corpus_copy, second))[0]
        assert c.get(f"/nodes/{only_old}").status_code == 404
        node = c.get(f"/nodes/{only_old}", params={"snapshot": first})
        assert node.status_code == 200 and node.json()["snapshot"] == first
        listing = c.get("/snapshots").json()
        assert listing["serving"] == second
        assert [(s["id"], s["published"], s["open"]) for s in listing["snapshots"]] == [(second, True, True), (first, False, True)]
        missing = c.post("/search", json={"text": QUESTION, "snapshot": "snap-0000"})
        assert missing.status_code == 404
        detail = missing.json()["detail"]
        assert "snap-0000" in detail and "GET /snapshots" in detail and second in detail and first in detail
        assert str(corpus_copy) not in detail  # the server's paths stay private
        assert c.post("/search", json={"text": QUESTION, "snapshot": "../etc"}).status_code == 422
    # arborag query --server URL --snapshot ID asks the server for that snapshot
    script = Path(sys.executable).parent / "arborag"
    out = subprocess.run([str(script), "query", "glass slipper", "--server", base, "--mode", "sparse", "--snapshot", first, "--json"],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    assert {h["node_id"] for h in json.loads(out.stdout)} <= _node_ids(corpus_copy, first)
    out = subprocess.run([str(script), "query", "x", "--server", base, "--snapshot", "snap-0000"], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert out.returncode != 0 and "404" in out.stderr and "GET /snapshots" in out.stderr
    app.state.holder.close()
    assert not live_leases(corpus), "closing the server released its leases"


def test_search_page_names_the_snapshot_that_answered(corpus_copy, lighthouse_file, embedders, run_server, browser_page):
    """The page lists the retained snapshots, searches the one picked and says which answered."""
    from test_serve_page import _expect

    first = json.loads((corpus_copy / "manifest.json").read_text())["snapshot"]
    second = build([CINDERELLA, lighthouse_file], corpus_copy)
    base = run_server(create_app(corpus_copy, embedders=embedders))
    page, expect = browser_page, _expect()
    page.goto(base + "/")
    expect(page.locator("#snapshot")).to_have_text(f"snapshot {second}")
    expect(page.locator(f"#snap option[value='{first}']")).to_have_count(1)
    page.fill("#q", QUESTION)
    page.fill("#budget", "400")
    page.click("button[type=submit]")
    page.wait_for_selector("article.hit")
    assert page.get_attribute("#results", "data-snapshot") == second
    assert f"answered from snapshot {second}" in page.text_content("#status")
    page.select_option("#snap", first)
    page.click("button[type=submit]")
    expect(page.locator("#status")).to_contain_text(f"answered from snapshot {first} (an earlier snapshot")
    assert page.get_attribute("#results", "data-snapshot") == first
    ids = [a.get_attribute("data-node") for a in page.locator("article.hit").all()]
    assert ids and set(ids) <= _node_ids(corpus_copy, first)
    # a node of the old snapshot opens from that snapshot
    only_old = next((i for i in ids if i not in _node_ids(corpus_copy, second)), None)
    if only_old is not None:
        page.locator(f"article.hit[data-node='{only_old}'] button").click()
        page.wait_for_selector("aside#node:not([hidden]) h3")
        assert only_old in page.locator("aside#node h2").text_content()
