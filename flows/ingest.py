"""The ``ingest_and_segment`` flow: sources → ``documents`` table → ``chunks`` table.

Two stages, each a thin runner around a pure function (read the inputs from the corpus, call
the function, write the output atomically, return a small summary):

- :func:`ingest_stage` → :func:`arborag.tasks.documents.build_documents` → ``tables/documents.parquet``
- :func:`segment_stage` → :func:`arborag.tasks.chunks.build_chunks` → ``tables/chunks.parquet`` (the
  rows of the segmented strategy are replaced; other strategies' rows stay)

Under Prefect each stage is a task whose cache key is made of content hashes — the source
files' bytes for ingest, the documents table for segment — plus the stage's config section and
the code version, so a second run over unchanged input is a cache hit and skips the work.
A cache hit is trusted only while the table it produced is still the one on disk (its
fingerprint is part of the summary); otherwise the stage runs again.

Entry points:

- :func:`run_ingest_and_segment` — plain Python; ``use_prefect=False`` runs the stages with no
  orchestrator (tests, notebooks), ``True`` runs the flow in-process (a temporary Prefect API
  starts unless ``PREFECT_API_URL`` points at a server, whose UI then shows the run).
- ``ingest_and_segment`` — the Prefect flow object (built on first access, after the offline
  environment defaults are applied), e.g. for ``prefect.yaml``:
  ``entrypoint: flows/ingest.py:ingest_and_segment``.

Every run is recorded in the ``runs`` table (status ok | partial | failed, counts as JSON).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from arborag.config import ArboragConfig, IngestConfig, SegmentConfig, Strategy, load_config
from arborag.errors import IngestError
from arborag.hashing import hash_json
from arborag.progress import progress_bar
from arborag.flows.common import (
    cache_key_from_files,
    code_fingerprint,
    current_flow_run_id,
    new_run_id,
    prefect_env_defaults,
    table_fingerprint,
    task_options,
    was_cached,
)
from arborag.storage.corpus import Corpus

__all__ = [
    "FLOW_NAME",
    "chunks_fingerprint",
    "ingest_stage",
    "run_ingest_and_segment",
    "segment_stage",
]

FLOW_NAME = "ingest_and_segment"
INGEST_RETRIES = 2  # table reads/writes can fail transiently on network file systems
SEGMENT_RETRIES = 1


# ---------------------------------------------------------------------------------------------
# Stages (plain functions; the Prefect tasks wrap them unchanged)
# ---------------------------------------------------------------------------------------------
def _write_if_changed(corpus: Corpus, name: str, table: pa.Table, before: pa.Table) -> bool:
    """Write ``table`` unless it equals what is on disk (so a no-op run leaves files untouched)."""
    if corpus.table_path(name).exists() and table.equals(before):
        return False
    corpus.write(name, table)
    return True


def ingest_stage(corpus_dir: str, files: list[str], ingest_cfg: dict[str, Any], progress: bool = False) -> dict[str, Any]:
    """Read ``files`` into the corpus's documents table; return a JSON summary.

    The summary holds the report's counts and first failures, table totals
    (``documents``: ok rows, ``errors``: error rows) and the table's ``fingerprint``.
    """
    from arborag.tasks.documents import build_documents

    corpus = Corpus(corpus_dir).ensure()
    cfg = IngestConfig.model_validate(ingest_cfg)
    existing = corpus.read("documents")
    with progress_bar("ingest", len(files), enabled=progress) as advance:
        table, report = build_documents(files, cfg, existing=existing, progress=advance)
    written = _write_if_changed(corpus, "documents", table, existing)
    status = table.column("status")
    return {
        **report.as_dict(),
        "table": str(corpus.table_path("documents")),
        "documents": int(pc.sum(pc.equal(status, "ok")).as_py() or 0),
        "errors": int(pc.sum(pc.equal(status, "error")).as_py() or 0),
        "written": written,
        "fingerprint": table_fingerprint(corpus.table_path("documents")),
    }


def chunks_fingerprint(chunks: pa.Table, strategy: str) -> str:
    """Hash of the chunk ids of one strategy (ids hash doc, strategy, params and span)."""
    ids = chunks.filter(pc.equal(chunks.column("strategy"), strategy)).column("chunk_id").to_pylist()
    return hash_json(sorted(ids))


def segment_stage(corpus_dir: str, segment_cfg: dict[str, Any], strategy: str, progress: bool = False) -> dict[str, Any]:
    """Segment the ok documents with ``strategy``; replace that strategy's rows in ``chunks``."""
    from arborag.tasks.chunks import build_chunks

    corpus = Corpus(corpus_dir).ensure()
    cfg = SegmentConfig.model_validate(segment_cfg)
    docs = corpus.read("documents")
    ok = docs.filter(pc.equal(docs.column("status"), "ok"))
    existing = corpus.read("chunks")
    others = existing.filter(pc.not_equal(existing.column("strategy"), strategy))
    with progress_bar(f"segment ({strategy})", ok.num_rows, enabled=progress) as advance:
        new = build_chunks(ok, cfg, strategy=strategy, progress=advance)  # type: ignore[arg-type]
    table = pa.concat_tables([others, new.select(others.schema.names).cast(others.schema)])
    order = pc.sort_indices(table, sort_keys=[("strategy", "ascending"), ("doc_id", "ascending"), ("ordinal", "ascending")])
    table = table.take(order)
    written = _write_if_changed(corpus, "chunks", table, existing)
    return {
        "table": str(corpus.table_path("chunks")),
        "strategy": strategy,
        "documents": ok.num_rows,
        "chunks": new.num_rows,
        "chunks_total": table.num_rows,
        "tokens": int(pc.sum(new.column("n_tokens")).as_py() or 0) if new.num_rows else 0,
        "written": written,
        "fingerprint": chunks_fingerprint(table, strategy),
    }


# ---------------------------------------------------------------------------------------------
# Running the stages: plainly, or as cached Prefect tasks
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StageCall:
    name: str
    fn: Callable[..., dict[str, Any]]
    kwargs: dict[str, Any]
    cache_key: str
    retries: int
    still_valid: Callable[[dict[str, Any]], bool]  # is a cached summary still true on disk?


_Runner = Callable[[Corpus, StageCall], tuple[dict[str, Any], bool]]


def run_stage_plain(corpus: Corpus, call: StageCall) -> tuple[dict[str, Any], bool]:
    return call.fn(**call.kwargs), False


def run_stage_prefect(corpus: Corpus, call: StageCall) -> tuple[dict[str, Any], bool]:
    task = _prefect_objects().tasks[call.name]
    state = task.with_options(**task_options(corpus, retries=call.retries, cache_key=call.cache_key))(
        **call.kwargs, return_state=True
    )
    summary = state.result()
    if was_cached(state) and call.still_valid(summary):
        return summary, True
    if was_cached(state):  # the table changed since: run again and overwrite the cache record
        state = task.with_options(
            **task_options(corpus, retries=call.retries, cache_key=call.cache_key, refresh_cache=True)
        )(**call.kwargs, return_state=True)
        summary = state.result()
    return summary, False


def cached_ingest_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """What a cache hit means in counts: nothing added; every document read before is unchanged."""
    seen = summary.get("added", 0) + summary.get("unchanged", 0) + summary.get("duplicates", 0)
    return {**summary, "added": 0, "duplicates": 0, "replaced": 0, "unchanged": seen, "written": False}


def ingest_call(corpus: Corpus, config: ArboragConfig, sources: Sequence[str], progress: bool) -> StageCall:
    from arborag.tasks.documents import discover_sources

    files = [s.uri for s in discover_sources(sources, config.ingest, skip=[corpus.root])]
    cfg = config.ingest.model_dump(mode="json")
    key = cache_key_from_files(
        files, "ingest", str(corpus.root), cfg, code_fingerprint("arborag.tasks.documents", "arborag.flows.ingest")
    )
    docs_path = corpus.table_path("documents")
    return StageCall(
        name="ingest",
        fn=ingest_stage,
        kwargs={"corpus_dir": str(corpus.root), "files": files, "ingest_cfg": cfg, "progress": progress},
        cache_key=f"ingest-{key}",
        retries=INGEST_RETRIES,
        still_valid=lambda s: s.get("fingerprint") == table_fingerprint(docs_path),
    )


def segment_call(corpus: Corpus, config: ArboragConfig, strategy: str, progress: bool) -> StageCall:
    cfg = config.segment.model_dump(mode="json")
    key = hash_json(
        [
            "segment",
            str(corpus.root),
            table_fingerprint(corpus.table_path("documents")),
            cfg,
            strategy,
            code_fingerprint("arborag.tasks.chunks", "arborag.tasks.segmenters", "arborag.tokenizer", "arborag.flows.ingest"),
        ]
    )
    return StageCall(
        name="segment",
        fn=segment_stage,
        kwargs={"corpus_dir": str(corpus.root), "segment_cfg": cfg, "strategy": strategy, "progress": progress},
        cache_key=f"segment-{key}",
        retries=SEGMENT_RETRIES,
        still_valid=lambda s: s.get("fingerprint") == chunks_fingerprint(corpus.read("chunks"), strategy),
    )


def _run_pipeline(
    sources: Sequence[str],
    corpus: Corpus,
    config: ArboragConfig,
    *,
    strategy: Strategy | None,
    segment: bool,
    progress: bool,
    runner: _Runner,
    run_id: str,
) -> dict[str, Any]:
    """Run the stages with ``runner``, record the run, return the summary."""
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    out: dict[str, Any] = {"run_id": run_id, "corpus": str(corpus.root), "ingest": None, "segment": None, "cached": []}
    flow_name = "+".join(n for n, on in (("ingest", bool(sources)), ("segment", segment)) if on) or "noop"
    status, message = "ok", ""
    try:
        if sources:
            summary, cached = runner(corpus, ingest_call(corpus, config, sources, progress))
            out["ingest"] = cached_ingest_summary(summary) if cached else summary
            if cached:
                out["cached"].append("ingest")
        if segment:
            chosen = strategy or config.segment.strategy
            summary, cached = runner(corpus, segment_call(corpus, config, chosen, progress))
            out["segment"] = {**summary, "written": False} if cached else summary
            if cached:
                out["cached"].append("segment")
        failed = int((out["ingest"] or {}).get("failed", 0))
        if failed:
            status = "partial"
            message = f"{failed} source(s) could not be read; see: SELECT uri, error FROM documents WHERE status = 'error'"
        out["status"] = status
        return out
    except BaseException as exc:
        status, message = "failed", f"{type(exc).__name__}: {exc}"
        raise
    finally:
        out["seconds"] = round(time.perf_counter() - t0, 3)
        # keep the runs row small: counts, not failure lists
        counts = {
            k: {f: v for f, v in out[k].items() if f not in ("failures", "warning_list")}
            for k in ("ingest", "segment")
            if out.get(k)
        }
        corpus.ensure().append_run(
            {
                "run_id": run_id,
                "flow": flow_name,
                "config_hash": config.config_hash(),
                "started_at": started,
                "finished_at": datetime.now(timezone.utc),
                "status": status,
                "counts": json.dumps({**counts, "cached": out["cached"]}, sort_keys=True, default=str),
                "tokens_in": 0,
                "tokens_out": 0,
                "message": message or None,
            }
        )


def _summaries_copy(out: dict[str, Any]) -> dict[str, Any]:
    """A plain-JSON copy of a flow's return value (detached from Prefect's result objects)."""
    copied: dict[str, Any] = json.loads(json.dumps(out, default=str))
    return copied


# ---------------------------------------------------------------------------------------------
# Prefect objects (built on first use, after the offline environment defaults)
# ---------------------------------------------------------------------------------------------
def ingest_and_segment_body(
    sources: list[str],
    corpus_dir: str,
    config_overrides: dict[str, dict[str, Any]] | None = None,
    strategy: Strategy | None = None,
    segment: bool = True,
    progress: bool = False,
) -> dict[str, Any]:
    """The flow body: ingest ``sources`` (if any) and segment (if ``segment``) in ``corpus_dir``.

    ``config_overrides`` are applied over ``./arborag.yaml`` and ``ARBORAG_*`` variables
    (``load_config``); :func:`run_ingest_and_segment` passes the caller's whole config here.
    """
    config = load_config(None, overrides=config_overrides)
    corpus = Corpus(corpus_dir).ensure()
    run_id = current_flow_run_id() or new_run_id()
    return _run_pipeline(
        sources, corpus, config, strategy=strategy, segment=segment, progress=progress,
        runner=run_stage_prefect, run_id=run_id,
    )


@dataclass(frozen=True)
class _PrefectObjects:
    flow: Any
    tasks: dict[str, Any]


@lru_cache(maxsize=1)
def _prefect_objects() -> _PrefectObjects:
    prefect_env_defaults()
    from prefect import flow, task

    tasks = {
        "ingest": task(name="ingest-documents", log_prints=False)(ingest_stage),
        "segment": task(name="segment-chunks", log_prints=False)(segment_stage),
    }
    flow_obj = flow(name=FLOW_NAME, log_prints=False)(ingest_and_segment_body)
    return _PrefectObjects(flow_obj, tasks)


def __getattr__(name: str) -> Any:
    # ``flows.ingest.ingest_and_segment`` is the Prefect flow, built on first access so that
    # importing this module does not import Prefect.
    if name == "ingest_and_segment":
        return _prefect_objects().flow
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run_ingest_and_segment(
    sources: Sequence[str | Path],
    corpus_dir: str | Path,
    config: ArboragConfig,
    *,
    strategy: Strategy | None = None,
    segment: bool = True,
    use_prefect: bool = True,
    progress: bool = False,
) -> dict[str, Any]:
    """Ingest ``sources`` into ``corpus_dir`` and (when ``segment``) segment the documents.

    Returns ``{"run_id", "corpus", "status": "ok" | "partial", "ingest": {...} | None,
    "segment": {...} | None, "cached": [stage names served from the Prefect cache], "seconds"}``.
    ``status == "partial"`` means some sources failed (listed in ``ingest["failures"]`` and in
    the documents table). ``strategy`` defaults to ``config.segment.strategy``. With no sources
    only segmentation runs.

    Raises:
        IngestError: a source does not exist, or there is nothing to segment; nothing is written.
        ArboragError: any other typed failure of a stage (the run is recorded as failed).
    """
    corpus = Corpus(corpus_dir)
    srcs = [str(s) for s in sources]
    if not srcs and not segment:
        raise IngestError(str(corpus.root), "nothing to do: give SOURCES to ingest, or ask to segment")
    if not srcs and not corpus.table_path("documents").exists():
        raise IngestError(
            str(corpus.root), f"no documents to segment; run `arborag ingest SOURCE... --corpus {corpus_dir}` first"
        )
    if srcs:  # fail on a missing source before anything (Prefect included) starts
        from arborag.tasks.documents import discover_sources

        discover_sources(srcs, config.ingest, skip=[corpus.root])
    if not use_prefect:
        return _run_pipeline(
            srcs, corpus.ensure(), config, strategy=strategy, segment=segment, progress=progress,
            runner=run_stage_plain, run_id=new_run_id(),
        )
    flow_obj = _prefect_objects().flow
    out = flow_obj(srcs, str(corpus.root), config.public_dict(), strategy, segment, progress)
    return _summaries_copy(out)
