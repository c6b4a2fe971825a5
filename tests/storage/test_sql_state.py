"""One state per inspection, on a real corpus (built once for the module): ``arborag sql`` reads
documents, chunks and nodes from one snapshot — the published one after a rollback, after a dry
run with more sources — and ``CORPUS/published.duckdb`` gives plain DuckDB (opened read-only)
the same counts, switched by publish and rollback."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from helpers.update import CONFIG
from typer.testing import CliRunner

from arborag.flows.build import run_build
from arborag.flows.update import run_update
from arborag.storage.leases import LEASES_DIR
from arborag.storage.sql import CATALOG_FILE, run_sql, run_sql_state

pytestmark = pytest.mark.slow

NO_AUTO = CONFIG.with_overrides(retention={"auto": False})
COUNTS = ("SELECT (SELECT count(*) FROM documents) AS docs, (SELECT count(*) FROM chunks) AS chunks, "
          "(SELECT count(*) FROM nodes) AS nodes")
EXTRA = {
    "lighthouse.txt": "The keeper of the glass lighthouse counted ships through a long winter night.\n\n"
                      "Every ship that passed the salt marsh carried barrels of green apples.\n",
    "tinker.txt": "A travelling tinker mended kettles for three copper coins in every village square.\n\n"
                  "He sang about a clockwork heron that could tell the hour by the tides.\n",
}


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _snapshot_counts(corpus: Path, sid: str) -> tuple[int, int, int]:
    """The counts as the snapshot's own files hold them (Parquet footers, not SQL)."""
    folder = corpus / "snapshots" / sid
    rows = [pq.read_metadata(folder / f"{name}.parquet").num_rows for name in ("documents", "chunks", "nodes")]
    return rows[0], rows[1], rows[2]


def _catalog_counts(corpus_or_catalog: Path) -> tuple[Any, ...]:
    """(docs, chunks, nodes, snapshot) as a catalog file (or a corpus's) answers them."""
    import duckdb

    path = corpus_or_catalog / CATALOG_FILE if corpus_or_catalog.is_dir() else corpus_or_catalog
    con = duckdb.connect(str(path), read_only=True)
    try:
        got = con.execute(COUNTS).fetchone()
        assert got is not None
        return tuple(got) + tuple(con.execute("SELECT snapshot FROM snapshot").fetchone() or ())
    finally:
        con.close()


@pytest.fixture(scope="module")
def history(rolled_back_history: dict[str, Any]) -> dict[str, Any]:
    """The session's build + update (adds a document) + rollback, with the catalog's counts after each publish."""
    after_build, after_update = rolled_back_history["catalogs"]
    return {**rolled_back_history, "catalog_first": _catalog_counts(after_build), "catalog_second": _catalog_counts(after_update)}


def test_after_a_rollback_every_view_is_the_published_snapshots(history: dict[str, Any]) -> None:
    corpus, first, second = history["corpus"], history["first"], history["second"]
    got = run_sql_state(corpus, COUNTS)
    assert got.snapshot == first
    assert got.rows == [_snapshot_counts(corpus, first)]
    # the working tables still hold the update's documents: the published state differs from them
    working = run_sql_state(corpus, COUNTS.replace(", (SELECT count(*) FROM nodes) AS nodes", ""), working=True)
    assert working.snapshot is None
    assert working.rows[0][0] == _snapshot_counts(corpus, second)[0] > _snapshot_counts(corpus, first)[0]
    # a named snapshot: all three from it
    assert run_sql(corpus, COUNTS, snapshot=second)[1] == [_snapshot_counts(corpus, second)]
    # links come from the same snapshot as nodes: every link endpoint is a leaf of it
    _, rows = run_sql(corpus, "SELECT count(*), count(*) FILTER (WHERE node_id NOT IN (SELECT node_id FROM nodes) "
                              "OR doc_id NOT IN (SELECT doc_id FROM documents)) FROM links")
    assert rows[0][0] > 0 and rows[0][1] == 0
    # so do the boilerplate shares: one row per leaf of that snapshot
    _, rows = run_sql(corpus, "SELECT count(*), count(*) FILTER (WHERE node_id NOT IN (SELECT node_id FROM nodes WHERE level = 0)), "
                              "(SELECT count(*) FROM nodes WHERE level = 0) FROM boilerplate")
    assert rows[0][0] == rows[0][2] > 0 and rows[0][1] == 0


def test_catalog_follows_publish_and_rollback_and_reads_read_only(history: dict[str, Any], tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    corpus, first, second = history["corpus"], history["first"], history["second"]
    assert history["catalog_first"] == (*_snapshot_counts(corpus, first), first)
    assert history["catalog_second"] == (*_snapshot_counts(corpus, second), second)
    monkeypatch.chdir(tmp_path)  # the views hold absolute paths: any working directory reads them
    before = (corpus / CATALOG_FILE).read_bytes()
    assert _catalog_counts(corpus) == (*_snapshot_counts(corpus, first), first)  # the rollback switched it
    assert (corpus / CATALOG_FILE).read_bytes() == before and not (corpus / f"{CATALOG_FILE}.wal").exists()
    assert sorted(os.listdir(tmp_path)) == []
    assert not list(corpus.glob(f".{CATALOG_FILE}.*"))  # no temporary file left behind
    # DuckDB's storage format 64 (v1.0.0) in the file header: a duckdb CLI 1.x opens it too
    header = before[:20]
    assert header[8:12] == b"DUCK" and struct.unpack("<Q", header[12:20]) == (64,)


@contextmanager
def _extra_sources(src: Path) -> Iterator[None]:
    """The :data:`EXTRA` files in ``src`` for the ``with`` block, gone after it."""
    for name, text in EXTRA.items():
        (src / name).write_text(text, encoding="utf-8")
    try:
        yield
    finally:
        for name in EXTRA:
            (src / name).unlink()


def test_dry_run_with_more_sources_writes_nothing_the_views_show(history: dict[str, Any]) -> None:
    corpus, src, first = history["corpus"], history["src"], history["first"]
    tables = _digest(corpus / "tables")
    catalog = (corpus / CATALOG_FILE).read_bytes()
    with _extra_sources(src):
        out = run_build([src], corpus, NO_AUTO, use_prefect=False, progress=False, dry_run=True)
    # the dry run saw the two new sources (more leaves than the working tables hold) ...
    assert "estimate" in out and "snapshot" not in out
    assert out["leaves"] > run_sql(corpus, "SELECT count(DISTINCT chunk_id) FROM chunks", working=True)[1][0][0]
    # ... and left the working tables, the catalog and the views as they were
    assert _digest(corpus / "tables") == tables
    assert (corpus / CATALOG_FILE).read_bytes() == catalog
    assert run_sql_state(corpus, COUNTS).rows == [_snapshot_counts(corpus, first)]
    assert not list(corpus.glob(".scratch-*"))  # the scratch copy is gone


def test_update_dry_run_with_more_sources_writes_nothing_the_views_show(history: dict[str, Any]) -> None:
    corpus, src, first = history["corpus"], history["src"], history["first"]
    tables = _digest(corpus / "tables")
    catalog = (corpus / CATALOG_FILE).read_bytes()
    with _extra_sources(src):
        out = run_update([src], corpus, NO_AUTO, dry_run=True)
    assert out["plan"]["added"] == len(EXTRA) and "snapshot" not in out
    assert _digest(corpus / "tables") == tables and (corpus / CATALOG_FILE).read_bytes() == catalog
    assert run_sql_state(corpus, COUNTS).rows == [_snapshot_counts(corpus, first)]


def test_cli_sql_says_which_state_it_read(history: dict[str, Any]) -> None:
    from arborag.cli.app import app

    corpus, first = history["corpus"], history["first"]
    res = CliRunner().invoke(app, ["sql", COUNTS, "--corpus", str(corpus), "--format", "json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == [dict(zip(("docs", "chunks", "nodes"), _snapshot_counts(corpus, first), strict=True))]
    res = CliRunner().invoke(app, ["sql", COUNTS, "--corpus", str(corpus)])
    assert res.exit_code == 0 and f"read snapshot {first}" in res.stderr
    res = CliRunner().invoke(app, ["sql", "SELECT count(*) AS n FROM chunks", "--corpus", str(corpus), "--working"])
    assert res.exit_code == 0 and "read the working tables" in res.stderr
    res = CliRunner().invoke(app, ["sql", "SELECT 1", "--corpus", str(corpus), "--working", "--snapshot", first])
    assert res.exit_code != 0 and "not both" in res.output


def test_snapshots_catalog_rewrites_a_missing_catalog(history: dict[str, Any], tmp_path: Path) -> None:
    from arborag.cli.app import app

    corpus, first = tmp_path / "c", history["first"]  # a copy: the session's corpus stays as it is
    shutil.copytree(history["corpus"], corpus, symlinks=True, ignore=shutil.ignore_patterns(LEASES_DIR))
    (corpus / CATALOG_FILE).unlink()
    res = CliRunner().invoke(app, ["snapshots", "catalog", "--corpus", str(corpus)])
    assert res.exit_code == 0, res.output
    assert _catalog_counts(corpus) == (*_snapshot_counts(corpus, first), first)
