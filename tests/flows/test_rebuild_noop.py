"""A rebuild of unchanged sources publishes nothing, and a build whose tree is the published one's
keeps the published snapshot.

Real SEC filings (two FinanceBench 8-Ks: tables of figures and vote counts) plus the example
corpus, real embedder, extractive summaries. One corpus, built once for the module.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from arborag.config import ArboragConfig
from arborag.flows import build as build_flow
from arborag.flows.build import run_build

pytestmark = pytest.mark.slow

#: Foot Locker's 8-K holds a table of vote counts: with these sources one cluster of its rows has
#: no sentence to quote (checked below), the case that gave an empty summary.
PDFS = ("FOOTLOCKER_2022_8K_dated-2022-05-20.pdf", "PEPSICO_2023_8K_dated-2023-05-05.pdf")


def _snapshots(corpus: Path) -> list[str]:
    return sorted(p.name for p in (corpus / "snapshots").iterdir() if p.is_dir() and not p.name.endswith(".partial"))


def _manifest(corpus: Path) -> dict[str, Any]:
    return json.loads((corpus / "manifest.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_data: Path, examples_dir: Path) -> tuple[list[str], Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("rebuild")
    pdfs = root / "filings"
    pdfs.mkdir()
    for name in PDFS:
        shutil.copy2(shared_data / "financebench" / "pdfs" / name, pdfs / name)
    sources = [str(pdfs), str(examples_dir / "corpus")]
    corpus = root / "corpus"
    first = run_build(sources, corpus, ArboragConfig(), use_prefect=False, progress=False)
    return sources, corpus, first


def test_a_rebuild_of_unchanged_sources_publishes_nothing(built: tuple[list[str], Path, dict[str, Any]]) -> None:
    sources, corpus, first = built
    assert first["status"] == "ok" and first["noop"] is False
    snap = first["snapshot"]
    for _ in range(2):
        again = run_build(sources, corpus, ArboragConfig(), use_prefect=False, progress=False)
        assert again["noop"] is True and again["snapshot"] == snap
        assert "publish" not in again and "retry_of" not in again  # decided before any tree stage ran
        assert again["calls"]["summaries"] == 0 and again["calls"]["embedded_texts"] == 0
    assert _snapshots(corpus) == [snap] and _manifest(corpus)["snapshot"] == snap


def test_no_summary_is_empty_and_none_is_a_fallback(built: tuple[list[str], Path, dict[str, Any]]) -> None:
    from arborag.tasks.ingest.reading import is_summary_sentence
    from arborag.text import split_sentences

    _, corpus, first = built
    snap = corpus / "snapshots" / first["snapshot"]
    nodes = pq.read_table(snap / "nodes.parquet").to_pylist()
    summaries = [n for n in nodes if n["level"] > 0]
    assert summaries
    children: dict[str, list[str]] = {}
    for e in pq.read_table(snap / "edges.parquet").to_pylist():
        children.setdefault(e["parent_id"], []).append(e["child_id"])
    text = {n["node_id"]: n["text"] for n in nodes}
    unquotable = [p for p, kids in children.items() if not any(is_summary_sentence(s) for k in kids for s in split_sentences(text[k] or ""))]
    assert unquotable, "no cluster without a whole sentence: this corpus no longer covers that case"
    assert [n["node_id"] for n in summaries if not n["text"].strip() or n["n_tokens"] == 0] == []
    assert {n["summary_status"] for n in summaries} == {"ok"}  # no LLM configured: nothing fell back
    assert first["tree"]["fallbacks"] == 0 and json.loads((corpus / "snapshots" / first["snapshot"] / "info.json").read_text())["fallbacks"] == 0
    assert "(empty)" not in {n["title"] for n in summaries}


def test_a_version_bump_that_changes_no_output_keeps_the_published_snapshot(
    built: tuple[list[str], Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    sources, corpus, first = built
    bumped = tuple(replace(s, code_version=s.code_version + "-bumped") if s.name == "tree" else s for s in build_flow.TREE_PIPELINE)
    monkeypatch.setattr(build_flow, "TREE_PIPELINE", bumped)
    out = run_build(sources, corpus, ArboragConfig(), use_prefect=False, progress=False)
    assert out["build_key"] != first["build_key"]  # a new key: the tree stage ran again ...
    assert out["publish"] == {"snapshot": first["snapshot"], "unchanged": True}  # ... and made the same tree
    assert out["noop"] is True and out["snapshot"] == first["snapshot"]
    assert _snapshots(corpus) == [first["snapshot"]]
    man = _manifest(corpus)
    assert man["snapshot"] == first["snapshot"] and man["build_key"] == out["build_key"] and man["run_id"] == first["run_id"]
    # the manifest records the snapshot as this key's result: the next build is a no-op at once
    again = run_build(sources, corpus, ArboragConfig(), use_prefect=False, progress=False)
    assert again["noop"] is True and "publish" not in again and again["snapshot"] == first["snapshot"]
