"""`arborag ingest`: read files and folders into the corpus's documents table (optionally segment).

Runs :func:`arborag.flows.ingest.run_ingest_and_segment` (a Prefect flow in-process by default,
``--no-prefect`` for a plain run). :func:`run_ingest_command` is shared with `arborag segment`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from arborag.cli.common import CONFIG_OPTION, EXIT_PARTIAL, FOLLOW_EXTERNAL_SYMLINKS_OPTION, NO_WAIT_OPTION, PREFECT_OPTION, config_from, console, corpus_option, fail, offline_env, use_prefect
from arborag.config import Strategy
from arborag.errors import ArboragError

__all__ = ["register", "run_ingest_command"]

_MAX_FAILURES_SHOWN = 20


def _quiet_parsers() -> None:
    # pypdf logs every recoverable oddity of a PDF as a warning; the reasons that matter end up
    # in the documents table, so keep the terminal for the summary.
    logging.getLogger("pypdf").setLevel(logging.ERROR)


def _print_ingest(out: dict[str, Any]) -> None:
    from arborag.flows.pipelines import INGEST

    ing = out.get(INGEST.name) or {}
    cached = INGEST.name in out.get("cached", [])
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
            f"  arborag sql --working \"SELECT uri, error FROM documents WHERE status = 'error'\" --corpus {out['corpus']}",
            highlight=False,
        )


def _print_segment(out: dict[str, Any]) -> None:
    from arborag.flows.pipelines import SEGMENT

    seg = out.get(SEGMENT.name) or {}
    cached = SEGMENT.name in out.get("cached", [])
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
    from arborag.flows.pipelines import INGEST, SEGMENT

    if out.get(INGEST.name):
        _print_ingest(out)
    if out.get(SEGMENT.name):
        _print_segment(out)
    console.print(f"[dim]run {out.get('run_id')} · {out.get('status')} · {out.get('seconds')} s[/]", highlight=False)


def run_ingest_command(
    sources: list[str], corpus: Path, config: Optional[Path], overrides: dict[str, dict[str, Any]], *,
    strategy: Optional[Strategy], segment: bool, prefect: Optional[bool], as_json: bool, no_wait: bool = False,
) -> None:
    """Run ingest (and/or segment) as the CLI does: config, the flow, the summary, the exit code."""
    offline_env()
    _quiet_parsers()
    cfg = config_from(config, overrides)
    from arborag.flows.ingest import run_ingest_and_segment

    try:
        out = run_ingest_and_segment(
            sources, corpus, cfg, strategy=strategy, segment=segment, use_prefect=use_prefect(prefect),
            progress=not as_json, lock_wait=not no_wait,
        )
    except (ArboragError, OSError) as exc:  # OSError: disk full, read-only corpus
        fail(exc)
        return
    _print_run(out, as_json)
    if out.get("status") == "partial":
        raise typer.Exit(EXIT_PARTIAL)


def register(app: typer.Typer) -> None:
    """Add ``ingest`` to ``app``."""

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
            "Runs in this process; as a Prefect flow run when a Prefect server is configured "
            "(PREFECT_API_URL: the runs show in its UI) or with --prefect.\n\n"
            "Examples:\n\n"
            "  arborag ingest examples/corpus/ --corpus .arborag-demo\n\n"
            "  arborag ingest docs/ 'reports/**/*.pdf' --corpus /tmp/c --exclude 'draft*' --segment"
        ),
    )
    def ingest(
        sources: list[str] = typer.Argument(..., help="Files, folders, glob patterns (quote them) or file:// URIs."),
        corpus: Path = corpus_option("Corpus directory (created if missing). Env: ARBORAG_CORPUS."),
        include: Optional[list[str]] = typer.Option(
            None, "--include", "-i", help="Glob of file names to read in folders (repeatable; replaces the default list of supported types)."
        ),
        exclude: Optional[list[str]] = typer.Option(None, "--exclude", "-x", help="Glob of file names or relative paths to skip (repeatable)."),
        max_file_mb: Optional[float] = typer.Option(None, "--max-file-mb", help="Record larger files as errors instead of reading them (default 200)."),
        segment: bool = typer.Option(False, "--segment", help="Also segment the documents (same as running `arborag segment` after)."),
        strategy: Optional[Strategy] = typer.Option(None, "--strategy", "-s", help="Segmenter for --segment (default: config, sentence)."),
        prefect: Optional[bool] = PREFECT_OPTION,
        follow_external_symlinks: bool = FOLLOW_EXTERNAL_SYMLINKS_OPTION,
        as_json: bool = typer.Option(False, "--json", help="Print the run summary as JSON (no progress bar)."),
        no_wait: bool = NO_WAIT_OPTION,
        config: Optional[Path] = CONFIG_OPTION,
    ) -> None:
        overrides = {"ingest": {"include": include or None, "exclude": exclude or None, "max_file_mb": max_file_mb,
                                "follow_external_symlinks": follow_external_symlinks or None}}
        run_ingest_command(list(sources), corpus, config, overrides, strategy=strategy, segment=segment, prefect=prefect, as_json=as_json, no_wait=no_wait)
