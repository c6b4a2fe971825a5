"""`arborag eval`: retrieval-only evaluation of systems × strategies × budgets on a benchmark."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from arborag.cli.common import CONFIG_OPTION, EXIT_PARTIAL, PREFECT_OPTION, config_from, console, fail, offline_env, use_prefect
from arborag.errors import ArboragError

__all__ = ["register"]

_DATASETS = ("hotpotqa", "narrativeqa", "financebench", "thematic")


def _csv(value: str | None) -> list[str] | None:
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    return items or None


def register(app: typer.Typer) -> None:
    @app.command(
        "eval",
        help=(
            "Evaluate retrieval on a benchmark: every system × segmentation strategy × token budget, "
            "through the real build and query pipeline, with no LLM needed.\n\n"
            "DATASET is hotpotqa (100 multi-hop questions, 994 paragraphs), narrativeqa (50 questions "
            "over 47 plot summaries), financebench (10 questions over 5 SEC filings as PDFs), read "
            "from ../shared/data (or --data-dir / ARBORAG_DATA_DIR), or thematic (15 hand-written questions "
            "about whole stories or themes over the NarrativeQA passages, scored by gold documents "
            "recalled; tasks/evaluation/data).\n\n"
            "Systems: auto (the default mode: dense + BM25 leaves fused), flat (dense top-k over leaves, "
            "the no-tree baseline), bm25 (sparse over leaves), collapsed and traversal (RAPTOR tree), hybrid "
            "(dense + BM25 fused over every level), the auto-* variants and the plug-in modes. Strategies: sentence, "
            "ffs, dfs, dds, rcs at matched ~100-token leaves; the first strategy runs every system, the "
            "others flat and collapsed. One build per strategy; reruns reuse builds and retrieval "
            "(Prefect cache) and only re-score.\n\n"
            "Writes OUT/results.parquet (one row per query × strategy × system × budget), "
            "OUT/summary.md, OUT/*.png and OUT/run.json.\n\n"
            "Examples:\n\n"
            "  arborag eval hotpotqa --out /tmp/ev\n\n"
            "  arborag eval narrativeqa --out /tmp/ev2 --limit 10 --strategies sentence --systems flat,collapsed\n\n"
            "  arborag eval thematic --out /tmp/ev3 --strategies sentence --systems auto,flat,bm25,collapsed,auto-summaries"
        ),
    )
    def eval_command(
        dataset: str = typer.Argument(..., help="hotpotqa | narrativeqa | financebench | thematic", metavar="DATASET"),
        out: Path = typer.Option(..., "--out", "-o", help="Output folder (created; reruns reuse its builds)."),
        budgets: Optional[str] = typer.Option(None, "--budgets", help="Comma-separated token budgets (default: eval.budgets, 500,1000,2000)."),
        systems: Optional[str] = typer.Option(None, "--systems", help="Comma-separated: flat,bm25,collapsed,traversal,hybrid (default: all)."),
        strategies: Optional[str] = typer.Option(None, "--strategies", help="Comma-separated: sentence,ffs,dfs,dds,rcs (default: all; the first gets every system)."),
        strategy_systems: Optional[str] = typer.Option(None, "--strategy-systems", help="Systems run on the non-first strategies (default: flat,collapsed)."),
        limit: Optional[int] = typer.Option(None, "--limit", "-n", min=1, help="Only the first N questions (and, unless --full-corpus, only their documents) for a quick run."),
        full_corpus: bool = typer.Option(False, "--full-corpus", help="With --limit: keep the whole corpus instead of the questions' documents."),
        data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Folder holding hotpotqa/, narrativeqa/, financebench/ (default: ../shared/data)."),
        answer: bool = typer.Option(False, "--answer", help="Also generate answers with the configured LLM (summarize.base_url) and score F1/EM/ROUGE-L/BLEU."),
        prefect: Optional[bool] = PREFECT_OPTION,
        no_progress: bool = typer.Option(False, "--no-progress", help="No progress bars."),
        config: Optional[Path] = CONFIG_OPTION,
    ) -> None:
        offline_env()
        if dataset not in _DATASETS:
            fail(ValueError(f"unknown dataset {dataset!r}; choose one of {', '.join(_DATASETS)}"), code=2)
        from arborag.extras import MissingExtra, require

        try:
            require("eval", "`arborag eval`")  # its metrics and plots: before the builds, not after
        except MissingExtra as exc:
            fail(exc)
        cfg = config_from(config)
        try:
            budget_list = [int(b) for b in (_csv(budgets) or [])] or list(cfg.eval.budgets)
        except ValueError:
            fail(ValueError(f"--budgets must be comma-separated integers, got {budgets!r}"), code=2)
            return
        from arborag.flows.evaluate import EvalOptions, evaluate
        from arborag.tasks.evaluation.plan import DEFAULT_STRATEGIES, DEFAULT_STRATEGY_SYSTEMS, SYSTEM_NAMES

        try:
            opts = EvalOptions(
                dataset=dataset,
                out_dir=out,
                budgets=tuple(budget_list),
                systems=tuple(_csv(systems) or SYSTEM_NAMES),
                strategies=tuple(_csv(strategies) or DEFAULT_STRATEGIES),
                strategy_systems=tuple(_csv(strategy_systems) or DEFAULT_STRATEGY_SYSTEMS),
                limit=limit,
                scope="full" if full_corpus else "auto",
                data_dir=data_dir,
                answer=answer,
                progress=not no_progress,
            )
            result = evaluate(opts, cfg, use_prefect=use_prefect(prefect))
        except ArboragError as exc:
            fail(exc)
            return
        files = result.get("files", {})
        console.print(f"[green]wrote[/] {result['rows']} result rows to {out / 'results.parquet'}")
        for name in ("summary", "hit_rate_vs_budget", "level_mix", "strategy_heatmap"):
            if name in files:
                console.print(f"  {files[name]}")
        console.print("timings (s): " + ", ".join(f"{k} {v}" for k, v in result.get("timings_s", {}).items()))
        if result.get("failures"):
            for strategy, why in result["failures"].items():
                console.print(f"[yellow]{strategy}[/]: {why}")
            raise typer.Exit(EXIT_PARTIAL)
