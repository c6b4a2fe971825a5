"""Stage ``ingest``: the runner beside :func:`arborag.tasks.documents.build_documents`.

(Kept in its own module until the ingest split of ``tasks/documents.py`` lands; then it moves
into that module as ``run_documents``.)
"""

from __future__ import annotations

from typing import Any

import polars as pl

from arborag.progress import progress_bar
from arborag.tasks import documents
from arborag.tasks.context import StageContext, table_fingerprint
from arborag.tasks.frames import frame

__all__ = ["run_documents"]


def run_documents(ctx: StageContext, files: list[str]) -> dict[str, Any]:
    """Read ``files`` (already discovered) into the corpus's documents table; return a JSON summary.

    The summary holds the report's counts and first failures, table totals (``documents``: ok
    rows, ``errors``: error rows), whether the table was written and its ``fingerprint``.
    """
    corpus = ctx.corpus
    existing = corpus.read("documents")
    with progress_bar("ingest", len(files), enabled=ctx.progress) as advance:
        table, report = documents.build_documents(files, ctx.config.ingest, existing=existing, progress=advance)
    written = ctx.write_if_changed("documents", table, existing)
    status = frame(table.select(["status"]))["status"]
    summary = {
        **report.as_dict(),
        "table": str(corpus.table_path("documents")),
        "documents": int((status == "ok").sum()),
        "errors": int((status == "error").sum()),
        "written": written,
        "fingerprint": table_fingerprint(corpus.table_path("documents")),
    }
    ctx.counters.stages["ingest"] = {k: v for k, v in summary.items() if k not in ("failures", "warning_list")}
    return summary
