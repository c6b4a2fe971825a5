"""Adding a stage as docs/ARCHITECTURE.md "Adding a stage" says: one module (the runner beside its
pure function) and one entry in a pipeline of flows/pipelines.py. The toy stage here is that: its
module is written to a temporary folder, its declaration goes into the build pipeline, and the
generic machinery does the rest: it runs, it is skipped as done on the second run, ``arborag
pipeline`` prints it, and gc sweeps its staged output and its Prefect record once no snapshot
keeps its build key."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from arborag.cli import app
from arborag.config import ArboragConfig, RetentionConfig
from arborag.flows import pipelines
from arborag.flows.ingest import run_ingest_and_segment
from arborag.flows.lazy import LazyTask
from arborag.flows.stage import Stage, _record_key, run_pipeline, staged, table
from arborag.storage.corpus import Corpus
from arborag.storage.snapshots import collect_garbage
from arborag.tasks.stage_context import StageContext

TOY_MODULE = '''
"""Words per chunk: the toy stage's pure function and its runner."""

from dataclasses import dataclass
import polars as pl
import pyarrow as pa

from arborag.tasks.stage_context import StageContext, StageSummary

OUTPUTS = ("toy_words.parquet",)


def word_counts(chunks: pa.Table) -> pa.Table:
    """The pure function: one row per chunk, its number of words."""
    df = pl.DataFrame(chunks.select(["chunk_id", "text"]))
    return df.select("chunk_id", pl.col("text").str.split(" ").list.len().alias("words")).to_arrow()


@dataclass(frozen=True)
class ToyWordsSummary(StageSummary):
    chunks: int
    words: int


def run_toy_words(ctx: StageContext, key: str) -> ToyWordsSummary:
    """The runner: read the chunks, write the staged file under the build key."""
    import pyarrow.parquet as pq

    out = word_counts(ctx.corpus.read("chunks"))
    folder = ctx.staging_dir(key)
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(out, folder / OUTPUTS[0])
    return ToyWordsSummary(chunks=out.num_rows, words=int(sum(out.column("words").to_pylist())))
'''


@pytest.fixture()
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Stage:
    """The toy module, imported from a temporary folder, declared as flows/pipelines.py declares
    a stage, and put in the build pipeline before publish."""
    folder = tmp_path / "toy_pkg"
    folder.mkdir()
    (folder / "toy_words.py").write_text(TOY_MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    module = importlib.import_module("toy_words")
    stage = Stage(
        "toy-words", LazyTask("toy-words", module.run_toy_words), code_version="1",
        reads=(table("chunks"),), writes=tuple(staged(n) for n in module.OUTPUTS), params=("key",),
        describe="count the words of every chunk (a toy)",
    )
    build = (*pipelines.BUILD_PIPELINE[:-1], stage, pipelines.PUBLISH)
    monkeypatch.setitem(pipelines.PIPELINES, "build", build)
    return stage


def test_a_stage_added_by_one_module_and_one_entry_runs_is_cached_printed_and_swept(toy: Stage, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("Cinderella went to the ball. " * 40, encoding="utf-8")
    config = ArboragConfig()
    run_ingest_and_segment([src], tmp_path / "c", config, use_prefect=False)
    corpus = Corpus(tmp_path / "c")
    ctx = StageContext(corpus, config, "run-1", progress=False)
    build = pipelines.PIPELINES["build"]
    assert toy in build

    first: dict = {"cached": []}  # the stages keyed by the build key, the toy among them
    run_pipeline(ctx, tuple(s for s in build if s is toy), use_prefect=False, out=first, key="k1")
    assert first["toy-words"]["chunks"] > 0 and first["toy-words"]["words"] >= 200 and first["cached"] == []
    assert ctx.counters.stages["toy-words"] == first["toy-words"]
    assert (ctx.staging_dir("k1") / "toy_words.parquet").is_file()

    second: dict = {"cached": []}
    run_pipeline(ctx, (toy,), use_prefect=False, out=second, key="k1")
    assert second["cached"] == ["toy-words"]

    res = CliRunner().invoke(app, ["pipeline", "build", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["build"]
    row = next(r for r in rows if r["stage"] == "toy-words")
    assert row["writes"] == ["staged:toy_words.parquet"] and row["runner"].endswith("toy_words.run_toy_words")
    assert [r["stage"] for r in rows][-2:] == ["toy-words", pipelines.PUBLISH.name]

    records = corpus.prefect_dir / "results"
    records.mkdir(parents=True, exist_ok=True)
    (records / _record_key(toy, "k1")).write_text("{}")  # what a Prefect run of it would have left
    report = collect_garbage(corpus, RetentionConfig(keep_last=1, grace_s=0))
    assert not (ctx.staging_dir("k1")).exists() and report.parts["staging"]["items"] == 1
    assert not (records / _record_key(toy, "k1")).exists() and report.parts["prefect"]["items"] == 1
