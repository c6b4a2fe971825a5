"""flows/ingest.py under a real Prefect engine: the flow runs, a second run over unchanged input is
served from the cache, a stale cache is not trusted, runs are recorded.

One session-scoped ``prefect_test_harness`` (≈16 s once) serves every test here; each flow run
after the first costs about a second.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from arborag.cli import app
from arborag.cli.common import EXIT_PARTIAL
from arborag.config import ArboragConfig
from arborag.errors import IngestError
from arborag.flows.common import cache_key_from_stats, file_fingerprint, table_fingerprint, task_options
from arborag.storage.corpus import Corpus
from helpers.ingest import write_bad_files

pytestmark = pytest.mark.slow


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count calls of the two stage functions (the tasks import them when they run)."""
    import arborag.tasks.stages.chunks
    import arborag.tasks.stages.documents

    calls = {"build_documents": 0, "build_chunks": 0}
    real_docs, real_chunks = arborag.tasks.stages.documents.build_documents, arborag.tasks.stages.chunks.build_chunks

    def docs(*a, **k):  # type: ignore[no-untyped-def]
        calls["build_documents"] += 1
        return real_docs(*a, **k)

    def chunks(*a, **k):  # type: ignore[no-untyped-def]
        calls["build_chunks"] += 1
        return real_chunks(*a, **k)

    monkeypatch.setattr(arborag.tasks.stages.documents, "build_documents", docs)
    monkeypatch.setattr(arborag.tasks.stages.chunks, "build_chunks", chunks)
    return calls


def _sources(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("The glass slipper fit. Everyone was surprised.\n\nThe end.")
    (src / "b.md").write_text("# Notes\n\nPumpkins become coaches at midnight, or rather stop being coaches.")
    return src


def test_flow_runs_then_second_run_is_cached(prefect_harness: None, counted: dict[str, int], tmp_path: Path) -> None:
    from arborag.flows.ingest import run_ingest_and_segment

    src = _sources(tmp_path)
    corpus = tmp_path / "corpus"
    cfg = ArboragConfig()
    first = run_ingest_and_segment([src], corpus, cfg, strategy="sentence")
    assert first["status"] == "ok" and first["cached"] == []
    assert first["ingest"]["added"] == 2 and first["segment"]["chunks"] >= 2
    assert counted == {"build_documents": 1, "build_chunks": 1}
    docs_before = (corpus / "tables" / "documents.parquet").read_bytes()

    second = run_ingest_and_segment([src], corpus, cfg, strategy="sentence")
    assert second["cached"] == ["ingest", "segment"]  # task states were Cached
    assert counted == {"build_documents": 1, "build_chunks": 1}  # the stage functions did not run
    assert second["ingest"]["added"] == 0 and second["ingest"]["unchanged"] == 2
    assert (corpus / "tables" / "documents.parquet").read_bytes() == docs_before

    # the runs table has both runs, under their Prefect flow-run ids, with the config hash
    runs = pq.read_table(corpus / "tables" / "runs.parquet").to_pylist()
    assert [r["run_id"] for r in runs] == [first["run_id"], second["run_id"]]
    assert all(r["config_hash"] == cfg.config_hash() and r["flow"] == "ingest+segment" for r in runs)
    assert json.loads(runs[1]["counts"])["cached"] == ["ingest", "segment"]

    # a changed input file is read again; a new strategy segments again
    (src / "a.txt").write_text("The glass slipper fit. Nobody was surprised.")
    third = run_ingest_and_segment([src], corpus, cfg, strategy="dds")
    assert third["cached"] == [] and third["ingest"]["added"] == 1 and third["ingest"]["replaced"] == 1
    assert counted == {"build_documents": 2, "build_chunks": 2}
    strategies = set(pq.read_table(corpus / "tables" / "chunks.parquet").column("strategy").to_pylist())
    assert strategies == {"sentence", "dds"}


def test_stale_cache_is_not_trusted(prefect_harness: None, counted: dict[str, int], tmp_path: Path) -> None:
    from arborag.flows.ingest import run_ingest_and_segment

    src = _sources(tmp_path)
    corpus = tmp_path / "corpus"
    cfg = ArboragConfig()
    run_ingest_and_segment([src], corpus, cfg, segment=False)
    (corpus / "tables" / "documents.parquet").unlink()  # someone deleted the table
    out = run_ingest_and_segment([src], corpus, cfg, segment=False)
    assert out["cached"] == [] and out["ingest"]["added"] == 2
    assert counted["build_documents"] == 2
    assert pq.read_table(corpus / "tables" / "documents.parquet").num_rows == 2


def test_cli_runs_the_flow_and_reports_failures(prefect_harness: None, tmp_path: Path) -> None:
    src = _sources(tmp_path)
    write_bad_files(src / "bad")
    corpus = tmp_path / "corpus"
    runner = CliRunner()
    for expect_cached in (False, True):
        result = runner.invoke(app, ["ingest", str(src), "--corpus", str(corpus), "--segment", "--json", "--prefect"])
        assert result.exit_code == EXIT_PARTIAL, result.output
        out = json.loads(result.output)
        assert out["ingest"]["failed"] == 7 and out["ingest"]["documents"] == 3
        assert ("ingest" in out["cached"]) is expect_cached
    runs = pq.read_table(corpus / "tables" / "runs.parquet").column("status").to_pylist()
    assert runs == ["partial", "partial"]


def test_flow_object_is_a_prefect_flow(prefect_harness: None) -> None:
    import arborag.flows.ingest

    flow_obj = arborag.flows.ingest.ingest_and_segment
    assert flow_obj.name == "ingest_and_segment"
    assert set(flow_obj.parameters.properties) >= {"sources", "corpus_dir", "config_overrides", "strategy"}


def test_common_helpers(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("one")
    b.write_text("two")
    key = cache_key_from_stats([a, b], "stage", {"x": 1})
    assert key == cache_key_from_stats([b, a, a], "stage", {"x": 1})
    assert key != cache_key_from_stats([a, b], "stage", {"x": 2})
    b.write_text("three")
    assert key != cache_key_from_stats([a, b], "stage", {"x": 1})
    assert file_fingerprint(tmp_path / "missing").startswith("unreadable:")
    assert table_fingerprint(tmp_path / "missing.parquet") == "absent"
    opts = task_options(Corpus(tmp_path / "c"), retries=2, cache_key="k")
    assert opts["persist_result"] and isinstance(opts["result_storage"], Path)
    assert opts["cache_key_fn"](None, {}) == "k" and opts["retries"] == 2
    assert "cache_policy" in task_options(Corpus(tmp_path / "c"))
    retry = opts["retry_condition_fn"]
    assert retry(None, None, SimpleNamespace(data=OSError("disk hiccup")))
    assert not retry(None, None, SimpleNamespace(data=IngestError("x", "corrupt")))
