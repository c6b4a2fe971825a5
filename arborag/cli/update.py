"""`arborag update`: bring a built corpus in line with its sources (added, changed, deleted documents)."""

from __future__ import annotations

import shlex

from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.table import Table

from arborag.cli.common import (
    CONFIG_OPTION,
    EXIT_PARTIAL,
    EXIT_REFUSED,
    EXIT_USAGE,
    FOLLOW_EXTERNAL_SYMLINKS_OPTION,
    NO_WAIT_OPTION,
    PREFECT_OPTION,
    check_corpus_path,
    config_from,
    console,
    fail,
    offline_env,
    require_corpus,
    use_prefect,
)
from arborag.errors import ArboragError


MAX_DELETE_OPTION = typer.Option(
    None, "--max-delete",
    help="Refuse (exit 4, nothing written) when the update would delete more than this many documents: a number (10) "
         "or a share of the documents the corpus holds (50%). Default: 50%.",
)


def register(app: typer.Typer) -> None:
    @app.command(
        "update",
        help=(
            "Make a built corpus hold exactly SOURCES: index added and changed files, delete the documents whose "
            "file is gone from SOURCES — without rebuilding the tree. To index a few files and keep everything "
            "else, use `arborag add`.\n\n"
            "Compares the sources with the corpus's documents by uri and content hash — added, "
            "changed, deleted (uri gone; --no-prune keeps them), unchanged — prints the plan, then "
            "assigns new leaves to the fitted clusters, removes deleted ones, re-summarizes only the "
            "clusters whose membership changed (level by level) and publishes a new snapshot "
            "atomically. The SOURCES are the whole corpus: a document whose file is gone is deleted "
            "from every level, the vectors and the sparse index. Past update.max_drift (20% of the "
            "leaves changed since the last full fit) it rebuilds the whole tree and says why.\n\n"
            "Delete guard: an update that would delete more than half of the documents the corpus holds "
            "(--max-delete) is refused before anything is written: it prints the plan and exits 4. "
            "--allow-delete lifts the limit.\n\n"
            "Exit codes: 0 done (files that failed before and still fail the same way are listed, not "
            "counted again); 3 a source failed to read in a new way this run (listed with its reason; its "
            "earlier document is kept); 4 refused by the delete guard; 1 error.\n\n"
            "Example:\n\n"
            "  arborag update examples/corpus/ --corpus /tmp/demo --dry-run\n\n"
            "  arborag update examples/corpus/ --corpus /tmp/demo --no-prefect\n\n"
            "  arborag update docs/ --corpus /tmp/demo --max-delete 100"
        ),
    )
    def update(
        sources: list[Path] = typer.Argument(..., help="Files or folders the corpus should hold (all of them)."),
        corpus: Path = typer.Option(..., "--corpus", "-c", callback=check_corpus_path,
                                    help="Corpus directory built by `arborag build` (see --init for a new one)."),
        prune: Optional[bool] = typer.Option(None, "--prune/--no-prune", help="Delete documents whose uri is gone from the sources (default: update.prune, on)."),
        max_delete: Optional[str] = MAX_DELETE_OPTION,
        allow_delete: bool = typer.Option(False, "--allow-delete", help="No delete limit: delete every document whose file is gone, however many."),
        init: bool = typer.Option(False, "--init", help="Allow a --corpus that is not a corpus yet: build it in full from SOURCES."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan and the estimated embedding and summary work; change nothing."),
        prefect: Optional[bool] = PREFECT_OPTION,
        no_wait: bool = NO_WAIT_OPTION,
        follow_external_symlinks: bool = FOLLOW_EXTERNAL_SYMLINKS_OPTION,
        config: Optional[Path] = CONFIG_OPTION,
    ) -> None:
        if not init:
            require_corpus(corpus, "update")
        if allow_delete and max_delete is not None:
            fail(ArboragError("give either --max-delete or --allow-delete, not both"), EXIT_USAGE)
        limit = "all" if allow_delete else max_delete
        if max_delete is not None:  # checked before any work; the plan module (polars, pyarrow) only then
            from arborag.tasks.stages.plan import DeleteLimit

            try:
                DeleteLimit.parse(limit)
            except ArboragError as exc:
                fail(exc, EXIT_USAGE)
        run_command(sources, corpus, prune=prune, max_delete=limit, dry_run=dry_run, prefect=prefect, no_wait=no_wait,
                    follow_external_symlinks=follow_external_symlinks, config=config, adding=False)


def run_command(sources: list[Path], corpus: Path, *, prune: Optional[bool], max_delete: Optional[str], dry_run: bool, prefect: Optional[bool],
                no_wait: bool, follow_external_symlinks: bool, config: Optional[Path], adding: bool) -> None:
    """``update`` and ``add`` (``adding``: prune off, the other documents shown as kept): run the
    update flow, print the plan and the result, exit with the documented code."""
    offline_env()
    cfg = config_from(config, {"update": {"prune": prune}, "ingest": {"follow_external_symlinks": follow_external_symlinks or None}})
    srcs = [str(s) for s in sources]
    orchestrated = use_prefect(prefect)
    if not dry_run and not orchestrated:
        from arborag.embed import worker as embed_worker

        # the model starts loading on the other core now (a console-script run; the worker is
        # killed at once when nothing changed), while nothing changed since the last run is
        # told from file stats — before Prefect, the stages or a model load here
        embed_worker.start(cfg.embed)
        from arborag.flows.noop import quick_noop

        quick = quick_noop(srcs, corpus, cfg, prune=prune)
        if quick is not None:
            embed_worker.stop_all(kill=True)
            _print_plan(quick["plan"], estimate=False, adding=adding, corpus=corpus)
            _print_result(quick)
            from arborag.cli.exit import finish

            finish(0)
            return
    preloading = None
    if not dry_run:  # the model loads while Prefect, the stages and the plan start
        from arborag.embed.model import preload

        # no UMAP (an update fits only when drift says so); lancedb is imported by the flow
        # once the plan is made (flows/update.py: on this thread it slowed the plan)
        preloading = preload(cfg.embed)
    from arborag.flows.update import run_update
    from arborag.tasks.stages.plan import DeletesRefused

    try:
        if dry_run:
            plan = run_update(srcs, corpus, cfg, prune=prune, dry_run=True, use_prefect=False, max_delete=max_delete)
            _print_plan(plan.get("plan") or {}, adding=adding, corpus=corpus)
            return
        # one pass: the plan is made (and printed) by the run itself, not by a dry run first
        out = run_update(srcs, corpus, cfg, prune=prune, use_prefect=orchestrated, progress=True, lock_wait=not no_wait,
                         noop_checked=not orchestrated, max_delete=max_delete)
    except DeletesRefused as exc:
        _print_plan(exc.plan, estimate=False, corpus=corpus)
        fail(exc, EXIT_REFUSED)
        return
    except (ArboragError, OSError) as exc:
        fail(exc)
        return
    finally:
        if preloading is not None:
            preloading.join()
            from arborag.embed.worker import stop_all

            stop_all()  # the embedding worker, if this run started one
    from arborag.flows.pipelines import PLAN

    _print_plan(out.get(PLAN.name) or {}, estimate=False, adding=adding, corpus=corpus)
    _print_result(out)
    code = exit_code(out)
    from arborag.cli.exit import finish

    finish(code)  # the console script ends here (no teardown)
    if code:
        raise typer.Exit(code)


def exit_code(out: dict[str, Any]) -> int:
    """3 (EXIT_PARTIAL) when this run met a read failure the corpus did not already record (a new
    file that does not read, a file that read before, another reason); 0 otherwise — a file still
    broken exactly as before is listed by every run but fails a schedule only once."""
    if out.get("status") != "partial":
        return 0
    new = out.get("new_failures")
    return EXIT_PARTIAL if new is None or int(new) > 0 else 0


_MAX_LISTED_FAILURES = 50


def _print_plan(plan: dict[str, Any], *, estimate: bool = True, adding: bool = False, corpus: str | Path | None = None) -> None:
    """The plan's counts and uris. ``adding`` (``arborag add``): the documents not named are kept,
    not "deleted" — shown as ``kept``."""
    kinds = ("added", "changed", "kept" if adding else "deleted", "unchanged", "failed")
    t = Table(title="Add plan (by uri)" if adding else "Update plan (by uri)")
    for col in kinds:
        t.add_column(col, justify="right")
    t.add_row(*(str(plan.get("deleted" if k == "kept" else k, 0)) for k in kinds))
    console.print(t)
    files, read = plan.get("files"), plan.get("files_read")
    if isinstance(files, int) and isinstance(read, int) and read < files:
        console.print(f"read {read:,} of {files:,} source files: the other {files - read:,} have the size, times and inode they had "
                      "when last read (cache/source_stats.parquet; delete it to read every file)", highlight=False)
    listed = ("added", "changed") if adding else ("added", "changed", "deleted")
    for kind in listed:
        uris = plan.get(f"{kind}_uris") or []
        if uris:
            more = plan.get(kind, 0) - len(uris)
            # one unwrapped line of plain text: paths are neither broken at the terminal's width nor read as markup
            console.print(f"{kind}: " + ", ".join(uris) + (f" (+{more} more)" if more > 0 else ""), highlight=False, markup=False, soft_wrap=True)
    _print_failures(plan, corpus)
    if plan.get("deleted") and not plan.get("pruned", True) and not adding:
        console.print("[yellow]--no-prune[/]: deleted uris stay in the corpus")
    if plan.get("refused"):
        console.print(f"[yellow]{escape(str(plan['refused']))}[/]", highlight=False)
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


def _print_failures(plan: dict[str, Any], corpus: str | Path | None = None) -> None:
    """Each source that failed to read, with its reason (and whether it failed the same way before)."""
    failures = plan.get("failures")
    if failures is None:  # a plan without reasons: the uris only
        uris = plan.get("failed_uris") or []
        if uris:
            more = plan.get("failed", 0) - len(uris)
            console.print("failed: " + ", ".join(uris) + (f" (+{more} more)" if more > 0 else ""), highlight=False, markup=False, soft_wrap=True)
        return
    for f in failures[:_MAX_LISTED_FAILURES]:
        again = "" if f.get("new", True) else " (failed the same way before; its earlier document, if any, is kept)"
        console.print(f"[red]failed[/]: {escape(str(f['uri']))}: {escape(str(f['reason']))}{again}", highlight=False, soft_wrap=True)
    if len(failures) > _MAX_LISTED_FAILURES:
        where = shlex.quote(str(corpus)) if corpus else "DIR"
        console.print(f"(+{len(failures) - _MAX_LISTED_FAILURES} more failed: arborag sql --working \"select uri, error from documents "
                      f"where status = 'error'\" --corpus {where})", highlight=False, markup=False, soft_wrap=True)


def _print_result(out: dict[str, Any]) -> None:
    mode = out.get("mode")
    if mode == "noop":
        console.print(f"[green]unchanged[/]: {out.get('reason')} (snapshot {out.get('snapshot')})")
        return
    if mode == "full":
        console.print(f"[yellow]full rebuild[/]: {out.get('reason')}")
    else:
        console.print(f"incremental: {out.get('reason')}")
    from arborag.flows.pipelines import TREE, TREE_UPDATE

    tree = out.get(TREE_UPDATE.name) or {}
    touched = tree.get("clusters_touched") or {}
    if touched:
        console.print("clusters touched per level: " + ", ".join(f"{lv}: {n}" for lv, n in touched.items()))
    opened = tree.get("clusters_opened") or {}
    if opened:
        console.print("clusters opened per level (for new nodes no existing cluster admitted): " + ", ".join(f"{lv}: {n}" for lv, n in opened.items()))
    calls = out.get("calls", {})
    console.print(
        f"[green]published[/] snapshot {out.get('snapshot')}; summaries written: {calls.get('summaries', 0)}; "
        f"texts embedded: {calls.get('embedded_texts', 0)}; {out.get('seconds', '?')} s"
    )
    from arborag.cli.build import fallback_lines

    for line in fallback_lines(out, TREE_UPDATE.name if out.get(TREE_UPDATE.name) else TREE.name):
        console.print(line, highlight=False)
