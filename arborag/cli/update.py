"""`arborag update`: bring a built corpus in line with its sources (added, changed, deleted documents)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from arborag.cli.common import CONFIG_OPTION, EXIT_PARTIAL, PREFECT_OPTION, config_from, console, fail, offline_env, use_prefect
from arborag.errors import ArboragError


def register(app: typer.Typer) -> None:
    @app.command(
        "update",
        help=(
            "Update a built corpus from its sources without rebuilding the tree.\n\n"
            "Compares the sources with the corpus's documents by uri and content hash — added, "
            "changed, deleted (uri gone; --no-prune keeps them), unchanged — prints the plan, then "
            "assigns new leaves to the fitted clusters, removes deleted ones, re-summarizes only the "
            "clusters whose membership changed (level by level) and publishes a new snapshot "
            "atomically. The SOURCES are the whole corpus: a document whose file is gone is deleted "
            "from every level, the vectors and the sparse index. Past update.max_drift (20% of the "
            "leaves changed since the last full fit) it rebuilds the whole tree and says why.\n\n"
            "Example:\n\n"
            "  arborag update examples/corpus/ --corpus /tmp/demo --dry-run\n\n"
            "  arborag update examples/corpus/ --corpus /tmp/demo --no-prefect"
        ),
    )
    def update(
        sources: list[Path] = typer.Argument(..., help="Files or folders the corpus should hold (all of them)."),
        corpus: Path = typer.Option(..., "--corpus", "-c", help="Corpus directory (built before; a new one is built in full)."),
        prune: Optional[bool] = typer.Option(None, "--prune/--no-prune", help="Delete documents whose uri is gone from the sources (default: update.prune, on)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan and the estimated embedding and summary work; change nothing."),
        prefect: Optional[bool] = PREFECT_OPTION,
        no_wait: bool = typer.Option(False, "--no-wait", help="Fail at once if another writer (build, update, ingest) holds the corpus lock, instead of waiting for it."),
        follow_external_symlinks: bool = typer.Option(
            False, "--follow-external-symlinks", help="Follow symlinks that lead out of a source's root (skipped and reported by default)."
        ),
        config: Optional[Path] = CONFIG_OPTION,
    ) -> None:
        offline_env()
        cfg = config_from(config, {"update": {"prune": prune}, "ingest": {"follow_external_symlinks": follow_external_symlinks or None}})
        srcs = [str(s) for s in sources]
        orchestrated = use_prefect(prefect)
        if not dry_run and not orchestrated:
            from arborag import embed_worker

            # the model starts loading on the other core now (a console-script run; the worker is
            # killed at once when nothing changed), while nothing changed since the last run is
            # told from file stats — before Prefect, the stages or a model load here
            embed_worker.start(cfg.embed)
            from arborag.flows.noop import quick_noop

            quick = quick_noop(srcs, corpus, cfg, prune=prune)
            if quick is not None:
                embed_worker.stop_all(kill=True)
                _print_plan(quick["plan"], estimate=False)
                _print_result(quick)
                from arborag.cli.exit import finish

                finish(0)
                return
        preloading = None
        if not dry_run:  # the model loads while Prefect, the stages and the plan start
            from arborag.embedder import preload

            # no UMAP (an update fits only when drift says so); lancedb is imported by the flow
            # once the plan is made (flows/update.py: on this thread it slowed the plan)
            preloading = preload(cfg.embed)
        from arborag.flows.update import run_update

        try:
            if dry_run:
                plan = run_update(srcs, corpus, cfg, prune=prune, dry_run=True, use_prefect=False)
                _print_plan(plan.get("plan") or {})
                return
            # one pass: the plan is made (and printed) by the run itself, not by a dry run first
            out = run_update(srcs, corpus, cfg, prune=prune, use_prefect=orchestrated, progress=True, lock_wait=not no_wait,
                             noop_checked=not orchestrated)
        except (ArboragError, OSError) as exc:
            fail(exc)
        finally:
            if preloading is not None:
                preloading.join()
                from arborag.embed_worker import stop_all

                stop_all()  # the embedding worker, if this run started one
        _print_plan(out.get("plan") or {}, estimate=False)
        _print_result(out)
        from arborag.cli.exit import finish

        finish(EXIT_PARTIAL if out.get("status") == "partial" else 0)  # the console script ends here (no teardown)
        if out.get("status") == "partial":
            raise typer.Exit(EXIT_PARTIAL)


def _print_plan(plan: dict[str, Any], *, estimate: bool = True) -> None:
    t = Table(title="Update plan (by uri)")
    for col in ("added", "changed", "deleted", "unchanged", "failed"):
        t.add_column(col, justify="right")
    t.add_row(*(str(plan.get(k, 0)) for k in ("added", "changed", "deleted", "unchanged", "failed")))
    console.print(t)
    files, read = plan.get("files"), plan.get("files_read")
    if isinstance(files, int) and isinstance(read, int) and read < files:
        console.print(f"read {read:,} of {files:,} source files: the other {files - read:,} have the size, times and inode they had "
                      "when last read (cache/source_stats.parquet; delete it to read every file)", highlight=False)
    for kind in ("added", "changed", "deleted", "failed"):
        uris = plan.get(f"{kind}_uris") or []
        if uris:
            more = plan.get(kind, 0) - len(uris)
            console.print(f"{kind}: " + ", ".join(uris) + (f" (+{more} more)" if more > 0 else ""), highlight=False)
    if plan.get("deleted") and not plan.get("pruned", True):
        console.print("[yellow]--no-prune[/]: deleted uris stay in the corpus")
    est = plan.get("estimate") or {}
    if est and estimate:
        console.print(
            f"estimated work: {est.get('new_leaves', 0)} new leaves to embed, {est.get('gone_leaves', 0)} leaves to remove, "
            + (f"about {est.get('summaries', 0)} summaries to rewrite ("
               + ", ".join(f"level {r['level']}: {r['summaries']}" for r in est.get("levels", [])) + "); " if est.get("levels") else "")
            + f"~{est.get('embed_texts', 0)} texts to embed"
        )
        if est.get("note"):
            console.print(est["note"])


def _print_result(out: dict[str, Any]) -> None:
    mode = out.get("mode")
    if mode == "noop":
        console.print(f"[green]unchanged[/]: {out.get('reason')} (snapshot {out.get('snapshot')})")
        return
    if mode == "full":
        console.print(f"[yellow]full rebuild[/]: {out.get('reason')}")
    else:
        console.print(f"incremental: {out.get('reason')}")
    tree = out.get("tree-update") or {}
    touched = tree.get("clusters_touched") or {}
    if touched:
        console.print("clusters touched per level: " + ", ".join(f"{lv}: {n}" for lv, n in touched.items()))
    calls = out.get("calls", {})
    console.print(
        f"[green]published[/] snapshot {out.get('snapshot')}; summaries written: {calls.get('summaries', 0)}; "
        f"texts embedded: {calls.get('embedded_texts', 0)}; {out.get('seconds', '?')} s"
    )
    from arborag.cli.build import fallback_lines

    for line in fallback_lines(out, "tree-update" if out.get("tree-update") else "tree"):
        console.print(line, highlight=False)
