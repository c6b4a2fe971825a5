"""`arborag update` with per-document trees (``tree.scope = document``): exact, not a rebuild.

One document added, one changed, one deleted: only the added and changed documents' trees are
summarized (counted), the others keep their nodes and the run that built them, and the result
is the same tree as a full build of the new sources into an empty corpus — node for node, edge
for edge, and every vector in the same direction.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from arborag.flows.build import run_build
from arborag.flows.update import run_update
from arborag.storage.corpus import Corpus
from tests.helpers.update import CONFIG, UNIQUE, CountingSummaries, copy_corpus, nodes_of, published, vector_texts

pytestmark = pytest.mark.slow

PER_DOC = CONFIG.with_overrides(tree={"scope": "document"}, cluster={"dims": 2})
ADDED = (
    "The ferryman of Lowmere rowed the ashen barge across the river every dawn.\n\n"
    "He carried seven baskets of pears, a lantern, and a letter for the miller's daughter.\n\n"
    "At the far bank the miller's daughter read the letter twice and laughed.\n\n"
    "The letter promised a wedding at harvest, with music and a roast goose.\n\n"
    "The ferryman rowed home singing, and the river carried his song downstream.\n"
)


def _doc_of(corpus: Path, name: str) -> str:
    return next(r["doc_id"] for r in pq.read_table(corpus / "tables" / "documents.parquet").to_pylist() if r["uri"].endswith(name))


def _vectors(corpus: Path) -> dict[str, np.ndarray]:
    import lancedb

    db = lancedb.connect(str(published(corpus) / "vectors.lance"))
    out: dict[str, np.ndarray] = {}
    for name in db.list_tables().tables:
        t = db.open_table(name).to_arrow()
        for node_id, v in zip(t.column("node_id").to_pylist(), t.column("vector").to_numpy(zero_copy_only=False)):
            out[node_id] = np.asarray(v, np.float32)
    return out


def _without_run(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "created_by_run"} for r in rows]


def test_per_document_update_rebuilds_only_changed_documents_and_equals_a_full_build(
    tmp_path: Path, examples_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.helpers.update import make_sources

    src0 = make_sources(tmp_path / "base", examples_dir)
    base = tmp_path / "base" / "c"
    assert run_build([src0], base, PER_DOC, use_prefect=False, progress=False)["status"] == "ok"
    before = nodes_of(base)
    build_run = {r["created_by_run"] for r in before}
    assert len(build_run) == 1
    by_doc: dict[str, set[int]] = {}
    for r in before:
        assert len(r["doc_ids"]) == 1, "per-document trees: every node belongs to one document"
        by_doc.setdefault(r["doc_ids"][0], set()).add(r["level"])
    assert sum(1 for levels in by_doc.values() if max(levels) >= 1) >= 4, "most documents should have summaries"

    corpus, src = copy_corpus(base, src0, tmp_path / "work")
    zebra, part01, part03 = _doc_of(corpus, "zebra.txt"), _doc_of(corpus, "part01.txt"), _doc_of(corpus, "part03.txt")
    (src / "zebra.txt").unlink()  # deleted
    (src / "part01.txt").write_text((src / "part01.txt").read_text() + "\nThe godmother's cat slept on the hearth.\n", encoding="utf-8")
    (src / "ferry.txt").write_text(ADDED, encoding="utf-8")  # added
    counter = CountingSummaries().install(monkeypatch)
    out = run_update([src], corpus, PER_DOC)
    assert out["mode"] == "incremental" and out["full_rebuild"] is False, out.get("reason")
    assert "per-document" in out["reason"]
    assert (out["plan"]["added"], out["plan"]["changed"], out["plan"]["deleted"]) == (1, 1, 1)

    after = nodes_of(corpus)
    ferry, part01_now = _doc_of(corpus, "ferry.txt"), _doc_of(corpus, "part01.txt")  # a changed text is a new doc_id
    new_run = {r["created_by_run"] for r in after} - build_run
    assert len(new_run) == 1
    rebuilt = {r["doc_ids"][0] for r in after if r["created_by_run"] in new_run}
    assert rebuilt == {ferry, part01_now}, "only the added and the changed document were built"
    new_summaries = [r for r in after if r["level"] > 0 and r["created_by_run"] in new_run]
    assert counter.clusters == len(new_summaries) == out["calls"]["summaries"] > 0
    kept_before = [r for r in before if r["doc_ids"][0] not in (zebra, part01)]
    kept_after = [r for r in after if r["doc_ids"][0] not in (ferry, part01_now)]
    assert kept_after == kept_before, "unchanged documents keep their trees as published (and the run that built them)"
    assert part03 in {r["doc_ids"][0] for r in kept_after}
    for word in (UNIQUE, "Quillon"):
        assert not [r for r in after if word in r["text"]] and not [t for t in vector_texts(corpus) if word in t]
    info = json.loads((published(corpus) / "info.json").read_text())
    assert info["update"]["leaves_added"] > 0 and info["update"]["leaves_removed"] > 0
    run = Corpus(corpus).read("runs").to_pylist()[-1]
    assert json.loads(run["counts"])["summaries_rewritten"] == len(new_summaries)

    # the same sources built from scratch give the same tree
    fresh = tmp_path / "fresh"
    assert run_build([src], fresh, PER_DOC, use_prefect=False, progress=False)["status"] == "ok"
    assert _without_run(nodes_of(fresh)) == _without_run(after)
    assert pq.read_table(published(fresh) / "edges.parquet").to_pylist() == pq.read_table(published(corpus) / "edges.parquet").to_pylist()
    va, vb = _vectors(fresh), _vectors(corpus)
    assert va.keys() == vb.keys() == {r["node_id"] for r in after}
    # the fresh corpus embeds its leaves in other batches than the update's cache did, and the
    # bf16 embedder's vectors move in the 3rd decimal with the batch (tasks/tree/build.py): same
    # direction, not the same bits — and the trees above are identical regardless
    cos = [float(vb[i] @ v / (np.linalg.norm(vb[i]) * np.linalg.norm(v))) for i, v in va.items()]
    assert min(cos) > 0.999

    # and a second update with nothing changed does nothing
    assert run_update([src], corpus, PER_DOC)["mode"] == "noop"
