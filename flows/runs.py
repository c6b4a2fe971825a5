"""Run records: the ``runs`` table row every flow appends, and the common end of the tree flows."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from arborag.tasks.stage_context import StageContext

__all__ = ["finish_run", "record_run"]


def record_run(
    ctx: StageContext,
    flow: str,
    *,
    started: datetime,
    finished: datetime,
    status: str,
    message: str | None,
    counts: dict[str, Any],
) -> None:
    """Append this run to the corpus's ``runs`` table (counts as JSON, tokens from the counters)."""
    ctx.corpus.ensure().append_run(
        {
            "run_id": ctx.run_id,
            "flow": flow,
            "config_hash": ctx.config.config_hash(),
            "started_at": started,
            "finished_at": finished,
            "status": status,
            "counts": json.dumps(counts, sort_keys=True, default=str),
            "tokens_in": ctx.counters.tokens_in,
            "tokens_out": ctx.counters.tokens_out,
            "message": message or None,
        }
    )


def finish_run(
    ctx: StageContext,
    flow: str,
    out: dict[str, Any],
    *,
    started: datetime,
    status: str,
    message: str | None,
    record: bool = True,
    counts: dict[str, Any] | None = None,
) -> None:
    """The common end of a tree flow (build, update): stamp ``out`` with the counters
    (``calls``, ``status``, ``stage_seconds``) and, unless ``record`` is off (a dry run),
    append the run — stage counts, ``counts`` and the counters — to the ``runs`` table."""
    out["calls"] = ctx.counters.as_dict()
    out["status"] = status
    out["stage_seconds"] = dict(ctx.counters.seconds)
    if record:
        merged = {**ctx.counters.stages, **(counts or {}), "calls": out["calls"], "cached": out.get("cached", []),
                  "seconds": out["stage_seconds"]}
        record_run(ctx, flow, started=started, finished=datetime.now(timezone.utc), status=status, message=message, counts=merged)

