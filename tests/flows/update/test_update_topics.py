"""`arborag update` adding a document of another domain keeps it out of the existing topics.

A real build of two FinanceBench filings (PDF ingestion, the real embedder, the default
clustering and the extractive summarizer; the Amcor 8-K holds loose legal-text clusters a story
leaf is nearest to), then an incremental update adding the Cinderella story. The story's 38-odd
leaves are more than the default ``update.max_drift`` (20 %) of the filings' 79 leaves, so
the plan would re-fit the whole tree; the test raises ``max_drift`` to 1.0 to force the
incremental path (and checks the update said ``incremental``), since that path is the one under
test. (Two filings, not all five: the build of five takes about 90 s.)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from arborag.config import ArboragConfig
from arborag.flows.build import run_build
from arborag.flows.update import run_update
from arborag.storage.corpus import Corpus
from tests.helpers.update import edges_of, nodes_of

pytestmark = pytest.mark.slow

FILINGS = ("AMCOR_2022_8K_dated-2022-07-01.pdf", "PEPSICO_2023_8K_dated-2023-05-05.pdf")
CONFIG = ArboragConfig().with_overrides(update={"max_drift": 1.0})


def _leaf_ancestors(edges: list[dict]) -> dict[str, set[str]]:
    """Node id -> every summary above it, through the edges (soft membership: all parents)."""
    parents: dict[str, set[str]] = {}
    for e in edges:
        parents.setdefault(e["child_id"], set()).add(e["parent_id"])
    out: dict[str, set[str]] = {}

    def up(node: str) -> set[str]:
        if node not in out:
            out[node] = set()
            for p in parents.get(node, ()):
                out[node] |= {p} | up(p)
        return out[node]

    for child in list(parents):
        up(child)
    return out


def test_update_keeps_an_added_story_apart_from_the_filings(shared_data: Path, tmp_path: Path) -> None:
    """No summary below the top level has both a story leaf and a filing leaf in its subtree (the
    top level may hold a node over everything, as a build's may; below it, a topic is one domain's).
    Each story leaf is in the tree (has a parent), and the update says it opened clusters for them."""
    src, corpus = tmp_path / "src", tmp_path / "corpus"
    src.mkdir()
    for name in FILINGS:
        shutil.copy(shared_data / "financebench" / "pdfs" / name, src / name)
    assert run_build([src], corpus, CONFIG, use_prefect=False, progress=False)["status"] == "ok"
    shutil.copy(shared_data / "raptor" / "cinderella.txt", src / "cinderella.txt")
    out = run_update([src], corpus, CONFIG)
    assert out["mode"] == "incremental", out.get("reason")

    snap = corpus / "snapshots" / json.loads((corpus / "manifest.json").read_text())["snapshot"]
    story_doc = {r["doc_id"] for r in pq.read_table(snap / "documents.parquet").to_pylist() if r["uri"].endswith("cinderella.txt")}
    nodes = nodes_of(corpus)
    level = {r["node_id"]: r["level"] for r in nodes}
    top = max(level.values())
    leaves = [r for r in nodes if r["level"] == 0]
    story = [r["node_id"] for r in leaves if set(r["doc_ids"]) <= story_doc]
    filings = [r["node_id"] for r in leaves if not set(r["doc_ids"]) & story_doc]
    assert len(story) >= 20 and len(filings) >= 40 and len(story) + len(filings) == len(leaves)
    above = _leaf_ancestors(edges_of(corpus))
    assert all(above.get(c) for c in story), "every story leaf joined the tree"
    story_up = set().union(*(above[c] for c in story))
    filing_up = set().union(*(above.get(c, set()) for c in filings))
    shared = {p for p in story_up & filing_up if level[p] < top}
    assert not shared, [(level[p], next(r["text"][:80] for r in nodes if r["node_id"] == p)) for p in sorted(shared)]
    stats = json.loads(Corpus(corpus).read("runs").to_pylist()[-1]["counts"])["tree-update"]["stats"]
    assert stats[0]["rejected"] > 0 and stats[0]["opened"] > 0
