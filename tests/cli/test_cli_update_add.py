"""`arborag update` vs `arborag add` through the CLI, and the CLI's checks of its arguments.

One corpus is built once (module fixture: two small FinanceBench 8-K filings beside the example
corpus, four documents) and copied per test. The scenario: a file of analyst notes given alone.
``update NOTES`` would delete every other document, so the delete guard refuses it — exit 4,
the plan printed, nothing written; ``add NOTES`` indexes it incrementally and keeps the rest.
The argument checks (no corpus, a mistyped one, a regular file, a missing source) need no build.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from arborag.cli import app
from arborag.cli.common import EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, EXIT_REFUSED, EXIT_USAGE
from tests.helpers.update import copy_corpus, published

FILINGS = ("FOOTLOCKER_2022_8K_dated-2022-05-20.pdf", "PEPSICO_2023_8K_dated-2023-05-05.pdf")
NOTES = (
    "Analyst notes on the quarter. The Brusselmoor tinker index rose for a third quarter in a row.\n\n"
    "Margins held steady while the copper-kettle segment doubled its orders from palace kitchens.\n"
)

runner = CliRunner()


def invoke(*args: str) -> tuple[int, str]:
    """Exit code and output (stdout and stderr), on one wide line per printed line."""
    result = runner.invoke(app, list(args), env={"COLUMNS": "400"})
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def flat(text: str) -> str:
    return " ".join(text.split())


def documents(corpus: Path) -> list[dict]:
    return pq.read_table(corpus / "tables" / "documents.parquet", columns=["uri", "status", "error"]).to_pylist()


def tables_and_manifest(corpus: Path) -> dict[str, bytes]:
    """Every working table (the runs log too), the manifest and the source-stat record, as bytes."""
    files = sorted((corpus / "tables").glob("*.parquet")) + [corpus / "manifest.json"] + sorted((corpus / "cache").glob("*.parquet"))
    return {p.name: p.read_bytes() for p in files}


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, shared_data: Path, examples_dir: Path) -> tuple[Path, Path]:
    pdfs = shared_data / "financebench" / "pdfs"
    missing = [name for name in FILINGS if not (pdfs / name).is_file()]
    if missing:
        pytest.skip(f"FinanceBench filings not found in {pdfs}: {', '.join(missing)}")
    root = tmp_path_factory.mktemp("update-add")
    src = root / "src"
    shutil.copytree(examples_dir / "corpus", src)
    for name in FILINGS:
        shutil.copy(pdfs / name, src / name)
    corpus = root / "c"
    code, out = invoke("build", str(src), "--corpus", str(corpus), "--no-prefect")
    assert code == EXIT_OK, out
    assert (published(corpus) / "clusters").is_dir()
    return corpus, src


@pytest.fixture()
def work(base: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path, Path]:
    corpus, src = copy_corpus(base[0], base[1], tmp_path)
    notes = tmp_path / "inbox" / "analyst_notes.txt"
    notes.parent.mkdir()
    notes.write_text(NOTES, encoding="utf-8")
    return corpus, src, notes


@pytest.mark.slow
def test_update_with_one_file_is_refused_with_the_plan_and_writes_nothing(work: tuple[Path, Path, Path]) -> None:
    corpus, src, notes = work
    before = tables_and_manifest(corpus)
    code, out = invoke("update", str(notes), "--corpus", str(corpus), "--no-prefect")
    assert code == EXIT_REFUSED, out
    text = flat(out)
    assert "delete 4 of the 4 documents" in text and "arborag add" in text and "--allow-delete" in text
    deleted_line = next(line for line in out.splitlines() if line.startswith("deleted: "))
    assert sorted(deleted_line.removeprefix("deleted: ").split(", ")) == sorted(str(p) for p in src.iterdir())
    assert f"added: {notes}" in out
    assert tables_and_manifest(corpus) == before, "a refused update writes no table, no run record, no snapshot"
    # the dry run says the same before anything runs, and exits 0
    code, out = invoke("update", str(notes), "--corpus", str(corpus), "--dry-run")
    assert code == EXIT_OK and "refused: this update would delete 4" in flat(out)


@pytest.mark.slow
def test_add_indexes_one_file_incrementally_and_keeps_every_other_document(work: tuple[Path, Path, Path]) -> None:
    corpus, src, notes = work
    snapshot = published(corpus).name
    code, out = invoke("add", str(notes), "--corpus", str(corpus), "--no-prefect")
    assert code == EXIT_OK, out
    assert "Add plan" in out and "incremental:" in out and "full rebuild" not in out
    assert "deleted" not in out, "add deletes nothing and says nothing of deletes"
    docs = documents(corpus)
    assert sorted(d["uri"] for d in docs if d["status"] == "ok") == sorted([str(notes), *(str(p) for p in src.iterdir())])
    assert published(corpus).name != snapshot
    leaves = [r["text"] for r in pq.read_table(published(corpus) / "nodes.parquet").to_pylist() if r["level"] == 0]
    assert any("Brusselmoor tinker index" in t for t in leaves)
    assert any("Cinderella" in t for t in leaves), "the documents not named stay in the tree"
    # the scheduled update of the folder with the notes moved in deletes nothing, and the guard lets it by
    shutil.move(notes, src / notes.name)
    code, out = invoke("update", str(src), "--corpus", str(corpus), "--no-prefect")
    assert code == EXIT_OK, out
    assert len([d for d in documents(corpus) if d["status"] == "ok"]) == 5


@pytest.mark.slow
def test_a_failed_file_is_listed_with_its_reason_and_fails_the_schedule_once(work: tuple[Path, Path, Path]) -> None:
    corpus, _src, notes = work
    broken = notes.parent / "empty.txt"
    broken.write_bytes(b"")
    code, out = invoke("add", str(broken), "--corpus", str(corpus), "--no-prefect")
    assert code == EXIT_PARTIAL, out
    reason = next(d["error"] for d in documents(corpus) if d["uri"] == str(broken))
    assert reason and f"failed: {broken}: {reason}" in out
    code, out = invoke("add", str(broken), "--corpus", str(corpus), "--no-prefect")
    assert code == EXIT_OK, out
    assert f"failed: {broken}: {reason} (failed the same way before" in out
    broken.write_bytes(bytes(range(256)) * 16)  # broken another way: a new failure
    code, out = invoke("add", str(broken), "--corpus", str(corpus), "--no-prefect")
    assert code == EXIT_PARTIAL, out


# -- argument checks (no build) --------------------------------------------------------------------
@pytest.mark.parametrize("command", ["update", "add"])
def test_update_and_add_refuse_a_folder_that_is_not_a_corpus(command: str, tmp_path: Path, examples_dir: Path) -> None:
    typo = tmp_path / "corpsu"
    typo.mkdir()
    code, out = invoke(command, str(examples_dir / "corpus"), "--corpus", str(typo), "--no-prefect")
    assert code == EXIT_ERROR, out
    assert f"--corpus {typo} is not a corpus" in flat(out) and "arborag build SOURCES --corpus" in flat(out)
    assert list(typo.iterdir()) == [], "nothing is created in the mistyped folder"
    code, out = invoke(command, str(examples_dir / "corpus"), "--corpus", str(tmp_path / "nowhere"), "--no-prefect")
    assert code == EXIT_ERROR and "does not exist" in flat(out) and not (tmp_path / "nowhere").exists()


def test_update_help_and_add_help_explain_the_difference() -> None:
    code, out = invoke("update", "--help")
    assert code == 0 and "arborag add" in flat(out) and "--max-delete" in out and "--allow-delete" in out and "--init" in out
    code, out = invoke("add", "--help")
    assert code == 0 and "deletes nothing" in flat(out) and "Example" in out


def test_a_bad_delete_limit_is_a_usage_error(tmp_path: Path, base_free_corpus: Path) -> None:
    code, out = invoke("update", str(tmp_path), "--corpus", str(base_free_corpus), "--max-delete", "half")
    assert code == EXIT_USAGE and "give a number of documents" in flat(out)
    code, out = invoke("update", str(tmp_path), "--corpus", str(base_free_corpus), "--max-delete", "3", "--allow-delete")
    assert code == EXIT_USAGE and "not both" in flat(out)


@pytest.fixture()
def base_free_corpus(tmp_path: Path) -> Path:
    """A folder that passes the corpus check (a manifest), for tests that stop before reading it."""
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "manifest.json").write_text(json.dumps({"snapshot": "none"}), encoding="utf-8")
    return corpus


@pytest.mark.parametrize("args", [
    ["build", "SRC"], ["update", "SRC"], ["add", "SRC"], ["ingest", "SRC"], ["segment"], ["sql", "select 1"],
    ["query", "anything"], ["ask", "anything"], ["inspect", "tree"], ["snapshots", "list"],
])
def test_a_corpus_that_is_a_regular_file_gets_one_clear_error(args: list[str], tmp_path: Path, examples_dir: Path) -> None:
    not_a_folder = tmp_path / "corpus.txt"
    not_a_folder.write_text("notes\n", encoding="utf-8")
    argv = [str(examples_dir / "corpus") if a == "SRC" else a for a in args]
    code, out = invoke(*argv, "--corpus", str(not_a_folder))
    assert code == EXIT_USAGE, out
    assert "is a file, not a corpus folder" in flat(out)
    assert not_a_folder.read_text(encoding="utf-8") == "notes\n"


def test_build_with_a_missing_source_creates_nothing(tmp_path: Path, examples_dir: Path) -> None:
    corpus = tmp_path / "new"
    code, out = invoke("build", str(examples_dir / "corpus"), str(tmp_path / "missing.pdf"), "--corpus", str(corpus), "--no-prefect")
    assert code == EXIT_ERROR, out
    assert "source not found" in flat(out) and "missing.pdf" in flat(out)
    assert not corpus.exists()


def test_the_build_hint_for_failed_documents_names_the_corpus(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from arborag.cli.build import _print_summary

    corpus = tmp_path / "my corpus"
    _print_summary({"status": "partial", "snapshot": "s1", "ingest": {"documents": 2, "failed": 1}}, str(corpus))
    out = flat(capsys.readouterr().out)
    assert f"--corpus '{corpus}'" in out and "--corpus ..." not in out


def test_add_starts_the_embedding_worker_early_as_update_does(monkeypatch: pytest.MonkeyPatch) -> None:
    from arborag.embed import spawn as worker_spawn

    monkeypatch.delenv("ARBORAG_EMBED_WORKER", raising=False)
    assert worker_spawn.will_embed(["arborag", "add", "notes.txt", "--corpus", "c"])
    assert not worker_spawn.will_embed(["arborag", "add", "notes.txt", "--corpus", "c", "--dry-run"])


def test_update_init_takes_a_new_folder(tmp_path: Path, examples_dir: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "note.txt").write_text(NOTES, encoding="utf-8")
    code, out = invoke("update", str(src), "--corpus", str(tmp_path / "new"), "--init", "--dry-run")
    assert code == EXIT_OK, out
    assert "Update plan" in out and f"added: {src / 'note.txt'}" in out
