"""CLI commands ``ingest``, ``segment`` and ``sql``.

``ingest`` and ``segment`` run :func:`arborag.flows.ingest.run_ingest_and_segment` (a Prefect flow
in-process by default, ``--no-prefect`` for a plain run). ``sql`` is a quick command: DuckDB over
the corpus's Parquet files, with no Prefect and no torch import.
"""

from __future__ import annotations

import csv
import json
import logging
import sys
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, Optional

import typer
from rich.table import Table

from arborag.cli.common import (
    CONFIG_OPTION,
    EXIT_PARTIAL,
    config_from,
    console,
    err_console,
    fail,
    offline_env,
)
from arborag.config import Strategy
from arborag.errors import ArboragError, QueryError

__all__ = ["register", "run_sql", "ALLOWED_STATEMENTS"]

SqlFormat = Literal["table", "csv", "json"]

#: DuckDB statement types ``arborag sql`` runs; anything else (COPY, INSERT, ATTACH, SET...) is refused.
ALLOWED_STATEMENTS = ("SELECT", "EXPLAIN")

_MAX_FAILURES_SHOWN = 20


def _corpus_option(help_text: str) -> Any:
    return typer.Option(..., "--corpus", "-c", envvar="ARBORAG_CORPUS", help=help_text)


def _quiet_parsers() -> None:
    # pypdf logs every recoverable oddity of a PDF as a warning; the reasons that matter end up
    # in the documents table, so keep the terminal for the summary.
    logging.getLogger("pypdf").setLevel(logging.ERROR)


# ---------------------------------------------------------------------------------------------
# Summaries
# ---------------------------------------------------------------------------------------------
def _print_ingest(out: dict[str, Any]) -> None:
    ing = out.get("ingest") or {}
    cached = "ingest" in out.get("cached", [])
    note = " [dim](Prefect cache hit: inputs unchanged since a previous run)[/]" if cached else ""
    console.print(f"[bold]ingest[/] {ing.get('files', 0)} file(s) → {out['corpus']}{note}", highlight=False)
    t = Table(show_header=True, header_style="bold")
    for col in ("added", "unchanged", "duplicates", "replaced", "warnings", "failed"):
        t.add_column(col, justify="right")
    failed = int(ing.get("failed", 0))
    t.add_row(
        str(ing.get("added", 0)), str(ing.get("unchanged", 0)), str(ing.get("duplicates", 0)),
        str(ing.get("replaced", 0)), str(ing.get("warnings", 0)),
        f"[red]{failed}[/]" if failed else "0",
    )
    console.print(t)
    console.print(f"documents table: {ing.get('documents', 0)} document(s), {ing.get('errors', 0)} error row(s)", highlight=False)
    for w in (ing.get("warning_list") or [])[:_MAX_FAILURES_SHOWN]:
        console.print(f"  [yellow]warning[/] {w['uri']}: {w['reason']}", highlight=False)
    failures = ing.get("failures") or []
    for f in failures[:_MAX_FAILURES_SHOWN]:
        console.print(f"  [red]failed[/] {f['uri']}: {f['reason']}", highlight=False)
    if failed > min(len(failures), _MAX_FAILURES_SHOWN):
        console.print(f"  … and {failed - min(len(failures), _MAX_FAILURES_SHOWN)} more")
    if failed:
        console.print(
            f"[yellow]{failed} source(s) failed[/] (recorded with reasons; the rest were ingested). List them with:\n"
            f"  arborag sql \"SELECT uri, error FROM documents WHERE status = 'error'\" --corpus {out['corpus']}",
            highlight=False,
        )


def _print_segment(out: dict[str, Any]) -> None:
    seg = out.get("segment") or {}
    cached = "segment" in out.get("cached", [])
    note = " [dim](Prefect cache hit: documents and settings unchanged)[/]" if cached else ""
    console.print(
        f"[bold]segment[/] ({seg.get('strategy')}): {seg.get('chunks', 0)} chunk(s), {seg.get('tokens', 0)} token(s) "
        f"from {seg.get('documents', 0)} document(s); chunks table holds {seg.get('chunks_total', 0)} row(s){note}",
        highlight=False,
    )


def _print_run(out: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(out, indent=2, sort_keys=True, default=str))
        return
    if out.get("ingest"):
        _print_ingest(out)
    if out.get("segment"):
        _print_segment(out)
    console.print(f"[dim]run {out.get('run_id')} · {out.get('status')} · {out.get('seconds')} s[/]", highlight=False)


def _run(
    sources: list[str], corpus: Path, config: Optional[Path], overrides: dict[str, dict[str, Any]], *,
    strategy: Optional[Strategy], segment: bool, no_prefect: bool, as_json: bool,
) -> None:
    offline_env()
    _quiet_parsers()
    cfg = config_from(config, overrides)
    from arborag.flows.ingest import run_ingest_and_segment

    try:
        out = run_ingest_and_segment(
            sources, corpus, cfg, strategy=strategy, segment=segment, use_prefect=not no_prefect,
            progress=not as_json,
        )
    except ArboragError as exc:
        fail(exc)
        return
    _print_run(out, as_json)
    if out.get("status") == "partial":
        raise typer.Exit(EXIT_PARTIAL)


# ---------------------------------------------------------------------------------------------
# SQL
# ---------------------------------------------------------------------------------------------
def run_sql(corpus_dir: str | Path, query: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run one read-only SQL statement over the corpus's tables; return (columns, rows).

    Every table of :meth:`arborag.storage.corpus.Corpus.all_table_paths` (working tables and the
    published snapshot's) is a view of the same name. Only SELECT/EXPLAIN statements run, and
    DuckDB is sandboxed to those files (no other file access, configuration locked).

    Raises:
        QueryError: the corpus has no tables, the statement is not a single SELECT, or DuckDB
            rejects it (the message carries DuckDB's reason).
    """
    import duckdb

    from arborag.storage.corpus import Corpus

    corpus = Corpus(corpus_dir)
    if not corpus.root.is_dir():
        raise QueryError(query, f"corpus {corpus.root} does not exist; run `arborag ingest SOURCE... --corpus {corpus_dir}` first")
    tables = corpus.all_table_paths()
    if not tables:
        raise QueryError(query, f"corpus {corpus.root} has no tables yet; run `arborag ingest SOURCE... --corpus {corpus_dir}` first")
    con = duckdb.connect(":memory:")
    try:
        for name, path in sorted(tables.items()):
            literal = str(path).replace("'", "''")
            con.execute(f'CREATE VIEW "{name}" AS SELECT * FROM read_parquet(\'{literal}\')')
        allowed = ", ".join("'" + str(p).replace("'", "''") + "'" for p in tables.values())
        con.execute(f"SET allowed_paths = [{allowed}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
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
            known = ", ".join(sorted(tables))
            raise QueryError(query, f"{str(exc).strip()} (tables: {known})") from None
    finally:
        con.close()
    return columns, rows


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


# ---------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------
def register(app: typer.Typer) -> None:
    """Add ``ingest``, ``segment`` and ``sql`` to ``app``."""

    @app.command(
        "ingest",
        help=(
            "Read files and folders into the corpus's documents table.\n\n"
            "Formats: .txt .md .html .pdf .docx .csv .jsonl (one document per record). Folders are "
            "walked recursively (hidden entries skipped); --include/--exclude filter file names. "
            "Identical content is one document however often it appears. A file that cannot be "
            "read (empty, binary, corrupt or encrypted PDF, symlink loop, unreadable, too large) is "
            "recorded with status=error and a reason, and the run goes on: the exit code is then 3. "
            "Re-running over unchanged files changes nothing.\n\n"
            "Runs as a Prefect flow in-process (a temporary API starts; set PREFECT_API_URL to "
            "see runs in your server's UI); --no-prefect skips the orchestrator.\n\n"
            "Examples:\n\n"
            "  arborag ingest examples/corpus/ --corpus .arborag-demo\n\n"
            "  arborag ingest docs/ 'reports/**/*.pdf' --corpus /tmp/c --exclude 'draft*' --segment"
        ),
    )
    def ingest(
        sources: list[str] = typer.Argument(..., help="Files, folders, glob patterns (quote them) or file:// URIs."),
        corpus: Path = _corpus_option("Corpus directory (created if missing). Env: ARBORAG_CORPUS."),
        include: Optional[list[str]] = typer.Option(
            None, "--include", "-i", help="Glob of file names to read in folders (repeatable; replaces the default list of supported types)."
        ),
        exclude: Optional[list[str]] = typer.Option(None, "--exclude", "-x", help="Glob of file names or relative paths to skip (repeatable)."),
        max_file_mb: Optional[float] = typer.Option(None, "--max-file-mb", help="Record larger files as errors instead of reading them (default 200)."),
        segment: bool = typer.Option(False, "--segment", help="Also segment the documents (same as running `arborag segment` after)."),
        strategy: Optional[Strategy] = typer.Option(None, "--strategy", "-s", help="Segmenter for --segment (default: config, sentence)."),
        no_prefect: bool = typer.Option(False, "--no-prefect", help="Run without Prefect (no orchestration, no cache, no UI; starts faster)."),
        as_json: bool = typer.Option(False, "--json", help="Print the run summary as JSON (no progress bar)."),
        config: Optional[Path] = CONFIG_OPTION,
    ) -> None:
        overrides = {"ingest": {"include": include or None, "exclude": exclude or None, "max_file_mb": max_file_mb}}
        _run(list(sources), corpus, config, overrides, strategy=strategy, segment=segment, no_prefect=no_prefect, as_json=as_json)

    @app.command(
        "segment",
        help=(
            "Cut the corpus's documents into chunks with one strategy.\n\n"
            "sentence: sentences packed into chunks of <= 100 tokens (RAPTOR leaves); ffs: fixed "
            "token windows; dfs: windows extended to the next delimiter; dds: windows of whole "
            "delimiter units; rcs: recursive character splitting (LangChain baseline). Sizes come "
            "from the segment section of the config (e.g. ARBORAG_SEGMENT__FFS_WINDOW=512).\n\n"
            "The chunks table keeps several strategies side by side: segmenting with a strategy "
            "replaces that strategy's rows only.\n\n"
            "Examples:\n\n"
            "  arborag segment --corpus .arborag-demo --strategy sentence\n\n"
            "  arborag segment --corpus /tmp/c --strategy dds --no-prefect"
        ),
    )
    def segment(
        corpus: Path = _corpus_option("Corpus directory with ingested documents. Env: ARBORAG_CORPUS."),
        strategy: Optional[Strategy] = typer.Option(None, "--strategy", "-s", help="sentence|ffs|dfs|dds|rcs (default: config, sentence)."),
        no_prefect: bool = typer.Option(False, "--no-prefect", help="Run without Prefect (no orchestration, no cache, no UI; starts faster)."),
        as_json: bool = typer.Option(False, "--json", help="Print the run summary as JSON (no progress bar)."),
        config: Optional[Path] = CONFIG_OPTION,
    ) -> None:
        _run([], corpus, config, {}, strategy=strategy, segment=True, no_prefect=no_prefect, as_json=as_json)

    @app.command(
        "sql",
        help=(
            "Run a read-only SQL query (DuckDB) over the corpus's tables.\n\n"
            "Views: documents, sections, chunks, runs, queries (working tables) and nodes, edges "
            "(the published snapshot), whichever exist. JSON columns (documents.metadata, "
            "runs.counts) work with DuckDB's json functions. Only SELECT runs; the files cannot be "
            "changed from here. Starts in well under a second (no Prefect, no models).\n\n"
            "Examples:\n\n"
            "  arborag sql \"SELECT title, n_chars FROM documents WHERE status = 'ok'\" --corpus .arborag-demo\n\n"
            "  arborag sql \"SELECT strategy, count(*) AS n, avg(n_tokens) FROM chunks GROUP BY strategy\" -c /tmp/c --format csv\n\n"
            "  arborag sql \"SELECT uri, error FROM documents WHERE status = 'error'\" -c /tmp/c --format json"
        ),
    )
    def sql(
        query: str = typer.Argument(..., help="One SELECT statement; quote it for the shell."),
        corpus: Path = _corpus_option("Corpus directory. Env: ARBORAG_CORPUS."),
        fmt: SqlFormat = typer.Option("table", "--format", "-f", help="table (rich, for people), csv or json (for scripts)."),
        max_chars: int = typer.Option(120, "--max-chars", help="table format: cut cells longer than this (0 = never)."),
    ) -> None:
        try:
            columns, rows = run_sql(corpus, query)
        except ArboragError as exc:
            fail(exc)
            return
        _print_sql(columns, rows, fmt, max_chars)
