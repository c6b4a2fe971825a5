"""arborag.storage.sql: read-only DuckDB over a corpus's tables, sandboxed to those files."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.query import NODES_SPEC, publish_snapshot

from arborag.errors import QueryError
from arborag.storage.corpus import Corpus
from arborag.storage.sql import connect_readonly, corpus_views, run_sql


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    c = Corpus(tmp_path_factory.mktemp("sql") / "corpus").ensure()
    publish_snapshot(c, "snap-sql")
    return c.root


def test_snapshot_tables_are_views(corpus: Path) -> None:
    columns, rows = run_sql(corpus, "SELECT level, count(*) AS n FROM nodes GROUP BY level ORDER BY level")
    assert columns == ["level", "n"] and rows == [(0, 6), (1, 2), (2, 1)]
    _, rows = run_sql(corpus, "SELECT count(*) FROM nodes n JOIN edges e ON n.node_id = e.child_id")
    assert rows == [(len(NODES_SPEC) - 1,)]


@pytest.mark.parametrize("statement", [
    "COPY nodes TO '/tmp/x.parquet'",
    "CREATE TABLE t AS SELECT 1",
    "ATTACH ':memory:' AS other",
    "SET enable_external_access = true",
    "SELECT 1; SELECT 2",
])
def test_only_one_select_runs(corpus: Path, statement: str) -> None:
    with pytest.raises(QueryError):
        run_sql(corpus, statement)


def test_no_other_file_can_be_read(corpus: Path, tmp_path: Path) -> None:
    other = tmp_path / "secret.csv"
    other.write_text("a\n1\n")
    with pytest.raises(QueryError, match="refused by the sandbox.*only these views can be read: edges, edges_all, nodes, nodes_all"):
        run_sql(corpus, f"SELECT * FROM read_csv('{other}')")


def test_missing_or_empty_corpus(tmp_path: Path) -> None:
    with pytest.raises(QueryError, match="does not exist"):
        run_sql(tmp_path / "nope", "SELECT 1")
    (tmp_path / "empty").mkdir()
    with pytest.raises(QueryError, match="no tables"):
        run_sql(tmp_path / "empty", "SELECT 1")


def test_connect_readonly_is_locked(corpus: Path) -> None:
    con = connect_readonly(corpus_views(Corpus(corpus)))
    try:
        assert con.execute("SELECT count(*) FROM edges").fetchone() == (len(NODES_SPEC) - 1,)
        with pytest.raises(Exception, match="lock|configuration"):
            con.execute("SET enable_external_access = true")
    finally:
        con.close()
