"""Retrieval for an evaluation: every question × system × budget through a search object.

The search object is anything with ``Index.search``'s contract (:class:`SearchIndex`); the flow
passes ``arborag.query.open_index(...)``'s ``Index`` (tasks do not import ``query``), tests pass
fakes. One HITS row (``storage.schemas.HITS``) per search.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import polars as pl
import pyarrow as pa

from arborag.config import ArboragConfig
from arborag.errors import ArboragError
from arborag.progress import progress_bar
from arborag.storage.schemas import HITS
from arborag.tasks.evaluation.datasets import PreparedDataset
from arborag.tasks.evaluation.plan import SYSTEMS
from arborag.tasks.evaluation.write import write_hits

__all__ = ["OpenFn", "SearchIndex", "VectorSearchIndex", "count_errors", "run_queries", "run_retrieve"]


class SearchIndex(Protocol):
    """What the eval loop needs from ``query.open_index(...)``: the ``Index.search`` contract.

    A hit has ``node_id``, ``level``, ``score``, ``text``, ``doc_ids`` and ``n_tokens``."""

    def search(self, text: str, *, mode: Any = ..., budget: int | None = ..., k: int = ..., levels: Any = ...) -> list[Any]: ...


@runtime_checkable
class VectorSearchIndex(Protocol):
    """A :class:`SearchIndex` that also embeds questions and takes a precomputed ``vector=``."""

    def embed_queries(self, texts: list[str]) -> Any: ...

    def search(self, text: str, *, vector: Any = ..., **kwargs: Any) -> list[Any]: ...


OpenFn = Callable[..., SearchIndex]  # open_index(corpus_dir, config=config) -> Index

# What a failing search may raise; it is recorded in the row's ``error``, the run goes on.
_SEARCH_ERRORS = (ArboragError, OSError, RuntimeError, ValueError, KeyError, ImportError)


def _accepts_vector(index: Any) -> bool:
    try:
        return "vector" in inspect.signature(index.search).parameters and hasattr(index, "embed_queries")
    except (TypeError, ValueError):
        return False


def _embed_questions(index: Any, qids: list[str], questions: list[str], embed_ms: dict[str, float]) -> dict[str, Any]:
    """One vector per question (one batch call); single-question embedding times into ``embed_ms``
    for the questions it does not hold yet (a warm-up call first pays for the model load)."""
    embed = index.embed_queries
    todo = [(qid, q) for qid, q in zip(qids, questions) if qid not in embed_ms]
    if todo:
        embed([todo[0][1]])
    for qid, q in todo:  # what one user query costs to embed
        t0 = time.perf_counter()
        embed([q])
        embed_ms[qid] = (time.perf_counter() - t0) * 1000
    # the vectors themselves: one batch, identical for every strategy and system
    return dict(zip(qids, embed(questions)))


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
    specs = [SYSTEMS[s] for s in systems]
    qids: list[str] = queries.column("qid").to_pylist()  # one search per question: a loop by nature
    questions: list[str] = queries.column("question").to_pylist()
    embed_ms = {} if embed_ms is None else embed_ms
    vectors: dict[str, Any] = {}
    if _accepts_vector(index) and qids and any(s.mode != "sparse" for s in specs):
        vectors = _embed_questions(index, qids, questions, embed_ms)
    rows: list[dict[str, Any]] = []
    for qid, question in zip(qids, questions):
        vector = vectors.get(qid)
        q_embed_ms = embed_ms.get(qid, 0.0)
        for spec in specs:
            for budget in budgets:
                kwargs: dict[str, Any] = {"mode": spec.mode, "budget": int(budget), "k": k}
                if spec.levels is not None:
                    kwargs["levels"] = list(spec.levels)
                kwargs.update(spec.options)
                if vector is not None and spec.mode != "sparse":
                    kwargs["vector"] = vector
                row: dict[str, Any] = {"qid": qid, "strategy": strategy, "system": spec.name, "mode": spec.mode, "budget": int(budget)}
                t0 = time.perf_counter()
                try:
                    hits = list(index.search(question, **kwargs))
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
                except _SEARCH_ERRORS as exc:
                    row.update(latency_ms=None, embed_ms=None, node_ids=[], levels=[], scores=[], n_tokens=[], doc_ids=[], texts=[],
                               error=f"{type(exc).__name__}: {exc}")
                rows.append(row)
                if advance is not None:
                    advance(1)
    return pa.Table.from_pylist(rows, schema=HITS)


def count_errors(hits: pa.Table) -> int:
    """How many rows of a HITS (or RESULTS) table carry an error (null and "" do not count)."""
    if hits.num_rows == 0:
        return 0
    err = pl.DataFrame(hits.select(["error"]))
    return int(err.select((pl.col("error").is_not_null() & (pl.col("error") != "")).sum()).item())


def run_retrieve(
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
    """Runner: open the strategy's index (``opener(record["corpus_dir"], config=config)``), run
    every query through every system, write HITS to ``hits_path``; returns a small summary."""
    queries = prepared.queries()
    index = opener(record["corpus_dir"], config=config)
    total = queries.num_rows * len(systems) * len(budgets)
    t0 = time.perf_counter()
    with progress_bar(f"queries ({record['strategy']})", total, enabled=progress) as advance:
        hits = run_queries(index, queries, record["strategy"], systems, budgets, k=config.query.k, advance=advance, embed_ms=embed_ms)
    write_hits(hits, hits_path)
    return {"path": str(hits_path), "rows": hits.num_rows, "errors": count_errors(hits), "seconds": round(time.perf_counter() - t0, 2)}
