"""The build's content-addressed key and the snapshot id it names.

- :func:`build_key` — ``hash(leaf chunk ids + headers, the occurrences of repeated texts,
  embed/cluster/summarize/tree/sparse config, code versions)``: a build whose key equals the published snapshot's is a no-op;
- :func:`tree_config` — the config parts that shape a tree (the key's config);
- :func:`hash_string_columns` — the hash of string columns read from the Arrow buffers;
- :func:`snapshot_id_for` — the snapshot id of a key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from arborag.config import ArboragConfig
from arborag.hashing import hash_bytes, hash_json

__all__ = ["build_key", "hash_string_columns", "snapshot_id_for", "tree_config"]

# Summarizer/embedder settings that do not change a tree's content (speed, cost, credentials).
_SUMMARIZE_RUNTIME = {"timeout_s", "concurrency", "retries", "price_in_per_1k", "price_out_per_1k", "api_key_env"}
_EMBED_RUNTIME = {"batch_size", "threads", "device"}


def tree_config(config: ArboragConfig) -> dict[str, Any]:
    """The config parts that shape a tree (the build key's config)."""
    pub = config.public_dict()
    summ = {k: v for k, v in pub["summarize"].items() if k not in _SUMMARIZE_RUNTIME}
    embed = {k: v for k, v in pub["embed"].items() if k not in _EMBED_RUNTIME}
    return {"embed": embed, "cluster": pub["cluster"], "summarize": summ, "tree": pub["tree"]}


def build_key(leaves: pa.Table, config: ArboragConfig, code: str) -> str:
    """The content address of a build; ``code`` is the hash of the declared code versions of the
    stages that build it (:func:`arborag.flows.fingerprints.code_versions`), not of their source text."""
    from arborag.tasks.build.repeats import repeats_table

    ids = hash_string_columns(leaves, ["chunk_id"])
    headers = hash_string_columns(leaves, ["header"])
    sparse = {"backend": config.sparse.backend, "prefix": config.sparse.es_index_prefix}
    parts = {"leaves": ids, "headers": headers, "tree": tree_config(config), "sparse": sparse, "code": code}
    repeats = repeats_table(leaves)
    if repeats.num_rows:  # where a repeated text also occurs is part of the build (nodes' doc_ids, the repeats table)
        parts["repeats"] = hash_string_columns(repeats, ["chunk_id", "node_id"])
    return hash_json(parts)


def hash_string_columns(table: pa.Table, names: Sequence[str]) -> str:
    """BLAKE2b of string columns' contents in row order, read from the Arrow buffers (no Python
    strings): per column its name, the value lengths (int64 little-endian, -1 for null) and the
    UTF-8 bytes of the non-null values. Chunking, slicing and string/large_string do not change it.

    (Since 2026-11-23 build keys hash these bytes instead of the JSON of Python lists: every
    build key changed once then.)
    """
    parts: list[bytes] = []
    for name in names:
        arr = table.column(name).combine_chunks().cast(pa.large_string())
        parts.append(name.encode("utf-8") + b"\0")
        parts.append(np.asarray(pc.fill_null(pc.binary_length(arr), -1).to_numpy(zero_copy_only=False), dtype="<i8").tobytes())
        values = pc.drop_null(arr) if arr.null_count else arr
        data = values.buffers()[2]
        if len(values) and data is not None:
            off = np.frombuffer(values.buffers()[1], dtype="<i8")[values.offset : values.offset + len(values) + 1]
            parts.append(data.slice(int(off[0]), int(off[-1]) - int(off[0])).to_pybytes())
    return hash_bytes(b"".join(parts))


def snapshot_id_for(key: str) -> str:
    return f"snap-{key[:20]}"
