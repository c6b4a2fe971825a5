"""An ``s3://`` corpus on a machine whose mirror holds none of its snapshots (a real S3-compatible
server, moto in server mode on 127.0.0.1; the client is the real s3fs/botocore): the LLM-cache
sweep reads the kept snapshots where they are — an old cached reply that is a kept snapshot's
summary stays, an old reply no snapshot uses goes — and ``arborag snapshots catalog`` gives that
machine its ``published.duckdb``."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers.s3 import moto_s3
from helpers.update import CONFIG, make_sources

from arborag.config import RetentionConfig
from arborag.flows.build import run_build
from arborag.llm.cache import LLMCache
from arborag.storage.corpus import Corpus
from arborag.storage.objectstore import ObjectStore
from arborag.storage.snapshots import collect_garbage

pytestmark = pytest.mark.slow

pytest.importorskip("moto.server")

URI = "s3://arborag-llm-gc/corpora/tale"
OLD = "2026-01-01T00:00:00+00:00"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A moto S3 server on 127.0.0.1 (a free port) with one bucket; AWS_* point at it; two mirrors."""
    mirrors = {"a": str(tmp_path_factory.mktemp("mirror-a")), "b": str(tmp_path_factory.mktemp("mirror-b"))}
    with moto_s3("arborag-llm-gc", mirrors["a"]):
        yield mirrors


@pytest.fixture(scope="module")
def built(s3: dict[str, str], tmp_path_factory: pytest.TempPathFactory, examples_dir: Path) -> dict[str, object]:
    """Built and published from machine a."""
    src = make_sources(tmp_path_factory.mktemp("src"), examples_dir)
    out = run_build([src], URI, CONFIG.with_overrides(retention={"auto": False}), use_prefect=False, progress=False)
    assert out["status"] == "ok"
    assert str(Corpus(URI).root).startswith(s3["a"]) and (Corpus(URI).root / "published.duckdb").is_file()  # the publish wrote it in a's mirror
    return out


def test_s3_llm_sweep_keeps_the_summaries_of_remote_snapshots(s3: dict[str, str], built: dict[str, str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    store = ObjectStore(URI)
    nodes = pq.read_table(io.BytesIO(store.fs.cat_file(store.path(f"snapshots/{built['snapshot']}/nodes.parquet"))))
    summary = next(t for t, level in zip(nodes["text"].to_pylist(), nodes["level"].to_pylist(), strict=True) if level > 0)

    monkeypatch.setenv("ARBORAG_OBJECT_CACHE", s3["b"])  # another machine: its mirror holds no snapshot
    machine_b = Corpus(URI)
    assert not (machine_b.snapshots_dir / built["snapshot"]).exists()
    cache = LLMCache(machine_b.cache_dir / "llm")
    cache.put("kept", {"text": f" {summary} ", "model": "m", "created_at": OLD})
    cache.put("unused", {"text": "a reply no snapshot holds", "model": "m", "created_at": OLD})
    cache.flush()

    report = collect_garbage(machine_b, RetentionConfig(keep_last=10, keep_days=1, grace_s=0))
    assert not report.errors and report.parts["llm_cache"]["items"] == 1
    left = LLMCache(machine_b.cache_dir / "llm")
    assert left.get("kept") is not None and left.get("unused") is None
    assert not (machine_b.snapshots_dir / built["snapshot"]).exists()  # read from the bucket, not downloaded


def test_snapshots_catalog_on_another_machine(s3: dict[str, str], built: dict[str, str], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import duckdb
    from typer.testing import CliRunner

    from arborag.cli.app import app

    monkeypatch.setenv("ARBORAG_OBJECT_CACHE", str(tmp_path / "mirror-c"))  # a third machine, nothing local
    machine_c = Corpus(URI)
    res = CliRunner().invoke(app, ["snapshots", "catalog", "--corpus", URI])
    assert res.exit_code == 0, res.output
    catalog = machine_c.root / "published.duckdb"
    store = ObjectStore(URI)
    nodes = pq.read_table(io.BytesIO(store.fs.cat_file(store.path(f"snapshots/{built['snapshot']}/nodes.parquet"))), columns=["level"])
    con = duckdb.connect(str(catalog), read_only=True)
    try:
        assert con.execute("SELECT snapshot FROM snapshot").fetchall() == [(built["snapshot"],)]
        assert con.execute("SELECT count(*) FROM nodes").fetchall() == [(nodes.num_rows,)]
    finally:
        con.close()
