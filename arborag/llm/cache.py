"""The content-addressed cache of LLM calls: ``key -> reply record``, as JSON Lines on disk.

Every :class:`LLMCache` instance writes its own shard ``calls-<shard_id>.jsonl`` in
``directory``. A flush *appends* the records not yet on disk in one write (JSON Lines, one
record per line, keys sorted), so a shard only grows. Opening reads every shard in the
directory (lazily, on first use); a line that does not parse — e.g. the torn last line of a
process that died mid-write — is skipped, and the next append starts on a fresh line. Records
hold the reply, its token counts and the model name — never the API key, and not the prompt
(the key is its hash). The foundation does its own file I/O here: this is an append-only
log, not a table.

Bounded by :meth:`LLMCache.sweep` (``arborag snapshots gc`` and after every publish): records
older than the retention's ``keep_days`` go unless their reply is a summary some kept snapshot
still holds; the rest are merged into one shard.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

__all__ = ["LLMCache"]


class LLMCache:
    """Content-addressed cache of LLM calls in a folder of JSON Lines shards."""

    def __init__(self, directory: str | Path, *, shard_id: str | None = None, flush_every: int = 16) -> None:
        self.directory = Path(directory)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        self.shard = self.directory / f"calls-{shard_id or f'{stamp}-{uuid.uuid4().hex[:8]}'}.jsonl"
        self.flush_every = max(1, flush_every)
        self._lock = threading.Lock()
        self._entries: dict[str, dict[str, Any]] | None = None
        self._pending: list[dict[str, Any]] = []  # records put since the last flush

    def _load(self) -> dict[str, dict[str, Any]]:
        if self._entries is None:
            entries: dict[str, dict[str, Any]] = {}
            if self.directory.is_dir():
                for path in sorted(self.directory.glob("calls-*.jsonl")):
                    with path.open(encoding="utf-8") as fh:
                        for line in fh:
                            try:
                                rec = json.loads(line)
                            except json.JSONDecodeError:
                                continue
                            if isinstance(rec, dict) and isinstance(rec.get("key"), str):
                                entries[rec["key"]] = rec
            self._entries = entries
        return self._entries

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            return self._load().get(key)

    def put(self, key: str, record: Mapping[str, Any]) -> None:
        rec = {"key": key, **record}
        with self._lock:
            entries = self._load()
            if key in entries:
                return
            entries[key] = rec
            self._pending.append(rec)
            if len(self._pending) >= self.flush_every:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if not self._pending:
            return
        blob = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in self._pending)
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.shard, "ab") as fh:
            if fh.tell() and not _ends_with_newline(self.shard):
                blob = "\n" + blob  # a torn last line stays alone (and is skipped on reading)
            fh.write(blob.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        self._pending = []

    def __len__(self) -> int:
        with self._lock:
            return len(self._load())

    def __repr__(self) -> str:
        return f"LLMCache({str(self.directory)!r})"

    @staticmethod
    def sweep(
        directory: str | Path, *, keep_texts: set[str], max_age_s: float | None, dry_run: bool = False, max_shards: int = 8
    ) -> dict[str, int]:
        """Drop the records of the cache in ``directory`` older than ``max_age_s`` (``created_at``,
        else the shard's mtime; None: none is too old) unless their reply (stripped) is in
        ``keep_texts``; merge what stays into one shard when anything went or there are more than
        ``max_shards``. A process appending meanwhile loses only cache entries (asked again).
        Returns ``{"records_removed", "records_kept", "bytes_freed"}``."""
        return _sweep(directory, keep_texts=keep_texts, max_age_s=max_age_s, dry_run=dry_run, max_shards=max_shards)


def _record_time(rec: dict[str, Any], fallback: float) -> float:
    try:
        return datetime.fromisoformat(str(rec["created_at"])).timestamp()
    except (KeyError, ValueError, TypeError):
        return fallback


def _sweep(
    directory: str | Path, *, keep_texts: set[str], max_age_s: float | None, dry_run: bool = False, max_shards: int = 8
) -> dict[str, int]:
    directory = Path(directory)
    shards = sorted(directory.glob("calls-*.jsonl"))
    now = time.time()
    kept: dict[str, dict[str, Any]] = {}
    total = 0
    size_before = 0
    for path in shards:
        try:
            st = path.stat()
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        size_before += st.st_size
        for line in lines:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(rec, dict) or not isinstance(rec.get("key"), str):
                continue
            total += 1
            young = max_age_s is None or now - _record_time(rec, st.st_mtime) < max_age_s
            if young or str(rec.get("text", "")).strip() in keep_texts:
                kept[rec["key"]] = rec
    removed = total - len(kept)
    if not removed and len(shards) <= max_shards:
        return {"records_removed": 0, "records_kept": len(kept), "bytes_freed": 0}
    blob = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in kept.values()).encode("utf-8")
    if not dry_run:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        target = directory / f"calls-{stamp}-gc-{uuid.uuid4().hex[:8]}.jsonl"
        tmp = directory / f".{target.name}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
        for path in shards:
            path.unlink(missing_ok=True)
    return {"records_removed": removed, "records_kept": len(kept), "bytes_freed": max(0, size_before - len(blob))}


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"
