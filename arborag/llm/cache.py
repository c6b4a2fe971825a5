"""The content-addressed cache of LLM calls: ``key -> reply record``, as JSON Lines on disk.

Every :class:`LLMCache` instance writes its own shard ``calls-<shard_id>.jsonl`` in
``directory``. A flush *appends* the records not yet on disk in one write (JSON Lines, one
record per line, keys sorted), so a shard only grows. Opening reads every shard in the
directory (lazily, on first use); a line that does not parse — e.g. the torn last line of a
process that died mid-write — is skipped, and the next append starts on a fresh line. Records
hold the reply, its token counts and the model name — never the API key, and not the prompt
(the key is its hash). The foundation does its own file I/O here: this is an append-only
log, not a table.
"""

from __future__ import annotations

import json
import os
import threading
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


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"
