"""Every reader of the query side describes one snapshot, never the working tables: on a real
corpus (built once for the module) with two snapshots — a build, then an update that adds a
document — rolled back to the first, the HTTP API (documents, stats), the MCP tools, the tree
views and ``arborag inspect`` show the published snapshot's documents, while ``tables/`` still
holds the update's."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient
from helpers.update import CONFIG
from typer.testing import CliRunner

from arborag.serve import create_app
from arborag.storage.leases import LEASES_DIR

pytestmark = pytest.mark.slow

NO_AUTO = CONFIG.with_overrides(retention={"auto": False})


def _doc_ids(path: Path) -> set[str]:
    return set(pq.read_table(path, columns=["doc_id"]).column("doc_id").to_pylist())


@pytest.fixture(scope="module")
def history(rolled_back_history: dict[str, Any]) -> dict[str, Any]:
    """The session's build + update (adds zebra2.txt) + rollback, with the documents of each state."""
    corpus, first, second = rolled_back_history["corpus"], rolled_back_history["first"], rolled_back_history["second"]
    first_docs = _doc_ids(corpus / "snapshots" / first / "documents.parquet")
    second_docs = _doc_ids(corpus / "snapshots" / second / "documents.parquet")
    working_docs = _doc_ids(corpus / "tables" / "documents.parquet")
    added = second_docs - first_docs
    # the state under test: the working tables hold a document the published snapshot does not
    assert len(added) == 1 and added <= working_docs
    return {"corpus": corpus, "first": first, "second": second, "first_docs": first_docs, "added": added.pop()}


@pytest.fixture(scope="module")
def client(history: dict[str, Any]):
    from arborag.serve.embedders import ResidentEmbedders

    with TestClient(create_app(history["corpus"], config=NO_AUTO, embedders=ResidentEmbedders())) as c:
        yield c


def test_document_endpoint_reads_the_published_snapshot(history: dict[str, Any], client: TestClient) -> None:
    first, second, added = history["first"], history["second"], history["added"]
    res = client.get(f"/documents/{added}")
    assert res.status_code == 404, res.text
    assert f"no document {added!r} in snapshot {first}" in res.json()["detail"]
    kept = sorted(history["first_docs"])[0]
    res = client.get(f"/documents/{kept}", params={"max_chars": 50})
    assert res.status_code == 200 and res.json()["snapshot"] == first and res.json()["doc_id"] == kept
    # an earlier or later retained snapshot, by name: its own documents
    res = client.get(f"/documents/{added}", params={"snapshot": second})
    assert res.status_code == 200 and res.json()["snapshot"] == second and "zebra king" in res.json()["text"]


def test_stats_and_health_describe_the_served_snapshot(history: dict[str, Any], client: TestClient) -> None:
    stats = client.get("/stats").json()
    assert stats["snapshot"] == history["first"] and stats["documents"] == len(history["first_docs"])
    health = client.get("/health").json()
    assert health["snapshot"] == history["first"]
    assert health["defaults"] == {"mode": NO_AUTO.query.mode, "budget": NO_AUTO.query.budget, "k": NO_AUTO.query.k}


def test_mcp_tools_read_the_published_snapshot(history: dict[str, Any]) -> None:
    pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'arborag[mcp]'")
    from arborag.mcpserver import tools
    from arborag.serve.embedders import ResidentEmbedders
    from arborag.serve.state import SnapshotHolder

    holder = SnapshotHolder(history["corpus"], NO_AUTO, ResidentEmbedders())
    try:
        info = tools.snapshot_info(holder)
        assert info["snapshot"] == history["first"] and info["documents"] == len(history["first_docs"])
        with pytest.raises(tools.ToolInputError, match=f"no document {history['added']!r} in snapshot {history['first']}"):
            tools.get_chunk(holder, history["added"], 0, 10, limits=tools.Limits())
        top = tools.tree_top(holder, max_nodes=3, limits=tools.Limits())
        assert top["snapshot"] == history["first"]
    finally:
        holder.close()


def test_tree_views_and_inspect_read_the_published_snapshot(history: dict[str, Any]) -> None:
    from arborag.cli.app import app
    from arborag.query.treeview import load_tree

    corpus = history["corpus"]
    tree = load_tree(corpus)
    assert tree.info["snapshot"] == history["first"]
    assert set(tree.doc_titles) == history["first_docs"]  # not the working tables' (which hold zebra2)
    res = CliRunner().invoke(app, ["inspect", "topics", "--corpus", str(corpus), "--json"])
    assert res.exit_code == 0, res.output
    assert "zebra2" not in res.output
    res = CliRunner().invoke(app, ["inspect", "snapshot", "--corpus", str(corpus)])
    assert res.exit_code == 0 and history["first"] in res.output


def test_a_snapshot_without_documents_shows_none_of_the_working_ones(history: dict[str, Any], tmp_path: Path) -> None:
    """A snapshot written before snapshots kept their documents: the views show no titles and the
    document endpoint says why, rather than describing the working tables."""
    from arborag.query import open_index
    from arborag.query.treeview import load_tree
    from arborag.serve.embedders import ResidentEmbedders

    corpus = tmp_path / "c"
    shutil.copytree(history["corpus"], corpus, symlinks=True, ignore=shutil.ignore_patterns(LEASES_DIR))
    (corpus / "snapshots" / history["first"] / "documents.parquet").unlink()
    (corpus / "snapshots" / history["first"] / "chunks.parquet").unlink(missing_ok=True)
    assert _doc_ids(corpus / "tables" / "documents.parquet") >= history["first_docs"]

    assert load_tree(corpus).doc_titles == {}
    index = open_index(corpus, config=NO_AUTO, embed_query=lambda texts: None)  # no query is embedded here
    try:
        assert index.documents().num_rows == 0 and index.leaf_chunks().num_rows == 0
    finally:
        index.close()
    kept = sorted(history["first_docs"])[0]
    with TestClient(create_app(corpus, config=NO_AUTO, embedders=ResidentEmbedders())) as c:
        res = c.get(f"/documents/{kept}")
        assert res.status_code == 404 and "rebuild to record them" in res.json()["detail"]
        assert c.get("/stats").json()["documents"] == 0
