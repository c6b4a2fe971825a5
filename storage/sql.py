"""Read-only SQL (DuckDB) over a corpus's tables, sandboxed to those Parquet files.

    run_sql(corpus_dir, "SELECT count(*) FROM nodes")  ->  (["count_star()"], [(101,)])

Every table of :meth:`arborag.storage.corpus.Corpus.all_table_paths` (the working tables and the
published snapshot's ``nodes``/``edges``) is a view of the same name. Only one SELECT/EXPLAIN
statement runs; DuckDB may read those files and nothing else (external access off, configuration
locked), so nothing can be written or attached from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from arborag.errors import QueryError
from arborag.storage.corpus import Corpus

if TYPE_CHECKING:  # pragma: no cover
    import duckdb

__all__ = ["ALLOWED_STATEMENTS", "connect_readonly", "run_sql"]

#: DuckDB statement types that run; anything else (COPY, INSERT, ATTACH, SET...) is refused.
ALLOWED_STATEMENTS: Final = ("SELECT", "EXPLAIN")


def _literal(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


def connect_readonly(tables: dict[str, Path]) -> "duckdb.DuckDBPyConnection":
    """An in-memory DuckDB with one view per table, allowed to read exactly those files."""
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        for name, path in sorted(tables.items()):
            con.execute(f'CREATE VIEW "{name}" AS SELECT * FROM read_parquet({_literal(path)})')
        con.execute(f"SET allowed_paths = [{', '.join(_literal(p) for p in tables.values())}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


def run_sql(corpus_dir: str | Path, query: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one read-only SQL statement over the corpus's tables; return (columns, rows).

    Raises:
        QueryError: the corpus has no tables, the statement is not a single SELECT, or DuckDB
            rejects it (the message carries DuckDB's reason).
    """
    import duckdb

    corpus = Corpus(corpus_dir)
    if not corpus.root.is_dir():
        raise QueryError(query, f"corpus {corpus.root} does not exist; run `arborag ingest SOURCE... --corpus {corpus_dir}` first")
    tables = corpus.all_table_paths()
    if not tables:
        raise QueryError(query, f"corpus {corpus.root} has no tables yet; run `arborag ingest SOURCE... --corpus {corpus_dir}` first")
    con = connect_readonly(tables)
    try:
        try:
            statements = con.extract_statements(query)
        except duckdb.Error as exc:
            raise QueryError(query, str(exc).strip()) from None
        if len(statements) != 1:
            raise QueryError(query, f"give exactly one statement (got {len(statements)})")
        kind = statements[0].type.name
        if kind not in ALLOWED_STATEMENTS:
            raise QueryError(query, f"only read-only SELECT queries run here (got {kind}); the tables are Parquet files you can open with DuckDB directly")
        try:
            cur = con.execute(query)
            columns = [d[0] for d in cur.description or []]
            rows = cur.fetchall()
        except duckdb.Error as exc:
            raise QueryError(query, f"{str(exc).strip()} (tables: {', '.join(sorted(tables))})") from None
    finally:
        con.close()
    return columns, rows
