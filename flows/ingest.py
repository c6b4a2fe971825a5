"""The ``ingest_and_segment`` flow: sources → ``documents`` → ``sections`` → ``doc_context`` → ``chunks``.

Orchestration only. The pipeline is :data:`INGEST_PIPELINE`; each entry's task calls a stage
runner in ``tasks/`` (``run_documents`` beside ``build_documents``, ``run_sections`` beside
``sections_for``, ``run_doc_context`` beside ``build_doc_context``, ``run_chunks`` beside
``build_chunks``). The ``sections`` and ``context`` stages run with ``segment`` (they shape the
chunks: borders and AutoContext headers); with ``sections.strategy = none`` and headers off they
are skipped (or empty the table an earlier run wrote). Under Prefect each stage is cached on a content key — the source files'
size and modification time for ingest, the bytes of the tables a stage reads otherwise — plus the
stage's config section and the code fingerprint of its runner modules
(:func:`arborag.flows.stage.pipeline_fingerprint`). A cache hit counts only while the table it
produced is still the one on disk.

Entry points:

- :func:`ingest_and_segment` — the module-level Prefect flow, JSON parameters only (corpus
  folder, sources, config file and overrides); ``prefect.yaml`` can name
  ``flows/ingest.py:ingest_and_segment`` and a worker in another process can run it.
- :func:`run_ingest_and_segment` — the Python entry point (CLI, tests): ``use_prefect=False``
  runs the same pipeline directly; ``True`` runs the flow in-process (a temporary Prefect API
  starts unless ``PREFECT_API_URL`` points at a server).

Every run is recorded in the ``runs`` table (status ok | partial | failed, counts as JSON).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from arborag.config import ArboragConfig, Strategy, load_config
from arborag.env import offline_env
from arborag.errors import IngestError
from arborag.flows.common import cache_key_from_stats, config_overrides, current_flow_run_id, new_run_id, plain_json
from arborag.flows.stage import Stage, pipeline_fingerprint, record_run, run_stage
from arborag.hashing import hash_json
from arborag.storage.corpus import Corpus
from arborag.storage.lock import corpus_lock
from arborag.tasks.stages.segment import chunks_fingerprint, run_chunks
from arborag.tasks.stage_context import StageContext, table_fingerprint
from arborag.tasks.stages.ingest import discover_sources, run_documents
from arborag.tasks.stages.context import run_doc_context
from arborag.tasks.stages.sections import run_sections

offline_env()  # Prefect reads its settings when imported
from prefect import flow, task  # noqa: E402

__all__ = ["FLOW_NAME", "INGEST_PIPELINE", "ingest_and_segment", "ingest_pipeline", "run_ingest_and_segment"]

FLOW_NAME = "ingest_and_segment"

ingest_documents = task(name="ingest-documents", log_prints=False)(run_documents)
segment_chunks = task(name="segment-chunks", log_prints=False)(run_chunks)
section_documents = task(name="sections", log_prints=False)(run_sections)
document_context = task(name="context", log_prints=False)(run_doc_context)

# table reads/writes can fail transiently on network file systems; LLM calls retry in the client
INGEST = Stage("ingest", ingest_documents, retries=2)
SECTIONS = Stage("sections", section_documents, retries=1)
CONTEXT = Stage("context", document_context, retries=1)
SEGMENT = Stage("segment", segment_chunks, retries=1)
INGEST_PIPELINE: tuple[Stage, ...] = (INGEST, SECTIONS, CONTEXT, SEGMENT)


def discover(ctx: StageContext, sources: Sequence[str]) -> list[str]:
    """The files of ``sources`` (the corpus itself is never entered); raises IngestError for a missing source.
    Symlinks leading out of a source's root are skipped, logged and counted in the run (``discover``)."""
    skipped: list[Any] = []
    files = [s.uri for s in discover_sources(list(sources), ctx.config.ingest, skip=[ctx.corpus.root], skipped=skipped)]
    if skipped:
        ctx.counters.stages["discover"] = {"skipped": len(skipped), "skipped_list": [{"uri": s.uri, "reason": s.reason} for s in skipped[:20]]}
    return files


def cached_ingest_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """What a cache hit means in counts: nothing added; every document read before is unchanged."""
    seen = summary.get("added", 0) + summary.get("unchanged", 0) + summary.get("duplicates", 0)
    return {**summary, "added": 0, "duplicates": 0, "replaced": 0, "unchanged": seen, "written": False}


def ingest_stage(ctx: StageContext, files: list[str], *, use_prefect: bool) -> tuple[dict[str, Any], bool]:
    """Run the ``ingest`` stage over discovered ``files``."""
    cfg = ctx.config.ingest.model_dump(mode="json")
    key = cache_key_from_stats(files, "ingest", str(ctx.corpus.root), cfg, pipeline_fingerprint((INGEST,)))
    docs = ctx.corpus.table_path("documents")
    summary, cached = run_stage(
        ctx, INGEST, use_prefect=use_prefect, cache_key=key, files=files,
        done=lambda s: s is not None and s.get("fingerprint") == table_fingerprint(docs),
    )
    return (cached_ingest_summary(summary) if cached else summary), cached


def _llm_config(ctx: StageContext) -> dict[str, Any]:
    """The LLM settings that change what the sections/context stages produce."""
    return {k: v for k, v in ctx.config.summarize.model_dump(mode="json").items() if k in ("base_url", "llm_model")}


def table_stage(ctx: StageContext, stage: Stage, table: str, inputs: Sequence[str], cfg: Any, *, use_prefect: bool) -> tuple[dict[str, Any], bool]:
    """Run a stage that rewrites one working ``table`` from ``inputs`` tables (keyed on their bytes + ``cfg``)."""
    fps = [table_fingerprint(ctx.corpus.table_path(name)) for name in inputs]
    key = hash_json([stage.name, str(ctx.corpus.root), fps, cfg, pipeline_fingerprint((stage,))])
    path = ctx.corpus.table_path(table)
    summary, cached = run_stage(
        ctx, stage, use_prefect=use_prefect, cache_key=key,
        done=lambda s: s is not None and s.get("fingerprint") == table_fingerprint(path),
    )
    return ({**summary, "written": False} if cached else summary), cached


def sections_stage(ctx: StageContext, *, use_prefect: bool) -> tuple[dict[str, Any], bool]:
    """Run the ``sections`` stage over the ok documents."""
    cfg = [ctx.config.sections.model_dump(mode="json"), ctx.config.context.llm, _llm_config(ctx)]
    return table_stage(ctx, SECTIONS, "sections", ["documents"], cfg, use_prefect=use_prefect)


def context_stage(ctx: StageContext, *, use_prefect: bool) -> tuple[dict[str, Any], bool]:
    """Run the ``context`` stage (document titles and summaries for the chunk headers)."""
    from arborag.tasks.stages.context import headers_enabled

    cfg = [ctx.config.context.model_dump(mode="json"), headers_enabled(ctx.config), _llm_config(ctx)]
    return table_stage(ctx, CONTEXT, "doc_context", ["documents"], cfg, use_prefect=use_prefect)


def segment_stage(ctx: StageContext, strategy: str, *, use_prefect: bool) -> tuple[dict[str, Any], bool]:
    """Run the ``segment`` stage with ``strategy`` over the ok documents (inside their sections, with headers)."""
    from arborag.tasks.stages.context import headers_enabled

    cfg = [ctx.config.segment.model_dump(mode="json"), ctx.config.sections.strategy, headers_enabled(ctx.config)]
    docs = [table_fingerprint(ctx.corpus.table_path(name)) for name in ("documents", "sections", "doc_context")]
    key = hash_json(["segment", str(ctx.corpus.root), docs, cfg, strategy, pipeline_fingerprint((SEGMENT,))])
    summary, cached = run_stage(
        ctx, SEGMENT, use_prefect=use_prefect, cache_key=key, strategy=strategy,
        done=lambda s: s is not None and s.get("fingerprint") == chunks_fingerprint(ctx.corpus.read("chunks"), strategy),
    )
    return ({**summary, "written": False} if cached else summary), cached


def _wanted(ctx: StageContext, table: str) -> bool:
    """Run the sections/context stage when it is on, or to empty the table it wrote when it was."""
    from arborag.tasks.stages.context import headers_enabled

    on = ctx.config.sections.strategy != "none" if table == "sections" else headers_enabled(ctx.config)
    return on or ctx.corpus.table_path(table).exists()


def run_ingest_stages(
    ctx: StageContext, files: list[str] | None, strategy: str | None, *, use_prefect: bool, out: dict[str, Any]
) -> None:
    """Run :data:`INGEST_PIPELINE` in order into ``out`` (``files=None``: no ingest; ``strategy=None``: no segment).

    Shared by this flow and the build flow.
    """
    for stage in INGEST_PIPELINE:
        if stage is INGEST and files is not None:
            summary, cached = ingest_stage(ctx, files, use_prefect=use_prefect)
        elif stage is SECTIONS and strategy is not None and _wanted(ctx, "sections"):
            summary, cached = sections_stage(ctx, use_prefect=use_prefect)
        elif stage is CONTEXT and strategy is not None and _wanted(ctx, "doc_context"):
            summary, cached = context_stage(ctx, use_prefect=use_prefect)
        elif stage is SEGMENT and strategy is not None:
            summary, cached = segment_stage(ctx, strategy, use_prefect=use_prefect)
        else:
            continue
        out[stage.name] = summary
        ctx.counters.stages[stage.name] = {k: v for k, v in summary.items() if k not in ("failures", "warning_list")}
        if cached:
            out["cached"].append(stage.name)


def ingest_pipeline(ctx: StageContext, files: list[str] | None, *, strategy: str | None, use_prefect: bool) -> dict[str, Any]:
    """Run the ingest pipeline over discovered ``files``, record the run, return the summary."""
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    out: dict[str, Any] = {"run_id": ctx.run_id, "corpus": str(ctx.corpus.root), "ingest": None, "segment": None, "cached": []}
    flow_name = "+".join(n for n, on in (("ingest", files is not None), ("segment", strategy is not None)) if on) or "noop"
    status, message = "ok", ""
    try:
        run_ingest_stages(ctx, files, strategy, use_prefect=use_prefect, out=out)
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
        record_run(
            ctx, flow_name, started=started, finished=datetime.now(timezone.utc), status=status, message=message,
            counts={**ctx.counters.stages, "cached": out["cached"]},
        )


def _check_inputs(corpus: Corpus, ingest: bool, segment: bool) -> None:
    if not ingest and not segment:
        raise IngestError(str(corpus.root), "nothing to do: give SOURCES to ingest, or ask to segment")
    if not ingest and not corpus.table_path("documents").exists():
        raise IngestError(str(corpus.root), f"no documents to segment; run `arborag ingest SOURCE... --corpus {corpus.root}` first")


@flow(name=FLOW_NAME, log_prints=False)
def ingest_and_segment(
    corpus_dir: str,
    sources: list[str] | None = None,
    config_path: str | None = None,
    config_overrides: dict[str, dict[str, Any]] | None = None,
    strategy: Strategy | None = None,
    segment: bool = True,
    progress: bool = False,
    lock_wait: bool = True,
) -> dict[str, Any]:
    """Ingest ``sources`` (``None``: ingest nothing) into ``corpus_dir`` and segment (if ``segment``).

    The config is ``load_config(config_path, overrides=config_overrides)`` (defaults <
    arborag.yaml < ``ARBORAG_*`` < overrides) in the process running the flow; secrets come
    from that process's environment. Runs under the corpus writer lock (``lock_wait=False``:
    fail at once if another writer holds it).
    """
    config = load_config(config_path, overrides=config_overrides)
    corpus = Corpus(corpus_dir)
    _check_inputs(corpus, sources is not None, segment)
    with corpus_lock(corpus_dir, wait=lock_wait, purpose="ingest"):
        ctx = StageContext(corpus.ensure(), config, current_flow_run_id() or new_run_id(), progress=progress)
        files = discover(ctx, sources) if sources is not None else None
        chosen = (strategy or config.segment.strategy) if segment else None
        return ingest_pipeline(ctx, files, strategy=chosen, use_prefect=True)


def run_ingest_and_segment(
    sources: Sequence[str | Path],
    corpus_dir: str | Path,
    config: ArboragConfig,
    *,
    strategy: Strategy | None = None,
    segment: bool = True,
    use_prefect: bool = True,
    progress: bool = False,
    lock_wait: bool = True,
) -> dict[str, Any]:
    """Ingest ``sources`` into ``corpus_dir`` and (when ``segment``) segment the documents.

    Returns ``{"run_id", "corpus", "status": "ok" | "partial", "ingest": {...} | None,
    "segment": {...} | None, "cached": [stage names served from the Prefect cache], "seconds"}``.
    ``status == "partial"`` means some sources failed (listed in ``ingest["failures"]`` and in
    the documents table). ``strategy`` defaults to ``config.segment.strategy``. With no sources
    only segmentation runs. ``config`` reaches the flow as JSON overrides (secrets stay in the
    environment).

    Raises:
        IngestError: a source does not exist, or there is nothing to segment; nothing is written.
        CorpusLockedError: ``lock_wait=False`` and another writer holds the corpus lock.
        ArboragError: any other typed failure of a stage (the run is recorded as failed).
    """
    corpus = Corpus(corpus_dir)
    srcs = [str(s) for s in sources]
    _check_inputs(corpus, bool(srcs), segment)
    ctx = StageContext(corpus, config, new_run_id(), progress=progress)
    files = discover(ctx, srcs) if srcs else None  # fails on a missing source before anything starts
    with corpus_lock(corpus.root, wait=lock_wait, purpose="ingest"):
        if not use_prefect:
            ctx.corpus.ensure()
            chosen = (strategy or config.segment.strategy) if segment else None
            return ingest_pipeline(ctx, files, strategy=chosen, use_prefect=False)
        out = ingest_and_segment(
            corpus_dir=str(corpus.root), sources=files, config_overrides=config_overrides(config),
            strategy=strategy, segment=segment, progress=progress,
        )
    return plain_json(out)
