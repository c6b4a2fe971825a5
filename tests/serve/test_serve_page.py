"""The search page in a real headless Chromium (the system /usr/bin/chromium driven by Playwright):
type a query, read the rendered hits, walk to a node's parent and back down; a screenshot is
written. Skips with the reason when the browser or the driver package is missing (CI installs
them: ``apt-get install -y chromium`` and ``pip install playwright``; no browser download)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import httpx
import pytest
from conftest import QUESTION

from arborag.serve import create_app

CHROMIUM = Path(os.environ.get("ARBORAG_CHROMIUM", "/usr/bin/chromium"))
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]


def _expect():
    from playwright.sync_api import expect

    return expect


@pytest.fixture()
def browser_page(tmp_path):
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed (pip install playwright)")
    with sync_api.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=str(CHROMIUM), headless=True, args=FLAGS,
            viewport={"width": 1360, "height": 900},
        )
        try:
            yield ctx.new_page()
        finally:
            ctx.close()


def test_search_page_renders_hits_and_walks_the_tree(built_corpus, embedders, run_server, browser_page, tmp_path):
    page = browser_page
    expect = _expect()
    base = run_server(create_app(built_corpus, embedders=embedders))
    expected = httpx.post(f"{base}/search", json={"text": QUESTION, "mode": "collapsed", "budget": 800}, timeout=60).json()

    page.goto(base + "/")
    expect(page.locator("#snapshot")).to_have_text(f"snapshot {expected['snapshot']}")
    page.fill("#q", QUESTION)
    page.select_option("#mode", "collapsed")
    page.fill("#budget", "800")
    page.click("button[type=submit]")
    page.wait_for_selector("article.hit")

    hits = page.locator("article.hit")
    assert hits.count() == len(expected["hits"]) > 0
    assert [hits.nth(i).get_attribute("data-node") for i in range(hits.count())] == [h["node_id"] for h in expected["hits"]]
    first = hits.nth(0)
    assert first.locator(".score").text_content() == f"{expected['hits'][0]['score']:.3f}"
    assert re.fullmatch(r"L\d (leaf|summary)", first.locator(".lvl").text_content())
    assert "cinderella" in first.locator(".src").text_content()
    status = page.text_content("#status")
    assert f"{len(expected['hits'])} hits" in status and f"{expected['tokens']} tokens" in status
    levels = {int(b.get_attribute("data-level")) for b in page.locator("article.hit .lvl").all()}
    assert levels  # every hit carries its level badge
    page.screenshot(path=str(tmp_path / "serve_search_results.png"), full_page=False)

    # click-through: a leaf's parents, then the parent's children lead back to the leaf
    leaf = next(h["node_id"] for h in expected["hits"] if h["level"] == 0)
    page.locator(f"article.hit[data-node='{leaf}'] button").click()
    page.wait_for_selector("aside#node:not([hidden]) h3")
    aside = page.locator("aside#node")
    assert leaf in aside.locator("h2").text_content()
    parents = aside.locator("h3:has-text('parents') ~ button.ref")
    assert parents.count() >= 1
    parent_id = parents.first.get_attribute("data-node")
    parents.first.click()
    expect(aside.locator("h2")).to_contain_text(parent_id)
    children = [b.get_attribute("data-node") for b in aside.locator("button.ref").all()]
    assert leaf in children
    assert "L1 summary" in aside.locator("h2 .lvl").text_content()
    shot = tmp_path / "serve_search.png"
    page.screenshot(path=str(shot), full_page=False)
    assert shot.stat().st_size > 10_000
    out = os.environ.get("ARBORAG_SCREENSHOT_DIR")
    if out:  # keep a copy for the README (scripts may set this)
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(out) / shot.name)


def test_search_page_reports_a_malformed_lucene_query(built_corpus, embedders, run_server, browser_page):
    page = browser_page
    expect = _expect()
    page.goto(run_server(create_app(built_corpus, embedders=embedders)) + "/")
    page.fill("#q", "slipper AND (")
    page.select_option("#mode", "sparse")
    page.check("#lucene")
    page.click("button[type=submit]")
    page.wait_for_selector("#results .warn")
    assert "position 12" in page.text_content("#results .warn")
    assert page.locator("article.hit").count() > 0


def test_search_page_asks_for_the_token(built_corpus, embedders, run_server, browser_page):
    page = browser_page
    expect = _expect()
    page.goto(run_server(create_app(built_corpus, embedders=embedders, token="page-token")) + "/")
    page.wait_for_selector("#token-box:not([hidden])")
    page.fill("#q", "slipper")
    page.select_option("#mode", "sparse")
    page.click("button[type=submit]")
    expect(page.locator("#status")).to_contain_text("401: this server needs a bearer token")
    page.fill("#token", "page-token")
    page.click("button[type=submit]")
    page.wait_for_selector("article.hit")


def test_search_page_starts_from_the_servers_query_defaults(built_corpus, embedders, run_server, browser_page, tmp_path):
    from arborag.config import ArboragConfig

    page = browser_page
    expect = _expect()
    config = ArboragConfig().with_overrides(query={"mode": "sparse", "budget": 700})
    base = run_server(create_app(built_corpus, embedders=embedders, config=config))
    assert httpx.get(f"{base}/health", timeout=30).json()["defaults"] == {"mode": "sparse", "budget": 700, "k": config.query.k}

    page.goto(base + "/")
    expect(page.locator("#budget")).to_have_value("700")
    expect(page.locator("#mode")).to_have_value("sparse")
    page.fill("#q", "glass slipper")
    page.click("button[type=submit]")
    page.wait_for_selector("article.hit")
    expect(page.locator("#status")).to_contain_text("(budget 700)")
    expect(page.locator("#status")).to_contain_text("sparse")
    shot = tmp_path / "serve_search_defaults.png"
    page.screenshot(path=str(shot), full_page=False)
    assert shot.stat().st_size > 10_000
    out = os.environ.get("ARBORAG_SCREENSHOT_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(out) / shot.name)
