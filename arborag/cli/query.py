"""`arborag query`: search a published corpus (never starts Prefect)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from arborag.cli.common import CONFIG_OPTION, config_from, console, err_console, fail, offline_env
from arborag.errors import ArboragError, QueryError


def register(app: typer.Typer) -> None:
    @app.command(
        "query",
        help=(
            "Retrieve context for a question from a built corpus.\n\n"
            "Modes: collapsed (default: all tree levels best-first until the token budget), "
            "traversal (top-k per level from the top), sparse (BM25; --lucene runs Lucene syntax), "
            "hybrid (dense + sparse fused by reciprocal rank fusion).\n\n"
            "Examples:\n\n"
            "  arborag query \"How did Cinderella reach her happy ending?\" --corpus /tmp/demo\n\n"
            "  arborag query '+\"golden slipper\" -stepmother' --mode sparse --lucene --corpus /tmp/demo --json"
        ),
    )
    def query(
        text: str = typer.Argument(..., help="The question (or a Lucene query with --lucene)."),
        corpus: Path = typer.Option(..., "--corpus", "-c", help="Corpus directory with a published build."),
        mode: Optional[str] = typer.Option(None, "--mode", "-m", help="collapsed | traversal | sparse | hybrid (default: query.mode, collapsed)."),
        budget: Optional[int] = typer.Option(None, "--budget", "-b", help="Token budget of the returned context (default: query.budget, 2000)."),
        k: Optional[int] = typer.Option(None, "--k", help="traversal: nodes kept per level (default: query.k, 5)."),
        levels: Optional[str] = typer.Option(None, "--levels", help="Comma-separated tree levels to search, e.g. 0 for leaves only."),
        lucene: bool = typer.Option(False, "--lucene", help="sparse/hybrid: run TEXT as Lucene query syntax (+must -not \"phrase\" term^2 field:x)."),
        as_json: bool = typer.Option(False, "--json", help="Print hits as JSON."),
        config: Optional[Path] = CONFIG_OPTION,
    ) -> None:
        offline_env()
        cfg = config_from(config)
        # an option given on the command line wins; otherwise arborag.yaml / ARBORAG_QUERY__*
        mode = mode if mode is not None else cfg.query.mode
        budget = budget if budget is not None else cfg.query.budget
        k = k if k is not None else cfg.query.k
        from arborag.query import open_index

        lv = [int(x) for x in levels.split(",")] if levels else None
        try:
            index = open_index(corpus, config=cfg)
            try:
                hits = index.search(text, mode=mode, budget=budget, k=k, levels=lv, lucene=lucene)  # type: ignore[arg-type]
            except QueryError as exc:
                if not lucene or exc.position is None:
                    raise
                # SPEC §6: a malformed Lucene query is reported, then retried as a plain match
                err_console.print(f"[yellow]warning:[/] {exc}\nretrying as a plain match of the words")
                hits = index.search(text, mode=mode, budget=budget, k=k, levels=lv, lucene=False)  # type: ignore[arg-type]
        except ArboragError as exc:
            fail(exc)
        if as_json:
            typer.echo(json.dumps([
                {"node_id": h.node_id, "level": h.level, "score": round(h.score, 6), "n_tokens": h.n_tokens, "doc_ids": list(h.doc_ids), "text": h.text}
                for h in hits
            ], ensure_ascii=False, indent=2))
            return
        titles = _doc_titles(index)
        used = sum(h.n_tokens for h in hits)
        n_sum = sum(1 for h in hits if h.level > 0)
        console.print(f"[bold]{len(hits)}[/] hits, {used} tokens (budget {budget}); {n_sum} summary nodes, {len(hits) - n_sum} leaves — mode {mode}")
        t = Table(show_lines=True)
        t.add_column("#", justify="right")
        t.add_column("level", justify="right")
        t.add_column("score", justify="right")
        t.add_column("tokens", justify="right")
        t.add_column("source")
        t.add_column("text")
        for i, h in enumerate(hits, 1):
            src = ", ".join(titles.get(d, d[:8]) for d in h.doc_ids[:3]) + (" …" if len(h.doc_ids) > 3 else "")
            text_ = h.text if len(h.text) <= 300 else h.text[:300] + " …"
            t.add_row(str(i), str(h.level), f"{h.score:.3f}", str(h.n_tokens), src, text_)
        console.print(t)


def _doc_titles(index) -> dict[str, str]:
    import pyarrow.parquet as pq

    path = index.corpus.table_path("documents")
    if not path.exists():
        return {}
    t = pq.read_table(path, columns=["doc_id", "title", "uri"])
    return {d: (ti or Path(u).name) for d, ti, u in zip(t.column("doc_id").to_pylist(), t.column("title").to_pylist(), t.column("uri").to_pylist())}
