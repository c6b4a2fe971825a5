"""flows/stage.py and the flow plumbing: the one cached-stage wrapper, the run recorder, code
fingerprints derived from the pipelines, config as JSON overrides, module-level tasks' ``.fn``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from arborag.config import ArboragConfig, load_config
from arborag.flows.common import cache_key_from_stats, config_overrides
from arborag.flows.fingerprints import module_closure, pipeline_fingerprint
from arborag.flows.runs import record_run
from arborag.flows.stage import Stage, run_stage, staged
from arborag.storage.corpus import Corpus
from arborag.tasks.stage_context import StageContext


class _FakeTask:
    """Stands in for a Prefect task in plain runs: ``run_stage`` calls ``task.fn`` then."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn


def _ctx(tmp_path: Path) -> StageContext:
    return StageContext(Corpus(tmp_path / "c").ensure(), ArboragConfig(), "run-1")


def test_plain_stage_runs_and_a_resumable_stage_with_outputs_is_skipped(tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []

    def runner(ctx: StageContext, key: str) -> dict[str, Any]:
        calls.append({"key": key})
        (ctx.staging_dir(key)).mkdir(parents=True, exist_ok=True)
        (ctx.staging_dir(key) / "out.parquet").write_text("x")
        return {"rows": 1}

    ctx = _ctx(tmp_path)
    stage = Stage("demo", _FakeTask(runner), writes=(staged("out.parquet"),))

    def done(_s: dict[str, Any] | None) -> bool:
        return (ctx.staging_dir("k") / "out.parquet").exists()

    assert run_stage(ctx, stage, use_prefect=False, cache_key="k", done=done, key="k") == ({"rows": 1}, False)
    assert run_stage(ctx, stage, use_prefect=False, cache_key="k", done=done, key="k") == ({"stage": "demo"}, True)
    assert len(calls) == 1 and "demo" in ctx.counters.seconds
    not_resumable = Stage("demo", _FakeTask(runner))
    run_stage(ctx, not_resumable, use_prefect=False, cache_key="k", done=done, key="k")
    assert len(calls) == 2


def test_record_run_appends_a_row(tmp_path: Path) -> None:
    from datetime import datetime, timezone

    ctx = _ctx(tmp_path)
    ctx.counters.tokens_in, ctx.counters.tokens_out = 5, 7
    now = datetime.now(timezone.utc)
    record_run(ctx, "build", started=now, finished=now, status="ok", message="", counts={"b": 1, "a": {"x": 2}})
    rows = pq.read_table(ctx.corpus.table_path("runs")).to_pylist()
    assert len(rows) == 1 and rows[0]["run_id"] == "run-1" and rows[0]["flow"] == "build"
    assert rows[0]["tokens_in"] == 5 and rows[0]["tokens_out"] == 7 and rows[0]["message"] is None
    assert json.loads(rows[0]["counts"]) == {"a": {"x": 2}, "b": 1}
    assert rows[0]["config_hash"] == ArboragConfig().config_hash()


def test_fingerprints_come_from_the_pipelines() -> None:
    from arborag.flows.build import BUILD_PIPELINE, TREE_PIPELINE
    from arborag.flows.eval_stages import EVAL_BUILD, EVAL_RETRIEVE
    from arborag.flows.ingest import INGEST_PIPELINE

    tree = module_closure(m for s in TREE_PIPELINE for m in s.modules)
    # everything that shapes a tree, found by following imports (lazy ones too), no hand-kept list
    for module in ("arborag.tasks.tree.build", "arborag.tasks.cluster.fit", "arborag.tasks.summarize", "arborag.tasks.summarize.llm",
                   "arborag.tasks.embedding.cached", "arborag.storage.vectors", "arborag.storage.sparse"):
        assert module in tree, module
    assert any(m.startswith("arborag.storage.lucene") for m in tree)
    ingest = module_closure(m for s in INGEST_PIPELINE for m in s.modules)
    assert {"arborag.tasks.stages.documents", "arborag.tasks.stages.chunks", "arborag.tasks.segment.windows", "arborag.tokenizer"} <= set(ingest)
    assert any(m.startswith("arborag.tasks.ingest.") for m in ingest)
    # the evaluation's build stage runs the whole build pipeline's code (the LLM summarizer, lucene included)
    assert module_closure(EVAL_BUILD.modules) == module_closure(m for s in BUILD_PIPELINE for m in s.modules)
    assert "arborag.query.index" in module_closure(EVAL_RETRIEVE.modules)
    assert pipeline_fingerprint(TREE_PIPELINE) != pipeline_fingerprint(INGEST_PIPELINE)
    assert all(not m.startswith("arborag.flows") for m in tree)  # runners live in tasks/, below the flows


def test_config_reaches_a_flow_as_json_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no arborag.yaml here
    cfg = ArboragConfig().with_overrides(segment={"strategy": "dds"}, cluster={"seed": 7})
    overrides = config_overrides(cfg)
    assert overrides == {"segment": {"strategy": "dds"}, "cluster": {"seed": 7}}
    assert json.loads(json.dumps(overrides)) == overrides
    assert load_config(None, overrides=overrides) == cfg
    assert config_overrides(ArboragConfig()) == {}
    # secrets never become parameters
    secret = ArboragConfig().with_overrides(sparse={"es_password": "hunter2"})
    assert "hunter2" not in json.dumps(config_overrides(secret))


def test_ingest_key_reads_no_file_but_sees_changes(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_text("one")
    key = cache_key_from_stats([a], "ingest")
    assert key == cache_key_from_stats([a, a], "ingest")
    a.write_text("three")
    assert key != cache_key_from_stats([a], "ingest")
    assert cache_key_from_stats([tmp_path / "missing"], "x") == cache_key_from_stats([tmp_path / "missing"], "x")


def test_module_level_tasks_run_with_fn(tmp_path: Path) -> None:
    from arborag.flows.pipelines import INGEST, SEGMENT

    ingest_documents, segment_chunks = INGEST.task, SEGMENT.task

    src = tmp_path / "a.txt"
    src.write_text("The glass slipper fit. Everyone was surprised.\n\nThe end.")
    ctx = _ctx(tmp_path)
    out = ingest_documents.fn(ctx, files=[str(src)])
    assert out["added"] == 1 and out["written"] is True and out["fingerprint"] != "absent"
    seg = segment_chunks.fn(ctx, strategy="sentence")
    assert seg["chunks"] >= 1 and seg["strategy"] == "sentence"
    assert seg.counts()["chunks"] == seg["chunks"] and "segment" not in ctx.counters.stages  # the pipeline records it
    again = segment_chunks.fn(ctx, strategy="sentence")
    assert again["written"] is False and again["fingerprint"] == seg["fingerprint"]


def test_a_flow_module_answers_its_flow_name_and_refuses_others() -> None:
    from arborag.flows.lazy import flow_getattr

    made: list[str] = []
    getattr_ = flow_getattr("some.flows", "build", lambda: made.append("flow") or "the flow")
    assert getattr_("build") == "the flow" and made == ["flow"]
    with pytest.raises(AttributeError, match="'some.flows' has no attribute 'other'"):
        getattr_("other")
    import arborag.flows.update as update_module

    with pytest.raises(AttributeError, match="no attribute 'not_a_flow'"):
        update_module.not_a_flow  # noqa: B018 - the module __getattr__ refuses it
