"""`arborag ingest | segment | sql` through the CLI (plain runs: --no-prefect; the Prefect path is
in test_ingest_flow.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from arborag.cli import app
from arborag.cli.common import EXIT_ERROR, EXIT_OK, EXIT_PARTIAL
from helpers.ingest import write_bad_files, write_good_files

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str]:
    """Exit code and output; rich wraps lines at 80 columns, so ``flat(out)`` for phrase checks."""
    result = runner.invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def flat(text: str) -> str:
    return " ".join(text.split())


def sql_json(corpus: Path, query: str) -> list[dict]:
    code, out = invoke("sql", query, "--corpus", str(corpus), "--format", "json")
    assert code == EXIT_OK, out
    return json.loads(out)


def table_bytes(corpus: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((corpus / "tables").glob("*.parquet")) if p.name != "runs.parquet"}


@pytest.mark.parametrize("command", ["ingest", "segment", "sql"])
def test_help_explains_options_with_an_example(command: str) -> None:
    code, out = invoke(command, "--help")
    assert code == 0 and "Example" in out and "--corpus" in out


def test_ingest_partial_run_exit_code_and_idempotent_rerun(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_good_files(src / "good")
    bad = write_bad_files(src / "bad")
    corpus = tmp_path / "corpus"
    code, out = invoke("ingest", str(src), "--corpus", str(corpus), "--no-prefect")
    assert code == EXIT_PARTIAL, out
    assert "7 source(s) failed" in flat(out) and "symlink loop" in flat(out)
    docs = sql_json(corpus, "SELECT status, count(*) AS n FROM documents GROUP BY status ORDER BY status")
    assert docs == [{"status": "error", "n": 7}, {"status": "ok", "n": 9}]
    before = table_bytes(corpus)

    code, out = invoke("ingest", str(src), "--corpus", str(corpus), "--no-prefect", "--json")
    assert code == EXIT_PARTIAL
    summary = json.loads(out)
    assert summary["status"] == "partial" and summary["ingest"]["added"] == 0 and summary["ingest"]["failed"] == 7
    assert table_bytes(corpus) == before  # nothing rewritten

    runs = sql_json(corpus, "SELECT flow, status, config_hash, json_extract(counts, '$.ingest.failed') AS failed FROM runs")
    assert [(r["flow"], r["status"], int(r["failed"])) for r in runs] == [("ingest", "partial", 7)] * 2

    # fix one file: its error row is replaced by a document
    bad["empty"].write_text("Now it has words.")
    code, _ = invoke("ingest", str(src), "--corpus", str(corpus), "--no-prefect")
    assert code == EXIT_PARTIAL
    rows = sql_json(corpus, f"SELECT status FROM documents WHERE uri = '{bad['empty']}'")
    assert rows == [{"status": "ok"}]


def test_ingest_missing_source_fails_cleanly(tmp_path: Path) -> None:
    code, out = invoke("ingest", str(tmp_path / "nope"), "--corpus", str(tmp_path / "c"), "--no-prefect")
    assert code == EXIT_ERROR and "no such file" in flat(out)
    assert not (tmp_path / "c" / "tables" / "documents.parquet").exists()


def test_segment_strategies_side_by_side(tmp_path: Path) -> None:
    write_good_files(tmp_path / "src")
    corpus = tmp_path / "corpus"
    code, out = invoke("ingest", str(tmp_path / "src"), "--corpus", str(corpus), "--no-prefect", "--segment")
    assert code == EXIT_OK, out
    code, out = invoke("segment", "--corpus", str(corpus), "--strategy", "ffs", "--no-prefect")
    assert code == EXIT_OK, out
    counts = {r["strategy"]: r["n"] for r in sql_json(corpus, "SELECT strategy, count(*) AS n FROM chunks GROUP BY strategy")}
    assert set(counts) == {"sentence", "ffs"} and all(n >= 8 for n in counts.values())
    sentence_ids = sql_json(corpus, "SELECT chunk_id FROM chunks WHERE strategy = 'sentence' ORDER BY chunk_id")

    # re-segmenting one strategy with other settings replaces only that strategy's rows
    ffs_ids = sql_json(corpus, "SELECT chunk_id FROM chunks WHERE strategy = 'ffs' ORDER BY chunk_id")
    result = runner.invoke(
        app, ["segment", "--corpus", str(corpus), "--strategy", "ffs", "--no-prefect", "--json"],
        env={"ARBORAG_SEGMENT__FFS_WINDOW": "4", "ARBORAG_SEGMENT__FFS_STEP": "2"},
    )
    assert result.exit_code == EXIT_OK, result.output
    assert json.loads(result.output)["segment"]["chunks"] > counts["ffs"]
    assert sql_json(corpus, "SELECT chunk_id FROM chunks WHERE strategy = 'sentence' ORDER BY chunk_id") == sentence_ids
    assert sql_json(corpus, "SELECT chunk_id FROM chunks WHERE strategy = 'ffs' ORDER BY chunk_id") != ffs_ids
    chunks = pq.read_table(corpus / "tables" / "chunks.parquet")
    docs = {r["doc_id"]: r["text"] for r in pq.read_table(corpus / "tables" / "documents.parquet").to_pylist()}
    for row in chunks.to_pylist():  # the text is the reading view of the slice: joined line breaks become spaces
        original = docs[row["doc_id"]][row["start_char"]:row["end_char"]]
        assert len(original) == len(row["text"]) and all(a == b or (a == "\n" and b == " ") for a, b in zip(original, row["text"]))


def test_segment_without_documents_is_an_error(tmp_path: Path) -> None:
    code, out = invoke("segment", "--corpus", str(tmp_path / "empty"), "--no-prefect")
    assert code == EXIT_ERROR and "arborag ingest" in flat(out)
    code, out = invoke("segment", "--corpus", str(tmp_path), "--strategy", "nope")
    assert code == 2  # usage error: unknown strategy


def test_sql_formats_and_read_only(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("Hello, world.\nSecond line.")
    corpus = tmp_path / "corpus"
    assert invoke("ingest", str(tmp_path / "src"), "-c", str(corpus), "--no-prefect")[0] == EXIT_OK
    code, out = invoke("sql", "SELECT title, n_chars FROM documents", "-c", str(corpus))
    assert code == 0 and "a" in out and "26" in out
    code, out = invoke("sql", "SELECT title, n_chars FROM documents", "-c", str(corpus), "--format", "csv")
    assert out.splitlines()[:2] == ["title,n_chars", "a,26"]
    assert sql_json(corpus, "SELECT json_extract_string(metadata, '$.encoding') AS enc FROM documents") == [{"enc": "utf-8"}]
    parquet = corpus / "tables" / "documents.parquet"
    before = parquet.read_bytes()
    for bad_sql in (f"COPY documents TO '{parquet}' (FORMAT parquet)", "DROP VIEW documents", "SELECT 1; SELECT 2"):
        code, out = invoke("sql", bad_sql, "-c", str(corpus))
        assert code == EXIT_ERROR, (bad_sql, out)
    code, out = invoke("sql", "SELECT * FROM read_csv('/etc/hostname')", "-c", str(corpus))
    assert code == EXIT_ERROR  # no file access beyond the corpus tables
    assert parquet.read_bytes() == before
    code, out = invoke("sql", "SELECT nope FROM documents", "-c", str(corpus))
    assert code == EXIT_ERROR and "nope" in flat(out)
    code, out = invoke("sql", "SELECT 1", "-c", str(tmp_path / "missing"))
    assert code == EXIT_ERROR and "does not exist" in flat(out)


def test_sql_starts_neither_prefect_nor_torch(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.txt").write_text("Hello.")
    corpus = tmp_path / "corpus"
    assert invoke("ingest", str(tmp_path / "src"), "-c", str(corpus), "--no-prefect")[0] == EXIT_OK
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from arborag.cli import app\n"
        f"r = CliRunner().invoke(app, ['sql', 'SELECT count(*) AS n FROM documents', '-c', {str(corpus)!r}, '--format', 'json'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print([m for m in ('prefect', 'torch', 'sentence_transformers', 'lancedb') if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.shared_data
def test_shared_data_six_documents_then_broken_files(shared_data: Path, tmp_path: Path) -> None:
    """The acceptance check: 5 FinanceBench PDFs + Cinderella = 6 documents; a folder of broken
    files adds error rows and exit code 3; rerunning changes nothing."""
    corpus = tmp_path / "corpus"
    pdfs, raptor = shared_data / "financebench" / "pdfs", shared_data / "raptor"
    code, out = invoke("ingest", str(pdfs), str(raptor), "--corpus", str(corpus), "--no-prefect")
    assert code == EXIT_OK, out
    assert sql_json(corpus, "SELECT count(*) AS n FROM documents WHERE status = 'ok'") == [{"n": 6}]
    bad = tmp_path / "bad"
    write_bad_files(bad)
    code, out = invoke("ingest", str(pdfs), str(raptor), str(bad), "--corpus", str(corpus), "--no-prefect")
    assert code == EXIT_PARTIAL, out
    before = table_bytes(corpus)
    rows = sql_json(corpus, "SELECT status, count(*) AS n FROM documents GROUP BY status ORDER BY status")
    assert rows == [{"status": "error", "n": 7}, {"status": "ok", "n": 7}]  # + the invalid-UTF-8 text
    code, out = invoke("ingest", str(pdfs), str(raptor), str(bad), "--corpus", str(corpus), "--no-prefect", "--json")
    assert code == EXIT_PARTIAL
    assert json.loads(out)["ingest"]["skipped_unchanged_files"] == 6 + 6  # bytes unchanged: not parsed again
    assert table_bytes(corpus) == before
    shutil.rmtree(bad)
