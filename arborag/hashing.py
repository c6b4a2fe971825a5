"""Content hashes used for ids and cache keys (BLAKE2b, hex)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["hash_bytes", "hash_text", "hash_json", "short_id"]


def hash_bytes(data: bytes, *, digest_size: int = 16) -> str:
    return hashlib.blake2b(data, digest_size=digest_size).hexdigest()


def hash_text(text: str, *, digest_size: int = 16) -> str:
    return hash_bytes(text.encode("utf-8", "surrogatepass"), digest_size=digest_size)


def hash_json(obj: Any, *, digest_size: int = 16) -> str:
    """Hash of the canonical JSON form of ``obj`` (sorted keys, no whitespace)."""
    blob = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hash_text(blob, digest_size=digest_size)


def short_id(*parts: Any, digest_size: int = 12) -> str:
    """A stable id from parts, e.g. ``short_id(doc_id, strategy, start, end)``."""
    return hash_json(list(parts), digest_size=digest_size)
