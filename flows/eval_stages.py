"""The cached stages of the evaluation flow: one build per strategy, one retrieval per strategy.

Orchestration only: the build stage runs the real build flow (:func:`arborag.flows.build.run_build`,
or a test double) into ``OUT/corpora/<strategy>``; the retrieval stage opens the built index
(:func:`arborag.query.open_index`, or a double) and hands it to
:func:`arborag.tasks.evaluation.retrieve.run_retrieve`. Both are module-level Prefect tasks run
through :func:`arborag.flows.stage.run_stage`; their cache keys hold the build pipeline's declared
code versions and the retrieval code's source fingerprint (:data:`EVALUATE_PIPELINE`), so no module
list is kept by hand.
"""

from __future__ import annotations

import inspect
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from arborag.config import ArboragConfig
from arborag.env import offline_env
from arborag.errors import ConfigError
from arborag.flows.build import BUILD_PIPELINE
from arborag.flows.fingerprints import code_versions, pipeline_fingerprint
from arborag.flows.stage import Stage
from arborag.hashing import hash_json
from arborag.tasks.stage_context import StageContext
from arborag.tasks.evaluation.datasets import PreparedDataset
from arborag.tasks.evaluation.plan import DEFAULT_STRATEGIES, DEFAULT_STRATEGY_SYSTEMS, STRATEGY_PRESETS, SYSTEM_NAMES, SYSTEMS
from arborag.tasks.evaluation.retrieve import OpenFn, run_retrieve
from arborag.tasks.evaluation.write import write_json

offline_env()  # Prefect reads its settings when imported
from prefect import task  # noqa: E402

__all__ = [
    "EVALUATE_PIPELINE", "EvalOptions", "build_key", "build_strategy", "machine_info", "previous_build",
    "retrieve_key", "retrieve_strategy", "stage_build", "build_valid",
]

# Part of the retrieval cache key: bump when run_queries or the HITS schema changes (edits to
# scoring or the report must not invalidate retrieval).
RETRIEVE_VERSION = 2

BuildFn = Callable[..., dict[str, Any]]  # run_build(sources, corpus_dir, config) -> dict


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
        from arborag.query.modes import MODES

        unregistered = sorted({SYSTEMS[s].mode for s in self.systems} - set(MODES))
        if unregistered:  # a system names its mode; the registry is the one list of modes
            raise ConfigError(f"system(s) use mode(s) {unregistered} that arborag.query.modes does not register")
        bad = [s for s in self.strategies if s not in STRATEGY_PRESETS]
        if bad:
            raise ConfigError(f"unknown strategy(ies) {bad}; choose from {', '.join(STRATEGY_PRESETS)}")
        if not self.budgets or any(b <= 0 for b in self.budgets):
            raise ConfigError(f"budgets must be positive token counts, got {list(self.budgets)}")
        if not self.systems or not self.strategies:
            raise ConfigError("at least one system and one strategy are needed")
        self.budgets = tuple(sorted(set(int(b) for b in self.budgets)))
        self.systems, self.strategies = tuple(self.systems), tuple(self.strategies)
        self.strategy_systems = tuple(self.strategy_systems)
        self.out_dir = Path(self.out_dir)
        self.data_dir = Path(self.data_dir) if self.data_dir is not None else None

    def to_params(self) -> dict[str, Any]:
        """Plain JSON parameters of the evaluation flow."""
        data = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(self).items()}
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in data.items()}


# --------------------------------------------------------------------------------------------
# Build (one per strategy)
# --------------------------------------------------------------------------------------------
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
    """The dataset, the config and the declared code versions of the build (a bumped stage rebuilds)."""
    return hash_json({"dataset": prepared.fingerprint, "config": config.config_hash(), "code": code_versions(BUILD_PIPELINE), "v": 1})


def _takes(fn: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def stage_build(
    prepared: PreparedDataset, strategy: str, config: ArboragConfig, out_dir: Path, *, builder: BuildFn, progress: bool = True
) -> dict[str, Any]:
    """Build one strategy's corpus with the real build flow; returns a small record."""
    corpus_dir = out_dir / "corpora" / strategy
    _link_shared_cache(corpus_dir, out_dir / "cache")
    previous = previous_build(out_dir, strategy)
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


def previous_build(out: Path, strategy: str) -> dict[str, Any] | None:
    """The eval_build.json of a strategy's corpus, if it still describes the published snapshot."""
    path = out / "corpora" / strategy / "eval_build.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
    except ValueError:
        return None
    return record if build_valid(record) else None


def build_valid(record: dict[str, Any] | None) -> bool:
    """Does the corpus a build record names still publish the snapshot it recorded?"""
    if not record or not record.get("corpus_dir"):
        return False
    man = Path(record["corpus_dir"]) / "manifest.json"
    if not man.exists():
        return False
    try:
        return json.loads(man.read_text(encoding="utf-8")).get("snapshot") == record.get("snapshot")
    except (OSError, ValueError):
        return False


def _build_strategy(ctx: StageContext, *, prepared: PreparedDataset, strategy: str, cfg: ArboragConfig, builder: BuildFn) -> dict[str, Any]:
    return stage_build(prepared, strategy, cfg, ctx.corpus.root, builder=builder, progress=ctx.progress)


# --------------------------------------------------------------------------------------------
# Retrieve (one per strategy, every system of it)
# --------------------------------------------------------------------------------------------
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


def _retrieve_strategy(
    ctx: StageContext, *, prepared: PreparedDataset, record: dict[str, Any], systems: Sequence[str], budgets: Sequence[int],
    cfg: ArboragConfig, path: str, opener: OpenFn, embed_ms: dict[str, float],
) -> dict[str, Any]:
    return run_retrieve(prepared, record, systems, budgets, cfg, Path(path), opener=opener, progress=ctx.progress, embed_ms=embed_ms)


def machine_info() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }


build_strategy = task(name="eval-build", log_prints=False)(_build_strategy)
retrieve_strategy = task(name="eval-retrieve", log_prints=False)(_retrieve_strategy)

def retrieve_code() -> tuple[str, ...]:
    """The modules whose source keys cached retrieval: the runner, the index, the mode registry and
    every mode it loads *by name* (``arborag.query.modes.mode_modules``), which the static import
    walk of :func:`~arborag.flows.fingerprints.module_closure` cannot see; their own imports follow."""
    from arborag.query.modes import mode_modules

    return ("arborag.tasks.evaluation.retrieve", "arborag.query.index", "arborag.query.modes", *mode_modules())


# The cached stages, in order (answer, score and report follow and always run: seconds).
# Their code: the whole build pipeline for a build; retrieval, the index and every mode for retrieval.
EVAL_BUILD = Stage("eval-build", build_strategy, code=tuple(m for s in BUILD_PIPELINE for m in s.modules), code_version="1")
EVAL_RETRIEVE = Stage("eval-retrieve", retrieve_strategy, code=retrieve_code())
EVALUATE_PIPELINE: tuple[Stage, ...] = (EVAL_BUILD, EVAL_RETRIEVE)


def stage_code(stage: Stage) -> str:
    """The code fingerprint of one evaluation stage: a build's is the declared code versions of the
    build pipeline; retrieval's the source of its modules (with the modes registered now)."""
    if stage.name == EVAL_BUILD.name:
        return code_versions((stage,), BUILD_PIPELINE)
    if stage.name == EVAL_RETRIEVE.name:
        stage = replace(stage, code=retrieve_code())
    return pipeline_fingerprint((stage,))
