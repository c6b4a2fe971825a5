"""What every stage runner is handed: the corpus, the config in force, the run, its counters.

The contract between ``flows/`` and ``tasks/`` (GraphRAG's runner + pure-function pair):

- a **pure function** per table, ``build_<table>(inputs..., *, cfg...) -> pa.Table`` (or a small
  typed result), which reads and writes nothing;
- a **runner** beside it in the same module, ``run_<table>(ctx: StageContext, **params) -> <Table>Summary``,
  which reads the stage's inputs from ``ctx.corpus``, calls the pure function, writes the outputs
  atomically, adds to ``ctx.counters`` and returns its stage's :class:`StageSummary` (a frozen
  dataclass of paths, counts, fingerprints; never a table). ``params`` are plain JSON values. The
  pipeline runner records the summary's :meth:`~StageSummary.counts` in the run record; a runner
  does not write ``ctx.counters.stages`` itself.

Flows build one ``StageContext`` per run from plain parameters (corpus URI, sources, config path
and overrides), so a Prefect worker in another process can run them: nothing here lives in a
process-global registry. Objects that are expensive to make and shared by several stages of one
run (the embedding model, the leaves table) live in ``ctx.resources`` (see :meth:`StageContext.shared`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from arborag.config import ArboragConfig
from arborag.storage.corpus import Corpus

__all__ = ["RunCounters", "StageContext", "StageSummary", "file_fingerprint", "table_fingerprint"]

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


class StageSummary(Mapping[str, Any]):
    """What a stage runner returns: each stage has its own frozen dataclass deriving from this.

    - :meth:`counts` — the stage's entry in the run record (the ``runs`` table's ``counts`` JSON,
      under the stage's name; users query these keys, so they do not change); empty: the stage
      records no entry;
    - :meth:`report` — what the flow returns for the stage (``out[stage]``): the counts plus what
      the run record leaves out (first failures, paths, ids). By default the counts.

    Read as a mapping it is its :meth:`report`, so a caller reading a stage's result by key
    (``out["publish"]["snapshot"]``) needs no change. Prefect caches it as JSON and rebuilds the
    dataclass on a cache hit (its fields are plain JSON values).
    """

    def counts(self) -> dict[str, Any]:
        """The stage's entry in the run record; by default every field, in declaration order."""
        return self.fields()

    def fields(self) -> dict[str, Any]:
        """The dataclass's fields by name, in declaration order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    def report(self) -> dict[str, Any]:
        return self.counts()

    def __getitem__(self, key: str) -> Any:
        return self.report()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.report())

    def __len__(self) -> int:
        return len(self.report())


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
