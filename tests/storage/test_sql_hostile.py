"""`arborag sql` cannot write: every hostile statement is refused and the corpus stays byte-identical.

Two layers are tried separately: :func:`run_sql` (statement check + sandbox) refuses each
statement with a clear message, and the sandboxed connection alone (no statement check) still
cannot touch a file — so the guarantee does not rest on the word list.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pyarrow as pa
import pytest
from helpers.query import publish_snapshot
from typer.testing import CliRunner

from arborag.errors import QueryError
from arborag.storage.corpus import Corpus
from arborag.storage.schemas import DOCUMENTS
from arborag.storage.sql import ViewSource, connect_readonly, corpus_views, run_sql
from arborag.storage.tables import write_table


def _digest(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (symlinks not followed), by relative path."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    c = Corpus(tmp_path / "corpus").ensure()
    publish_snapshot(c, "snap-hostile")
    docs = pa.Table.from_pylist([{"doc_id": "d1", "uri": "file:///x.txt", "title": "x", "mime": "text/plain",
                                  "n_chars": 3, "text": "abc", "metadata": "{}", "status": "ok"}],
                                schema=DOCUMENTS)
    write_table("documents", docs, c.table_path("documents"))
    write_table("documents", docs, c.published_dir() / "documents.parquet")  # a published snapshot carries its documents
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)  # DuckDB's default temp directory would be <cwd>/.tmp/
    return c.root


def _hostile(corpus: Path, tmp: Path) -> list[str]:
    snap = Corpus(corpus).published_dir()
    docs = corpus / "tables" / "documents.parquet"
    nodes = snap / "nodes.parquet"
    outside = tmp / "outside.csv"
    outside.write_text("secret\n42\n")
    copy_docs = f"COPY (SELECT 'x' AS node_id) TO '{docs}' (FORMAT parquet, USE_TMP_FILE false)"
    return [
        # EXPLAIN ANALYZE executes what it wraps
        f"EXPLAIN ANALYZE {copy_docs}",
        f"EXPLAIN ANALYZE COPY (SELECT 'x' AS node_id) TO '{nodes}' (FORMAT parquet)",
        "EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1",
        "EXPLAIN ANALYZE INSERT INTO documents VALUES (1)",
        "EXPLAIN ANALYZE UPDATE documents SET title = 'y'",
        f"EXPLAIN (ANALYZE) {copy_docs}",
        f"EXPLAIN (FORMAT json) {copy_docs}",
        f"/* a comment */ EXPLAIN -- another\n ANALYZE {copy_docs}",
        # COPY ... TO, into the corpus, the snapshot and the working directory's .tmp/
        copy_docs,
        f"COPY nodes TO '{nodes}' (FORMAT parquet)",
        "COPY documents TO '.tmp/x.parquet' (FORMAT parquet)",
        f"COPY documents FROM '{outside}'",
        # other databases and extensions
        f"ATTACH '{corpus / 'x.duckdb'}' AS other",
        "ATTACH ':memory:' AS other",
        "INSTALL fts",
        "LOAD fts",
        "LOAD parquet",
        # configuration
        "SET enable_external_access = true",
        "SET temp_directory = '.tmp'",
        "SET allowed_directories = ['/']",
        "RESET enable_external_access",
        "PRAGMA enable_profiling",
        "PRAGMA threads = 1",
        # readers outside the corpus, and the working directory's .tmp/
        f"SELECT * FROM read_csv('{outside}')",
        f"SELECT * FROM read_parquet('{docs}')",
        f"SELECT * FROM '{docs}'",
        f"SELECT * FROM read_text('{outside}')",
        "SELECT * FROM read_text('/etc/passwd')",
        "SELECT * FROM read_blob('/etc/hostname')",
        f"SELECT * FROM read_json('{outside}')",
        "SELECT * FROM glob('/etc/*')",
        f"SELECT * FROM glob('{corpus}/**')",
        "SELECT * FROM glob('.tmp/*')",
        "SELECT * FROM read_csv('.tmp/*.csv')",
        # more than one statement, or one hidden behind a comment
        "SELECT 1; SELECT 2",
        f"SELECT 1; {copy_docs}",
        f"SELECT 1 -- harmless\n; {copy_docs}",
        f"/* SELECT */ {copy_docs}",
        f"-- SELECT 1\n{copy_docs}",
        "-- only a comment",
        "",
        # CALL, macros, DDL, DML, temp objects
        "CALL pragma_version()",
        "CALL enable_logging()",
        "CREATE MACRO m(x) AS x + 1",
        "CREATE TEMP MACRO m(x) AS x + 1",
        "CREATE TEMP TABLE t AS SELECT * FROM documents",
        "CREATE TEMP VIEW v AS SELECT 1",
        "CREATE OR REPLACE VIEW documents AS SELECT 1 AS x",
        "DROP VIEW documents",
        "INSERT INTO documents SELECT * FROM documents",
        "UPDATE documents SET title = 'y'",
        "DELETE FROM documents",
        "CREATE SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')",
        "EXPORT DATABASE '.tmp/db'",
        "CHECKPOINT",
        "VACUUM",
        "DETACH memory",
        "USE system",
        "BEGIN TRANSACTION",
        "PIVOT documents ON status",
    ]


def test_every_hostile_statement_is_refused_and_nothing_changes(corpus: Path, tmp_path: Path) -> None:
    before = _digest(corpus)
    cwd_before = sorted(os.listdir("."))
    statements = _hostile(corpus, tmp_path)
    ran = []
    for statement in statements:
        try:
            run_sql(corpus, statement)
        except QueryError as exc:
            msg = str(exc)
            assert "refused" in msg or "Parser Error" in msg, (statement, msg)
            continue
        ran.append(statement)
    assert ran == []
    assert _digest(corpus) == before
    assert sorted(os.listdir(".")) == cwd_before and not Path(".tmp").exists()
    # the corpus still answers
    assert run_sql(corpus, "SELECT count(*) FROM documents")[1] == [(1,)]
    assert run_sql(corpus, "SELECT count(*) FROM nodes")[1] == [(9,)]


def test_clear_messages(corpus: Path) -> None:
    docs = corpus / "tables" / "documents.parquet"
    with pytest.raises(QueryError, match=r"refused: EXPLAIN of a COPY statement \(EXPLAIN ANALYZE executes"):
        run_sql(corpus, f"EXPLAIN ANALYZE COPY documents TO '{docs}'")
    with pytest.raises(QueryError, match="refused: give exactly one statement, got 2 statements"):
        run_sql(corpus, "SELECT 1; SELECT 2")
    with pytest.raises(QueryError, match="refused: CALL is not a query"):
        run_sql(corpus, "CALL pragma_version()")
    with pytest.raises(QueryError, match=r"refused by the sandbox \(Permission Error: .*file system operations are disabled.*\): only these views can be read: documents, documents_all, edges, edges_all, nodes, nodes_all"):
        run_sql(corpus, "SELECT * FROM read_text('/etc/passwd')")
    with pytest.raises(QueryError, match="no statement"):
        run_sql(corpus, "/* nothing */")


def test_the_sandbox_alone_cannot_touch_a_file(corpus: Path, tmp_path: Path) -> None:
    """Without the statement check: every file-touching statement still fails inside DuckDB."""
    import duckdb

    before = _digest(corpus)
    con = connect_readonly(corpus_views(Corpus(corpus)))
    try:
        parser = duckdb.connect()
        touching = ("COPY", "ATTACH '", "INSTALL", "LOAD", "SET ", "RESET", "read_", "glob", "FROM '", "EXPORT", "PRAGMA threads")
        tried = 0
        for statement in _hostile(corpus, tmp_path):
            for part in parser.extract_statements(statement) if statement.strip() else []:
                text = part.query
                if not any(w in text for w in touching) or ":memory:" in text or text == "LOAD parquet" or (part.type.name == "EXPLAIN" and "ANALYZE" not in text):
                    continue  # runs in memory only, or a plain EXPLAIN (plans, does not execute)
                tried += 1
                with pytest.raises(duckdb.Error):
                    con.execute(text).fetchall()
        assert tried >= 30
        # what runs in memory touches no file either
        con.execute("CREATE TEMP TABLE t AS SELECT * FROM documents")
        con.execute("CREATE OR REPLACE VIEW documents AS SELECT 1 AS x")
    finally:
        con.close()
    assert _digest(corpus) == before
    assert not Path(".tmp").exists()


@pytest.mark.parametrize("query", [
    "SELECT title FROM documents",
    "WITH x AS (SELECT level FROM nodes) SELECT count(*) FROM x",
    "FROM nodes SELECT node_id LIMIT 1",
    "DESCRIBE nodes",
    "SHOW TABLES",
    "SUMMARIZE nodes",
    "EXPLAIN SELECT * FROM nodes",
    "EXPLAIN ANALYZE SELECT * FROM nodes WHERE level = 1",
    "EXPLAIN (FORMAT json) SELECT 1",
    "EXPLAIN (SELECT 1)",
    "/* comment */ SELECT 1 -- trailing",
    "SELECT 1;",
    "SELECT ';' AS semicolon, '(' AS paren",
    "VALUES (1), (2)",
])
def test_queries_still_run(corpus: Path, query: str) -> None:
    columns, _ = run_sql(corpus, query)
    assert columns


def test_views_with_constant_columns(corpus: Path) -> None:
    """The engine takes any views: several sources unioned by name with constant columns."""
    nodes = Corpus(corpus).published_dir() / "nodes.parquet"
    docs = corpus / "tables" / "documents.parquet"
    views = {
        "nodes_all": [ViewSource((nodes,), {"snapshot": "a"}), ViewSource((nodes,), {"snapshot": "b", "n": 2})],
        "documents": [ViewSource((docs,))],
    }
    cols, rows = run_sql(corpus, "SELECT snapshot, n, count(*) FROM nodes_all GROUP BY ALL ORDER BY 1", views=views)
    assert cols == ["snapshot", "n", "count_star()"] and rows == [("a", None, 9), ("b", 2, 9)]
    with pytest.raises(QueryError, match="refused"):
        run_sql(corpus, f"EXPLAIN ANALYZE COPY nodes_all TO '{nodes}'", views=views)
    with pytest.raises(QueryError, match="(?s)Catalog Error.*views: documents, nodes_all"):
        run_sql(corpus, "SELECT * FROM nodes", views=views)


def test_cli_refuses_and_says_why(corpus: Path) -> None:
    from arborag.cli.app import app

    docs = corpus / "tables" / "documents.parquet"
    before = _digest(corpus)
    result = CliRunner().invoke(app, ["sql", f"EXPLAIN ANALYZE COPY (SELECT 1) TO '{docs}'", "--corpus", str(corpus)])
    assert result.exit_code != 0
    assert "refused" in result.output and "nothing can be written" in result.output
    assert _digest(corpus) == before
