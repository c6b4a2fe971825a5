"""Helpers shared by CLI commands: config loading, error reporting, exit codes, common options.

``offline_env`` is :func:`arborag.env.offline_env` (the one owner), re-exported for the commands.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, NamedTuple

import typer
from rich.console import Console
from rich.markup import escape

from arborag.config import ArboragConfig, load_config
from arborag.env import offline_env
from arborag.errors import ArboragError

__all__ = ["console", "err_console", "EXIT_OK", "EXIT_PARTIAL", "EXIT_ERROR", "EXIT_USAGE", "EXIT_REFUSED", "FOLLOW_EXTERNAL_SYMLINKS_OPTION", "NO_WAIT_OPTION", "PREFECT_OPTION", "QueryOptions",
           "check_corpus_path", "config_from", "corpus_option", "fail", "is_corpus", "offline_env", "query_options", "require_corpus", "use_prefect"]

# soft_wrap: a printed line stays one line whatever the width (rich breaks lines at 80 columns when
# stdout is not a terminal, which split "texts embedded this run: N" in logs and scripts); tables
# still fit the width
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)

EXIT_OK = 0
EXIT_ERROR = 1  # the command could not do its job
EXIT_USAGE = 2  # typer/click usage errors
EXIT_PARTIAL = 3  # the job ran but some inputs failed (recorded with reasons)
EXIT_REFUSED = 4  # update: the delete guard stopped it (nothing written); see docs/OPERATIONS.md

CONFIG_OPTION = typer.Option(None, "--config", help="Path to an arborag.yaml (default: ./arborag.yaml if present).")

#: ``--prefect/--no-prefect`` of the commands that run a pipeline (build, update, ingest, segment, eval).
PREFECT_OPTION = typer.Option(
    None, "--prefect/--no-prefect",
    help="Run as a Prefect flow (--prefect) or directly in this process (--no-prefect). Default: a Prefect flow run "
         "when a Prefect server is configured (PREFECT_API_URL, or the active Prefect profile), else directly — "
         "without a server Prefect would start a temporary local API in every run (~6 s).",
)

#: ``--no-wait`` of the commands that write a corpus (build, ingest, update, add).
NO_WAIT_OPTION = typer.Option(
    False, "--no-wait", help="Fail at once if another writer (build, update, ingest) holds the corpus lock, instead of waiting for it."
)
#: ``--follow-external-symlinks`` of the commands that read sources (build, ingest, update, add).
FOLLOW_EXTERNAL_SYMLINKS_OPTION = typer.Option(
    False, "--follow-external-symlinks", help="Follow symlinks that lead out of a source folder (skipped and reported by default)."
)


def use_prefect(flag: bool | None) -> bool:
    """``--prefect/--no-prefect`` as given, else whether a Prefect server is configured
    (:func:`arborag.env.prefect_api_url`; read without importing Prefect).

    Measured (benchmarks/results/cold_path.md): Prefect's temporary local API costs every CLI run
    ~6 s when no server is configured; with a server a run reports to it (its UI shows the runs)."""
    if flag is not None:
        return flag
    from arborag.env import prefect_api_url

    return prefect_api_url() is not None


def check_corpus_path(value: Any) -> Any:
    """The ``--corpus`` callback of every command: a path that is a regular file (not a corpus
    folder) is a usage error with one message, whatever the command. URIs (``s3://…``) and
    missing paths pass (each command says what it needs of them)."""
    if value is None or "://" in str(value):
        return value
    path = Path(str(value)).expanduser()
    if path.exists() and not path.is_dir():
        raise typer.BadParameter(
            f"{path} is a file, not a corpus folder: give the folder that `arborag build SOURCES --corpus DIR` "
            "made (or, for build, a new folder to create)", param_hint="'--corpus' / '-c'")
    return value


def is_corpus(path: Path) -> bool:
    """True when ``path`` is a corpus folder: it holds a published manifest or a documents table."""
    return (path / "manifest.json").is_file() or (path / "tables" / "documents.parquet").is_file()


def require_corpus(path: Path | str, command: str) -> None:
    """Stop ``command`` (update, add) with a clear error when ``path`` is not a built corpus:
    a mistyped ``--corpus`` must not start a full build in a new or unrelated folder."""
    if "://" in str(path):
        return
    p = Path(path).expanduser()
    if not p.exists():
        what = "does not exist"
    elif not p.is_dir():
        what = "is a file, not a corpus folder"
    elif not is_corpus(p):
        what = "is not a corpus (no manifest.json, no tables/documents.parquet)"
    else:
        return
    err_console.print(
        f"[bold red]error:[/] --corpus {p} {what}. `arborag {command}` works on a corpus that `arborag build` made: "
        f"check the path, or create the corpus first with `arborag build SOURCES --corpus {p}`"
        + (" (or pass --init to build it from these sources)" if command == "update" else ""),
        highlight=False,
    )
    raise typer.Exit(EXIT_ERROR)


def corpus_option(help_text: str) -> Any:
    """``--corpus/-c``, required, also read from ``ARBORAG_CORPUS``; a regular file is refused
    (:func:`check_corpus_path`)."""
    return typer.Option(..., "--corpus", "-c", envvar="ARBORAG_CORPUS", help=help_text, callback=check_corpus_path)


def config_from(path: Path | None, overrides: dict[str, dict[str, Any]] | None = None) -> ArboragConfig:
    try:
        return load_config(path, overrides=overrides)
    except ArboragError as exc:
        fail(exc)
        raise  # unreachable


class QueryOptions(NamedTuple):
    mode: str
    budget: int
    k: int
    levels: list[int] | None


def query_options(cfg: ArboragConfig, mode: str | None, budget: int | None, k: int | None, levels: str | None) -> QueryOptions:
    """The retrieval options of ``query`` and ``ask``: an option given on the command line wins,
    otherwise ``query.*`` from arborag.yaml / ``ARBORAG_QUERY__*``. ``levels`` is "0,1,..."."""
    lv = None
    if levels:
        try:
            lv = [int(x) for x in levels.split(",") if x.strip()]
        except ValueError:
            raise typer.BadParameter(f"{levels!r}: give tree levels as comma-separated whole numbers, e.g. 0 or 0,1", param_hint="--levels") from None
    from arborag.query.options import FROM_CONFIG, query_settings

    settings = query_settings(cfg.query, mode=mode, budget=FROM_CONFIG if budget is None else budget, k=k)
    assert settings.budget is not None  # --budget is a number, and so is query.budget
    return QueryOptions(settings.mode, settings.budget, settings.k, lv)


def fail(exc: BaseException, code: int = EXIT_ERROR) -> None:
    # escaped: a message is plain text, and its brackets (pip install 'arborag[eval]') are not markup
    err_console.print(f"[bold red]error:[/] {escape(_os_hint(exc) if isinstance(exc, OSError) else str(exc))}", highlight=False)
    raise typer.Exit(code)


_OS_HINTS = {
    28: "the disk is full: free some space (or move the corpus) and run again",
    30: "the folder is on a read-only file system: point --corpus at a writable folder",
    13: "permission denied: check the folder's permissions",
    122: "the disk quota is exhausted: free some space and run again",
}


def _os_hint(exc: OSError) -> str:
    """An I/O failure (disk full, read-only corpus, permissions) in plain words, with what to do.
    Tables and snapshots are written atomically, so what was published before is unchanged."""
    code = exc.errno
    if code is None and (found := re.search(r"\[errno (\d+)\]", str(exc), flags=re.IGNORECASE)):
        code = int(found.group(1))  # pyarrow puts the errno in the message only
    where = f" ({exc.filename})" if exc.filename else ""
    hint = _OS_HINTS.get(code or 0, "an I/O error")
    return f"{hint}{where}: {exc}. Nothing half-written was published; the previous tables and snapshot are intact."
