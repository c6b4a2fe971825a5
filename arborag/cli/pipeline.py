"""`arborag pipeline`: the stages of every pipeline, printed from their declarations.

Reads :data:`arborag.flows.pipelines.PIPELINES` (ingest, build, update; the update's routes from
:data:`~arborag.flows.pipelines.BRANCHES`) and the evaluation's
:data:`arborag.flows.eval_stages.EVALUATE_PIPELINE` through
:func:`arborag.flows.stage.describe_pipeline`; nothing is run and no corpus is needed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from arborag.cli.common import CONFIG_OPTION, config_from, console, fail
from arborag.errors import ConfigError

__all__ = ["branch_lines", "register", "pipeline_rows"]

NAMES = ("ingest", "build", "update", "evaluate")


def pipeline_rows(config: Any, names: tuple[str, ...] = NAMES) -> dict[str, list[dict[str, Any]]]:
    """``{pipeline: [stage row, ...]}`` for ``names`` under ``config`` (see ``describe_pipeline``)."""
    from arborag.flows.eval_stages import EVALUATE_PIPELINE
    from arborag.flows.pipelines import BRANCHES, PIPELINES
    from arborag.flows.stage import describe_branch, describe_pipeline

    every = {**PIPELINES, "evaluate": EVALUATE_PIPELINE}
    return {name: describe_branch(BRANCHES[name], config) if name in BRANCHES else describe_pipeline(every[name], config)
            for name in names}


def branch_lines() -> dict[str, str]:
    """``{pipeline: "then <predicate>() picks: route | route | ..."}`` for the pipelines that fork."""
    from arborag.flows.pipelines import BRANCHES

    out = {}
    for name, branch in BRANCHES.items():
        routes = " | ".join([*(r for r, _ in branch.routes), "noop (nothing more)"])
        out[name] = f"after the stages without a route, {branch.choose.__name__}() picks one route: {routes}. {branch.describe}"
    return out


def _cell(values: list[str]) -> str:
    return "\n".join(values) if values else "—"


def register(app: typer.Typer) -> None:
    """Add ``pipeline`` to ``app``."""

    @app.command(
        "pipeline",
        help=(
            "Print the stages of every pipeline (ingest, build, update, evaluate) as they are declared: "
            "each stage's name, what it reads and writes (table:<name> = a corpus table, staged:<file> = "
            "a file staged under the build key, sources, snapshot), the config keys that key its cache "
            "(\"(build key)\": keyed by the build key, which holds the tree config), its run inputs, and "
            "whether the current config turns it on (an off stage is skipped, or runs only to empty a table "
            "it wrote while on). The update forks after its first stages: each later stage is listed under "
            "its route (incremental or full), with the predicate that picks one. Nothing runs; no corpus is needed.\n\n"
            "Examples:\n\n"
            "  arborag pipeline\n\n"
            "  arborag pipeline build --config arborag.yaml\n\n"
            "  arborag pipeline --json | jq '.build[].stage'"
        ),
    )
    def pipeline(
        name: Optional[str] = typer.Argument(None, help=f"One pipeline: {' | '.join(NAMES)} (default: all)."),
        config: Optional[Path] = CONFIG_OPTION,
        as_json: bool = typer.Option(False, "--json", help="Print JSON ({pipeline: [stage, ...]}) instead of tables."),
    ) -> None:
        if name is not None and name not in NAMES:
            fail(ConfigError(f"unknown pipeline {name!r}; use one of: {', '.join(NAMES)}"))
            return
        cfg = config_from(config)
        rows = pipeline_rows(cfg, (name,) if name else NAMES)
        if as_json:
            typer.echo(json.dumps(rows, indent=2))
            return
        branches = branch_lines()
        for pname, stages in rows.items():
            t = Table(title=f"{pname} pipeline", show_header=True, header_style="bold", show_lines=True, title_justify="left")
            routed = any("route" in row for row in stages)
            for col in ("#", *(("route",) if routed else ()), "stage", "reads", "writes", "config keys", "inputs", "on"):
                t.add_column(col, overflow="fold")
            for i, row in enumerate(stages, 1):
                t.add_row(str(i), *((row["route"] or "—",) if routed else ()), f"[bold]{row['stage']}[/]",
                          _cell(row["reads"]), _cell(row["writes"]), _cell(row["config"]), _cell(row["inputs"]),
                          ("yes" if row["enabled"] else "[yellow]off[/]") + (" (beside)" if row.get("beside") else ""))
            console.print(t)
            if pname in branches:
                console.print(f"[dim]  {branches[pname]}[/]")
            does = {r["stage"]: r["does"] for r in stages if r["does"]}  # a stage of two routes, once
            console.print("\n".join(f"[dim]  {name}: {text}[/]" for name, text in does.items()))
            if any(r.get("beside") for r in stages):
                console.print("[dim]  (beside): without Prefect, runs on a thread beside the stages after it until one needs what it writes[/]")
