"""`arborag update` on a real (small) tree: the real embedder, the default extractive summarizer
counted through a wrapper. One build, copied per test:

- add: only the clusters on the new leaf's path are summarized again (counted), every other
  summary keeps its id;
- delete: a sentence only the deleted document held is gone from every level, the vectors and
  the sparse index, its doc_id from every ``doc_ids`` and from the snapshot's provenance;
- change: the old text is gone, the new one present;
- no-op: nothing is embedded, summarized or published;
- drift: past ``update.max_drift`` the update rebuilds the whole tree and says why;
- ``runs`` records the counts; ``--dry-run`` prints the plan and changes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from arborag.flows.build import run_build
from arborag.flows.update import run_update
from arborag.storage.corpus import Corpus
from tests.helpers.update import (
    CONFIG,
    UNIQUE,
    CountingSummaries,
    ancestors,
    copy_corpus,
    edges_of,
    make_sources,
    nodes_of,
    published,
    vector_texts,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, examples_dir: Path) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("update-base")
    src = make_sources(root, examples_dir)
    corpus = root / "c"
    out = run_build([src], corpus, CONFIG, use_prefect=False, progress=False)
    assert out["status"] == "ok"
    assert (published(corpus) / "clusters").is_dir(), "the build keeps its fitted clusters in the snapshot"
    return corpus, src


@pytest.fixture()
def work(base: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    return copy_corpus(base[0], base[1], tmp_path)


def test_update_add_summarizes_only_the_new_leafs_clusters(work: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    corpus, src = work
    before = {r["node_id"] for r in nodes_of(corpus) if r["level"] > 0}
    n_levels = max(r["level"] for r in nodes_of(corpus))
    assert n_levels >= 2, "the fixture tree should have several summary levels"
    (src / "new.txt").write_text("A tinker from Brusselmoor mended the kettle of the palace kitchen with copper wire.\n", encoding="utf-8")
    counter = CountingSummaries().install(monkeypatch)
    out = run_update([src], corpus, CONFIG)
    assert out["mode"] == "incremental", out.get("reason")
    assert out["plan"]["added"] == 1 and out["plan"]["deleted"] == 0
    nodes = nodes_of(corpus)
    leaf = next(r for r in nodes if r["level"] == 0 and "Brusselmoor" in r["text"])
    path = ancestors(edges_of(corpus), leaf["node_id"])
    assert path, "the new leaf joined a cluster"
    after = {r["node_id"] for r in nodes if r["level"] > 0}
    rewritten = after - before
    assert rewritten == path  # the new summaries are exactly the new leaf's ancestors
    assert counter.clusters == len(rewritten) == out["calls"]["summaries"]
    assert counter.clusters < len(before) / 2  # far fewer than a rebuild
    assert after - rewritten <= before  # every other summary kept its id
    assert len({r["level"] for r in nodes if r["node_id"] in path}) == n_levels  # one per level, up to the top
    assert max(r["level"] for r in nodes) == n_levels


def test_update_delete_leaves_no_trace(work: tuple[Path, Path]) -> None:
    corpus, src = work
    zebra_doc = next(r for r in pq.read_table(corpus / "tables" / "documents.parquet").to_pylist() if r["uri"].endswith("zebra.txt"))["doc_id"]
    assert any(UNIQUE in t for t in vector_texts(corpus))
    from arborag.query import open_index

    assert open_index(corpus).search('"purple owls"', mode="sparse", budget=500)
    (src / "zebra.txt").unlink()
    out = run_update([src], corpus, CONFIG)
    assert out["mode"] == "incremental" and out["plan"]["deleted"] == 1
    nodes = nodes_of(corpus)
    for word in (UNIQUE, "Quillon", "zebra"):
        assert not [r["level"] for r in nodes if word in r["text"]], f"{word!r} is still in the tree"
        assert not [t for t in vector_texts(corpus) if word in t], f"{word!r} is still in the vectors"
    assert not any(zebra_doc in (r["doc_ids"] or []) for r in nodes)
    assert open_index(corpus).search('"purple owls"', mode="sparse", budget=500) == []
    assert open_index(corpus).search("Quillon", mode="sparse", lucene=False, budget=500) == []
    snap = published(corpus)
    assert zebra_doc not in pq.read_table(snap / "chunks.parquet").column("doc_id").to_pylist()
    assert zebra_doc not in pq.read_table(snap / "documents.parquet").column("doc_id").to_pylist()
    assert zebra_doc not in pq.read_table(corpus / "tables" / "documents.parquet").column("doc_id").to_pylist()
    # the fitted models no longer name the deleted leaves either
    present = {r["node_id"] for r in nodes_of(corpus)}
    for f in (snap / "clusters").glob("level-*.json"):
        for fit in json.loads(f.read_text())["fits"]:
            assert set(fit["train_ids"]) <= present


def test_update_change_replaces_old_text_with_new(work: tuple[Path, Path]) -> None:
    corpus, src = work
    (src / "zebra.txt").write_text((src / "zebra.txt").read_text().replace("purple owls", "crimson ravens"), encoding="utf-8")
    out = run_update([src], corpus, CONFIG)
    assert out["mode"] == "incremental" and out["plan"]["changed"] == 1
    texts = [r["text"] for r in nodes_of(corpus)]
    assert not any("purple owls" in t for t in texts) and not any("purple owls" in t for t in vector_texts(corpus))
    assert any("crimson ravens" in t for t in texts)
    from arborag.query import open_index

    assert open_index(corpus).search('"crimson ravens"', mode="sparse", budget=500)
    assert open_index(corpus).search('"purple owls"', mode="sparse", budget=500) == []


def test_update_noop_does_nothing(work: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    corpus, src = work
    manifest = (corpus / "manifest.json").read_text()
    counter = CountingSummaries().install(monkeypatch)
    out = run_update([src], corpus, CONFIG)
    assert out["mode"] == "noop" and out["noop"] is True
    assert out["calls"] == {"embedded_texts": 0, "summaries": 0} and counter.clusters == 0
    assert (corpus / "manifest.json").read_text() == manifest


def test_update_drift_guard_rebuilds_and_says_why(work: tuple[Path, Path]) -> None:
    corpus, src = work
    (src / "new.txt").write_text("The lamplighter of Orvenna counted ninety lanterns on the bridge.\n", encoding="utf-8")
    cfg = CONFIG.with_overrides(update={"max_drift": 0.01})
    out = run_update([src], corpus, cfg)
    assert out["mode"] == "full" and out["full_rebuild"] is True
    assert "max_drift" in out["reason"]
    info = json.loads((published(corpus) / "info.json").read_text())
    assert info["drift"]["changed"] == 0  # a full fit resets the drift
    run = Corpus(corpus).read("runs").to_pylist()[-1]
    counts = json.loads(run["counts"])
    assert run["flow"] == "update" and counts["full_rebuild"] is True and counts["added"] == 1


def test_update_records_counts_in_runs_and_dry_run_changes_nothing(work: tuple[Path, Path]) -> None:
    corpus, src = work
    (src / "part05.txt").unlink()
    manifest = (corpus / "manifest.json").read_text()
    from arborag.cli import app

    res = CliRunner().invoke(app, ["update", str(src), "--corpus", str(corpus), "--dry-run"], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert "deleted" in res.output and "part05.txt" in res.output and "summaries to rewrite" in res.output
    assert (corpus / "manifest.json").read_text() == manifest
    out = run_update([src], corpus, CONFIG)
    assert out["mode"] == "incremental"
    run = Corpus(corpus).read("runs").to_pylist()[-1]
    counts = json.loads(run["counts"])
    assert run["flow"] == "update" and run["status"] == "ok"
    assert counts["deleted"] == 1 and counts["added"] == 0 and counts["full_rebuild"] is False
    assert counts["clusters_touched"] and counts["summaries_rewritten"] == sum(counts["clusters_touched"].values())
    assert "tokens_in" in counts and "part05" not in json.dumps(nodes_of(corpus))


def test_update_no_prune_keeps_documents_whose_file_is_gone(work: tuple[Path, Path]) -> None:
    corpus, src = work
    (src / "zebra.txt").unlink()
    out = run_update([src], corpus, CONFIG, prune=False)
    assert out["plan"]["deleted"] == 1 and out["plan"]["pruned"] is False
    assert out["mode"] == "noop"  # nothing left the documents table, so the tree is the same
    assert any(UNIQUE in r["text"] for r in nodes_of(corpus))


def _age(src: Path, seconds: float = 30.0) -> None:
    """Set every source file's mtime ``seconds`` into the past (a just-written file is 'racy')."""
    import os
    import time

    for f in src.iterdir():
        t = time.time() - seconds
        os.utime(f, (t, t))


def test_update_noop_is_told_from_file_stats_and_a_change_is_not(work: tuple[Path, Path]) -> None:
    corpus, src = work
    _age(src)
    first = run_update([src], corpus, CONFIG)  # the full path decides "noop" and records the state
    assert first["mode"] == "noop" and not first.get("quick")
    assert (corpus / "cache" / "update_noop.json").is_file()
    manifest = (corpus / "manifest.json").read_text()
    runs = Corpus(corpus).read("runs").num_rows
    quick = run_update([src], corpus, CONFIG)
    assert quick["quick"] is True and quick["mode"] == "noop" and quick["snapshot"] == json.loads(manifest)["snapshot"]
    assert quick["plan"]["unchanged"] == len(list(src.iterdir())) and quick["calls"] == {"embedded_texts": 0, "summaries": 0}
    assert (corpus / "manifest.json").read_text() == manifest
    run = Corpus(corpus).read("runs").to_pylist()
    assert len(run) == runs + 1 and run[-1]["flow"] == "update" and json.loads(run[-1]["counts"])["quick"] is True
    from arborag.cli import app

    res = CliRunner().invoke(app, ["update", str(src), "--corpus", str(corpus), "--no-prefect"],
                             env={"COLUMNS": "300", "ARBORAG_CLUSTER__DIMS": "4"})  # CONFIG's one override
    assert res.exit_code == 0 and "unchanged" in res.output and "decided from file stats" in res.output, res.output
    # the update flow's body (what a scheduled run executes) takes the same shortcut, under the flow run's id
    from arborag.flows import update as update_flow_module

    scheduled = update_flow_module._update(str(corpus), [str(src)], config_overrides={"cluster": {"dims": 4}})
    assert scheduled["quick"] is True and scheduled["mode"] == "noop"
    assert Corpus(corpus).read("runs").to_pylist()[-1]["run_id"] == scheduled["run_id"]
    # another config is not the recorded state: the full path runs (and finds nothing to do)
    other = run_update([src], corpus, CONFIG.with_overrides(update={"max_drift": 0.5}))
    assert not other.get("quick") and other["mode"] == "noop"
    # a changed file (even with an old mtime) is seen, so is a new one
    zebra = src / "zebra.txt"
    zebra.write_text(zebra.read_text().replace("purple owls", "crimson ravens"), encoding="utf-8")
    _age(src)
    changed = run_update([src], corpus, CONFIG)
    assert not changed.get("quick") and changed["mode"] == "incremental" and changed["plan"]["changed"] == 1
    (src / "new.txt").write_text("The ferryman of Lisk rowed eleven goats across the dark river.\n", encoding="utf-8")
    added = run_update([src], corpus, CONFIG)  # new.txt was just written: never trusted from a record anyway
    assert not added.get("quick") and added["plan"]["added"] == 1
    assert not (corpus / "cache" / "update_noop.json").exists()  # racy: the record is not written


TREE_UPDATE_KEYS = {"nodes", "edges", "levels", "leaves_added", "leaves_removed", "clusters_touched", "clusters_opened", "summaries", "fallbacks",
                    "fallback_reasons", "drift", "stats"}
LEVEL_KEYS = {"level", "rewritten", "removed_children", "new_children", "replaced_children", "dissolved", "emptied", "split", "clusters",
              "seconds"}
LEVEL_KEYS_WHEN = {"training_dropped", "assigned", "assigned_by_centroid", "assigned_leaves", "rejected", "opened", "n_fallback", "fallback_reasons",
                   "tokens_in", "tokens_out"}


def test_update_records_the_tree_update_keys_and_reads_the_published_nodes_once(
    work: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``runs.counts`` keeps the keys users query under ``tree-update`` (per level too); the runner
    reads the previous snapshot's nodes.parquet once for the update and the labels."""
    from arborag.storage import tables

    corpus, src = work
    (src / "part05.txt").unlink()
    (src / "new.txt").write_text("The fairy godmother waved her wand over the pumpkin patch at dawn.\n", encoding="utf-8")
    real = tables.read_table
    reads: list[Path] = []

    def counting(name: str, path: Path, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if name == "nodes" and "snapshots" in Path(path).parts:
            reads.append(Path(path))
        return real(name, path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tables, "read_table", counting)
    assert run_update([src], corpus, CONFIG)["mode"] == "incremental"
    assert len(reads) == 1, reads
    tree = json.loads(Corpus(corpus).read("runs").to_pylist()[-1]["counts"])["tree-update"]
    assert set(tree) == TREE_UPDATE_KEYS
    assert set(tree["drift"]) == {"fitted", "changed", "share"} and tree["leaves_added"] >= 1 and tree["leaves_removed"] >= 1
    assert tree["summaries"] == sum(tree["clusters_touched"].values()) == sum(s["rewritten"] for s in tree["stats"]) > 0
    for st in tree["stats"]:
        assert LEVEL_KEYS <= set(st) <= LEVEL_KEYS | LEVEL_KEYS_WHEN, st
    assert "assigned_leaves" in tree["stats"][0] and all("assigned_leaves" not in st for st in tree["stats"][1:])
