"""Helpers shared by CLI commands: config loading, error reporting, exit codes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from arborag.config import ArboragConfig, load_config
from arborag.errors import ArboragError

__all__ = ["console", "err_console", "EXIT_OK", "EXIT_PARTIAL", "EXIT_ERROR", "EXIT_USAGE", "config_from", "fail", "offline_env"]

console = Console()
err_console = Console(stderr=True)

EXIT_OK = 0
EXIT_ERROR = 1  # the command could not do its job
EXIT_USAGE = 2  # typer/click usage errors
EXIT_PARTIAL = 3  # the job ran but some inputs failed (recorded with reasons)

CONFIG_OPTION = typer.Option(None, "--config", help="Path to an arborag.yaml (default: ./arborag.yaml if present).")


def offline_env() -> None:
    """Environment every command runs with: no hub downloads, no telemetry."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")


def config_from(path: Path | None, overrides: dict[str, dict[str, Any]] | None = None) -> ArboragConfig:
    try:
        return load_config(path, overrides=overrides)
    except ArboragError as exc:
        fail(exc)
        raise  # unreachable


def fail(exc: BaseException, code: int = EXIT_ERROR) -> None:
    err_console.print(f"[bold red]error:[/] {exc}")
    raise typer.Exit(code)
