"""`arborag ask`: retrieve, then answer with numbered citations to nodes and source documents.

The answering logic lives in :mod:`arborag.query.answer`; this module parses options and prints.
Without an LLM configured it says how to configure one and still prints the retrieved passages
with their sources (exit code 0: the retrieval worked, the answer could not be written).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

from arborag.cli.common import CONFIG_OPTION, config_from, console, err_console, fail, offline_env, query_options
from arborag.cli.common import check_corpus_path
from arborag.cli.query import mode_option
from arborag.errors import ArboragError


def register(app: typer.Typer) -> None:
    @app.command(
        "ask",
        help=(
            "Answer a question from a built corpus, citing the retrieved passages as [1], [2] "
            "(each maps to a node id and its source: title, uri, character offsets for leaves). "
            "When the passages do not support an answer, it says so instead of answering.\n\n"
            "Needs an OpenAI-compatible LLM (ARBORAG_LLM_BASE_URL, or summarize.base_url in "
            "arborag.yaml; docs/LLM.md has a fully local recipe). Without one it prints the "
            "retrieved passages and how to configure an LLM (exit code 0).\n\n"
            "Examples:\n\n"
            "  arborag ask \"How did Cinderella reach her happy ending?\" --corpus /tmp/demo\n\n"
            "  ARBORAG_LLM_BASE_URL=http://127.0.0.1:8011/v1 arborag ask \"Who lost a slipper?\" -c /tmp/demo --mode multi --json"
        ),
    )
    def ask(
        question: str = typer.Argument(..., help="The question."),
        corpus: Path = typer.Option(..., "--corpus", "-c", callback=check_corpus_path, help="Corpus directory with a published build."),
        mode: Optional[str] = mode_option("Retrieval mode of the context"),
        budget: Optional[int] = typer.Option(None, "--budget", "-b", help="Token budget of the context given to the LLM (default: query.budget, 2000)."),
        k: Optional[int] = typer.Option(None, "--k", help="traversal: nodes kept per level (default: query.k)."),
        levels: Optional[str] = typer.Option(None, "--levels", help="Comma-separated tree levels to search, e.g. 0 for leaves only."),
        max_tokens: int = typer.Option(400, "--max-tokens", help="Longest answer, in tokens."),
        as_json: bool = typer.Option(False, "--json", help="Print the answer, citations, sources and token counts as JSON."),
        config: Optional[Path] = CONFIG_OPTION,
    ) -> None:
        offline_env()
        cfg = config_from(config)
        mode, budget, k, lv = query_options(cfg, mode, budget, k, levels)
        try:
            from arborag.llm.configured import llm_from_config
            from arborag.query import open_index
            from arborag.query.answer import ask as ask_question

            index = open_index(corpus, config=cfg, light=True)
            llm = llm_from_config(cfg, cache_dir=index.corpus.cache_dir / "llm")
            try:
                answer = ask_question(index, question, llm=llm, mode=mode, budget=budget, k=k, levels=lv, max_tokens=max_tokens)
            finally:
                if llm is not None:
                    llm.close()
                index.close()
        except ArboragError as exc:
            fail(exc)
        if as_json:
            typer.echo(json.dumps(answer.to_dict(), ensure_ascii=False, indent=2))
        else:
            _print(answer, budget)


def _print(answer: Any, budget: int | None) -> None:
    from rich.markup import escape
    from rich.panel import Panel

    status = answer.status
    title = {"answered": "answer", "refused": "no supported answer", "no_llm": "no LLM configured", "failed": "LLM failed"}[status]
    style = {"answered": "green", "refused": "yellow", "no_llm": "yellow", "failed": "red"}[status]
    if status == "no_llm":  # the configuration hint reads better unboxed
        console.print(f"[bold {style}]{title}[/]\n{escape(answer.answer)}\n")
    else:
        console.print(Panel(escape(answer.answer), title=f"[bold {style}]{title}[/]", title_align="left"))
    for w in answer.warnings:
        err_console.print(f"[yellow]warning:[/] {escape(w)}")
    used = sum(s.n_tokens for s in answer.sources)
    cited = set(answer.citations)
    heading = "cited sources" if cited else "retrieved context"
    console.print(f"[bold]{heading}[/] — {len(answer.sources)} passages, {used} tokens (budget {budget}), mode {answer.mode}")
    for s in answer.sources:
        if cited and s.n not in cited:
            continue
        uris = ", ".join(d.uri for d in s.docs[:3] if d.uri)
        console.print(f"[bold][{s.n}][/] {escape(s.label())}  node {s.node_id}" + (f"  {escape(uris)}" if uris else ""))
        if not cited:
            text = " ".join(s.text.split())
            console.print("    " + escape(text if len(text) <= 240 else text[:240] + " …"))
    if cited and len(cited) < len(answer.sources):
        console.print(f"({len(answer.sources) - len(cited)} more passages were given to the model but not cited; --json lists all)")
    u = answer.usage
    console.print(
        f"tokens: {u.tokens_in} in, {u.tokens_out} out ({u.calls} LLM calls, {u.cache_hits} from cache"
        f"{f', {u.failures} failed' if u.failures else ''}); cost ≈ ${answer.cost:.5f} at summarize.price_*_per_1k; "
        f"{answer.seconds:.1f} s"
        + (f"; model {answer.model}" if answer.model else "")
    )
    if status == "no_llm":
        console.print("(exit code 0: retrieval worked; the answer needs an LLM)")
