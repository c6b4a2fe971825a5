"""The no-op update decided from file stats, before anything heavy is imported.

A scheduled ``arborag update SRC --corpus C`` mostly finds nothing changed, and the full path
learns that only after importing Prefect and the stage modules, reading every source file,
re-segmenting every document and hashing the leaves (3 s on 2,300 documents). This module
decides it from what is on disk:

- :func:`remember` — at the end of a successful run (build or update) whose documents are exactly
  its sources — writes ``cache/update_noop.json``: the published snapshot, the config hash, the
  ``prune`` setting, the size and modification time (ns) of every source file, of the corpus's
  ``documents`` and ``chunks`` tables and of every ``.py`` file of arborag (the code).
- :func:`quick_noop` — before an update — recomputes the same state and answers a no-op run
  summary when it is the recorded one and the recorded snapshot is still the published one;
  otherwise None (the full path runs and decides, as before). Like ``make`` or git's index it
  trusts size + mtime; as git does with "racily clean" entries, a file modified within
  :data:`RACY_S` seconds before the record was written makes the record untrusted. A locked
  corpus (another writer running), a remote corpus and a Prefect run take the full path.

Imports only the foundation, ``storage.corpus`` and source discovery (no Prefect, polars,
torch or lancedb). The run is recorded in ``runs`` like the full path's no-op (``mode`` noop,
``quick`` true).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from arborag.config import ArboragConfig
from arborag.hashing import hash_json

__all__ = ["RACY_S", "RECORD", "code_state", "discovered", "quick_noop", "remember"]

RECORD = "update_noop.json"
#: A source modified this close (seconds) before the record was written may change again within
#: the same mtime tick without the record seeing it: such a record is not trusted.
RACY_S = 2.0
_CODE_PACKAGES = ("arborag", "arborag.storage", "arborag.tasks", "arborag.query", "arborag.flows")


def _stat(path: str | Path) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def code_state() -> str:
    """A hash of the size and mtime of every ``.py`` file of arborag's packages (the code that ran)."""
    import importlib.util

    entries: list[tuple[str, list[int] | None]] = []
    for name in _CODE_PACKAGES:
        spec = importlib.util.find_spec(name)
        for loc in (spec.submodule_search_locations or []) if spec else []:
            for root, dirs, files in os.walk(loc):
                dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "static"))
                for f in sorted(files):
                    if f.endswith(".py"):
                        p = os.path.join(root, f)
                        entries.append((p, _stat(p)))
    return hash_json(entries)


#: The last discovery of :func:`quick_noop` in this process: ``(key, files, skipped)``, so an update
#: that goes on after it (the CLI asks first) does not walk the sources again (:func:`discovered`).
_last: tuple[str, list[str], list[Any]] | None = None


def _discovery_key(root: Any, config: ArboragConfig, sources: Sequence[str]) -> str:
    return hash_json([os.path.abspath(str(root)), config.ingest.model_dump(mode="json"), [str(s) for s in sources]])


def _discover(corpus: Any, config: ArboragConfig, sources: Sequence[str]) -> list[str] | None:
    """The files an update of ``corpus`` from ``sources`` reads, or None when a source is missing
    (the full path reports it)."""
    global _last
    from arborag.tasks.ingest.discover import discover_sources

    if not sources or any(not os.path.exists(s) for s in sources):
        return None
    skipped: list[Any] = []
    files = [s.uri for s in discover_sources(list(sources), config.ingest, skip=[corpus.root], skipped=skipped)]
    _last = (_discovery_key(corpus.root, config, sources), files, skipped)
    return files


def discovered(sources: Sequence[str], corpus_root: str | Path, config: ArboragConfig) -> tuple[list[str], list[Any]] | None:
    """``(files, skipped)`` of the discovery :func:`quick_noop` just made of these ``sources`` for this
    corpus and ingest config (taken: asked once), or None. The update that follows a quick check
    that found changes reads these files instead of walking the sources a second time."""
    global _last
    found, _last = _last, None
    if found is None or found[0] != _discovery_key(corpus_root, config, sources):
        return None
    return list(found[1]), list(found[2])


def _state(corpus: Any, config: ArboragConfig, files: Sequence[str], prune: bool) -> tuple[dict[str, Any], list[str], int]:
    """(state, sorted files, newest source mtime ns) of an update of ``corpus`` reading ``files``."""
    files = sorted(files)
    stats = [(f, _stat(f)) for f in files]
    newest = max((s[1] for _, s in stats if s is not None), default=0)
    state = {
        "files": hash_json(stats),
        "n_files": len(files),
        "config": config.config_hash(),
        "prune": bool(prune),
        "tables": {t: _stat(corpus.tables_dir / f"{t}.parquet") for t in ("documents", "chunks")},
        "code": code_state(),
    }
    return state, files, newest


def remember(corpus: Any, config: ArboragConfig, files: Sequence[str], prune: bool, snapshot: str | None) -> bool:
    """Record the state after a successful run that published (or kept) ``snapshot`` from the
    discovered source ``files``, if the corpus's documents are exactly those files; returns whether it did.
    Never fails the run (a record it cannot write only costs the next update its fast path)."""
    path = Path(corpus.cache_dir) / RECORD
    try:
        path.unlink(missing_ok=True)
        if not snapshot or getattr(corpus, "remote", False):
            return False
        state, files, newest = _state(corpus, config, files, prune)
        import pyarrow.parquet as pq

        docs = pq.read_table(corpus.tables_dir / "documents.parquet", columns=["uri", "status"])
        if docs.column("status").to_pylist().count("ok") != docs.num_rows or sorted(docs.column("uri").to_pylist()) != files:
            return False  # documents the sources do not hold (or failed ones): the full path must look
        written = time.time_ns()
        if newest >= written - int(RACY_S * 1e9):
            return False
        from arborag.storage.tables import atomic_write_json

        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, {"snapshot": snapshot, "written_ns": written, **state})
        return True
    except Exception:  # noqa: BLE001 - an optimisation: never the reason a run fails
        return False


def quick_noop(sources: Sequence[str], corpus_dir: str | Path, config: ArboragConfig, *, prune: bool | None = None,
               run_id: str | None = None) -> dict[str, Any] | None:
    """The run summary of a no-op update when the recorded state (:func:`remember`) still holds,
    else None. Records the run (``run_id``, or a new one) in the ``runs`` table, as the full path does."""
    global _last
    _last = None  # a discovery of an earlier call is never handed on (see discovered())
    t0 = time.perf_counter()
    started = datetime.now(timezone.utc)
    root = Path(corpus_dir)
    try:
        rec = json.loads((root / "cache" / RECORD).read_text(encoding="utf-8"))
        manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if manifest.get("snapshot") != rec.get("snapshot"):
        return None
    from arborag.storage.corpus import Corpus
    from arborag.storage.lock import read_lock

    corpus = Corpus(root)
    if corpus.remote or read_lock(root) is not None:
        return None
    prune = config.update.prune if prune is None else prune
    found = _discover(corpus, config, [str(s) for s in sources])
    if found is None:
        return None
    state, files, newest = _state(corpus, config, found, prune)
    if any(rec.get(k) != v for k, v in state.items()) or newest >= int(rec.get("written_ns", 0)) - int(RACY_S * 1e9):
        return None
    snapshot = rec["snapshot"]
    reason = "nothing changed since the last run (sources, config, code and tables as recorded; decided from file stats)"
    plan = {"added": 0, "changed": 0, "deleted": 0, "unchanged": len(files), "failed": 0, "pruned": prune}
    out: dict[str, Any] = {
        "corpus": str(root), "plan": plan, "mode": "noop", "reason": reason, "noop": True, "full_rebuild": False,
        "snapshot": snapshot, "calls": {"embedded_texts": 0, "summaries": 0}, "status": "ok", "quick": True,
    }
    from arborag.flows.common import new_run_id

    out["run_id"] = run_id = run_id or new_run_id()
    counts = {"added": 0, "changed": 0, "deleted": 0, "unchanged": len(files), "failed": 0, "mode": "noop", "full_rebuild": False,
              "reason": reason, "quick": True, "calls": out["calls"], "seconds": {}}
    corpus.append_run({
        "run_id": run_id, "flow": "update", "config_hash": state["config"], "started_at": started,
        "finished_at": datetime.now(timezone.utc), "status": "ok", "counts": json.dumps(counts, sort_keys=True, default=str),
        "tokens_in": 0, "tokens_out": 0, "message": reason,
    })
    # the runs table changed; the record does not cover it (only documents and chunks)
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out
