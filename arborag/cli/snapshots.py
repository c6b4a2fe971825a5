"""`arborag snapshots …`: list, show, diff, pin/unpin, gc and roll back a corpus's snapshots.

Conventions of ``git`` / ``docker image``: ids accept unique prefixes (``snap-`` may be left
out), ``published`` names the published one, every listing has ``--json``.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

import typer

from arborag.cli.common import config_from, console, err_console, fail
from arborag.cli.common import check_corpus_path
from arborag.errors import ArboragError
from arborag.storage.catalog import SNAPSHOT_VIEW_TABLES

__all__ = ["register"]

CORPUS = typer.Option(..., "--corpus", "-c", callback=check_corpus_path, envvar="ARBORAG_CORPUS", help="Corpus directory or s3:// URI.")
JSON = typer.Option(False, "--json", help="Print JSON instead of a table.")


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _when(t: datetime | None) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S") if t else "-"


def _levels(levels: dict[str, int]) -> str:
    return " / ".join(str(levels[k]) for k in sorted(levels, key=int)) if levels else "-"


def _corpus(location: str) -> Any:
    from arborag.storage.corpus import Corpus

    return Corpus(location)


def register(app: typer.Typer) -> None:
    snaps = typer.Typer(
        help=(
            "List, compare, pin, garbage-collect and roll back the snapshots of a corpus (every build or "
            "update publishes one; retention keeps the last retention.keep_last within retention.keep_days, "
            "plus the published, pinned and leased ones).\n\n"
            "Example:\n\n  arborag snapshots list --corpus /tmp/demo\n\n"
            "  arborag snapshots diff 3f2a published --corpus /tmp/demo"
        ),
        no_args_is_help=True,
    )
    app.add_typer(snaps, name="snapshots")

    @snaps.command("list", help=(
        "Every retained snapshot, newest first: id, when it was published, the flow and run that made it, "
        "documents, nodes per level (leaves first), bytes on disk, pinned, live leases; * marks the published one.\n\n"
        "Example:\n\n  arborag snapshots list --corpus /tmp/demo --json"))
    def list_cmd(corpus: str = CORPUS, as_json: bool = JSON) -> None:
        from rich.table import Table

        from arborag.storage.snapshots import list_snapshots

        try:
            items = list_snapshots(_corpus(corpus))
        except ArboragError as exc:
            fail(exc)
        if as_json:
            typer.echo(json.dumps([s.to_dict() for s in items], indent=2))
            return
        if not items:
            console.print(f"no snapshots in {corpus}: build one with `arborag build SOURCE... --corpus {corpus}`")
            return
        table = Table(show_edge=False, header_style="bold", pad_edge=False)
        for col in ("", "id", "published (UTC)", "flow run", "docs", "nodes/level", "size", "notes"):
            table.add_column(col, justify="right" if col in ("docs", "size") else "left", no_wrap=col in ("id", "size"))
        for s in items:  # short ids as docker/git show them (any unique prefix works; --json has the full ids)
            notes = ", ".join(n for n in ("pinned" if s.pinned else "", f"{s.leases} lease(s)" if s.leases else "") if n)
            table.add_row("*" if s.published else "", s.id[:13], s.published_at.strftime("%Y-%m-%d %H:%M:%S") if s.published_at else "-",
                          f"{s.flow or '-'} {s.run_id or '-'}", "-" if s.documents is None else str(s.documents),
                          _levels(s.levels), _size(s.bytes), notes)
        console.print(table)
        console.print(f"{len(items)} snapshot(s), {_size(sum(s.bytes or 0 for s in items))}; * = published")

    @snaps.command("show", help="One snapshot in full: its info.json (build key, config hash, embedder, counts, drift), size, pin, leases.\n\n"
                   "Example:\n\n  arborag snapshots show published --corpus /tmp/demo")
    def show_cmd(ref: str = typer.Argument(..., help="Snapshot id, unique prefix, or 'published'."), corpus: str = CORPUS) -> None:
        from arborag.storage.leases import live_leases
        from arborag.storage.snapshots import list_snapshots, pinned_ids, resolve_snapshot

        try:
            c = _corpus(corpus)
            sid = resolve_snapshot(c, ref)
            s = next(x for x in list_snapshots(c) if x.id == sid)
            out = {**s.to_dict(), "info": s.info, "pin": pinned_ids(c).get(sid), "live_leases": live_leases(c).get(sid, [])}
        except ArboragError as exc:
            fail(exc)
        typer.echo(json.dumps(out, indent=2, default=str))

    @snaps.command("diff", help=(
        "What changed from snapshot A to snapshot B: documents added, removed and changed (by uri), leaves added "
        "and removed, and summaries rewritten per level (a rewritten summary is one removed node and one added).\n\n"
        "Example — what did the last update change?\n\n  arborag snapshots diff <previous-id> published --corpus /tmp/demo"))
    def diff_cmd(
        a: str = typer.Argument(..., help="The older snapshot (id, prefix or 'published')."),
        b: str = typer.Argument(..., help="The newer snapshot."),
        corpus: str = CORPUS,
        as_json: bool = JSON,
        show: int = typer.Option(20, "--show", help="Documents listed per group in the table (all in --json)."),
    ) -> None:
        from rich.table import Table

        from arborag.storage.snapshots import diff_snapshots

        try:
            d = diff_snapshots(_corpus(corpus), a, b)
        except ArboragError as exc:
            fail(exc)
        if as_json:
            typer.echo(json.dumps(d, indent=2))
            return
        console.print(f"{d['a']} -> {d['b']}")
        for group in ("added", "removed", "changed"):
            uris = d["documents"][group]
            console.print(f"documents {group}: {len(uris)}")
            for u in uris[:show]:
                console.print(f"  {'+-~'[('added', 'removed', 'changed').index(group)]} {u}", highlight=False)
            if len(uris) > show:
                console.print(f"  … and {len(uris) - show} more (--json lists all)")
        table = Table(show_edge=False, header_style="bold")
        for col in ("level", "nodes A", "nodes B", "added", "removed"):
            table.add_column(col, justify="right")
        for lvl, v in d["levels"].items():
            table.add_row("0 (leaves)" if lvl == "0" else lvl, str(v["nodes_a"]), str(v["nodes_b"]), str(v["added"]), str(v["removed"]))
        console.print(table)

    @snaps.command("pin", help="Pin a snapshot: retention never removes it until it is unpinned.\n\n"
                   "Example:\n\n  arborag snapshots pin published --corpus /tmp/demo --note 'before the re-chunking'")
    def pin_cmd(ref: str = typer.Argument(..., help="Snapshot id, unique prefix, or 'published'."), corpus: str = CORPUS,
                note: str = typer.Option("", "--note", help="Why it is pinned (shown by `snapshots show`).")) -> None:
        from arborag.storage.snapshots import pin_snapshot

        try:
            sid = pin_snapshot(_corpus(corpus), ref, note=note)
        except ArboragError as exc:
            fail(exc)
        console.print(f"pinned {sid}")

    @snaps.command("unpin", help="Remove a pin; retention may then remove the snapshot.\n\nExample:\n\n  arborag snapshots unpin 3f2a --corpus /tmp/demo")
    def unpin_cmd(ref: str = typer.Argument(..., help="Pinned snapshot id or prefix."), corpus: str = CORPUS) -> None:
        from arborag.storage.snapshots import unpin_snapshot

        try:
            sid = unpin_snapshot(_corpus(corpus), ref)
        except ArboragError as exc:
            fail(exc)
        console.print(f"unpinned {sid}")

    @snaps.command("gc", help=(
        "Apply retention now (it also runs after every publish): remove snapshots beyond retention.keep_last or older "
        "than retention.keep_days — never the published, a pinned or a leased one — plus cache entries no kept snapshot "
        "uses, staging folders of abandoned runs and old Prefect records. Takes the writer lock.\n\n"
        "Example — what would go, and how many bytes:\n\n  arborag snapshots gc --corpus /tmp/demo --dry-run\n\n"
        "  arborag snapshots gc --corpus /tmp/demo --keep-last 3"))
    def gc_cmd(
        corpus: str = CORPUS,
        dry_run: bool = typer.Option(False, "--dry-run", help="Remove nothing; say what would go and how many bytes."),
        keep_last: Optional[int] = typer.Option(None, "--keep-last", min=0, help="Override retention.keep_last."),
        keep_days: Optional[float] = typer.Option(None, "--keep-days", min=0, help="Override retention.keep_days."),
        grace_s: Optional[float] = typer.Option(None, "--grace-s", min=0, help="Override retention.grace_s."),
        no_wait: bool = typer.Option(False, "--no-wait", help="Fail at once if a writer holds the corpus lock instead of waiting."),
        config: Optional[Path] = typer.Option(None, "--config", help="Path to an arborag.yaml (default: ./arborag.yaml if present)."),
        as_json: bool = JSON,
    ) -> None:
        from arborag.storage.snapshots import collect_garbage

        cfg = config_from(config, {"retention": {"keep_last": keep_last, "keep_days": keep_days, "grace_s": grace_s}})
        try:
            with err_console.status("collecting garbage…", spinner="dots"):
                report = collect_garbage(_corpus(corpus), cfg.retention, dry_run=dry_run, wait=not no_wait)
        except (ArboragError, OSError) as exc:
            fail(exc)
        if as_json:
            typer.echo(json.dumps(report.to_dict(), indent=2))
        else:
            verb = "would remove" if dry_run else "removed"
            for r in report.removed:
                console.print(f"{verb} {r['id']} ({_size(r['bytes'])}): {r['reason']}", highlight=False)
            for sid, why in report.kept.items():
                console.print(f"kept {sid}: {', '.join(why)}", highlight=False)
            for part, v in sorted(report.parts.items()):
                if v["items"]:
                    console.print(f"{part}: {verb} {v['items']} ({_size(v['bytes'])})", highlight=False)
            console.print(f"{'would free' if dry_run else 'freed'} {_size(report.bytes_freed)} in {report.seconds:.2f} s")
        for e in report.errors:
            console.print(f"[yellow]warning:[/] {e}", highlight=False)
        if report.errors:
            raise typer.Exit(3)

    @snaps.command("rollback", help=(
        "Publish an earlier retained snapshot again (one atomic manifest switch, under the writer lock); readers move "
        "to it on their next request. The next update starts from it.\n\n"
        "Example:\n\n  arborag snapshots rollback 3f2a --corpus /tmp/demo"))
    def rollback_cmd(ref: str = typer.Argument(..., help="Snapshot id or unique prefix."), corpus: str = CORPUS,
                     no_wait: bool = typer.Option(False, "--no-wait", help="Fail at once if a writer holds the corpus lock.")) -> None:
        from arborag.storage.snapshots import rollback

        got: dict = {}
        try:
            sid = rollback(_corpus(corpus), ref, wait=not no_wait, report=got)
        except (ArboragError, OSError) as exc:
            fail(exc)
        console.print(f"published {sid}")
        gc = got.get("gc") or {}
        if gc.get("errors"):
            console.print(f"retention after the rollback: {'; '.join(gc['errors'])} (the rollback stands)")
        elif gc:
            console.print(f"retention after the rollback: {gc.get('snapshots_removed', 0)} snapshots removed, "
                          f"{gc.get('bytes_freed', 0) / 1e6:.1f} MB freed")

    @snaps.command("catalog", help=(
        f"Write CORPUS/published.duckdb again: DuckDB views ({', '.join(SNAPSHOT_VIEW_TABLES)}, snapshot) over the "
        "published snapshot, for plain `duckdb -readonly`. Every publish and rollback writes it; run this for a corpus "
        "published before it existed, after moving the corpus folder (the views hold absolute paths), or on another "
        "machine of an s3:// corpus (its local mirror gets the snapshot and the file). Takes the writer lock.\n\n"
        "Example:\n\n  arborag snapshots catalog --corpus /tmp/demo\n\n"
        "  duckdb -readonly /tmp/demo/published.duckdb -c \"SELECT snapshot FROM snapshot\""))
    def catalog_cmd(corpus: str = CORPUS,
                    no_wait: bool = typer.Option(False, "--no-wait", help="Fail at once if a writer holds the corpus lock.")) -> None:
        from arborag.storage.lock import corpus_lock
        from arborag.storage.catalog import write_catalog

        c = _corpus(corpus)
        try:
            with corpus_lock(c.root, wait=not no_wait, purpose="catalog"):
                path = write_catalog(c)
        except (ArboragError, OSError) as exc:
            fail(exc)
        console.print(f"wrote {path}", highlight=False)
