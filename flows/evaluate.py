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
from typing import Any, Literal, Protocol, get_args

import pyarrow as pa
import pyarrow.parquet as pq

from arborag.config import ArboragConfig, Strategy
from arborag.errors import ArboragError, ConfigError
from arborag.hashing import hash_json
from arborag.progress import progress_bar
from arborag.tasks import metrics as M
from arborag.tasks.datasets import PreparedDataset, gold_items, prepare_dataset, resolve_gold

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

SystemName = Literal["flat", "bm25", "collapsed", "traversal", "hybrid"]
SYSTEM_NAMES: tuple[str, ...] = get_args(SystemName)
STRATEGY_NAMES: tuple[str, ...] = get_args(Strategy)


@dataclass(frozen=True, slots=True)
class SystemSpec:
    name: str
    mode: str
    levels: tuple[int, ...] | None
    description: str


SYSTEMS: dict[str, SystemSpec] = {
    "flat": SystemSpec("flat", "collapsed", (0,), "dense top-k over leaves (no tree; the baseline)"),
    "bm25": SystemSpec("bm25", "sparse", (0,), "BM25 over leaves"),
    "collapsed": SystemSpec("collapsed", "collapsed", None, "RAPTOR collapsed tree, all levels"),
    "traversal": SystemSpec("traversal", "traversal", None, "RAPTOR tree traversal, top-k per level"),
    "hybrid": SystemSpec("hybrid", "hybrid", None, "dense + BM25, reciprocal rank fusion"),
}
BASELINE = "flat"

# Segmentation at matched sizes (~100 tokens per leaf), so strategies differ in *where* they
# cut, not in how much a leaf holds. Overlapping strategies use a step of 80 tokens (20 %
# overlap, like rcs's 20-token overlap); dds counts its step in delimiter units.
STRATEGY_PRESETS: dict[str, dict[str, Any]] = {
    "sentence": {"strategy": "sentence", "sentence_max_tokens": 100},
    "ffs": {"strategy": "ffs", "ffs_window": 100, "ffs_step": 80},
    "dfs": {"strategy": "dfs", "dfs_window": 90, "dfs_step": 80},
    "dds": {"strategy": "dds", "dds_window": 80, "dds_step": 6},
    "rcs": {"strategy": "rcs", "rcs_chunk_size": 100, "rcs_overlap": 20},
}
DEFAULT_STRATEGIES: tuple[str, ...] = ("sentence", "ffs", "dfs", "dds", "rcs")
DEFAULT_STRATEGY_SYSTEMS: tuple[str, ...] = ("flat", "collapsed")
# Modules whose source is part of the build cache key (a code change re-runs the build task;
# note that run_build itself may still answer "unchanged" if its own build key ignores code).
BUILD_MODULES: tuple[str, ...] = (
    "arborag.flows.build", "arborag.tasks.documents", "arborag.tasks.chunks", "arborag.tasks.segmenters", "arborag.tasks.embeddings",
    "arborag.tasks.clustering", "arborag.tasks.tree", "arborag.tasks.summarize", "arborag.storage.vectors", "arborag.storage.sparse",
)
# Part of the retrieval cache key: bump when run_queries or the HITS schema changes (edits to
# scoring or the report must not invalidate retrieval).
RETRIEVE_VERSION = 2

HITS = pa.schema(
    [
        pa.field("qid", pa.string(), nullable=False),
        pa.field("strategy", pa.string(), nullable=False),
        pa.field("system", pa.string(), nullable=False),
        pa.field("mode", pa.string(), nullable=False),
        pa.field("budget", pa.int32(), nullable=False),
        pa.field("latency_ms", pa.float64()),  # search + query embedding (dense modes)
        pa.field("embed_ms", pa.float64()),  # the query-embedding part of latency_ms (0 for sparse)
        pa.field("node_ids", pa.list_(pa.string())),
        pa.field("levels", pa.list_(pa.int32())),
        pa.field("scores", pa.list_(pa.float64())),
        pa.field("n_tokens", pa.list_(pa.int32())),
        pa.field("doc_ids", pa.list_(pa.list_(pa.string()))),
        pa.field("texts", pa.list_(pa.large_string())),
        pa.field("error", pa.string()),
    ]
)

RESULTS = pa.schema(
    [
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("qid", pa.string(), nullable=False),
        pa.field("type", pa.string()),
        pa.field("strategy", pa.string(), nullable=False),
        pa.field("system", pa.string(), nullable=False),
        pa.field("mode", pa.string(), nullable=False),
        pa.field("budget", pa.int32(), nullable=False),
        pa.field("n_hits", pa.int32()),
        pa.field("context_tokens", pa.int32()),
        pa.field("levels", pa.list_(pa.int32())),
        pa.field("answer_hit", pa.float64()),  # null: no span answer (yes/no)
        pa.field("recall_at_5", pa.float64()),
        pa.field("recall_at_10", pa.float64()),
        pa.field("recall_at_budget", pa.float64()),
        pa.field("full_support", pa.float64()),
        pa.field("mrr", pa.float64()),
        pa.field("ndcg_at_10", pa.float64()),
        pa.field("level_mix", pa.float64()),
        pa.field("latency_ms", pa.float64()),
        pa.field("embed_ms", pa.float64()),
        pa.field("n_gold", pa.int32()),
        pa.field("n_gold_resolved", pa.int32()),
        pa.field("prediction", pa.string()),  # LLM answer (null without --answer)
        pa.field("f1", pa.float64()),
        pa.field("em", pa.float64()),
        pa.field("rouge_l", pa.float64()),
        pa.field("bleu_1", pa.float64()),
        pa.field("bleu_4", pa.float64()),
        pa.field("error", pa.string()),
        pa.field("config_hash", pa.string()),
    ]
)


class SearchIndex(Protocol):
    """What the eval loop needs from ``query.open_index(...)``: the ``Index.search`` contract."""

    def search(self, text: str, *, mode: Any = ..., budget: int | None = ..., k: int = ..., levels: Any = ...) -> list[Any]: ...


BuildFn = Callable[..., dict[str, Any]]  # run_build(sources, corpus_dir, config) -> dict
OpenFn = Callable[..., SearchIndex]  # open_index(corpus_dir, config=config) -> Index
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
# Planning
# --------------------------------------------------------------------------------------------
def plan_runs(
    strategies: Sequence[str], systems: Sequence[str], strategy_systems: Sequence[str] = DEFAULT_STRATEGY_SYSTEMS
) -> list[tuple[str, str]]:
    """(strategy, system) pairs: the first strategy runs every system, the others only
    ``systems ∩ strategy_systems`` (if that is empty, every system)."""
    runs: list[tuple[str, str]] = []
    for i, strategy in enumerate(strategies):
        chosen = list(systems) if i == 0 else [s for s in systems if s in strategy_systems] or list(systems)
        runs.extend((strategy, s) for s in chosen)
    return runs


def strategy_config(base: ArboragConfig, strategy: str) -> ArboragConfig:
    """``base`` with the segment section set to the strategy's matched-size preset."""
    return base.with_overrides(segment=dict(STRATEGY_PRESETS[strategy]))


def default_budget(config: ArboragConfig, budgets: Sequence[int]) -> int:
    return config.query.budget if config.query.budget in budgets else max(budgets)


# --------------------------------------------------------------------------------------------
# Retrieval
# --------------------------------------------------------------------------------------------
def _accepts_vector(index: Any) -> bool:
    try:
        return "vector" in inspect.signature(index.search).parameters and hasattr(index, "embed_queries")
    except (TypeError, ValueError):
        return False


def run_queries(
    index: SearchIndex,
    queries: pa.Table,
    strategy: str,
    systems: Sequence[str],
    budgets: Sequence[int],
    *,
    k: int = 5,
    advance: Callable[[int], None] | None = None,
    embed_ms: dict[str, float] | None = None,
) -> pa.Table:
    """Every query × system × budget through ``index.search``; one HITS row each.

    When the index takes a precomputed query vector (``Index.search(vector=...)`` and
    ``embed_queries``), every question is embedded once and its vector reused by every dense
    system and budget. Latency stays what a user would see: the single-question embedding time
    is measured once per question (pass the same ``embed_ms`` dict to later strategies: the
    embedder is the same, so they skip the timing) and added to the search time of every dense
    mode; the vectors come from one batch call. A search that raises is recorded in ``error``.
    """
    reuse = _accepts_vector(index)
    specs = [SYSTEMS[s] for s in systems]
    qrows = queries.select(["qid", "question"]).to_pylist()
    embed_ms = {} if embed_ms is None else embed_ms
    vectors: dict[str, Any] = {}
    if reuse and qrows and any(s.mode != "sparse" for s in specs):
        embed = index.embed_queries  # type: ignore[attr-defined]
        todo = [q for q in qrows if q["qid"] not in embed_ms]
        if todo:
            embed([todo[0]["question"]])  # warm up: the first call pays for the model load
        for q in todo:  # what one user query costs to embed
            t0 = time.perf_counter()
            embed([q["question"]])
            embed_ms[q["qid"]] = (time.perf_counter() - t0) * 1000
        # the vectors themselves: one batch, identical for every strategy and system
        for q, v in zip(qrows, embed([q["question"] for q in qrows])):
            vectors[q["qid"]] = v
    rows: list[dict[str, Any]] = []
    for q in qrows:
        vector = vectors.get(q["qid"])
        q_embed_ms = embed_ms.get(q["qid"], 0.0)
        for spec in specs:
            for budget in budgets:
                kwargs: dict[str, Any] = {"mode": spec.mode, "budget": int(budget), "k": k}
                if spec.levels is not None:
                    kwargs["levels"] = list(spec.levels)
                if vector is not None and spec.mode != "sparse":
                    kwargs["vector"] = vector
                row: dict[str, Any] = {
                    "qid": q["qid"], "strategy": strategy, "system": spec.name, "mode": spec.mode, "budget": int(budget),
                }
                t0 = time.perf_counter()
                try:
                    hits = list(index.search(q["question"], **kwargs))
                    e_ms = q_embed_ms if "vector" in kwargs else 0.0
                    row.update(
                        latency_ms=(time.perf_counter() - t0) * 1000 + e_ms,
                        embed_ms=e_ms,
                        node_ids=[h.node_id for h in hits],
                        levels=[int(h.level) for h in hits],
                        scores=[float(h.score) for h in hits],
                        n_tokens=[int(h.n_tokens) for h in hits],
                        doc_ids=[list(h.doc_ids) for h in hits],
                        texts=[h.text for h in hits],
                        error=None,
                    )
                except (ArboragError, OSError, RuntimeError, ValueError, KeyError, ImportError) as exc:
                    row.update(latency_ms=None, embed_ms=None, node_ids=[], levels=[], scores=[], n_tokens=[], doc_ids=[], texts=[],
                               error=f"{type(exc).__name__}: {exc}")
                rows.append(row)
                if advance is not None:
                    advance(1)
    return pa.Table.from_pylist(rows, schema=HITS)


# --------------------------------------------------------------------------------------------
# Scoring
# --------------------------------------------------------------------------------------------
def score_hits(
    hits: pa.Table,
    queries: pa.Table,
    gold_docs: dict[str, dict[str, frozenset[str]]],
    *,
    dataset: str,
    match: M.MatchMode,
    config_hashes: dict[str, str] | None = None,
    predictions: dict[tuple[str, str, str, int], str] | None = None,
) -> pa.Table:
    """One RESULTS row per HITS row. ``gold_docs[strategy]`` maps gold ids to doc_ids of that
    strategy's built corpus; ``predictions`` (qid, strategy, system, budget) -> LLM answer."""
    qrows = {r["qid"]: r for r in queries.to_pylist()}
    applicable = {qid: M.answer_applicable(r["answers"] or [], r["gold_texts"]) for qid, r in qrows.items()}
    out = []
    for h in hits.to_pylist():
        q = qrows.get(h["qid"])
        if q is None:
            continue
        answers = q["answers"] or []
        golds = gold_items(q["gold_ids"] or [], q["gold_texts"], gold_docs.get(h["strategy"], {}))
        retrieved = [
            M.Retrieved(level=lv, text=t, doc_ids=tuple(d or ()), n_tokens=n)
            for lv, t, d, n in zip(h["levels"], h["texts"], h["doc_ids"], h["n_tokens"])
        ]
        matches = M.evidence_matches(retrieved, golds, match=match)
        n_gold = len(golds)
        failed = h["error"] is not None
        row: dict[str, Any] = {
            "dataset": dataset,
            "qid": h["qid"],
            "type": q["type"],
            "strategy": h["strategy"],
            "system": h["system"],
            "mode": h["mode"],
            "budget": h["budget"],
            "n_hits": len(retrieved),
            "context_tokens": sum(h["n_tokens"]),
            "levels": h["levels"],
            "answer_hit": None if failed or not applicable[h["qid"]] else M.answer_hit(answers, h["texts"]),
            "recall_at_5": None if failed else M.recall_at(matches, n_gold, 5),
            "recall_at_10": None if failed else M.recall_at(matches, n_gold, 10),
            "recall_at_budget": None if failed else M.recall_at(matches, n_gold),
            "full_support": None if failed else M.full_support(matches, n_gold),
            "mrr": None if failed else M.reciprocal_rank(matches, n_gold),
            "ndcg_at_10": None if failed else M.ndcg_at(matches, n_gold, 10),
            "level_mix": None if failed else M.level_mix(h["levels"]),
            "latency_ms": h["latency_ms"],
            "embed_ms": h["embed_ms"],
            "n_gold": n_gold,
            "n_gold_resolved": sum(1 for g in golds if g.doc_ids),
            "prediction": None,
            "f1": None, "em": None, "rouge_l": None, "bleu_1": None, "bleu_4": None,
            "error": h["error"],
            "config_hash": (config_hashes or {}).get(h["strategy"]),
        }
        pred = (predictions or {}).get((h["qid"], h["strategy"], h["system"], h["budget"]))
        if pred is not None and answers:
            row.update(
                prediction=pred,
                f1=M.token_f1(pred, answers),
                em=M.exact_match(pred, answers),
                rouge_l=M.rouge_l(pred, answers),
                bleu_1=M.bleu(pred, answers, n=1),
                bleu_4=M.bleu(pred, answers, n=4),
            )
        out.append(row)
    return pa.Table.from_pylist(out, schema=RESULTS)


# --------------------------------------------------------------------------------------------
# Answers with an LLM (optional)
# --------------------------------------------------------------------------------------------
ANSWER_PROMPT = (
    "Answer the question using only the context. Reply with the answer alone: a few words, "
    "no explanation.\n\nContext:\n{context}\n\nQuestion: {question}\nAnswer:"
)


def llm_answerer(config: ArboragConfig, cache_dir: Path) -> Callable[[list[tuple[str, list[str]]]], list[str]]:
    """A batch answerer over the summarize section's OpenAI-compatible endpoint (cached calls)."""
    from arborag.tasks.llm import LLMClient

    if not config.summarize.base_url and not os.environ.get(config.summarize.api_key_env):
        raise ConfigError(
            "--answer needs an LLM: set summarize.base_url (ARBORAG_LLM_BASE_URL) or the API key variable "
            f"{config.summarize.api_key_env}"
        )
    client = LLMClient.from_config(config.summarize, cache_dir=cache_dir)

    def answer_many(items: list[tuple[str, list[str]]]) -> list[str]:
        batch = [
            [{"role": "user", "content": ANSWER_PROMPT.format(context="\n\n".join(ctx), question=q)}] for q, ctx in items
        ]
        results = client.complete_many(batch, max_tokens=64)
        return [r.text.strip() if hasattr(r, "text") else "" for r in results]

    return answer_many


# --------------------------------------------------------------------------------------------
# Stages
# --------------------------------------------------------------------------------------------
_CONFIGS: dict[str, ArboragConfig] = {}


def _write_parquet(table: pa.Table, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)
    return path


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
    _atomic_json(corpus_dir / "eval_build.json", record)
    return record


def _takes(fn: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _atomic_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str), encoding="utf-8")
    os.replace(tmp, path)


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


def stage_retrieve(
    prepared: PreparedDataset,
    record: dict[str, Any],
    systems: Sequence[str],
    budgets: Sequence[int],
    config: ArboragConfig,
    hits_path: Path,
    *,
    opener: OpenFn,
    progress: bool = True,
    embed_ms: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Open the strategy's index and run every query through every system; writes HITS."""
    queries = prepared.queries()
    index = opener(record["corpus_dir"], config=config)
    total = queries.num_rows * len(systems) * len(budgets)
    t0 = time.perf_counter()
    with progress_bar(f"queries ({record['strategy']})", total, enabled=progress) as advance:
        hits = run_queries(index, queries, record["strategy"], systems, budgets, k=config.query.k, advance=advance, embed_ms=embed_ms)
    _write_parquet(hits, hits_path)
    errors = sum(1 for e in hits.column("error").to_pylist() if e)
    return {"path": str(hits_path), "rows": hits.num_rows, "errors": errors, "seconds": round(time.perf_counter() - t0, 2)}


def _documents(corpus_dir: str | Path) -> pa.Table:
    from arborag.storage.corpus import Corpus

    return Corpus(corpus_dir).read("documents")


def _chunk_stats(corpus_dir: str | Path, strategy: str) -> dict[str, Any]:
    """Leaf count and size of a built corpus (from its published nodes, else its chunks)."""
    from arborag.storage.corpus import Corpus

    corpus = Corpus(corpus_dir)
    stats: dict[str, Any] = {}
    try:
        nodes = pq.read_table(corpus.snapshot_table_path("nodes"), columns=["level", "n_tokens"])
        levels = nodes.column("level").to_pylist()
        toks = nodes.column("n_tokens").to_pylist()
        per_level: dict[int, int] = {}
        for lv in levels:
            per_level[int(lv)] = per_level.get(int(lv), 0) + 1
        leaf_tokens = [t for lv, t in zip(levels, toks) if lv == 0]
        stats["nodes_per_level"] = dict(sorted(per_level.items()))
    except (ArboragError, OSError, KeyError, pa.ArrowInvalid):
        chunks = corpus.read("chunks")
        leaf_tokens = [t for t, s in zip(chunks.column("n_tokens").to_pylist(), chunks.column("strategy").to_pylist()) if s == strategy]
    if leaf_tokens:
        srt = sorted(leaf_tokens)
        stats.update(
            leaves=len(srt),
            mean_tokens=sum(srt) / len(srt),
            p50_tokens=M.percentile(srt, 50),
            p95_tokens=M.percentile(srt, 95),
            max_tokens=srt[-1],
        )
    return stats


def stage_score(
    prepared: PreparedDataset,
    records: dict[str, dict[str, Any]],
    hits_paths: dict[str, Path],
    out_dir: Path,
    *,
    predictions: dict[tuple[str, str, str, int], str] | None = None,
) -> tuple[pa.Table, dict[str, Any]]:
    queries = prepared.queries()
    evidence = prepared.evidence()
    gold_docs: dict[str, dict[str, frozenset[str]]] = {}
    unresolved: dict[str, int] = {}
    for strategy, rec in records.items():
        gd = resolve_gold(evidence, _documents(rec["corpus_dir"]))
        gold_docs[strategy] = gd
        needed = {g for ids in queries.column("gold_ids").to_pylist() for g in (ids or [])}
        unresolved[strategy] = sum(1 for g in needed if not gd.get(g))
    tables = [pq.read_table(p) for p in hits_paths.values() if Path(p).exists()]
    hits = pa.concat_tables([t.cast(HITS) for t in tables]) if tables else HITS.empty_table()
    results = score_hits(
        hits,
        queries,
        gold_docs,
        dataset=prepared.name,
        match=prepared.match,
        config_hashes={s: r["config_hash"] for s, r in records.items()},
        predictions=predictions,
    )
    _write_parquet(results, out_dir / "results.parquet")
    return results, {"unresolved_gold": unresolved}


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
    from arborag.tasks.report import write_report

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
    by_strategy: dict[str, list[str]] = {}
    for strategy, system in runs:
        by_strategy.setdefault(strategy, []).append(system)
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
            _say(f"build {i}/{len(by_strategy)}: {strategy} ({_preset_text(strategy)})")
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
                retrieve_info[strategy] = stage_retrieve(prepared, rec, systems, opts.budgets, configs[strategy], path, opener=opener,
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
        predictions = _answers(prepared, hits_paths, default_budget(config, opts.budgets), answer_many)
        timings["answer"] = time.perf_counter() - t0

    # 4. score
    t0 = time.perf_counter()
    results, score_info = stage_score(prepared, {s: records[s] for s in hits_paths}, hits_paths, out, predictions=predictions)
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
        "chunk_stats": {s: _chunk_stats(r["corpus_dir"], s) for s, r in records.items()},
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
    _atomic_json(out / "run.json", meta)
    return {"out_dir": str(out), "rows": results.num_rows, "files": {k: str(v) for k, v in files.items()}, "failures": failures, "timings_s": meta["timings_s"]}


def _answers(
    prepared: PreparedDataset, hits_paths: dict[str, Path], budget: int, answer_many: Callable[[list[tuple[str, list[str]]]], list[str]]
) -> dict[tuple[str, str, str, int], str]:
    questions = {r["qid"]: r["question"] for r in prepared.queries().select(["qid", "question"]).to_pylist()}
    keys, items = [], []
    for path in hits_paths.values():
        for h in pq.read_table(path).to_pylist():
            if h["budget"] != budget or h["error"]:
                continue
            keys.append((h["qid"], h["strategy"], h["system"], h["budget"]))
            items.append((questions[h["qid"]], list(h["texts"])))
    preds = answer_many(items) if items else []
    return dict(zip(keys, preds))


def _say(message: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(f"[bold cyan]eval[/] {message}")


def _preset_text(strategy: str) -> str:
    return ", ".join(f"{k}={v}" for k, v in STRATEGY_PRESETS[strategy].items() if k != "strategy")


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
    """stage_retrieve as a Prefect task keyed on the build, queries, systems, budgets, query config."""
    from prefect import task

    from arborag.flows.common import task_options, was_cached
    from arborag.storage.corpus import Corpus

    key = "eval-retrieve-" + hash_json([key, RETRIEVE_VERSION, _code_version("arborag.query.index", "arborag.query.fusion", "arborag.storage.sparse", "arborag.storage.vectors")])

    def _run(strategy: str) -> dict[str, Any]:
        return stage_retrieve(prepared, record, systems, budgets, cfg, path, opener=opener, progress=progress, embed_ms=embed_ms)

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
