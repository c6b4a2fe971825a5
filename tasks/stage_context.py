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
process-global registry. Objects that are expensive to make and shared by several stages of one
run (the embedding model, the leaves table) live in ``ctx.resources`` (see :meth:`StageContext.shared`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from arborag.config import ArboragConfig
from arborag.storage.corpus import Corpus

__all__ = ["RunCounters", "StageContext", "file_fingerprint", "table_fingerprint"]

_CHUNK = 1 << 20

T = TypeVar("T")


@dataclass
class RunCounters:
    """Work done by one run, recorded in the ``runs`` table (tests count calls through these)."""

    embedded_texts: int = 0
    summaries: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    stages: dict[str, Any] = field(default_factory=dict)  # per-stage summaries (counts, stats)
    seconds: dict[str, float] = field(default_factory=dict)  # wall time per stage run

    def as_dict(self) -> dict[str, Any]:
        """The call counts (what a no-op run must leave at zero)."""
        return {"embedded_texts": self.embedded_texts, "summaries": self.summaries}


@dataclass
class StageContext:
    """One run's shared state. ``run_id`` is the id recorded in ``runs`` and in ``created_by_run``."""

    corpus: Corpus
    config: ArboragConfig
    run_id: str
    progress: bool = False
    counters: RunCounters = field(default_factory=RunCounters)
    resources: dict[str, Any] = field(default_factory=dict, repr=False)

    def shared(self, name: str, factory: Callable[[], T]) -> T:
        """The run's one ``name`` object, made by ``factory()`` on first use."""
        if name not in self.resources:
            self.resources[name] = factory()
        return self.resources[name]  # type: ignore[no-any-return]

    def write_if_changed(self, name: str, table: pa.Table, before: pa.Table) -> bool:
        """Write working table ``name`` unless it equals ``before``, what is on disk (a no-op run touches nothing)."""
        if self.corpus.table_path(name).exists() and table.equals(before):
            return False
        self.corpus.write(name, table)
        return True

    def staging_dir(self, key: str) -> Path:
        """Where the stages of build ``key`` stage their outputs until publish."""
        return self.corpus.root / "staging" / key


def file_fingerprint(path: str | Path) -> str:
    """Content hash of a file; a file that cannot be read gets a stable marker of why.

    So an unreadable file keys a cache as well as a readable one: the key changes when the
    file becomes readable (or changes), not on every run.
    """
    digest = hashlib.blake2b(digest_size=16)
    try:
        with open(path, "rb") as fh:
            while block := fh.read(_CHUNK):
                digest.update(block)
    except OSError as exc:
        return f"unreadable:{exc.errno}"
    return digest.hexdigest()


def table_fingerprint(path: str | Path) -> str:
    """Content hash of a table file (``"absent"`` when it does not exist)."""
    path = Path(path)
    if not path.exists():
        return "absent"
    return file_fingerprint(path)
