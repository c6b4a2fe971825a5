"""`arborag inspect`: look at a built corpus (tree view, snapshot info)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from arborag.cli.common import console, fail
from arborag.cli.common import check_corpus_path
from arborag.errors import ArboragError, NotBuiltError


def register(app: typer.Typer) -> None:
    inspect_app = typer.Typer(help="Inspect a built corpus: the tree as an HTML page, the published snapshot.", no_args_is_help=True)
    app.add_typer(inspect_app, name="inspect")

    @inspect_app.command(
        "tree",
        help=(
            "Show the tree: every summary with its label (title, keywords) and size, level by level. "
            "In the terminal by default, depth-limited; with --html, a self-contained page (works "
            "offline) where you can expand every node and read every summary and its children.\n\n"
            "Examples:\n\n  arborag inspect tree --corpus /tmp/demo --depth 2\n\n"
            "  arborag inspect tree --corpus /tmp/demo --html tree.html"
        ),
    )
    def tree(
        corpus: Path = typer.Option(..., "--corpus", "-c", callback=check_corpus_path, help="Corpus directory with a published build."),
        html_out: Optional[Path] = typer.Option(None, "--html", help="Write an HTML page here instead of printing the tree."),
        depth: int = typer.Option(2, "--depth", "-d", min=1, help="Terminal view: levels shown from the top (1 = the top level only)."),
        max_children: Optional[int] = typer.Option(None, "--max-children", min=1,
                                                   help="Show at most this many children per node (terminal default: 8)."),
    ) -> None:
        from arborag.query.treeview import render_tree_html, tree_outline

        try:
            if html_out is not None:
                out = render_tree_html(corpus, html_out, max_children=max_children)
                console.print(f"wrote {out} — open it in a browser")
                return
            lines = tree_outline(corpus, depth=depth, max_children=max_children if max_children is not None else 8)
        except ArboragError as exc:
            fail(exc)
        for line in lines:
            typer.echo(line)

    @inspect_app.command(
        "topics",
        help=(
            "What is this corpus about? The top levels of the tree as a table: each topic's title, "
            "keywords, size (leaf chunks and share of the corpus) and the documents it draws most on. "
            "No LLM needed: labels are computed at build time.\n\n"
            "Examples:\n\n  arborag inspect topics --corpus /tmp/demo\n\n"
            "  arborag inspect topics --corpus /tmp/demo --levels 1 --json | jq '.[0]'"
        ),
    )
    def topics_cmd(
        corpus: Path = typer.Option(..., "--corpus", "-c", callback=check_corpus_path, help="Corpus directory with a published build."),
        levels: int = typer.Option(2, "--levels", "-l", min=1, help="How many levels from the top to list."),
        docs: int = typer.Option(3, "--docs", min=1, help="Documents listed per topic (those with most leaves under it)."),
        as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON instead of a table."),
    ) -> None:
        from arborag.query.treeview import topics

        try:
            rows = topics(corpus, levels=levels, docs=docs)
        except ArboragError as exc:
            fail(exc)
        if as_json:
            typer.echo(json.dumps(rows, indent=2, ensure_ascii=False))
            return
        from rich.table import Table

        table = Table(title=f"topics — top {levels} level(s)", show_lines=False)
        for col in ("level", "title", "keywords", "leaves", "share", "documents"):
            table.add_column(col, justify="right" if col in ("level", "leaves", "share") else "left")
        for r in rows:
            documents = "; ".join(f"{d['title']} ({d['leaves']})" for d in r["documents"])
            if r["n_docs"] > len(r["documents"]):
                documents += f" … of {r['n_docs']}"
            table.add_row(f"L{r['level']}", r["title"], ", ".join(r["keywords"]), str(r["leaves"]), f"{r['share']:.0%}", documents)
        console.print(table)

    @inspect_app.command("snapshot", help="Print the published snapshot's manifest (build key, counts, config hash).\n\nExample:\n\n  arborag inspect snapshot --corpus /tmp/demo")
    def snapshot(corpus: Path = typer.Option(..., "--corpus", "-c", callback=check_corpus_path, help="Corpus directory.")) -> None:
        from arborag.storage.corpus import Corpus

        man = Corpus(corpus).manifest()
        if man is None:
            fail(NotBuiltError(str(corpus)))
        typer.echo(json.dumps(man, indent=2))
