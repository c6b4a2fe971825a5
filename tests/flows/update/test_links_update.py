"""The links table survives ``arborag update``: added, changed and deleted documents.

A real build (MiniLM, tantivy, LanceDB) of five small documents that name each other, then an
update that deletes the lighthouse, changes the ferry's text and adds a mill that names the
ferry. The published snapshot's ``links.parquet`` must hold no row of the deleted document and
no link to it, the new and changed documents' links, and exactly what a fresh build of the new
sources publishes; ``arborag sql`` sees it as the ``links`` table.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from arborag.config import ArboragConfig
from arborag.flows.build import run_build
from arborag.flows.update import run_update
from arborag.storage.sql import run_sql
from tests.helpers.update import LINKED_SOURCES, built_from, published

pytestmark = pytest.mark.slow

CONFIG = ArboragConfig().with_overrides(tree={"scope": "document"}, cluster={"dims": 2})
SOURCES = LINKED_SOURCES


def _links(corpus: Path) -> list[dict]:
    return pq.read_table(published(corpus) / "links.parquet").to_pylist()


def _key(rows: list[dict]) -> set[tuple]:
    return {(r["node_id"], r["doc_id"], r["entity"], r["kind"], r["df"], round(r["weight"], 9)) for r in rows}


def _doc_id(corpus: Path, name: str) -> str:
    docs = pq.read_table(corpus / "tables" / "documents.parquet").to_pylist()
    return next(r["doc_id"] for r in docs if r["uri"].endswith(name) and r["status"] == "ok")


def test_links_follow_added_changed_and_deleted_documents(tmp_path: Path) -> None:
    src, corpus = built_from(tmp_path, SOURCES, CONFIG)
    before = _links(corpus)
    lighthouse, ferry = _doc_id(corpus, "Quillon_Lighthouse.txt"), _doc_id(corpus, "Lowmere_Ferry.txt")
    assert any(r["entity"] == "quillon lighthouse" and r["kind"] == "mention" and r["doc_id"] == ferry for r in before)
    assert any(r["entity"] == "quillon lighthouse" and r["kind"] == "title" and r["doc_id"] == lighthouse for r in before)

    (src / "Quillon_Lighthouse.txt").unlink()  # deleted
    (src / "Lowmere_Ferry.txt").write_text(  # changed: now names the harbour, not the lighthouse
        "Lowmere Ferry\nThe ferryman of Lowmere rowed the ashen barge to Tern Harbour every dawn.\n\n"
        "He carried pears and a letter for Ada Brimble.\n", encoding="utf-8")
    (src / "Brimble_Mill.txt").write_text(  # added: names the ferry
        "Brimble Mill\nBrimble Mill grinds the wheat that the Lowmere Ferry brings.\n\nAda Brimble built it in 1810.\n",
        encoding="utf-8")
    out = run_update([src], corpus, CONFIG, prune=True)
    assert out["mode"] == "incremental", out.get("reason")
    after = _links(corpus)
    new_ferry, mill = _doc_id(corpus, "Lowmere_Ferry.txt"), _doc_id(corpus, "Brimble_Mill.txt")
    assert new_ferry != ferry
    docs_after = {r["doc_id"] for r in after}
    assert lighthouse not in docs_after and ferry not in docs_after  # deleted, and the old version of the changed one
    assert "quillon lighthouse" not in {r["entity"] for r in after}  # nothing names it any more in two documents
    assert any(r["doc_id"] == new_ferry and r["entity"] == "tern harbour" and r["kind"] == "mention" for r in after)
    assert any(r["doc_id"] == mill and r["entity"] == "lowmere ferry" and r["kind"] == "mention" for r in after)
    assert any(r["doc_id"] == new_ferry and r["entity"] == "lowmere ferry" and r["kind"] == "title" for r in after)

    fresh = tmp_path / "fresh"
    assert run_build([src], fresh, CONFIG, use_prefect=False, progress=False)["status"] == "ok"
    assert _key(after) == _key(_links(fresh))  # the update's table is the one a full build writes

    cols, rows = run_sql(corpus, "SELECT count(*) FROM links WHERE kind = 'title'")
    assert rows[0][0] == sum(1 for r in after if r["kind"] == "title") > 0
