"""Stage runners return one frozen dataclass per stage; the pipeline records its ``counts()``.

The keys of ``counts()`` are the stage's entry in the ``runs`` table's ``counts`` JSON, which users
query in SQL: the sets below are that contract, written out so a change to them is a visible
change to this file.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from prefect.serializers import JSONSerializer

from arborag.config import ArboragConfig
from arborag.flows.pipelines import INGEST, INGEST_PIPELINE, PUBLISH, SEGMENT
from arborag.flows.stage import run_pipeline
from arborag.storage.corpus import Corpus
from arborag.tasks.stage_context import StageContext, StageSummary
from arborag.tasks.stages.chunks import ChunksSummary, run_chunks
from arborag.tasks.stages.documents import DocumentsSummary, cached_ingest_summary, run_documents
from arborag.tasks.stages.leaf_vectors import LeafVectorsSummary
from arborag.tasks.stages.plan import PlanSummary
from arborag.tasks.stages.publish import PublishSummary
from arborag.tasks.stages.sections import SectionsSummary

INGEST_KEYS = {"files", "added", "unchanged", "duplicates", "replaced", "failed", "warnings", "skipped_unchanged_files",
               "table", "documents", "errors", "written", "fingerprint"}
SEGMENT_KEYS = {"table", "strategy", "documents", "segmented", "reused", "chunks", "chunks_total", "tokens", "written", "fingerprint"}
SECTIONS_KEYS = {"table", "strategy", "sections", "documents", "llm_calls", "llm_failures", "written", "fingerprint"}
CONTEXT_KEYS = {"documents", "llm_calls", "llm_failures", "written", "fingerprint"}


def _sources(tmp_path: Path) -> list[str]:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("Cinderella lost her glass slipper at the ball. The prince kept it.\n")
    (src / "b.txt").write_text("The pumpkin became a coach. At midnight it was a pumpkin again.\n")
    (src / "c.bin").write_bytes(b"\x00\x01\x02 not text")
    return sorted(str(p) for p in src.iterdir())


def _ctx(tmp_path: Path, **sections: str) -> StageContext:
    config = ArboragConfig(sections=sections) if sections else ArboragConfig()
    return StageContext(Corpus(tmp_path / "c").ensure(), config, "run-1")


def test_runners_return_frozen_summaries_and_write_no_run_record(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    docs = run_documents(ctx, _sources(tmp_path))
    seg = run_chunks(ctx, "sentence")
    assert isinstance(docs, DocumentsSummary) and isinstance(seg, ChunksSummary)
    assert ctx.counters.stages == {}  # the pipeline records the summaries, not the runners
    assert set(docs.counts()) == INGEST_KEYS and set(seg.counts()) == SEGMENT_KEYS
    assert docs.counts()["added"] == 2 and docs.counts()["failed"] == 1 and seg.counts()["documents"] == 2
    # the flow's view keeps the first failures, which the run record leaves out
    assert set(docs.report()) == INGEST_KEYS | {"failures", "warning_list"}
    assert docs["failures"][0]["uri"].endswith("c.bin") and dict(docs) == docs.report()
    with pytest.raises(dataclasses.FrozenInstanceError):
        seg.chunks = 0  # type: ignore[misc]


def test_the_pipeline_records_each_stage_counts_once(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, strategy="structural")
    out: dict = {"cached": []}
    run_pipeline(ctx, INGEST_PIPELINE, use_prefect=False, out=out, files=_sources(tmp_path), strategy="sentence")
    stages = ctx.counters.stages
    assert set(stages["ingest"]) == INGEST_KEYS and set(stages["segment"]) == SEGMENT_KEYS
    assert set(stages["sections"]) == SECTIONS_KEYS  # structural: no semantic window counts
    assert set(stages.get("context", CONTEXT_KEYS)) == CONTEXT_KEYS
    assert stages["segment"]["chunks"] == out["segment"]["chunks"] > 0
    # what the flow returns is plain JSON (the CLI prints it; Prefect's flow result stores it)
    assert all(type(out[s]) is dict for s in ("ingest", "sections", "segment"))
    assert json.loads(json.dumps(out))["ingest"]["failures"][0]["uri"].endswith("c.bin")


def test_a_summary_comes_back_from_prefects_json_cache_as_itself(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    docs = run_documents(ctx, _sources(tmp_path))
    serializer = JSONSerializer()
    again = serializer.loads(serializer.dumps(docs))
    assert isinstance(again, DocumentsSummary) and again == docs
    pub = PublishSummary(snapshot="snap-x", gc={"errors": [], "parts": {"staging": {"items": 1}}})
    assert serializer.loads(serializer.dumps(pub)) == pub


def test_cache_hits_record_nothing_added_and_nothing_written(tmp_path: Path, prefect_harness: None) -> None:
    files = _sources(tmp_path)
    first_ctx, first = _ctx(tmp_path), {"cached": []}
    run_pipeline(first_ctx, (INGEST, SEGMENT), use_prefect=True, out=first, files=files, strategy="sentence")
    ctx, out = _ctx(tmp_path), {"cached": []}
    run_pipeline(ctx, (INGEST, SEGMENT), use_prefect=True, out=out, files=files, strategy="sentence")  # Prefect's JSON cache
    assert first["cached"] == [] and out["cached"] == ["ingest", "segment"]
    assert first_ctx.counters.stages["segment"]["written"] is True
    assert ctx.counters.stages["segment"] == {**first_ctx.counters.stages["segment"], "written": False} == {**first["segment"], "written": False}
    recorded = ctx.counters.stages["ingest"]
    assert set(recorded) == INGEST_KEYS and (recorded["added"], recorded["unchanged"], recorded["written"]) == (0, 2, False)
    assert type(out["ingest"]) is dict and out["ingest"]["failures"] == first["ingest"]["failures"]
    hit = cached_ingest_summary(DocumentsSummary(**first["ingest"]))
    assert isinstance(hit, DocumentsSummary) and hit.counts() == recorded


@dataclasses.dataclass(frozen=True)
class FakeTask:
    """Stands in for a stage's Prefect task: ``fn`` is the runner."""

    summary: StageSummary

    def fn(self, ctx: StageContext) -> StageSummary:
        return self.summary


def test_a_summary_without_counts_adds_no_entry_to_the_run_record(tmp_path: Path) -> None:
    ctx, out = _ctx(tmp_path), {"cached": []}
    published = PublishSummary(snapshot="snap-x", gc={"errors": []})
    stage = dataclasses.replace(PUBLISH, task=FakeTask(published), params=(), reads=(), writes=())
    run_pipeline(ctx, (stage,), use_prefect=False, out=out)
    assert "publish" not in ctx.counters.stages  # retention records its own entry, ``gc``
    assert out["publish"] == {"snapshot": "snap-x", "gc": {"errors": []}}
    assert PublishSummary(snapshot="snap-y", unchanged=True).report() == {"snapshot": "snap-y", "unchanged": True}


def test_views_that_differ_from_the_record() -> None:
    leaf = LeafVectorsSummary(path="/s/leaf_vectors.parquet", rows=4, computed=3)
    assert leaf.counts() == {"leaves": 4, "computed": 3} and leaf.report() == {"path": "/s/leaf_vectors.parquet", "rows": 4}
    plan = PlanSummary(plan={"added": 1, "changed": 0, "added_uris": ["a.txt"], "pruned": True}, files=3, held=2,
                       failures=[{"uri": "b.txt", "reason": "unreadable", "new": True}], new_failures=1, files_read=3,
                       written=True, fingerprint="f", new_doc_ids=["d1"], gone_doc_ids=[])
    assert set(plan.counts()) == {"added", "changed", "pruned", "files", "held", "new_failures", "files_read", "written", "fingerprint"}
    assert "estimate" not in plan.report() and plan.report()["added_uris"] == ["a.txt"]
    dry = dataclasses.replace(plan, estimate={"new_leaves": 2}, refused="over the delete limit")
    assert dry.report()["estimate"] == {"new_leaves": 2} and dry.report()["refused"] and "estimate" not in dry.counts()
    semantic = SectionsSummary(table="t", strategy="semantic", sections=2, documents=1, llm_calls=1, llm_failures=0,
                               failed_windows=0, collapsed_windows=1, invalid_answers=0, written=True, fingerprint="f")
    assert set(semantic.counts()) == SECTIONS_KEYS | {"failed_windows", "collapsed_windows", "invalid_answers"}
    assert all(isinstance(s, StageSummary) for s in (leaf, plan, semantic))
