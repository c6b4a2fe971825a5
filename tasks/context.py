"""What every stage runner is handed: the corpus, the config in force, the run, its counters.

The contract between ``flows/`` and ``tasks/`` (GraphRAG's runner + pure-function pair):

- a **pure function** per table, ``build_<table>(inputs..., *, cfg...) -> pa.Table`` (or a small
  typed result), which reads and writes nothing;
- a **runner** beside it in the same module, ``run_<stage>(ctx: StageContext, **params) -> dict``,
  which reads the stage's inputs from ``ctx.corpus``, calls the pure function, writes the outputs
  atomically, adds to ``ctx.counters`` and returns a small JSON-serializable summary (paths,
  counts, fingerprints; never a table). ``params`` are plain JSON values.

Flows build one ``StageContext`` per run from plain parameters (corpus URI, sources, config path
and overrides), so a Prefect worker in another process can run them: nothing here lives in a
process-global registry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from arborag.config import ArboragConfig
from arborag.storage.corpus import Corpus

__all__ = ["RunCounters", "StageContext"]


@dataclass
class RunCounters:
    """Work done by one run, recorded in the ``runs`` table (tests count calls through these)."""

    embedded_texts: int = 0
    summaries: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    stages: dict[str, Any] = field(default_factory=dict)  # per-stage summaries (counts, stats)

    def as_dict(self) -> dict[str, Any]:
        return {
            "embedded_texts": self.embedded_texts,
            "summaries": self.summaries,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
        }


@dataclass
class StageContext:
    """One run's shared state. ``run_id`` is the id recorded in ``runs`` and in ``created_by_run``."""

    corpus: Corpus
    config: ArboragConfig
    run_id: str
    progress: bool = False
    counters: RunCounters = field(default_factory=RunCounters)
