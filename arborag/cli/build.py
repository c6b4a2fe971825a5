"""`arborag build`: ingest → segment → embed → tree → index → publish."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from arborag.cli.common import CONFIG_OPTION, EXIT_PARTIAL, FOLLOW_EXTERNAL_SYMLINKS_OPTION, NO_WAIT_OPTION, PREFECT_OPTION, check_corpus_path, config_from, console, fail, offline_env, use_prefect
from arborag.errors import ArboragError


def register(app: typer.Typer) -> None:
    @app.command(
        "build",
        help=(
            "Build (or update) the retrieval tree of a corpus and publish it atomically.\n\n"
            "Runs ingest → segment → embed → cluster/summarize per level → vectors → sparse index → "
            "publish in this process — as a Prefect flow run when a Prefect server is configured "
            "(PREFECT_API_URL; see --prefect). A rebuild with unchanged "
            "inputs and config is a no-op; caches make changed builds pay only for what changed.\n\n"
            "Example:\n\n"
            "  arborag build examples/corpus/ --corpus /tmp/demo\n\n"
            "  arborag build docs/ --corpus /tmp/c --strategy dds --dry-run\n\n"
            "  arborag build docs/ --corpus /tmp/c --sections structural\n\n"
            "  arborag build docs/ --corpus /tmp/c --runner dask --workers 2\n\n"
            "  arborag build docs/ --corpus s3://bucket/corpora/c --runner dask --address tcp://10.0.0.5:8786\n\n"
            "  ARBORAG_EMBED__BACKEND=openai ARBORAG_EMBED__BASE_URL=http://127.0.0.1:8012/v1 arborag build docs/ --corpus /tmp/c"
            "   (embeddings from an OpenAI-compatible server: docs/PLUGS.md)"
        ),
    )
    def build(
        sources: list[Path] = typer.Argument(None, help="Files or folders to ingest first (optional: omit to rebuild from the corpus's documents)."),
        corpus: str = typer.Option(..., "--corpus", "-c", callback=check_corpus_path,
                                   help="Corpus directory (created if missing), or an object-store URI (s3://bucket/prefix; see docs/SCALE.md)."),
        strategy: Optional[str] = typer.Option(None, "--strategy", "-s", help="Leaf segmenter: sentence|ffs|dfs|dds|rcs (default: config, sentence)."),
        sections: Optional[str] = typer.Option(None, "--sections", help="Chunk inside sections, with AutoContext headers: none|structural|semantic (default: config, none). structural is offline; semantic uses the LLM of summarize.*."),
        summarizer: Optional[str] = typer.Option(None, "--summarizer", help="extractive (default, offline) or openai (needs ARBORAG_LLM_BASE_URL)."),
        per_document: bool = typer.Option(False, "--per-document", help="Build one tree per document instead of one over the corpus."),
        seed: Optional[int] = typer.Option(None, "--seed", help="Random seed of UMAP/GMM (same seed + input => same tree)."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Ingest and segment, then print chunk counts and estimated summarizer tokens/cost per level; build nothing."),
        prefect: Optional[bool] = PREFECT_OPTION,
        follow_external_symlinks: bool = FOLLOW_EXTERNAL_SYMLINKS_OPTION,
        no_wait: bool = NO_WAIT_OPTION,
        runner: str = typer.Option("local", "--runner", help="local (all in this process) or dask: embedding, summaries and local clustering fan out as Prefect tasks on Dask workers."),
        workers: Optional[int] = typer.Option(None, "--workers", min=1, help="With --runner dask: start a LocalCluster of N worker processes on 127.0.0.1 (default 2)."),
        address: Optional[str] = typer.Option(None, "--address", help="With --runner dask: join the Dask scheduler at this address (tcp://host:8786) instead of starting one."),
        config: Optional[Path] = CONFIG_OPTION,
    ) -> None:
        missing = [str(s) for s in (sources or []) if "://" not in str(s) and not s.exists()]
        if missing:  # before the corpus folder is made: a failed build leaves nothing behind
            fail(ArboragError(f"source not found: {', '.join(missing)}. Check the path(s); nothing was created or changed in {corpus}"))
        if runner == "dask":  # before the corpus folder is made, as above
            from arborag.extras import MissingExtra, require

            try:
                require("scale", "the Dask runner (arborag build --runner dask)")
            except MissingExtra as exc:
                fail(exc)
        offline_env()
        overrides: dict[str, dict[str, Any]] = {
            "ingest": {"follow_external_symlinks": follow_external_symlinks or None},
            "segment": {"strategy": strategy},
            "sections": {"strategy": sections},
            "summarize": {"backend": summarizer},
            "tree": {"scope": "document" if per_document else None},
            "cluster": {"seed": seed},
        }
        cfg = config_from(config, overrides)
        preloading = None
        if not dry_run and runner == "local":  # the model loads while Prefect, the stages and ingest start
            from arborag.embed.model import preload

            preloading = preload(cfg.embed)  # UMAP and lancedb: the flow imports them after segmenting
        from arborag.flows.build import run_build

        try:
            out = run_build([str(s) for s in (sources or [])], corpus, cfg, use_prefect=use_prefect(prefect) or runner == "dask", dry_run=dry_run, lock_wait=not no_wait,
                            runner=runner, workers=workers, address=address)
        except (ArboragError, OSError) as exc:  # OSError: disk full, read-only corpus
            fail(exc)
        finally:
            if preloading is not None:
                preloading.join()
                from arborag.embed.worker import stop_all

                stop_all()  # the embedding worker, if this run started one
        if dry_run:
            _print_estimate(out, cfg)
            return
        _print_summary(out, corpus)
        from arborag.cli.exit import finish

        finish(EXIT_PARTIAL if out.get("status") == "partial" else 0)  # the console script ends here (no teardown)
        if out.get("status") == "partial":
            raise typer.Exit(EXIT_PARTIAL)


def _print_estimate(out: dict, cfg) -> None:
    console.print(f"[bold]{out.get('leaves', 0)}[/] leaf chunks ({cfg.segment.strategy}); summarizer: {cfg.summarize.backend}")
    t = Table(title="Estimated summarization per level (estimate: ~5 children per summary)")
    for col in ("level", "nodes in", "summaries", "input tokens", "output tokens", "price"):
        t.add_column(col, justify="right")
    tin = tout = price = 0.0
    for row in out.get("estimate", []):
        t.add_row(str(row["level"]), str(row["nodes_in"]), str(row["summaries"]), f"{row['tokens_in']:,}", f"{row['tokens_out']:,}", f"${row['price']:.4f}")
        tin += row["tokens_in"]; tout += row["tokens_out"]; price += row["price"]
    t.add_row("all", "", "", f"{int(tin):,}", f"{int(tout):,}", f"${price:.4f}")
    console.print(t)
    if cfg.summarize.backend == "extractive":
        console.print("extractive summaries cost nothing; prices apply to --summarizer openai "
                      f"(${cfg.summarize.price_in_per_1k}/1k in, ${cfg.summarize.price_out_per_1k}/1k out)")


def _print_summary(out: dict, corpus: str) -> None:
    from arborag.flows.pipelines import INGEST, SEGMENT

    ing = out.get(INGEST.name) or {}
    seg = out.get(SEGMENT.name) or {}
    if out.get("noop"):
        console.print(f"[green]unchanged[/]: snapshot {out.get('snapshot')} already matches the inputs and config (no embedding, no summaries)")
    else:
        console.print(f"[green]published[/] snapshot {out.get('snapshot')}")
    console.print(
        f"documents: {ing.get('documents', '?')} (added {ing.get('added', 0)}, failed {ing.get('failed', 0)}); "
        f"chunks ({seg.get('strategy', '?')}): {seg.get('chunks', '?')}; "
        f"texts embedded this run: {out.get('calls', {}).get('embedded_texts', 0)}; "
        f"summaries written: {out.get('calls', {}).get('summaries', 0)}"
    )
    for line in fallback_lines(out, "tree"):
        console.print(line, highlight=False)
    if out.get("status") == "partial":
        console.print("[yellow]some documents failed[/]: arborag sql --working \"select uri, error from documents where status = 'error'\" "
                      f"--corpus {shlex.quote(str(corpus))}", highlight=False)


def fallback_lines(out: dict, stage: str) -> list[str]:
    """What a build or update says about LLM summaries that fell back to extractive text (and
    about a build that asked again for the fallbacks of an earlier snapshot)."""
    from rich.markup import escape

    lines = []
    retry = out.get("retry_of") or {}
    if retry and not out.get("noop"):
        lines.append(f"retried: snapshot {retry.get('snapshot')} held {retry.get('fallbacks')} fallback summaries; "
                     "the LLM was asked again for those clusters (the others came from the LLM cache)")
    tree = out.get(stage) or {}
    n = int(tree.get("fallbacks", 0) or 0)
    if n:
        reasons = tree.get("fallback_reasons") or {}
        why = "; ".join(f"{escape(str(r))} ×{c}" for r, c in list(reasons.items())[:3]) + (" …" if len(reasons) > 3 else "")
        lines.append(f"[yellow]{n} cluster summar{'y' if n == 1 else 'ies'} fell back to extractive text[/] (the LLM failed: {why}); "
                     "they are marked summary_status = 'fallback:…' and the next `arborag build` asks the LLM again "
                     "for exactly these clusters")
    return lines
