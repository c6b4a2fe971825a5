"""The sections and context stages under Prefect: a second identical run is served from the task
cache (every stage Cached, no table rewritten); changing a sections setting re-runs the sections
stage, and the stages after it stay cached while the table they read is unchanged."""

from __future__ import annotations

from pathlib import Path

from helpers.context import write_structured_corpus

from arborag.config import ArboragConfig
from arborag.storage.corpus import Corpus


def test_sections_and_context_are_cached_stages(prefect_harness: None, tmp_path: Path) -> None:
    from arborag.flows.ingest import run_ingest_and_segment

    files = write_structured_corpus(tmp_path / "src")
    corpus = tmp_path / "corpus"
    cfg = ArboragConfig().with_overrides(sections={"strategy": "structural"})
    first = run_ingest_and_segment([files["md"].parent], corpus, cfg)
    assert first["status"] == "ok" and first["cached"] == []
    assert first["sections"]["sections"] == 11 and first["context"]["documents"] == 4
    tables = {p: p.read_bytes() for p in (Corpus(corpus).tables_dir).glob("*.parquet") if p.stem != "runs"}

    second = run_ingest_and_segment([files["md"].parent], corpus, cfg)
    assert second["cached"] == ["ingest", "sections", "context", "segment"]
    assert {p: p.read_bytes() for p in tables} == tables

    # a smaller block target changes no heading-based section here, but the sections config is
    # part of the stage's key: sections runs again (same table), segment stays cached on the
    # table's bytes, context never depended on it
    third = run_ingest_and_segment([files["md"].parent], corpus, cfg.with_overrides(sections={"target_chars": 100}))
    assert "sections" not in third["cached"] and {"ingest", "context", "segment"} <= set(third["cached"])
    assert not third["sections"]["written"]
