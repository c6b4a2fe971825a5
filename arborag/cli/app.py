"""The ``arborag`` command line (typer).

Commands live in :mod:`arborag.cli`, one module per area, each with ``register(app)``.
Heavy imports (torch, Prefect, LanceDB) happen inside the commands, never at import time, so
``arborag --help`` and quick commands (query, sql, inspect) start fast.
"""

from __future__ import annotations

import typer

from arborag.cli import add as _add
from arborag.cli import ask as _ask
from arborag.cli import build as _build
from arborag.cli import evaluate as _evaluate
from arborag.cli import ingest as _ingest
from arborag.cli import inspect as _inspect
from arborag.cli import mcp as _mcp
from arborag.cli import pipeline as _pipeline
from arborag.cli import query as _query
from arborag.cli import segment as _segment
from arborag.cli import serve as _serve  # arborag.serve (FastAPI, uvicorn) is imported inside the command
from arborag.cli import sql as _sql
from arborag.cli import schedule as _schedule
from arborag.cli import snapshots as _snapshots
from arborag.cli import update as _update

app = typer.Typer(
    name="arborag",
    help=(
        "arborag turns a pile of documents into a hierarchical (RAPTOR-style) retrieval index "
        "and answers queries over it. Everything runs offline on embedded defaults.\n\n"
        "Quick start:\n\n"
        "  arborag build examples/corpus/ --corpus /tmp/demo\n\n"
        "  arborag query \"How did Cinderella reach her happy ending?\" --corpus /tmp/demo"
    ),
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
)

def _print_version(value: bool) -> None:
    if value:
        from arborag import installed_version

        typer.echo(f"arborag {installed_version()}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", "-V", callback=_print_version, is_eager=True, help="Print arborag's version and exit."),
) -> None:
    pass


for _module in (_ingest, _segment, _sql, _build, _query, _inspect, _serve, _evaluate, _update, _add, _ask, _schedule, _snapshots, _mcp, _pipeline):
    _module.register(app)


def main() -> None:  # pragma: no cover - console entry point
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
