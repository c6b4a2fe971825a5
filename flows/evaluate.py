"""The evaluation flow: prepare dataset → build per strategy → run queries per system → score → report.

One run compares retrieval *systems* (how the index is queried) and segmentation *strategies*
(how leaves are cut) on one dataset, with one embedder and the same token budgets:

| system | mode | levels | what it is |
| --- | --- | --- | --- |
| flat | collapsed | [0] | dense top-k over leaf chunks: the no-tree baseline |
| bm25 | sparse | [0] | BM25 over leaf chunks |
| collapsed | collapsed | all | RAPTOR collapsed tree (every level, best-first to the budget) |
| traversal | traversal | all | RAPTOR tree traversal (top-k per level, root to leaves) |
| hybrid | hybrid | all | dense + BM25 fused by reciprocal rank fusion |

Builds: one per strategy (``run_build`` into ``OUT/corpora/<strategy>``); every system queries
the same built index of its strategy (flat/collapsed/traversal come from one tree). The first
strategy gets every system; the others get only the systems in ``strategy_systems`` (flat and
collapsed by default). All corpora share one embedding cache (``OUT/cache``, symlinked as each
corpus's ``cache/``), so a text that appears under several strategies is embedded once.

Caching (Prefect, results persisted under ``OUT/prefect``):
- build: key = hash(dataset fingerprint, the strategy's config hash); a hit is used only while
  the corpus still has that published snapshot;
- retrieve: key = hash(build key + snapshot, queries, systems, budgets, k, query config);
- score and report always run (seconds). So a rerun with nothing changed only re-scores.

Everything but the Prefect wrapping is a plain function (``use_prefect=False`` runs the same
stages without an orchestrator; tests use it with a fake builder/index).
"""

from __future__ import annotations

import inspect
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from arborag.config import ArboragConfig
from arborag.errors import ConfigError
from arborag.hashing import hash_json
from arborag.storage.schemas import HITS, RESULTS
from arborag.tasks.datasets import PreparedDataset, prepare_dataset
from arborag.tasks.evaluation.answer import collect_answers, llm_answerer
from arborag.tasks.evaluation.plan import (
    BASELINE,
    DEFAULT_STRATEGIES,
    DEFAULT_STRATEGY_SYSTEMS,
    STRATEGY_PRESETS,
    SYSTEM_NAMES,
    SYSTEMS,
    SystemName,
    SystemSpec,
    default_budget,
    plan_runs,
    preset_text,
    strategy_config,
    systems_by_strategy,
)
from arborag.tasks.evaluation.retrieve import OpenFn, SearchIndex, run_queries, run_retrieve
from arborag.tasks.evaluation.score import run_score, score_hits
from arborag.tasks.evaluation.stats import chunk_stats
from arborag.tasks.evaluation.write import write_json, write_report, write_run

__all__ = [
    "HITS",
    "RESULTS",
    "STRATEGY_PRESETS",
    "SYSTEMS",
    "EvalOptions",
    "SearchIndex",
    "SystemName",
    "SystemSpec",
    "evaluate",
    "plan_runs",
    "run_queries",
    "score_hits",
    "strategy_config",
]


# Modules whose source is part of the build cache key (a code change re-runs the build task;
# note that run_build itself may still answer "unchanged" if its own build key ignores code).
BUILD_MODULES: tuple[str, ...] = (
    "arborag.flows.build", "arborag.tasks.documents", "arborag.tasks.chunks", "arborag.tasks.segmenters", "arborag.tasks.embeddings",
    "arborag.tasks.clustering", "arborag.tasks.tree", "arborag.tasks.summarize", "arborag.storage.vectors", "arborag.storage.sparse",
)
# Part of the retrieval cache key: bump when run_queries or the HITS schema changes (edits to
# scoring or the report must not invalidate retrieval).
RETRIEVE_VERSION = 2

BuildFn = Callable[..., dict[str, Any]]  # run_build(sources, corpus_dir, config) -> dict
AnswerFn = Callable[[str, list[str]], str]  # (question, contexts) -> answer


@dataclass
class EvalOptions:
    """Everything one evaluation run depends on (besides the dataset files and the config)."""

    dataset: str
    out_dir: Path
    budgets: tuple[int, ...] = (500, 1000, 2000)
    systems: tuple[str, ...] = SYSTEM_NAMES
    strategies: tuple[str, ...] = DEFAULT_STRATEGIES
    strategy_systems: tuple[str, ...] = DEFAULT_STRATEGY_SYSTEMS
    limit: int | None = None
    scope: str = "auto"
    data_dir: Path | None = None
    answer: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        bad = [s for s in self.systems if s not in SYSTEMS]
        if bad:
            raise ConfigError(f"unknown system(s) {bad}; choose from {', '.join(SYSTEM_NAMES)}")
        bad = [s for s in self.strategies if s not in STRATEGY_PRESETS]
        if bad:
            raise ConfigError(f"unknown strategy(ies) {bad}; choose from {', '.join(STRATEGY_PRESETS)}")
        if not self.budgets or any(b <= 0 for b in self.budgets):
            raise ConfigError(f"budgets must be positive token counts, got {list(self.budgets)}")
        if not self.systems or not self.strategies:
            raise ConfigError("at least one system and one strategy are needed")
        self.budgets = tuple(sorted(set(int(b) for b in self.budgets)))
        self.out_dir = Path(self.out_dir)


# --------------------------------------------------------------------------------------------
# Stages
# --------------------------------------------------------------------------------------------
_CONFIGS: dict[str, ArboragConfig] = {}


def _link_shared_cache(corpus_dir: Path, shared: Path) -> None:
    """Make ``corpus_dir/cache`` the shared cache folder (a symlink), unless it already exists."""
    shared.mkdir(parents=True, exist_ok=True)
    corpus_dir.mkdir(parents=True, exist_ok=True)
    link = corpus_dir / "cache"
    if link.is_symlink() or link.exists():
        return
    try:
        link.symlink_to(os.path.relpath(shared, corpus_dir), target_is_directory=True)
    except OSError:  # no symlinks here (some filesystems): each corpus keeps its own cache
        pass


def build_key(prepared: PreparedDataset, config: ArboragConfig) -> str:
    return hash_json({"dataset": prepared.fingerprint, "config": config.config_hash(), "v": 1})


def stage_build(
    prepared: PreparedDataset, strategy: str, config: ArboragConfig, out_dir: Path, *, builder: BuildFn, progress: bool = True
) -> dict[str, Any]:
    """Build one strategy's corpus with the real build flow; returns a small record."""
    corpus_dir = out_dir / "corpora" / strategy
    _link_shared_cache(corpus_dir, out_dir / "cache")
    previous = _previous_build(out_dir, strategy)
    t0 = time.perf_counter()
    summary = builder([str(prepared.corpus_dir)], str(corpus_dir), config, **({"progress": progress} if _takes(builder, "progress") else {}))
    seconds = round(time.perf_counter() - t0, 2)
    noop = bool(summary.get("noop", False))
    if noop and previous is not None and previous.get("snapshot") == summary.get("snapshot"):
        seconds = previous.get("seconds", seconds)  # report what the build that made the snapshot took
    record = {
        "strategy": strategy,
        "corpus_dir": str(corpus_dir),
        "key": build_key(prepared, config),
        "config_hash": config.config_hash(),
        "snapshot": summary.get("snapshot"),
        "seconds": seconds,
        "status": summary.get("status", "ok"),
        "noop": noop,
    }
    write_json(corpus_dir / "eval_build.json", record)
    return record


def _takes(fn: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _previous_build(out: Path, strategy: str) -> dict[str, Any] | None:
    """The eval_build.json of a strategy's corpus, if it still describes the published snapshot."""
    path = out / "corpora" / strategy / "eval_build.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
    except ValueError:
        return None
    return record if _build_valid(record) else None


def _build_valid(record: dict[str, Any] | None) -> bool:
    if not record or not record.get("corpus_dir"):
        return False
    man = Path(record["corpus_dir"]) / "manifest.json"
    if not man.exists():
        return False
    try:
        return json.loads(man.read_text(encoding="utf-8")).get("snapshot") == record.get("snapshot")
    except (OSError, ValueError):
        return False


def retrieve_key(record: dict[str, Any], prepared: PreparedDataset, systems: Sequence[str], budgets: Sequence[int], config: ArboragConfig) -> str:
    return hash_json(
        {
            "build": record["key"],
            "snapshot": record.get("snapshot"),
            "queries": prepared.fingerprint,
            "systems": list(systems),
            "version": RETRIEVE_VERSION,
            "budgets": list(budgets),
            "query": config.query.model_dump(mode="json"),
            "v": 1,
        }
    )


# --------------------------------------------------------------------------------------------
# The flow
# --------------------------------------------------------------------------------------------
def machine_info() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }


def _evaluate_body(
    opts: EvalOptions,
    config: ArboragConfig,
    *,
    builder: BuildFn | None,
    opener: OpenFn | None,
    answerer: Callable[[list[tuple[str, list[str]]]], list[str]] | None,
    use_prefect: bool,
) -> dict[str, Any]:
    if builder is None:
        from arborag.flows.build import run_build as builder  # type: ignore[no-redef]
    if opener is None:
        from arborag.query import open_index as opener  # type: ignore[no-redef]
    out = opts.out_dir
    out.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    t_all = time.perf_counter()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")

    # 1. prepare
    t0 = time.perf_counter()
    prepared = prepare_dataset(opts.dataset, out / "dataset", data_dir=opts.data_dir, limit=opts.limit, scope=opts.scope)  # type: ignore[arg-type]
    timings["prepare"] = time.perf_counter() - t0

    runs = plan_runs(opts.strategies, opts.systems, opts.strategy_systems)
    by_strategy = systems_by_strategy(runs)
    configs = {s: strategy_config(config, s) for s in by_strategy}
    for c in configs.values():
        _CONFIGS[c.config_hash()] = c

    # 2. build (one per strategy)
    t0 = time.perf_counter()
    records: dict[str, dict[str, Any]] = {}
    failures: dict[str, str] = {}
    for i, strategy in enumerate(by_strategy, start=1):
        cfg = configs[strategy]
        if opts.progress:
            _say(f"build {i}/{len(by_strategy)}: {strategy} ({preset_text(strategy)})")
        try:
            previous = _previous_build(out, strategy)
            if previous is not None and previous.get("key") == build_key(prepared, cfg) and not use_prefect:
                records[strategy] = {**previous, "noop": True}  # plain runs: the record file is the cache
            elif use_prefect:
                records[strategy] = _prefect_build(prepared, strategy, cfg, out, builder, opts.progress)
            else:
                records[strategy] = stage_build(prepared, strategy, cfg, out, builder=builder, progress=opts.progress)
        except Exception as exc:  # one failed build must not sink the other strategies
            failures[strategy] = f"{type(exc).__name__}: {exc}"
            if opts.progress:
                _say(f"  build of {strategy} failed: {failures[strategy]}")
    timings["build"] = time.perf_counter() - t0

    # 3. retrieve (per strategy, every system of it)
    t0 = time.perf_counter()
    hits_paths: dict[str, Path] = {}
    retrieve_info: dict[str, dict[str, Any]] = {}
    embed_ms: dict[str, float] = {}  # single-question embedding times, shared by the strategies
    for strategy, rec in records.items():
        systems = by_strategy[strategy]
        path = out / "hits" / f"{strategy}.parquet"
        key = retrieve_key(rec, prepared, systems, opts.budgets, configs[strategy])
        try:
            marker = path.with_suffix(".key")
            if not use_prefect and path.exists() and marker.exists() and marker.read_text(encoding="utf-8") == key:
                retrieve_info[strategy] = {"path": str(path), "cached": True}
            elif use_prefect:
                retrieve_info[strategy] = _prefect_retrieve(prepared, rec, systems, opts.budgets, configs[strategy], path, key, opener, opts.progress, embed_ms)
            else:
                retrieve_info[strategy] = run_retrieve(prepared, rec, systems, opts.budgets, configs[strategy], path, opener=opener,
                                                       progress=opts.progress, embed_ms=embed_ms)
            marker.write_text(key, encoding="utf-8")
            hits_paths[strategy] = path
        except Exception as exc:
            failures[strategy] = f"retrieval failed: {type(exc).__name__}: {exc}"
    timings["retrieve"] = time.perf_counter() - t0

    # 3b. answers (optional, one budget: the default)
    predictions = None
    if opts.answer and hits_paths:
        t0 = time.perf_counter()
        answer_many = answerer or llm_answerer(config, out / "cache" / "llm-answers")
        hits_tables = [pq.read_table(p) for p in hits_paths.values()]
        predictions = collect_answers(hits_tables, prepared.queries(), default_budget(config, opts.budgets), answer_many)
        timings["answer"] = time.perf_counter() - t0

    # 4. score
    t0 = time.perf_counter()
    results, score_info = run_score(prepared, {s: records[s] for s in hits_paths}, hits_paths, out, predictions=predictions)
    timings["score"] = time.perf_counter() - t0

    # 5. report
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


def _say(message: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(f"[bold cyan]eval[/] {message}")


# -- Prefect wrappers ---------------------------------------------------------------------
def _code_version(*modules: str) -> str:
    from arborag.flows.common import code_fingerprint

    try:
        return code_fingerprint(*modules)
    except ImportError:  # a module is not there yet: key on the names
        return hash_json(list(modules))


def _prefect_build(prepared: PreparedDataset, strategy: str, cfg: ArboragConfig, out: Path, builder: BuildFn, progress: bool) -> dict[str, Any]:
    """stage_build as a Prefect task keyed on dataset content + the strategy's config hash + code."""
    from prefect import task

    from arborag.flows.common import task_options, was_cached
    from arborag.storage.corpus import Corpus

    key = "eval-build-" + hash_json([build_key(prepared, cfg), _code_version(*BUILD_MODULES)])
    # A cache hit is trusted only while the corpus still publishes the snapshot it recorded.
    previous = _previous_build(out, strategy)
    usable = previous is not None and previous.get("key") == build_key(prepared, cfg)

    def _run(strategy: str) -> dict[str, Any]:
        return stage_build(prepared, strategy, cfg, out, builder=builder, progress=progress)

    t = task(name="eval-build", task_run_name=f"build-{strategy}")(_run)
    state = t.with_options(**task_options(Corpus(out), cache_key=key, refresh_cache=not usable))(strategy, return_state=True)
    record = state.result()
    if not _build_valid(record):
        state = t.with_options(**task_options(Corpus(out), cache_key=key, refresh_cache=True))(strategy, return_state=True)
        record = state.result()
    return {**record, "noop": True} if was_cached(state) else record


def _prefect_retrieve(
    prepared: PreparedDataset,
    record: dict[str, Any],
    systems: Sequence[str],
    budgets: Sequence[int],
    cfg: ArboragConfig,
    path: Path,
    key: str,
    opener: OpenFn,
    progress: bool,
    embed_ms: dict[str, float],
) -> dict[str, Any]:
    """run_retrieve as a Prefect task keyed on the build, queries, systems, budgets, query config."""
    from prefect import task

    from arborag.flows.common import task_options, was_cached
    from arborag.storage.corpus import Corpus

    key = "eval-retrieve-" + hash_json([key, RETRIEVE_VERSION, _code_version("arborag.query.index", "arborag.query.fusion", "arborag.storage.sparse", "arborag.storage.vectors")])

    def _run(strategy: str) -> dict[str, Any]:
        return run_retrieve(prepared, record, systems, budgets, cfg, path, opener=opener, progress=progress, embed_ms=embed_ms)

    t = task(name="eval-retrieve", task_run_name=f"retrieve-{record['strategy']}")(_run)
    state = t.with_options(**task_options(Corpus(path.parent.parent), cache_key=key, refresh_cache=not path.exists()))(
        record["strategy"], return_state=True
    )
    info = state.result()
    return {**info, "cached": True} if was_cached(state) else info


def _flow_entry(options_json: str, config_hash: str) -> dict[str, Any]:
    opts_data = json.loads(options_json)
    opts = EvalOptions(**{**opts_data, "out_dir": Path(opts_data["out_dir"]),
                          "data_dir": Path(opts_data["data_dir"]) if opts_data.get("data_dir") else None})
    hooks = _HOOKS.pop(config_hash, {})
    return _evaluate_body(opts, _CONFIGS[config_hash], use_prefect=True, **hooks)


_HOOKS: dict[str, dict[str, Any]] = {}


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

    ``builder`` defaults to :func:`arborag.flows.build.run_build`, ``opener`` to :func:`arborag.query.open_index`
    (tests pass fakes); ``answerer`` defaults to the configured LLM when ``opts.answer``.
    """
    if not use_prefect:
        return _evaluate_body(opts, config, builder=builder, opener=opener, answerer=answerer, use_prefect=False)
    from arborag.flows.common import prefect_env_defaults

    prefect_env_defaults()
    from prefect import flow

    h = config.config_hash()
    _CONFIGS[h] = config
    _HOOKS[h] = {"builder": builder, "opener": opener, "answerer": answerer}
    data = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(opts).items()}
    data = {k: (list(v) if isinstance(v, tuple) else v) for k, v in data.items()}
    run = flow(name=f"arborag-eval-{opts.dataset}", log_prints=False, validate_parameters=False)(_flow_entry)
    return run(json.dumps(data, default=str), h)
