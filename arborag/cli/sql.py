"""`arborag sql`: read-only DuckDB over the corpus's Parquet tables (no Prefect, no torch).

The engine is :func:`arborag.storage.sql.run_sql`; this module prints its rows as a table, CSV
or JSON.
"""

from __future__ import annotations

import csv
import json
import sys
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import typer
from rich.table import Table

from arborag.cli.common import console, corpus_option, err_console, fail
from arborag.errors import ArboragError

__all__ = ["register"]

SqlFormat = Literal["table", "csv", "json"]


def _plain(value: Any) -> Any:
    """A JSON/CSV-friendly form of a DuckDB value."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _cell(value: Any, max_chars: int, *, one_line: bool = False) -> str:
    if value is None:
        return ""
    value = _plain(value)
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if one_line:
        text = text.replace("\n", " ↵ ")
    if max_chars and len(text) > max_chars:
        return text[: max_chars - 1] + "…"
    return text


def _print_sql(columns: list[str], rows: list[tuple[Any, ...]], fmt: SqlFormat, max_chars: int) -> None:
    if fmt == "json":
        records = [{c: _plain(v) for c, v in zip(columns, row, strict=True)} for row in rows]
        typer.echo(json.dumps(records, indent=2, ensure_ascii=False, default=str))
    elif fmt == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        for row in rows:
            writer.writerow(["" if v is None else _cell(v, 0) for v in row])
    else:
        t = Table(show_header=True, header_style="bold", show_lines=False)
        for c in columns:
            t.add_column(c, overflow="fold")
        for row in rows:
            t.add_row(*(_cell(v, max_chars, one_line=True) for v in row))
        console.print(t)
        err_console.print(f"[dim]{len(rows)} row(s)[/]")


def register(app: typer.Typer) -> None:
    """Add ``sql`` to ``app``."""

    @app.command(
        "sql",
        help=(
            "Run a read-only SQL query (DuckDB) over the corpus's tables.\n\n"
            "One state per query: documents, chunks, nodes, edges, links, repeats are the published snapshot's "
            "(whichever it holds), or the snapshot --snapshot ID names; --working reads the working "
            "tables instead (documents, sections, doc_context, chunks: what the next build starts from, "
            "e.g. documents that failed to read). Before anything is published, the working tables. "
            "The logs runs and queries are there in every state. The table format names the state read (stderr). "
            "JSON columns (documents.metadata, runs.counts) work with DuckDB's json functions.\n\n"
            "History: nodes_all, edges_all, documents_all, chunks_all, links_all, repeats_all hold every retained snapshot "
            "(`arborag snapshots list`) with a `snapshot` column (and `snapshot_published_at`), so one query "
            "compares versions. Every snapshot read is leased while the query runs (gc cannot remove it "
            "under the query). Plain DuckDB: `duckdb -readonly CORPUS/published.duckdb` (docs/OPERATIONS.md).\n\n"
            "Read-only by construction: one query per call (SELECT, WITH, FROM, DESCRIBE, SHOW, "
            "SUMMARIZE, or EXPLAIN of one); DuckDB reads the tables through Arrow and may open no "
            "file itself, so COPY, ATTACH, INSTALL/LOAD, SET, read_csv('...') and the like are "
            "refused and nothing on disk can change. Tables are scanned lazily (only the columns "
            "and row groups a query needs). Starts in well under a second (no Prefect, no models).\n\n"
            "Examples:\n\n"
            "  arborag sql \"SELECT title, n_chars FROM documents WHERE status = 'ok'\" --corpus .arborag-demo\n\n"
            "  arborag sql \"SELECT strategy, count(*) AS n, avg(n_tokens) FROM chunks GROUP BY strategy\" -c /tmp/c --format csv\n\n"
            "  arborag sql \"SELECT uri, error FROM documents WHERE status = 'error'\" -c /tmp/c --working --format json\n\n"
            "  arborag sql \"SELECT snapshot, level, count(*) AS nodes FROM nodes_all GROUP BY ALL ORDER BY snapshot, level\" -c /tmp/c\n\n"
            "  arborag sql \"SELECT level, count(*) FROM nodes GROUP BY level\" -c /tmp/c --snapshot snap-3f2a"
        ),
    )
    def sql(
        query: str = typer.Argument(..., help="One query (SELECT / WITH / FROM / DESCRIBE / SHOW / SUMMARIZE / EXPLAIN); quote it for the shell."),
        corpus: Path = corpus_option("Corpus directory. Env: ARBORAG_CORPUS."),
        fmt: SqlFormat = typer.Option("table", "--format", "-f", help="table (rich, for people), csv or json (for scripts)."),
        max_chars: int = typer.Option(120, "--max-chars", help="table format: cut cells longer than this (0 = never)."),
        snapshot: str | None = typer.Option(
            None, "--snapshot", help="Read nodes, edges, documents and chunks from this retained snapshot (id or unique "
            "prefix; `arborag snapshots list`) instead of the published one."),
        working: bool = typer.Option(
            False, "--working", help="Read the working tables (documents, sections, doc_context, chunks, runs, queries) "
            "instead of a snapshot: what the next build starts from."),
    ) -> None:
        from arborag.storage.sql import run_sql_state

        try:
            got = run_sql_state(corpus, query, snapshot=snapshot, working=working)
        except ArboragError as exc:
            fail(exc)
            return
        _print_sql(got.columns, got.rows, fmt, max_chars)
        if fmt == "table":  # csv and json print the rows alone (scripts read them whole)
            state = f"snapshot {got.snapshot}" if got.snapshot else "the working tables"
            if not got.snapshot and not working:
                state += " (nothing is published yet)"
            err_console.print(f"[dim]read {state}[/]", highlight=False)
