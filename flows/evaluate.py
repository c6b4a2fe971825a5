"""The evaluation flow: prepare dataset → build per strategy → run queries per system → score → report.

One run compares retrieval *systems* (how the index is queried — flat, bm25, collapsed,
traversal, hybrid, auto, multi, level, segments, rerank, ...; the table and each system's mode
and levels are in :mod:`arborag.tasks.evaluation.plan`) and segmentation *strategies* (how
leaves are cut) on one dataset, with one embedder and the same token budgets.

Builds: one per strategy (``run_build`` into ``OUT/corpora/<strategy>``); every system queries
the same built index of its strategy. The first strategy gets every system; the others get only
the systems in ``strategy_systems``. All corpora share one embedding cache (``OUT/cache``).

Caching (:data:`~arborag.flows.eval_stages.EVALUATE_PIPELINE`, results under ``OUT/prefect``):
- build: key = hash(dataset fingerprint, the strategy's config hash, build code); a hit is used
  only while the corpus still has that published snapshot;
- retrieve: key = hash(build key + snapshot, queries, systems, budgets, k, query config, code);
- answer, score and report always run (seconds). So a rerun with nothing changed only re-scores.

Entry points: :func:`evaluate_flow` (module-level Prefect flow, JSON parameters; test doubles as
``"module:attribute"`` strings) and :func:`evaluate` (Python: CLI, tests). ``evaluate`` runs the
flow, or — without Prefect, or when handed test doubles as objects — the same pipeline directly
(its stages still cache as Prefect tasks when ``use_prefect``).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from functools import partial
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from arborag.config import ArboragConfig, load_config
from arborag.env import offline_env
from arborag.flows.common import config_overrides, current_flow_run_id, new_run_id, plain_json
from arborag.flows.eval_stages import (
    EVAL_BUILD,
    EVAL_RETRIEVE,
    EVALUATE_PIPELINE,
    BuildFn,
    EvalOptions,
    build_key,
    build_valid,
    machine_info,
    previous_build,
    retrieve_key,
    stage_code,
)
from arborag.flows.stage import run_stage
from arborag.hashing import hash_json
from arborag.storage.corpus import Corpus
from arborag.tasks.stage_context import StageContext
from arborag.tasks.evaluation.datasets import corpus_scope, prepare_dataset
from arborag.tasks.evaluation.answer import AnswerMany, collect_answers, llm_answerer
from arborag.tasks.evaluation.plan import (
    BASELINE, STRATEGY_PRESETS, SYSTEMS, default_budget, plan_runs, preset_text, strategy_config, systems_by_strategy,
)
from arborag.tasks.evaluation.retrieve import OpenFn
from arborag.tasks.evaluation.score import run_score
from arborag.tasks.evaluation.stats import chunk_stats
from arborag.tasks.evaluation.readability import corpus_readability
from arborag.tasks.evaluation.write import write_report, write_run

offline_env()  # Prefect reads its settings when imported
from prefect import flow  # noqa: E402

__all__ = ["EVALUATE_PIPELINE", "EvalOptions", "evaluate", "evaluate_flow", "evaluate_pipeline"]


def _say(message: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(f"[bold cyan]eval[/] {message}")


def _builds(ctx: StageContext, opts: EvalOptions, prepared: Any, configs: dict[str, ArboragConfig], builder: BuildFn,
            use_prefect: bool, failures: dict[str, str]) -> dict[str, dict[str, Any]]:
    records: dict[str, dict[str, Any]] = {}
    code = stage_code(EVAL_BUILD)
    for i, (strategy, cfg) in enumerate(configs.items(), start=1):
        if opts.progress:
            _say(f"build {i}/{len(configs)}: {strategy} ({preset_text(strategy)})")
        try:
            previous = previous_build(ctx.corpus.root, strategy)
            if not use_prefect and previous is not None and previous.get("key") == build_key(prepared, cfg):
                records[strategy] = {**previous, "noop": True}  # plain runs: the record file is the cache
                continue
            record, cached = run_stage(
                ctx, EVAL_BUILD, use_prefect=use_prefect, cache_key=hash_json([build_key(prepared, cfg), code]),
                done=build_valid, prepared=prepared, strategy=strategy, cfg=cfg, builder=builder,
            )
            records[strategy] = {**record, "noop": True} if cached else record
        except Exception as exc:  # one failed build must not sink the other strategies
            failures[strategy] = f"{type(exc).__name__}: {exc}"
            if opts.progress:
                _say(f"  build of {strategy} failed: {failures[strategy]}")
    return records


def _written(path: Path, _out: dict[str, Any] | None) -> bool:
    """The ``done`` check of a retrieval stage: its hits file exists."""
    return path.exists()


def _retrievals(ctx: StageContext, opts: EvalOptions, prepared: Any, configs: dict[str, ArboragConfig], records: dict[str, dict[str, Any]],
                by_strategy: dict[str, list[str]], opener: OpenFn, use_prefect: bool, failures: dict[str, str]) -> tuple[dict[str, Path], dict[str, Any]]:
    hits_paths: dict[str, Path] = {}
    info: dict[str, dict[str, Any]] = {}
    embed_ms: dict[str, float] = {}  # single-question embedding times, shared by the strategies
    code = stage_code(EVAL_RETRIEVE)
    for strategy, rec in records.items():
        systems = by_strategy[strategy]
        path = ctx.corpus.root / "hits" / f"{strategy}.parquet"
        key = retrieve_key(rec, prepared, systems, opts.budgets, configs[strategy])
        try:
            marker = path.with_suffix(".key")
            if not use_prefect and path.exists() and marker.exists() and marker.read_text(encoding="utf-8") == key:
                info[strategy] = {"path": str(path), "cached": True}
            else:
                out, cached = run_stage(
                    ctx, EVAL_RETRIEVE, use_prefect=use_prefect, cache_key=hash_json([key, code]),
                    done=partial(_written, path),
                    prepared=prepared, record=rec, systems=systems, budgets=opts.budgets, cfg=configs[strategy],
                    path=str(path), opener=opener, embed_ms=embed_ms,
                )
                info[strategy] = {**out, "cached": True} if cached else out
            marker.write_text(key, encoding="utf-8")
            hits_paths[strategy] = path
        except Exception as exc:
            failures[strategy] = f"retrieval failed: {type(exc).__name__}: {exc}"
    return hits_paths, info


def evaluate_pipeline(
    opts: EvalOptions, config: ArboragConfig, *, builder: BuildFn | None = None, opener: OpenFn | None = None,
    answerer: AnswerMany | None = None, use_prefect: bool, run_id: str | None = None,
) -> dict[str, Any]:
    """Prepare, build, retrieve, (answer,) score and report; the body of :func:`evaluate_flow`."""
    if builder is None:  # --no-prefect builds directly too (it used to start a temporary Prefect API per build)
        from arborag.flows.build import run_build

        builder = run_build if use_prefect else partial(run_build, use_prefect=False)
    if opener is None:
        from arborag.query import open_index

        opener = open_index
    out = opts.out_dir
    out.mkdir(parents=True, exist_ok=True)
    ctx = StageContext(Corpus(out), config, run_id or new_run_id(), progress=opts.progress)
    timings: dict[str, float] = {}
    t_all = t0 = time.perf_counter()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    prepared = prepare_dataset(opts.dataset, out / "dataset", data_dir=opts.data_dir, limit=opts.limit, scope=corpus_scope(opts.scope))
    timings["prepare"] = time.perf_counter() - t0

    by_strategy = systems_by_strategy(plan_runs(opts.strategies, opts.systems, opts.strategy_systems))
    configs = {s: strategy_config(config, s) for s in by_strategy}
    failures: dict[str, str] = {}
    t0 = time.perf_counter()
    records = _builds(ctx, opts, prepared, configs, builder, use_prefect, failures)
    timings["build"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    hits_paths, retrieve_info = _retrievals(ctx, opts, prepared, configs, records, by_strategy, opener, use_prefect, failures)
    timings["retrieve"] = time.perf_counter() - t0

    predictions = None
    if opts.answer and hits_paths:  # one budget: the default
        t0 = time.perf_counter()
        answer_many = answerer or llm_answerer(config, out / "cache" / "llm-answers")
        hits_tables = [pq.read_table(p) for p in hits_paths.values()]
        predictions = collect_answers(hits_tables, prepared.queries(), default_budget(config, opts.budgets), answer_many)
        timings["answer"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    results, score_info = run_score(prepared, {s: records[s] for s in hits_paths}, hits_paths, out, predictions=predictions)
    timings["score"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    meta = {
        "dataset": prepared.name,
        "sources": list(prepared.sources),
        "corpus_files": prepared.n_files,
        "questions": prepared.n_queries,
        "limit": opts.limit,
        "scope": opts.scope,
        "fingerprint": prepared.fingerprint,
        "config_hash": config.config_hash(),
        "strategy_config_hashes": {s: c.config_hash() for s, c in configs.items()},
        "seed": config.cluster.seed,
        "embedder": f"{config.embed.model} ({config.embed.dtype})",
        "summarizer": config.summarize.backend if config.summarize.backend == "extractive" else f"{config.summarize.backend}:{config.summarize.llm_model}",
        "sparse_backend": config.sparse.backend,
        "k": config.query.k,
        "budgets": list(opts.budgets),
        "default_budget": default_budget(config, opts.budgets),
        "baseline": BASELINE,
        "strategies": list(by_strategy),
        "primary_strategy": opts.strategies[0],
        "presets": {s: STRATEGY_PRESETS[s] for s in by_strategy},
        "systems": {s: SYSTEMS[s].description for s in opts.systems},
        "builds": records,
        "chunk_stats": {s: chunk_stats(r["corpus_dir"], s) for s, r in records.items()},
        "readability": {s: corpus_readability(r["corpus_dir"]) for s, r in records.items()},
        "retrieval": retrieve_info,
        "failures": failures,
        "match": prepared.match,
        "machine": machine_info(),
        "started_at": started_at,
        "prefect": use_prefect,
        **score_info,
    }
    timings["total"] = time.perf_counter() - t_all
    meta["timings_s"] = {k: round(v, 1) for k, v in timings.items()}
    files = write_report(results, out, meta)
    meta["timings_s"]["report"] = round(time.perf_counter() - t0, 1)
    meta["timings_s"]["total"] = round(time.perf_counter() - t_all, 1)
    write_run(out, meta)
    return {"out_dir": str(out), "rows": results.num_rows, "files": {k: str(v) for k, v in files.items()}, "failures": failures, "timings_s": meta["timings_s"]}


def _hook(path: str | None) -> Any:
    """``"package.module:attribute"`` -> that object (a test double a separate process can import)."""
    if not path:
        return None
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


@flow(name="arborag-eval", flow_run_name="eval-{dataset}", log_prints=False)
def evaluate_flow(
    dataset: str,
    out_dir: str,
    budgets: list[int] | None = None,
    systems: list[str] | None = None,
    strategies: list[str] | None = None,
    strategy_systems: list[str] | None = None,
    limit: int | None = None,
    scope: str = "auto",
    data_dir: str | None = None,
    answer: bool = False,
    progress: bool = False,
    config_path: str | None = None,
    config_overrides: dict[str, dict[str, Any]] | None = None,
    builder: str | None = None,
    opener: str | None = None,
    answerer: str | None = None,
) -> dict[str, Any]:
    """Evaluate retrieval on ``dataset`` into ``out_dir``; every parameter is plain JSON.

    The config is ``load_config(config_path, overrides=config_overrides)``; ``budgets`` default
    to ``eval.budgets``. ``builder``/``opener``/``answerer`` name test doubles as
    ``"module:attribute"`` (default: the real build, ``open_index`` and the configured LLM).
    """
    config = load_config(config_path, overrides=config_overrides)
    given = {"systems": systems, "strategies": strategies, "strategy_systems": strategy_systems}
    opts = EvalOptions(
        dataset=dataset, out_dir=Path(out_dir), budgets=tuple(budgets or config.eval.budgets), limit=limit, scope=scope,
        data_dir=Path(data_dir) if data_dir else None, answer=answer, progress=progress,
        **{k: tuple(v) for k, v in given.items() if v},
    )
    return evaluate_pipeline(
        opts, config, builder=_hook(builder), opener=_hook(opener), answerer=_hook(answerer), use_prefect=True,
        run_id=current_flow_run_id(),
    )


def evaluate(
    opts: EvalOptions,
    config: ArboragConfig,
    *,
    use_prefect: bool = True,
    builder: BuildFn | None = None,
    opener: OpenFn | None = None,
    answerer: Callable[[list[tuple[str, list[str]]]], list[str]] | None = None,
) -> dict[str, Any]:
    """Run the evaluation; writes results.parquet, summary.md, PNG plots and run.json to ``opts.out_dir``.

    ``builder`` defaults to :func:`arborag.flows.build.run_build`, ``opener`` to
    :func:`arborag.query.open_index`, ``answerer`` to the configured LLM when ``opts.answer``.
    With ``use_prefect`` and no doubles the :func:`evaluate_flow` runs (``config`` as JSON
    overrides); doubles given as objects run the same pipeline directly, its stages still
    cached as Prefect tasks.
    """
    if not use_prefect or any(h is not None for h in (builder, opener, answerer)):
        return evaluate_pipeline(opts, config, builder=builder, opener=opener, answerer=answerer, use_prefect=use_prefect)
    return plain_json(evaluate_flow(**opts.to_params(), config_overrides=config_overrides(config)))
