"""Screenshots of the tree labels for the README: tree.html and the search page.

Renders ``tree.html`` of a built corpus and opens it in the system Chromium (headless, driven by
Playwright; no browser download), expands the top levels; then starts ``arborag serve`` on
127.0.0.1, searches in ``collapsed`` mode (summaries among the hits) and opens a summary's node
panel. Writes docs/img/tree_labels.png and docs/img/serve_labels.png.

    python scripts/label_screenshots.py --corpus /tmp/demo [--port 8765]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--query", default="How did Cinderella reach her happy ending?")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "img")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from arborag.query.treeview import render_tree_html

    args.out.mkdir(parents=True, exist_ok=True)
    html = render_tree_html(args.corpus, args.corpus / "tree.html", max_children=6)
    arborag = str(Path(sys.executable).parent / "arborag")
    server = subprocess.Popen([arborag, "serve", "--corpus", str(args.corpus), "--port", str(args.port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{args.port}"
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=FLAGS)
            page = browser.new_page(viewport={"width": 1360, "height": 900})
            page.goto(html.resolve().as_uri())
            page.evaluate("openLevel(2)")  # the top levels open: their children's titles show
            page.screenshot(path=str(args.out / "tree_labels.png"), full_page=False)

            for _ in range(240):  # the server loads the model first (bounded wait)
                try:
                    if httpx.get(base + "/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(1)
            page.goto(base + "/")
            page.fill("#q", args.query)
            page.select_option("#mode", "collapsed")
            page.fill("#budget", "1200")
            page.click("button[type=submit]")
            page.wait_for_selector("article.hit", timeout=120_000)
            summary = page.locator("article.hit:not([data-level='0'])").first
            summary.locator("button").click()
            page.wait_for_selector("aside#node:not([hidden]) h3", timeout=60_000)
            page.screenshot(path=str(args.out / "serve_labels.png"), full_page=False)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"wrote {args.out / 'tree_labels.png'} and {args.out / 'serve_labels.png'}")


if __name__ == "__main__":
    main()
