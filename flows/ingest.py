"""The ``ingest_and_segment`` flow: sources → ``documents`` → ``sections`` → ``doc_context`` → ``chunks``.

Orchestration only. The pipeline is :data:`arborag.flows.pipelines.INGEST_PIPELINE`, run by the
generic :func:`arborag.flows.stage.run_pipeline`; each entry's task calls a stage runner in
``tasks/stages/`` (``ingest.run_documents`` beside ``build_documents``, ``sections.run_sections``
beside ``sections_for``, ``context.run_doc_context`` beside ``build_doc_context``,
``segment.run_chunks`` beside ``build_chunks``). The ``sections`` and ``context`` stages need a
segmentation strategy (they shape the chunks: borders and AutoContext headers) and are enabled
by the config (``sections.strategy``, ``context.headers``); while off they are skipped, or empty
the table an earlier run wrote. Under Prefect each stage is cached on the key its declaration
derives — the source files' size and modification time for ingest, the bytes of the tables a
stage reads otherwise — plus its declared config keys and the code fingerprint of its runner
modules (:func:`arborag.flows.fingerprints.pipeline_fingerprint`). A cache hit counts only while the
table it produced is still the one on disk.

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
from arborag.flows.common import config_overrides, current_flow_run_id, new_run_id, plain_json
from arborag.flows.lazy import flow_getattr, lazy_flow
from arborag.flows.pipelines import INGEST, INGEST_PIPELINE, SEGMENT
from arborag.flows.runs import record_run
from arborag.flows.stage import run_pipeline
from arborag.storage.corpus import Corpus
from arborag.storage.lock import corpus_lock
from arborag.tasks.stage_context import StageContext
from arborag.tasks.stages.documents import discover_sources


offline_env()  # the offline settings (HF, numba's cache, Prefect's) before anything reads them

__all__ = ["FLOW_NAME", "INGEST_PIPELINE", "count_skipped", "discover", "ingest_and_segment", "ingest_pipeline", "run_ingest_and_segment"]  # noqa: F822 - the flow objects come from the module __getattr__ (flows/lazy.py)

FLOW_NAME = "ingest_and_segment"


def discover(ctx: StageContext, sources: Sequence[str]) -> list[str]:
    """The files of ``sources`` (the corpus itself is never entered); raises IngestError for a missing source.
    Symlinks leading out of a source's root are skipped, logged and counted in the run (``discover``)."""
    skipped: list[Any] = []
    files = [s.uri for s in discover_sources(list(sources), ctx.config.ingest, skip=[ctx.corpus.root], skipped=skipped)]
    count_skipped(ctx, skipped)
    return files


def count_skipped(ctx: StageContext, skipped: Sequence[Any]) -> None:
    """Count the sources discovery skipped in the run (``discover``: how many, the first 20 with why)."""
    if skipped:
        ctx.counters.stages["discover"] = {"skipped": len(skipped), "skipped_list": [{"uri": s.uri, "reason": s.reason} for s in skipped[:20]]}


def ingest_pipeline(ctx: StageContext, files: list[str] | None, *, strategy: str | None, use_prefect: bool) -> dict[str, Any]:
    """Run the ingest pipeline over discovered ``files``, record the run, return the summary."""
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    out: dict[str, Any] = {"run_id": ctx.run_id, "corpus": str(ctx.corpus.root), INGEST.name: None, SEGMENT.name: None, "cached": []}
    flow_name = "+".join(n for n, on in ((INGEST.name, files is not None), (SEGMENT.name, strategy is not None)) if on) or "noop"
    status, message = "ok", ""
    try:
        run_pipeline(ctx, INGEST_PIPELINE, use_prefect=use_prefect, out=out, files=files, strategy=strategy)
        failed = int((out[INGEST.name] or {}).get("failed", 0))
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


def _ingest_and_segment(
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


_ingest_flow = lazy_flow(_ingest_and_segment, attr="ingest_and_segment", name=FLOW_NAME)
__getattr__ = flow_getattr(__name__, "ingest_and_segment", _ingest_flow)


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
        out = _ingest_flow()(
            corpus_dir=str(corpus.root), sources=files, config_overrides=config_overrides(config),
            strategy=strategy, segment=segment, progress=progress,
        )
    return plain_json(out)
