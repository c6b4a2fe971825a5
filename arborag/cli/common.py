"""Helpers shared by CLI commands: config loading, error reporting, exit codes, common options.

``offline_env`` is :func:`arborag.env.offline_env` (the one owner), re-exported for the commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from arborag.config import ArboragConfig, load_config
from arborag.env import offline_env
from arborag.errors import ArboragError

__all__ = ["console", "err_console", "EXIT_OK", "EXIT_PARTIAL", "EXIT_ERROR", "EXIT_USAGE", "config_from", "corpus_option", "fail", "offline_env"]

console = Console()
err_console = Console(stderr=True)

EXIT_OK = 0
EXIT_ERROR = 1  # the command could not do its job
EXIT_USAGE = 2  # typer/click usage errors
EXIT_PARTIAL = 3  # the job ran but some inputs failed (recorded with reasons)

CONFIG_OPTION = typer.Option(None, "--config", help="Path to an arborag.yaml (default: ./arborag.yaml if present).")


def corpus_option(help_text: str) -> Any:
    """``--corpus/-c``, required, also read from ``ARBORAG_CORPUS``."""
    return typer.Option(..., "--corpus", "-c", envvar="ARBORAG_CORPUS", help=help_text)


def config_from(path: Path | None, overrides: dict[str, dict[str, Any]] | None = None) -> ArboragConfig:
    try:
        return load_config(path, overrides=overrides)
    except ArboragError as exc:
        fail(exc)
        raise  # unreachable


def fail(exc: BaseException, code: int = EXIT_ERROR) -> None:
    err_console.print(f"[bold red]error:[/] {exc}")
    raise typer.Exit(code)
