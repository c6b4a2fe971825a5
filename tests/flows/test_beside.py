"""``Stage.beside`` (flows/stage.py): without Prefect a stage so marked runs on a thread while the
stages after it run, and is joined before the first one that touches what it reads or writes.
And ``publish`` seals staged files as hard links, or copies where links fail."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from arborag.config import ArboragConfig
from arborag.flows.stage import SNAPSHOT, Stage, run_pipeline, staged, table
from arborag.storage.corpus import Corpus
from arborag.tasks.stage_context import StageContext

WAIT_S = 20  # a generous bound: the events below are set within milliseconds when the code is right


class _FakeTask:
    """Stands in for a Prefect task in plain runs (``run_stage`` calls ``task.fn``)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn


def _stage(name: str, fn: Any, *, reads: tuple[str, ...] = (), writes: tuple[str, ...] = (), beside: bool = False) -> Stage:
    return Stage(name, _FakeTask(fn), reads=reads, writes=writes, params=("key",), beside=beside)


def _ctx(tmp_path: Path) -> StageContext:
    return StageContext(Corpus(tmp_path / "c").ensure(), ArboragConfig(), "run-1")


def _slow_then_quick(log: list[str]) -> tuple[Any, Any]:
    """Two runners: ``first`` logs after 0.2 s, ``second`` at once; run one after the other the
    log reads first, second — run side by side it reads second, first."""

    def first(ctx: StageContext, key: str) -> dict[str, Any]:
        time.sleep(0.2)
        log.append("first")
        return {}

    def second(ctx: StageContext, key: str) -> dict[str, Any]:
        log.append("second")
        return {}

    return first, second


def test_a_beside_stage_runs_while_the_next_stage_runs_and_is_joined_before_its_reader(tmp_path: Path) -> None:
    ctx, log, out = _ctx(tmp_path), [], {"cached": []}
    started, released = threading.Event(), threading.Event()

    def vectors(ctx: StageContext, key: str) -> dict[str, Any]:
        started.set()
        assert released.wait(WAIT_S), "the next stage did not run beside this one"
        time.sleep(0.05)  # still running when the main thread reaches the reader
        log.append("vectors")
        return {"rows": 3}

    def sparse(ctx: StageContext, key: str) -> dict[str, Any]:
        assert started.wait(WAIT_S)
        log.append("sparse")
        released.set()
        return {"count": 3}

    def publish(ctx: StageContext, key: str) -> dict[str, Any]:
        log.append("publish")
        return {"snapshot": "s"}

    pipeline = (
        _stage("vectors", vectors, writes=(staged("vectors.lance"),), beside=True),
        _stage("sparse", sparse, writes=(staged("sparse"),)),
        _stage("publish", publish, reads=(staged("vectors.lance"),), writes=(SNAPSHOT,)),
    )
    run_pipeline(ctx, pipeline, use_prefect=False, out=out, key="k")
    assert log == ["sparse", "vectors", "publish"]
    assert out["vectors"] == {"rows": 3} and out["sparse"] == {"count": 3} and out["cached"] == []
    assert {"vectors", "sparse", "publish"} <= set(ctx.counters.seconds)


@pytest.mark.parametrize("later", ["reads its output", "writes its input", "writes its output", "writes the snapshot"])
def test_a_later_stage_that_touches_what_a_beside_stage_uses_waits_for_it(tmp_path: Path, later: str) -> None:
    ctx, log = _ctx(tmp_path), []

    first, second = _slow_then_quick(log)
    touches = {
        "reads its output": {"reads": (staged("a"),)},
        "writes its input": {"writes": (table("chunks"),)},
        "writes its output": {"writes": (staged("a"),)},
        "writes the snapshot": {"writes": (SNAPSHOT,)},
    }[later]
    pipeline = (_stage("first", first, reads=(table("chunks"),), writes=(staged("a"),), beside=True), _stage("second", second, **touches))
    run_pipeline(ctx, pipeline, use_prefect=False, out={"cached": []}, key="k")
    assert log == ["first", "second"]


def test_an_error_beside_is_raised_at_the_join_after_the_stages_that_ran_meanwhile(tmp_path: Path) -> None:
    ctx, log = _ctx(tmp_path), []

    def broken(ctx: StageContext, key: str) -> dict[str, Any]:
        raise OSError("no space left on device")

    def sparse(ctx: StageContext, key: str) -> dict[str, Any]:
        log.append("sparse")
        return {}

    def publish(ctx: StageContext, key: str) -> dict[str, Any]:
        log.append("publish")
        return {}

    pipeline = (
        _stage("vectors", broken, writes=(staged("vectors.lance"),), beside=True),
        _stage("sparse", sparse, writes=(staged("sparse"),)),
        _stage("publish", publish, writes=(SNAPSHOT,)),
    )
    with pytest.raises(OSError, match="no space left"):
        run_pipeline(ctx, pipeline, use_prefect=False, out={"cached": []}, key="k")
    assert log == ["sparse"]  # nothing was published


def test_an_error_here_waits_for_the_stage_beside_before_it_is_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ctx, log = _ctx(tmp_path), []

    def slow(ctx: StageContext, key: str) -> dict[str, Any]:
        time.sleep(0.3)
        log.append("slow finished")
        return {}

    def bad(ctx: StageContext, key: str) -> dict[str, Any]:
        raise ValueError("a malformed table")

    pipeline = (_stage("slow", slow, writes=(staged("a"),), beside=True), _stage("bad", bad, writes=(staged("b"),)))
    with pytest.raises(ValueError, match="malformed"):
        run_pipeline(ctx, pipeline, use_prefect=False, out={"cached": []}, key="k")
    assert log == ["slow finished"]  # no thread of the run is left writing into staging

    def also_bad(ctx: StageContext, key: str) -> dict[str, Any]:
        raise RuntimeError("the index is locked")

    pipeline = (_stage("also", also_bad, writes=(staged("a"),), beside=True), _stage("bad", bad, writes=(staged("b"),)))
    with pytest.raises(ValueError, match="malformed"), caplog.at_level("WARNING"):
        run_pipeline(ctx, pipeline, use_prefect=False, out={"cached": []}, key="k")
    assert "stage also (run beside) failed too" in caplog.text and "the index is locked" in caplog.text


def test_under_prefect_a_beside_stage_runs_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import arborag.flows.stage as stage_module

    # the Prefect call stands in as a direct call: what is tested is the order run_pipeline keeps
    monkeypatch.setattr(stage_module, "_prefect_call", lambda ctx, stage, key, refresh, params: (stage.runner(ctx, **params), False))
    ctx, log = _ctx(tmp_path), []

    first, second = _slow_then_quick(log)
    pipeline = (_stage("first", first, writes=(staged("a"),), beside=True), _stage("second", second, writes=(staged("b"),)))
    run_pipeline(ctx, pipeline, use_prefect=True, out={"cached": []}, key="k")
    assert log == ["first", "second"]


def test_every_beside_stage_of_the_pipelines_runs_beside_a_stage_and_publish_joins_it() -> None:
    """A beside stage buys something only where the stage after it need not wait for it."""
    from arborag.flows.pipelines import TREE_PIPELINE, UPDATE_PIPELINE

    beside_something: set[str] = set()
    for pipeline in (TREE_PIPELINE, UPDATE_PIPELINE):
        assert pipeline[-1].name == "publish" and SNAPSHOT in pipeline[-1].writes  # joins every stage beside
        for stage, nxt in zip(pipeline, pipeline[1:]):
            if stage.beside and not (set(stage.writes) & set(nxt.reads) or set(nxt.writes) & set(stage.reads + stage.writes)
                                     or SNAPSHOT in nxt.writes):
                beside_something.add(stage.name)
    assert beside_something == {s.name for p in (TREE_PIPELINE, UPDATE_PIPELINE) for s in p if s.beside} == {"vectors", "sparse"}


def _publish_small_tree(tmp_path: Path) -> tuple[StageContext, Path, str]:
    from helpers.embed import FakeEmbedder

    from arborag.flows.pipelines import TREE_PIPELINE
    from arborag.flows.stage import snapshot_files
    from arborag.tasks.build.key import build_key
    from arborag.tasks.build.leaves import load_leaves
    from arborag.tasks.stages.leaf_vectors import run_leaf_vectors
    from arborag.tasks.stages.documents import run_documents
    from arborag.tasks.stages.links import run_links
    from arborag.tasks.stages.publish import run_publish
    from arborag.tasks.stages.chunks import run_chunks
    from arborag.tasks.stages.sparse import run_sparse
    from arborag.tasks.stages.tree import run_tree
    from arborag.tasks.stages.vectors import run_vectors

    src = tmp_path / "src"
    src.mkdir(parents=True)
    (src / "a.txt").write_text("Cinderella lost her glass slipper at the ball. The prince kept it.")
    ctx = StageContext(Corpus(tmp_path / "c").ensure(), ArboragConfig(), "run-1")
    ctx.resources["embedder"] = FakeEmbedder()
    run_documents(ctx, [str(src / "a.txt")])
    run_chunks(ctx, "sentence")
    key = build_key(load_leaves(ctx), ctx.config, "code")
    for runner in (run_leaf_vectors, run_tree, run_vectors, run_sparse, run_links):
        runner(ctx, key)
    staged = sum(1 for p in ctx.staging_dir(key).rglob("*") if p.is_file())
    run_publish(ctx, key, snapshot_files(TREE_PIPELINE))
    return ctx, ctx.corpus.published_dir(), staged


def test_publish_seals_the_staged_files_and_copies_where_links_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    real_link, links = os.link, []

    def spy(src: Any, dst: Any) -> None:
        links.append(Path(dst).name)
        real_link(src, dst)

    monkeypatch.setattr(os, "link", spy)
    linked_ctx, linked, linked_staged = _publish_small_tree(tmp_path / "linked")
    assert {"nodes.parquet", "edges.parquet", "nodes.arrow", "arborag_sparse.json"} <= set(links)  # linked, not copied

    def no_links(src: Any, dst: Any) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_links)
    copied_ctx, copied, copied_staged = _publish_small_tree(tmp_path / "copied")
    files = sorted(p.relative_to(linked).as_posix() for p in linked.rglob("*") if p.is_file())
    # lance names its data files by uuid: the two snapshots hold as many files, not the same names
    assert len(files) == sum(1 for p in copied.rglob("*") if p.is_file()) and linked_staged == copied_staged
    assert any(f.startswith("vectors.lance/") for f in files) and any(f.startswith("sparse/") for f in files)
    for name in ("nodes.parquet", "edges.parquet", "vectors.lance/nodes.arrow"):
        assert (linked / name).read_bytes() == (copied / name).read_bytes(), name
        assert (linked / name).stat().st_nlink == 1  # the staging folder is gone: the snapshot holds the only link
    for ctx in (linked_ctx, copied_ctx):
        assert ctx.corpus.read_snapshot("nodes").num_rows > 0
