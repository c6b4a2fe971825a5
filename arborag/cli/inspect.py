"""`arborag inspect`: look at a built corpus (tree view, snapshot info)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from arborag.cli.common import console, fail
from arborag.errors import ArboragError, NotBuiltError


def register(app: typer.Typer) -> None:
    inspect_app = typer.Typer(help="Inspect a built corpus: the tree as an HTML page, the published snapshot.", no_args_is_help=True)
    app.add_typer(inspect_app, name="inspect")

    @inspect_app.command(
        "tree",
        help=(
            "Write a self-contained HTML page (works offline) where you can expand the tree "
            "level by level and read every summary and its children.\n\n"
            "Example:\n\n  arborag inspect tree --corpus /tmp/demo --html tree.html"
        ),
    )
    def tree(
        corpus: Path = typer.Option(..., "--corpus", "-c", help="Corpus directory with a published build."),
        html_out: Path = typer.Option(Path("tree.html"), "--html", help="Output HTML file."),
        max_children: Optional[int] = typer.Option(None, "--max-children", help="Show at most this many children per node."),
    ) -> None:
        from arborag.query.treeview import render_tree_html

        try:
            out = render_tree_html(corpus, html_out, max_children=max_children)
        except ArboragError as exc:
            fail(exc)
        console.print(f"wrote {out} — open it in a browser")

    @inspect_app.command("snapshot", help="Print the published snapshot's manifest (build key, counts, config hash).\n\nExample:\n\n  arborag inspect snapshot --corpus /tmp/demo")
    def snapshot(corpus: Path = typer.Option(..., "--corpus", "-c", help="Corpus directory.")) -> None:
        from arborag.storage.corpus import Corpus

        man = Corpus(corpus).manifest()
        if man is None:
            fail(NotBuiltError(str(corpus)))
        typer.echo(json.dumps(man, indent=2))
