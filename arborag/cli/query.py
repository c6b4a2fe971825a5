"""`arborag query`: search a published corpus (never starts Prefect), or a running `arborag serve`.

Cold start matters here (a one-off process per question): nothing heavy is imported at module
level; the snapshot's vectors are read without lancedb, the question is embedded by
:class:`~arborag.embed.light.LightEmbedder` (same vector, no sentence-transformers import),
and a sparse query never imports torch. ``--server URL`` sends the query to a running
``arborag serve`` (model resident) and prints the same output.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import typer

from arborag.cli.common import CONFIG_OPTION, config_from, console, err_console, fail, offline_env, query_options
from arborag.cli.common import check_corpus_path
from arborag.errors import ArboragError, BackendUnavailable, QueryError


@dataclass(frozen=True, slots=True)
class _Row:
    """One printed hit, from the local index or from the server's response."""

    node_id: str
    level: int
    score: float
    n_tokens: int
    doc_ids: tuple[str, ...]
    text: str
    title: str | None = None  # a span of one document (``--mode segments``): its title and offsets
    start_char: int | None = None
    end_char: int | None = None


def _span(h: _Row) -> dict[str, Any]:
    """The span fields of a segment hit for JSON output (none for a single node)."""
    return {} if h.start_char is None else {"title": h.title, "start_char": h.start_char, "end_char": h.end_char}


def mode_option(what: str) -> Any:
    """``--mode``: the choices and their help from the registry (arborag.query.modes; no mode is imported)."""
    from arborag.query.modes import DEFAULT_MODE, MODE_NAMES

    def known(value: str | None) -> str | None:
        if value is not None and value not in MODE_NAMES:
            raise typer.BadParameter(f"{value!r} is not a mode; use one of {', '.join(MODE_NAMES)}")
        return value

    return typer.Option(None, "--mode", "-m", callback=known, metavar="[" + "|".join(MODE_NAMES) + "]",
                        help=f"{what} (default: query.mode, {DEFAULT_MODE}); `arborag query --help` describes each.")


def modes_help() -> str:
    """One paragraph per registered mode, for the command's help."""
    from arborag.query.modes import DEFAULT_MODE, MODES

    llm = {"none": "", "optional": " [LLM if configured, offline otherwise]", "configurable": " [LLM only if the config picks one]",
           "required": " [needs an LLM]"}
    return "\n\n".join(f"  {m.name}{' (default)' if m.name == DEFAULT_MODE else ''}: {m.description}{llm[m.llm]}"
                        for m in MODES.values())


def register(app: typer.Typer) -> None:
    @app.command(
        "query",
        help=(
            "Retrieve context for a question from a built corpus.\n\n"
            "Modes (--mode):\n\n" + modes_help() + "\n\n"
            "Examples:\n\n"
            "  arborag query \"How did Cinderella reach her happy ending?\" --corpus /tmp/demo\n\n"
            "  arborag query '+\"golden slipper\" -stepmother' --mode sparse --lucene --corpus /tmp/demo --json\n\n"
            "  arborag query \"glass slipper\" --server http://127.0.0.1:8000   (a running `arborag serve`)\n\n"
            "  arborag query \"glass slipper\" --corpus /tmp/demo --snapshot snap-3f2a   (an earlier retained snapshot; "
            "--as-of 2026-11-25T22:00 picks the one published then; `arborag snapshots list` shows them)\n\n"
            "  arborag query \"Where was the author of Xanadu born?\" --mode level --trace --corpus /tmp/demo   "
            "(LevelRAG searchers; needs ARBORAG_LLM_BASE_URL, else an offline plan; --trace prints the search tree)"
        ),
    )
    def query(
        text: str = typer.Argument(..., help="The question (or a Lucene query with --lucene)."),
        corpus: Optional[Path] = typer.Option(None, "--corpus", "-c", callback=check_corpus_path, help="Corpus directory with a published build (or --server)."),
        mode: Optional[str] = mode_option("Retrieval mode"),
        budget: Optional[int] = typer.Option(None, "--budget", "-b", help="Token budget of the returned context (default: query.budget, 2000)."),
        k: Optional[int] = typer.Option(None, "--k", help="traversal: nodes kept per level (default: query.k, 5)."),
        levels: Optional[str] = typer.Option(None, "--levels", help="Comma-separated tree levels to search, e.g. 0 for leaves only."),
        lucene: bool = typer.Option(False, "--lucene", help="sparse/hybrid: run TEXT as Lucene query syntax (+must -not \"phrase\" term^2 field:x)."),
        as_json: bool = typer.Option(False, "--json", help="Print hits as JSON; a mode that records a trace (level) prints {mode, hits, trace}."),
        show_trace: bool = typer.Option(False, "--trace", help="level: print the search trace (sub-questions, queries as sent, hits, verdicts, tokens) as a tree."),
        server: Optional[str] = typer.Option(
            None, "--server", help="Base URL of a running `arborag serve` (e.g. http://127.0.0.1:8000); "
            "the bearer token comes from ARBORAG_SERVE_TOKEN. Instead of --corpus."),
        snapshot: Optional[str] = typer.Option(
            None, "--snapshot", help="Answer from this retained snapshot (id or unique prefix; `arborag snapshots list`) "
            "instead of the published one; it is leased while the query runs, so gc cannot remove it."),
        as_of: Optional[str] = typer.Option(
            None, "--as-of", help="Answer from the snapshot that was published at this time (ISO-8601, e.g. "
            "2026-11-25T22:00; no zone = UTC). --corpus only."),
        config: Optional[Path] = CONFIG_OPTION,
    ) -> None:
        offline_env()
        cfg = config_from(config)
        mode, budget, k, lv = query_options(cfg, mode, budget, k, levels)
        if as_of is not None and (server is not None or snapshot is not None):
            err_console.print("[bold red]error:[/] --as-of needs --corpus and no --snapshot (give a time or an id, not both)")
            raise typer.Exit(2)
        if (corpus is None) == (server is None):
            err_console.print("[bold red]error:[/] give either --corpus DIR or --server URL")
            raise typer.Exit(2)
        trace = None
        try:
            if server is not None:
                rows, titles = _search_server(server, text, mode=mode, budget=budget, k=k, levels=lv, lucene=lucene, snapshot=snapshot)
                if show_trace:
                    err_console.print("[yellow]warning:[/] --trace needs a local --corpus (the server does not send traces)")
            else:
                assert corpus is not None
                rows, titles, trace = _search_local(corpus, cfg, text, mode=mode, budget=budget, k=k, levels=lv,
                                                    lucene=lucene, want_titles=not as_json, snapshot=snapshot, as_of=as_of)
        except ArboragError as exc:
            fail(exc)
        if as_json and trace is not None:
            _print_json_with_trace(rows, trace, mode=mode)
            return
        _print(rows, titles, mode=mode, budget=budget, as_json=as_json)
        if not as_json:
            for note in _fallback_notes(trace):
                console.print(f"[yellow]note:[/] {escape_markup(note)}", highlight=False)
        if show_trace and not as_json:
            if trace is None:
                console.print(f"[dim]mode {mode} records no search trace[/]")
            else:
                _print_trace(trace)


def pointer(query: str, position: int | None) -> str:
    """Two lines under a message: the query and a ``^`` under ``position`` (nothing for a query
    of several lines, longer than a line of text, or without a position)."""
    if position is None or "\n" in query or len(query) > 160 or not 0 <= position <= len(query):
        return ""
    return "\n  " + escape_markup(query) + "\n  " + " " * position + "^"


def escape_markup(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _fallback_notes(trace: Any) -> list[str]:
    """What an LLM-backed mode did instead of asking the LLM, said in the default output (not only
    with --json/--trace): ``multi`` variants from PRF, ``level``'s offline plan or failed steps."""
    if trace is None:
        return []
    notes: list[str] = []
    if hasattr(trace, "sub_questions"):  # level
        if getattr(trace, "plan", "llm") == "offline":
            notes.append("level ran its offline plan, without an LLM" + (f": {trace.notice}" if trace.notice else ""))
        errors = list(getattr(trace, "errors", []) or [])
        if errors:
            shown = "; ".join(_clip(e, 140) for e in errors[:3]) + (f"; … {len(errors) - 3} more" if len(errors) > 3 else "")
            notes.append(f"level: {len(errors)} LLM step(s) failed and fell back ({shown}); --trace shows each step")
    elif getattr(trace, "source", None) == "prf":  # multi
        status = str(getattr(trace, "status", "") or "")
        why = status if status.startswith("fallback") else "no LLM configured (set ARBORAG_LLM_BASE_URL for LLM variants)"
        notes.append(f"multi: the query variants came from PRF (pseudo-relevance feedback), not an LLM — {why}")
    return notes


def _print(hits: list[_Row], titles: dict[str, str], *, mode: str, budget: int | None, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps([
            {"node_id": h.node_id, "level": h.level, "score": round(h.score, 6), "n_tokens": h.n_tokens, "doc_ids": list(h.doc_ids),
             **_span(h), "text": h.text}
            for h in hits
        ], ensure_ascii=False, indent=2))
        return
    from rich.table import Table

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
        if h.start_char is not None:  # a segment: the document's title and where the span lies in it
            src = f"{h.title or src}\nchars {h.start_char:,}–{h.end_char:,}"
        text_ = h.text if len(h.text) <= 300 else h.text[:300] + " …"
        t.add_row(str(i), str(h.level), f"{h.score:.3f}", str(h.n_tokens), src, text_)
    console.print(t)


def _search_local(corpus: Path, cfg: Any, text: str, *, mode: str, budget: int | None, k: int,
                  levels: list[int] | None, lucene: bool, want_titles: bool, snapshot: str | None = None,
                  as_of: str | None = None) -> tuple[list[_Row], dict[str, str], Any]:
    from arborag.query import open_index

    index = open_index(corpus, config=cfg, light=True, snapshot=snapshot, as_of=as_of)  # an old snapshot is leased
    try:
        return _search_index(index, text, mode=mode, budget=budget, k=k, levels=levels, lucene=lucene, want_titles=want_titles,
                             time_travel=snapshot is not None or as_of is not None)
    finally:
        index.close()


def _search_index(index: Any, text: str, *, mode: str, budget: int | None, k: int, levels: list[int] | None, lucene: bool,
                  want_titles: bool, time_travel: bool) -> tuple[list[_Row], dict[str, str], Any]:
    if time_travel:
        err_console.print(f"answering from snapshot {index.snapshot} (published {index.info.get('published_at', '?')})")
    try:
        hits = index.search(text, mode=mode, budget=budget, k=k, levels=levels, lucene=lucene)  # type: ignore[arg-type]
    except QueryError as exc:
        if not lucene or exc.position is None:
            raise
        # docs/METHODS.md §6.4: a malformed Lucene query is reported (where it goes wrong), then retried as a plain match
        err_console.print(f"[yellow]warning:[/] {escape_markup(str(exc))}{pointer(text, exc.position)}\n"
                          "retrying as a plain match of the words", highlight=False)
        hits = index.search(text, mode=mode, budget=budget, k=k, levels=levels, lucene=False)  # type: ignore[arg-type]
    rows = [_Row(h.node_id, h.level, h.score, h.n_tokens, tuple(h.doc_ids), h.text,
                 getattr(h, "title", None), getattr(h, "start_char", None), getattr(h, "end_char", None)) for h in hits]
    return rows, (_doc_titles(index) if want_titles else {}), getattr(hits, "trace", None)


def _search_server(url: str, text: str, *, mode: str, budget: int | None, k: int,
                   levels: list[int] | None, lucene: bool, snapshot: str | None = None) -> tuple[list[_Row], dict[str, str]]:
    """POST /search to a running ``arborag serve``; the server retries a malformed Lucene query
    as plain words and says so (printed as the same warning as a local query)."""
    import httpx

    token = os.environ.get("ARBORAG_SERVE_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    body = {"text": text, "mode": mode, "budget": budget, "k": k, "levels": levels, "lucene": lucene}
    if snapshot is not None:
        body["snapshot"] = snapshot
    endpoint = url.rstrip("/") + "/search"
    try:
        resp = httpx.post(endpoint, json=body, headers=headers, timeout=60.0)
    except httpx.HTTPError as exc:
        raise BackendUnavailable("arborag serve", url, f"{exc}; start it with `arborag serve --corpus DIR`") from exc
    if resp.status_code != 200:
        try:
            err = resp.json()
        except ValueError:
            err = {}
        detail = err.get("detail") if isinstance(err, dict) else None
        detail = detail if isinstance(detail, str) else (json.dumps(detail) if detail else resp.text[:300])
        position = err.get("position") if isinstance(err, dict) else None
        if resp.status_code in (401, 403):
            detail = f"{detail} (set ARBORAG_SERVE_TOKEN to the server's token)"
        raise QueryError(text, f"the server answered {resp.status_code}: {detail}", position)
    data = resp.json()
    report = data.get("lucene")
    if report:
        at = f" at position {report['position']}" if report.get("position") is not None else ""
        message = escape_markup(f"cannot run query {text!r}{at}: {report['error']}")
        err_console.print(f"[yellow]warning:[/] {message}{pointer(text, report.get('position'))}\n"
                          "retrying as a plain match of the words", highlight=False)
    titles: dict[str, str] = {}
    rows = []
    for h in data["hits"]:
        for s in h["sources"]:
            if s.get("title") or s.get("uri"):
                titles[s["doc_id"]] = s.get("title") or Path(s["uri"]).name
        rows.append(_Row(h["node_id"], int(h["level"]), float(h["score"]), int(h["tokens"]),
                         tuple(s["doc_id"] for s in h["sources"]), h["text"]))
    return rows, titles


def _doc_titles(index) -> dict[str, str]:
    return index.doc_titles()

# -- search traces (--trace, --json) of modes that record one (level) ----------------------------------


def _trace_dict(trace: Any) -> Any:
    if hasattr(trace, "to_dict"):
        return trace.to_dict()
    import dataclasses

    return dataclasses.asdict(trace) if dataclasses.is_dataclass(trace) and not isinstance(trace, type) else repr(trace)


def _print_json_with_trace(hits: list[_Row], trace: Any, *, mode: str) -> None:
    typer.echo(json.dumps({
        "mode": mode,
        "hits": [{"node_id": h.node_id, "level": h.level, "score": round(h.score, 6), "n_tokens": h.n_tokens,
                  "doc_ids": list(h.doc_ids), **_span(h), "text": h.text} for h in hits],
        "trace": _trace_dict(trace),
    }, ensure_ascii=False, indent=2, default=str))


def _clip(text: str, n: int = 120) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _print_trace(trace: Any) -> None:
    """A level trace as a rich Tree: rounds > sub-questions > searchers > queries as sent."""
    from rich.markup import escape
    from rich.tree import Tree

    if not hasattr(trace, "sub_questions"):
        from rich.pretty import Pretty

        console.print(Pretty(_trace_dict(trace)))
        return
    head = (f"[bold]level[/] {escape(_clip(trace.question, 100))!s} — plan [bold]{trace.plan}[/], "
            f"{trace.rounds} round(s), {len(trace.calls)} LLM calls, {trace.tokens_in} tokens in / "
            f"{trace.tokens_out} out, {trace.seconds:.1f} s; searchers {', '.join(trace.searchers)}; scope {trace.scope}")
    root = Tree(head)
    if trace.notice:
        root.add(f"[yellow]{escape(trace.notice)}[/]")
    verdicts = {v.round: v for v in trace.verdicts}
    for rnd in range(1, trace.rounds + 1):
        branch = root.add(f"[bold]round {rnd}[/]")
        for sq in (s for s in trace.sub_questions if s.round == rnd):
            node = branch.add(f"[cyan]sub-question[/] {escape(sq.text)}")
            for run in sq.runs:
                srch = node.add(f"[magenta]{run.searcher}[/]")
                for a in run.attempts:
                    hits = " ".join(f"{nid[:10]}({score:.2f})" for nid, score in a.hits[:5])
                    more = f" +{len(a.hits) - 5}" if len(a.hits) > 5 else ""
                    verdict = {"enough": " [green]✓ enough[/]", "not enough": " [red]✗ not enough[/]"}.get(a.verdict or "", "")
                    line = f"r{a.round} {a.action} {escape('[' + a.syntax + ']')} [bold]{escape(_clip(a.query, 140))}[/]"
                    if a.error:
                        at = f" at {a.error_position}" if a.error_position is not None else ""
                        line += f" [red]error{at}: {escape(_clip(a.error, 120))}[/]"
                    else:
                        line += f" → {len(a.hits)} hits {escape(hits)}{more}"
                    line += verdict
                    if a.note:
                        line += f" [dim]({escape(a.note)})[/]"
                    srch.add(line)
            node.add(f"[green]found:[/] {escape(_clip(sq.summary, 200))}")
        v = verdicts.get(rnd)
        if v is not None:
            txt = "[green]enough[/]" if v.enough else "[red]not enough[/]"
            extra = f" — {escape(_clip(v.reason, 160))}" if v.reason else ""
            if v.supplements:
                extra += f"; supplements: {escape('; '.join(v.supplements))}"
            if v.dropped:
                extra += f"; dropped (already asked): {escape('; '.join(v.dropped))}"
            branch.add(f"[bold]verdict[/] {txt}{extra}")
    if trace.calls:
        calls = root.add("[bold]LLM calls[/]")
        for c in trace.calls:
            line = f"{c.step} {c.prompt}: {c.tokens_in}→{c.tokens_out} tokens, {c.seconds:.1f} s" + (" (cached)" if c.cached else "")
            if c.error:
                line += f" [red]{escape(_clip(c.error, 160))}[/]"
            calls.add(line)
    console.print(root)
