"""The pipelines are tuples of the same declared Stage objects, and the generic runner derives keys,
proofs, skips and the snapshot's files from the declarations alone (no Prefect here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from arborag.cli import app
from arborag.config import ArboragConfig
from arborag.flows.pipelines import (
    BUILD_PIPELINE, CONTEXT, EMBED, INGEST, INGEST_PIPELINE, PIPELINES, PLAN, PUBLISH, SECTIONS, SEGMENT, SPARSE, TREE_PIPELINE,
    UPDATE_BRANCH, UPDATE_PIPELINE, VECTORS,
)
from arborag.flows.stage import Stage, declared_config, run_pipeline, snapshot_files, stage_done, stage_key, table
from arborag.storage.corpus import Corpus
from arborag.tasks.stage_context import StageContext


class _FakeTask:
    """Stands in for a Prefect task: ``.fn`` is the runner."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn


def _ctx(tmp_path: Path, config: ArboragConfig | None = None) -> StageContext:
    return StageContext(Corpus(tmp_path / "c").ensure(), config or ArboragConfig(), "run-1", progress=False)


def test_pipelines_share_their_stage_objects() -> None:
    assert BUILD_PIPELINE[: len(INGEST_PIPELINE)] == INGEST_PIPELINE and BUILD_PIPELINE[len(INGEST_PIPELINE):] == TREE_PIPELINE
    for stage in (EMBED, VECTORS, SPARSE, PUBLISH):  # one definition, used by build and update
        assert any(s is stage for s in TREE_PIPELINE) and any(s is stage for s in UPDATE_PIPELINE)
    assert UPDATE_BRANCH.before == (PLAN, SECTIONS, CONTEXT, SEGMENT)
    assert UPDATE_BRANCH.route("incremental") == UPDATE_PIPELINE and UPDATE_BRANCH.route("full") == TREE_PIPELINE
    assert UPDATE_BRANCH.route("noop") == () and PIPELINES["update"] == UPDATE_BRANCH.stages
    names = [s.name for p in PIPELINES.values() for s in p]
    assert len({s.name: id(s) for p in PIPELINES.values() for s in p}) == len(set(names))  # a name is one object


def test_the_snapshot_files_come_from_the_declarations() -> None:
    assert snapshot_files(TREE_PIPELINE) == ["nodes.parquet", "edges.parquet", "vectors.lance", "sparse", "links.parquet", "boilerplate.parquet", "repeats.parquet"]
    # the same files; the update runs links first and the vector table after the sparse index (flows/update.py)
    assert sorted(snapshot_files(UPDATE_PIPELINE)) == sorted(snapshot_files(TREE_PIPELINE))
    assert len(snapshot_files(UPDATE_PIPELINE)) == len(set(snapshot_files(UPDATE_PIPELINE)))
    for stage in TREE_PIPELINE[:-1]:  # every staged file a snapshot holds is written by a stage before publish
        assert all(f"staged:{name}" in stage.writes for name in stage.snapshot)


def test_enabled_follows_the_config() -> None:
    off = ArboragConfig()
    on = ArboragConfig().with_overrides(sections={"strategy": "structural"})
    assert not SECTIONS.enabled(off) and not CONTEXT.enabled(off)
    assert SECTIONS.enabled(on) and CONTEXT.enabled(on)  # context.headers None: on with sections
    assert CONTEXT.enabled(ArboragConfig().with_overrides(context={"headers": True}))
    assert declared_config(on, ("sections.strategy", "context.llm")) == {"sections.strategy": "structural", "context.llm": False}


def test_keys_follow_what_a_stage_declares(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    src = tmp_path / "a.txt"
    src.write_text("one")
    ingest = stage_key(ctx, INGEST, {"files": [str(src)]})
    assert ingest == stage_key(ctx, INGEST, {"files": [str(src)]})
    src.write_text("three")  # the sources' stats key the ingest stage
    assert ingest != stage_key(ctx, INGEST, {"files": [str(src)]})
    seg = stage_key(ctx, SEGMENT, {"strategy": "sentence"})
    assert seg != stage_key(ctx, SEGMENT, {"strategy": "dds"})  # a param
    other = _ctx(tmp_path, ArboragConfig().with_overrides(segment={"sentence_max_tokens": 50}))
    assert seg != stage_key(other, SEGMENT, {"strategy": "sentence"})  # a declared config key
    unrelated = _ctx(tmp_path, ArboragConfig().with_overrides(cluster={"seed": 7}))
    assert seg == stage_key(unrelated, SEGMENT, {"strategy": "sentence"})  # an undeclared one
    assert stage_key(ctx, EMBED, {"key": "k1"}) == "k1" != stage_key(ctx, EMBED, {"key": "k2"})  # a build stage: the build key
    assert stage_key(ctx, PLAN, {}) != stage_key(StageContext(ctx.corpus, ctx.config, "run-2"), PLAN, {})  # never reused across runs


def test_staged_outputs_prove_a_stage_done_and_resume_it(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    assert not stage_done(ctx, EMBED, {"key": "k"}, None)
    ctx.staging_dir("k").mkdir(parents=True)
    (ctx.staging_dir("k") / "leaf_vectors.parquet").write_bytes(b"x")
    assert stage_done(ctx, EMBED, {"key": "k"}, None) and EMBED.resumable
    assert not PUBLISH.resumable and not stage_done(ctx, PUBLISH, {"key": "k"}, None)
    assert not SEGMENT.resumable and not stage_done(ctx, SEGMENT, {"strategy": "sentence"}, None)


def test_run_pipeline_skips_what_the_run_or_the_config_leaves_out(tmp_path: Path) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    def runner(name: str) -> Any:
        def run(ctx: StageContext, **params: Any) -> dict[str, Any]:
            calls.append((name, params))
            if name == "opt":
                ctx.corpus.table_path("sections").parent.mkdir(parents=True, exist_ok=True)
                ctx.corpus.table_path("sections").write_bytes(b"")
            return {"stage": name}
        run.__module__ = __name__
        return _FakeTask(run)

    first = Stage("first", runner("first"), writes=(table("documents"),), params=("files",))
    opt = Stage("opt", runner("opt"), writes=(table("sections"),), needs=("strategy",), enabled=lambda c: c.sections.strategy != "none")
    last = Stage("last", runner("last"), writes=(table("chunks"),), params=("strategy",))
    ctx = _ctx(tmp_path, ArboragConfig().with_overrides(sections={"strategy": "structural"}))
    out: dict[str, Any] = {"cached": []}
    run_pipeline(ctx, (first, opt, last), use_prefect=False, out=out, files=None, strategy="sentence")
    assert [c[0] for c in calls] == ["opt", "last"] and calls[1][1] == {"strategy": "sentence"}  # no files: no first
    calls.clear()
    ctx_off = _ctx(tmp_path)  # opt is off, but its table exists: it runs to empty it
    run_pipeline(ctx_off, (first, opt, last), use_prefect=False, out=out, files=["a"], strategy=None)
    assert [c[0] for c in calls] == ["first"] and calls[0][1] == {"files": ["a"]}  # no strategy: opt and last wait
    calls.clear()
    run_pipeline(ctx_off, (first, opt, last), use_prefect=False, out=out, files=["a"], strategy="sentence")
    assert [c[0] for c in calls] == ["first", "opt", "last"]
    calls.clear()
    ctx_off.corpus.table_path("sections").unlink()
    run_pipeline(ctx_off, (first, opt, last), use_prefect=False, out=out, files=["a"], strategy="sentence")
    assert [c[0] for c in calls] == ["first", "last"]


def test_arborag_pipeline_prints_every_pipeline_from_the_declarations(tmp_path: Path) -> None:
    import json

    res = CliRunner().invoke(app, ["pipeline", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert list(rows) == ["ingest", "build", "update", "evaluate"]
    assert [r["stage"] for r in rows["build"]] == [s.name for s in BUILD_PIPELINE]
    seg = next(r for r in rows["ingest"] if r["stage"] == "segment")
    assert seg["writes"] == ["table:chunks"] and "segment" in seg["config"] and seg["enabled"] is True
    assert next(r for r in rows["build"] if r["stage"] == "sections")["enabled"] is False
    cfg = tmp_path / "arborag.yaml"
    cfg.write_text("sections:\n  strategy: structural\n")
    res = CliRunner().invoke(app, ["pipeline", "build", "--json", "--config", str(cfg)])
    assert res.exit_code == 0, res.output
    assert next(r for r in json.loads(res.output)["build"] if r["stage"] == "sections")["enabled"] is True
    res = CliRunner().invoke(app, ["pipeline", "update"])
    assert res.exit_code == 0 and "update pipeline" in res.output and "tree-update: update the published tree" in res.output
    assert CliRunner().invoke(app, ["pipeline", "nope"]).exit_code != 0


def test_the_update_runs_the_stages_before_its_branch_then_the_route_the_predicate_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """flows/update.py follows UPDATE_BRANCH: the stages before it (plan, segment: sections and
    context are off), then the predicate, given the leaves; a route name without stages runs
    nothing more (noop). A dry run stops after the plan, before the predicate."""
    import dataclasses

    from arborag.flows import update as update_flow

    asked: list[int] = []

    def fake_choose(ctx: StageContext, leaves: Any) -> tuple[str, str]:
        asked.append(leaves.num_rows)
        return "noop", "the fake predicate says nothing changed"

    monkeypatch.setattr(update_flow, "UPDATE_BRANCH", dataclasses.replace(UPDATE_BRANCH, choose=fake_choose))
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("Cinderella went to the ball. The prince found her slipper. " * 20)
    dry = update_flow.run_update([src], tmp_path / "c", ArboragConfig(), dry_run=True)
    assert "plan" in dry and "segment" not in dry and asked == []
    out = update_flow.run_update([src], tmp_path / "c", ArboragConfig(), noop_checked=True)
    assert asked and asked[0] > 0
    assert out["mode"] == "noop" and out["noop"] is True and out["reason"] == "the fake predicate says nothing changed"
    assert "plan" in out and "segment" in out and not any(s.name in out for s in UPDATE_PIPELINE)


def test_arborag_pipeline_prints_the_update_routes() -> None:
    res = CliRunner().invoke(app, ["pipeline", "update", "--json"])
    assert res.exit_code == 0, res.output
    import json

    rows = json.loads(res.output)["update"]
    assert [(r["route"], r["stage"]) for r in rows] == [
        *(("", s.name) for s in UPDATE_BRANCH.before), *(("incremental", s.name) for s in UPDATE_PIPELINE),
        *(("full", s.name) for s in TREE_PIPELINE),
    ]
    res = CliRunner().invoke(app, ["pipeline", "update"])
    assert res.exit_code == 0 and "decide() picks one route: incremental | full | noop" in res.output
