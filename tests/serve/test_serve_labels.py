"""Labels end to end: a real build labels every summary node; the API and the views show them."""

from __future__ import annotations

import json

import polars as pl
import pyarrow.parquet as pq
from conftest import QUESTION
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from arborag.cli import app
from arborag.serve import create_app


def test_a_build_labels_every_summary_and_the_api_returns_the_labels(built_corpus, embedders) -> None:
    snap = json.loads((built_corpus / "manifest.json").read_text())["snapshot"]
    nodes = pl.from_arrow(pq.read_table(built_corpus / "snapshots" / snap / "nodes.parquet"))
    summaries = nodes.filter(pl.col("level") > 0)
    assert summaries.height > 0
    assert summaries.filter(pl.col("title").is_null() | (pl.col("keywords").list.len() == 0)).height == 0
    assert set(summaries["title_source"].unique()) <= {"ctfidf", "text"}
    assert nodes.filter(pl.col("level") == 0)["title"].null_count() == nodes.filter(pl.col("level") == 0).height
    assert "cinderella" in summaries.filter(pl.col("level") == summaries["level"].max())["keywords"].explode().to_list()

    with TestClient(create_app(built_corpus, embedders=embedders)) as client:
        res = client.post("/search", json={"text": QUESTION, "mode": "collapsed", "budget": 1500}).json()
        by_id = dict(zip(nodes["node_id"].to_list(), nodes.select("title", "keywords").to_dicts()))
        summary_hits = [h for h in res["hits"] if h["level"] > 0]
        assert summary_hits, "collapsed search over a tree returns some summaries"
        for h in res["hits"]:
            assert h["title"] == by_id[h["node_id"]]["title"] and h["keywords"] == by_id[h["node_id"]]["keywords"]
        node = client.get(f"/nodes/{summary_hits[0]['node_id']}").json()
        assert node["title"] == summary_hits[0]["title"] and node["keywords"]
        assert all(c["title"] is None for c in node["children"] if c["level"] == 0)


def test_inspect_tree_and_topics_on_a_built_corpus(built_corpus) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["inspect", "tree", "--corpus", str(built_corpus), "--depth", "1"])
    assert res.exit_code == 0, res.output
    nodes = pl.from_arrow(pq.read_table(next((built_corpus / "snapshots").glob("*/nodes.parquet"))))
    top = nodes.filter(pl.col("level") == nodes["level"].max())
    lines = res.output.splitlines()
    assert len(lines) == top.height  # depth 1: the roots only
    assert all(t in res.output for t in top["title"].to_list())
    res = runner.invoke(app, ["inspect", "topics", "--corpus", str(built_corpus), "--levels", "1", "--json"])
    rows = json.loads(res.output)
    assert sorted(r["title"] for r in rows) == sorted(top["title"].to_list())
    assert sum(r["leaves"] for r in rows) >= nodes.filter(pl.col("level") == 0).height  # the top level covers every leaf
    assert all(r["documents"][0]["title"] for r in rows)


def test_the_search_page_shows_labels_in_a_real_browser(built_corpus, embedders, run_server, tmp_path) -> None:
    from test_serve_page import CHROMIUM, FLAGS

    import pytest

    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed (pip install playwright)")
    base = run_server(create_app(built_corpus, embedders=embedders))
    reference = create_app(built_corpus, embedders=embedders)
    with TestClient(reference) as client:  # the lifespan runs: the reader lease on the shared corpus goes with it
        expected = client.post("/search", json={"text": QUESTION, "mode": "collapsed", "budget": 1500}).json()
    reference.state.holder.close()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=FLAGS)
        try:
            page = browser.new_page()
            page.goto(base + "/")
            page.fill("#q", QUESTION)
            page.select_option("#mode", "collapsed")
            page.fill("#budget", "1500")
            page.click("button[type=submit]")
            page.wait_for_selector("article.hit")
            shown = {a.get_attribute("data-node"): (a.locator(".label .title").all_text_contents() or [None])[0]
                     for a in page.locator("article.hit").all()}
            assert shown == {h["node_id"]: h["title"] for h in expected["hits"]}
            assert any(shown.values())
        finally:
            browser.close()
