"""The content-addressed embedding cache (docs/METHODS.md §1.3): ``(model_id, hash_text(text)) -> vector``.

One folder of Parquet shards with columns ``model_id`` (string), ``text_hash`` (string) and
``vector`` (``fixed_size_list<float32>[dim]``); readable by DuckDB. Every shard is loaded on
open, its vector column going to NumPy without a round trip through Python floats. Each
:meth:`EmbeddingCache.put_many` writes one new shard atomically (temp file, fsync, rename), so
concurrent writers never clobber each other and a crash never leaves half a shard (a damaged
file is skipped on open: its entries are recomputed); :meth:`EmbeddingCache.merge_shards`
merges one writer's shards and :meth:`EmbeddingCache.compact` all of them.

Bounded by :func:`sweep_embedding_cache` (run by ``arborag snapshots gc`` and after every
publish, :mod:`arborag.storage.snapshots`): an entry stays while some kept snapshot holds its
vector. Vectors go from this cache into a snapshot bit for bit, so the kept snapshots' vectors
are exactly the referenced entries — no text needs to be re-derived, whatever composed it
(headers, long-text windows, summaries). The sweep matches them by a 64-bit digest of their bit
patterns (:func:`vector_digests`), which can keep an unreferenced entry, never drop a referenced one.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from arborag.errors import SchemaError
from arborag.storage.arrays import arrow_to_vectors, vectors_to_arrow
from arborag.storage.tables import atomic_path, atomic_write_parquet

__all__ = ["EmbeddingCache", "sweep_embedding_cache", "vector_digests"]

_SHARD_PREFIX = "emb-"
_COLUMNS = {"model_id", "text_hash", "vector"}


def _read_shard(shard: Path, batch_rows: int = 1 << 14) -> tuple[pa.Table, np.ndarray] | None:
    """(``model_id``/``text_hash`` columns, float32 ``(rows, dim)`` vectors) of one shard, or None.

    The vector column is decoded in record batches straight into one preallocated matrix: a
    list column decoded whole holds its Arrow buffers and the decoder's scratch at once. Loading
    2·10⁵ × 384 vectors (0.3 GB): peak RSS 1.52 GB before (whole table, per-row index lists),
    0.80 GB now.
    """
    try:
        f = pq.ParquetFile(shard)
        if not _COLUMNS <= set(f.schema_arrow.names) or f.metadata.num_rows == 0:
            return None
        keys = f.read(columns=["model_id", "text_hash"])
        out: np.ndarray | None = None
        at = 0
        for batch in f.iter_batches(batch_size=batch_rows, columns=["vector"]):
            part = arrow_to_vectors(batch.column(0))
            if out is None:
                out = np.empty((keys.num_rows, part.shape[1]), dtype=np.float32)
            elif part.shape[1] != out.shape[1]:
                return None
            out[at : at + len(part)] = part
            at += len(part)
    except (pa.ArrowInvalid, OSError, SchemaError):
        return None
    if out is None or at != keys.num_rows:
        return None
    return keys, out


class EmbeddingCache:
    """Content-addressed embedding cache: ``(model_id, hash_text(text)) -> float32 vector``.

    Per model the entries are blocks (one per shard or put): the hashes as an Arrow string
    array and the vectors as a float32 matrix. A lookup is one :func:`pyarrow.compute.index_in`
    of the asked hashes in all the model's hashes (the first block holding a hash wins), not a
    Python dict built hash by hash.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        # per model: the blocks' hashes and vectors (rows aligned), and the concatenated hashes
        # with each block's first row (rebuilt after an add)
        self._hashes: dict[str, list[pa.Array]] = {}
        self._blocks: dict[str, list[np.ndarray]] = {}
        self._lookup: dict[str, tuple[pa.Array, np.ndarray]] = {}
        self._lock = threading.Lock()
        self.n_shards = 0
        shards = sorted(self.directory.glob(f"{_SHARD_PREFIX}*.parquet"))
        merged: set[str] = set()
        for shard in shards:  # finish a merge a crash interrupted: its sources hold nothing more
            for name in _merged_from(shard):
                if name != shard.name and (self.directory / name).exists():
                    (self.directory / name).unlink(missing_ok=True)
                    merged.add(name)
        for shard in shards:
            if shard.name not in merged:
                self._load_shard(shard)

    def _load_shard(self, shard: Path) -> None:
        read = _read_shard(shard)
        if read is None:
            return  # a foreign or damaged file, or not vectors of ours: the entries are just recomputed
        keys, vectors = read
        self.n_shards += 1
        models = keys.column("model_id")
        hashes = keys.column("text_hash").combine_chunks()
        for model_id in sorted(m for m in pc.unique(models).to_pylist() if m is not None):
            mask = pc.fill_null(pc.equal(models, model_id), False)
            if pc.all(mask).as_py():
                self._add(model_id, hashes, vectors)
                continue
            rows = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
            self._add(model_id, hashes.take(rows), vectors[rows])

    def _add(self, model_id: str, hashes: pa.Array, vectors: np.ndarray) -> None:
        self._blocks.setdefault(model_id, []).append(np.ascontiguousarray(vectors, dtype=np.float32))
        self._hashes.setdefault(model_id, []).append(hashes.cast(pa.string()))
        self._lookup.pop(model_id, None)

    def _keys(self, model_id: str) -> tuple[pa.Array, np.ndarray]:
        """All hashes of ``model_id`` (blocks in order) and the first row of each block."""
        got = self._lookup.get(model_id)
        if got is None:
            parts = self._hashes.get(model_id, [])
            keys = pa.concat_arrays(parts) if parts else pa.array([], pa.string())
            starts = np.cumsum([0] + [len(p) for p in parts[:-1]], dtype=np.int64)
            got = self._lookup[model_id] = (keys, starts)
        return got

    def _find(self, model_id: str, hashes: Sequence[str] | pa.Array) -> np.ndarray:
        """Per asked hash, its row in :meth:`_keys` (first occurrence), or -1."""
        keys, _ = self._keys(model_id)
        asked = hashes if isinstance(hashes, pa.Array) else pa.array(list(hashes), type=pa.string())
        if not len(asked) or not len(keys):
            return np.full(len(asked), -1, dtype=np.int64)
        at = pc.fill_null(pc.index_in(asked, value_set=keys), -1)
        return np.asarray(at.to_numpy(zero_copy_only=False), dtype=np.int64)

    def __len__(self) -> int:
        return sum(len(pc.unique(self._keys(m)[0])) for m in self._hashes)

    def __contains__(self, key: tuple[str, str]) -> bool:
        model_id, text_hash = key
        return bool(self._find(model_id, [text_hash])[0] >= 0)

    def get_many(self, model_id: str, hashes: Sequence[str]) -> tuple[np.ndarray, list[np.ndarray | None]]:
        """(found mask, vectors or None per hash)."""
        at = self._find(model_id, hashes)
        found = at >= 0
        out: list[np.ndarray | None] = [None] * len(at)
        if found.any():
            _, starts = self._keys(model_id)
            blocks = self._blocks[model_id]
            rows = np.flatnonzero(found)
            which = np.searchsorted(starts, at[rows], side="right") - 1
            for i, b, g in zip(rows.tolist(), which.tolist(), at[rows].tolist()):  # the hits only: row views
                out[i] = blocks[b][g - starts[b]]
        return found, out

    def put_many(self, model_id: str, hashes: Sequence[str], vectors: np.ndarray) -> Path | None:
        """Store new entries (already-present hashes are skipped) as one new shard."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(hashes) != vectors.shape[0]:
            raise SchemaError("embedding cache", f"got {len(hashes)} hashes for vectors of shape {vectors.shape}")
        with self._lock:
            asked = pa.array(list(hashes), type=pa.string())
            new_rows = self._find(model_id, asked) < 0
            if len(asked):
                # keep the first occurrence of a hash repeated in this call: pc.unique lists the
                # hashes in order of first appearance, so a row is a first occurrence when its
                # distinct index exceeds every index before it
                uniq_at = np.asarray(pc.index_in(asked, value_set=pc.unique(asked)).to_numpy(zero_copy_only=False), dtype=np.int64)
                seen_before = np.maximum.accumulate(np.concatenate([[-1], uniq_at[:-1]]))
                new_rows &= uniq_at > seen_before
            keep = np.flatnonzero(new_rows)
            if not len(keep):
                return None
            new_hashes = asked.take(pa.array(keep))
            new_vectors = vectors[keep]
            path = self._write_shard(model_id, new_hashes, new_vectors)
            self._add(model_id, new_hashes, new_vectors)
            self.n_shards += 1
            return path

    @staticmethod
    def _table(model_id: str, hashes: Sequence[str] | pa.Array, vectors: np.ndarray) -> pa.Table:
        return pa.table(
            {
                "model_id": pa.array([model_id] * len(hashes), type=pa.string()),
                "text_hash": hashes.cast(pa.string()) if isinstance(hashes, pa.Array) else pa.array(list(hashes), type=pa.string()),
                "vector": vectors_to_arrow(vectors),
            }
        )

    def _write_shard(self, model_id: str, hashes: Sequence[str] | pa.Array, vectors: np.ndarray) -> Path:
        return _write_durable(self._table(model_id, hashes, vectors), self.directory)

    def merge_shards(self, shards: Sequence[Path]) -> Path | None:
        """Rewrite ``shards`` (written by this cache, e.g. the slices of one embedding call) as one
        shard, then delete them. Safe beside other writers: only these files are touched. The
        merged shard names its sources in its metadata, so a crash between the write and the
        deletes loses nothing and the next open deletes the sources left over."""
        shards = [Path(p) for p in shards]
        with self._lock:
            tables = []
            for shard in shards:
                try:
                    tables.append(pq.read_table(shard, columns=["model_id", "text_hash", "vector"]))
                except (pa.ArrowInvalid, OSError):
                    return None  # gone or damaged: leave the rest as they are
            if len(tables) < 2:
                return None
            both = pa.concat_tables(tables).combine_chunks()
            merged = _write_durable(both.replace_schema_metadata({_MERGED_FROM: json.dumps([p.name for p in shards])}),
                                    self.directory)
            for shard in shards:
                shard.unlink(missing_ok=True)
            self.n_shards -= len(shards) - 1
            return merged

    def compact(self) -> None:
        """Rewrite all entries of each model as one shard and delete the old shards.

        Only safe while no other process writes to the folder.
        """
        with self._lock:
            old = sorted(self.directory.glob(f"{_SHARD_PREFIX}*.parquet"))
            new: list[Path] = []
            for model_id in sorted(self._hashes):
                hashes = pc.unique(self._keys(model_id)[0]).sort().to_pylist()  # the distinct hashes, in code-point order
                _, vecs = self.get_many(model_id, hashes)
                if hashes:
                    stacked = np.stack([v for v in vecs if v is not None])
                    new.append(self._write_shard(model_id, hashes, stacked))
            for p in old:
                if p not in new:
                    p.unlink(missing_ok=True)
            self.n_shards = len(new)


_MERGED_FROM = "arborag.merged_from"


def _merged_from(shard: Path) -> list[str]:
    """The shard names a merged shard was made of (its Parquet metadata); [] for any other."""
    try:
        meta = pq.read_schema(shard).metadata or {}
        names = json.loads(meta.get(_MERGED_FROM.encode(), b"[]"))
    except (pa.ArrowInvalid, OSError, ValueError):
        return []
    return [n for n in names if isinstance(n, str) and n.startswith(_SHARD_PREFIX) and "/" not in n]


def _write_durable(table: pa.Table, directory: Path) -> Path:
    """``table`` as a new shard in ``directory``: written to a temporary file, flushed to disk,
    renamed into place (a reader, or a run after a kill or power loss, sees all of it or none)."""
    path = directory / f"{_SHARD_PREFIX}{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return path


#: Rows per block of :func:`vector_digests` (a block's 64-bit words: 1024 x 384 x 8 B = 3 MB).
_DIGEST_BLOCK = 1024
_DIGEST_WEIGHTS: dict[int, np.ndarray] = {}


def _digest_weights(dim: int) -> np.ndarray:
    """``dim`` odd 64-bit weights from a fixed seed (the same in every process and run)."""
    got = _DIGEST_WEIGHTS.get(dim)
    if got is None:
        rng = np.random.Generator(np.random.PCG64(0x6172626F72616721))
        got = _DIGEST_WEIGHTS[dim] = rng.integers(0, np.iinfo(np.uint64).max, size=dim, dtype=np.uint64, endpoint=True) | np.uint64(1)
    return got


def vector_digests(vectors: np.ndarray) -> np.ndarray:
    """A 64-bit digest of each row's bit pattern: ``uint64 (n,)`` of a float32 ``(n, dim)`` matrix.

    Equal rows (bit for bit) always get equal digests. The digest is ``sum(w_i * m_i) mod 2**64``
    over the row's 32-bit words ``w_i`` with fixed odd 64-bit weights ``m_i``: two different rows
    collide only when their word differences happen to cancel modulo 2**64 (for weights drawn at
    random: at most 2**-33 for a given pair, 2**-64 for most). The sweep uses digests because a
    collision can only *keep* an entry no snapshot references — never drop one that is: 8 bytes a
    vector instead of its 1,536, computed in blocks straight from memory-mapped snapshot files
    (``benchmarks/results/gc_sweep.md``).
    """
    v = np.asarray(vectors)
    if v.ndim != 2 or v.dtype != np.float32:
        raise SchemaError("embedding cache", f"vectors must be float32 (n, dim), got {v.dtype} {v.shape}")
    words = np.ascontiguousarray(v).view(np.uint32)
    weights = _digest_weights(words.shape[1])
    out = np.empty(len(words), dtype=np.uint64)
    for start in range(0, len(words), _DIGEST_BLOCK):
        block = words[start : start + _DIGEST_BLOCK].astype(np.uint64)
        block *= weights  # wraps modulo 2**64, as meant
        block.sum(axis=1, dtype=np.uint64, out=out[start : start + _DIGEST_BLOCK])
    return out


#: Shards beyond this many are merged into one by a sweep (each update adds one or two).
MAX_SHARDS = 16


def _among(digests: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Which ``digests`` are in ``keep`` (sorted, distinct): a binary search each, no sort of ``digests``."""
    if not len(keep):
        return np.zeros(len(digests), dtype=bool)
    pos = np.minimum(np.searchsorted(keep, digests), len(keep) - 1)
    return np.asarray(keep[pos] == digests)


def sweep_embedding_cache(directory: str | Path, keep: np.ndarray, *, dry_run: bool = False) -> dict[str, int]:
    """Remove the entries of the cache in ``directory`` whose vector's digest is not in ``keep``
    (:func:`vector_digests` of every vector the kept snapshots hold: an entry a kept snapshot
    holds is always kept; a digest collision may keep one it does not). A shard with nothing to keep is
    deleted; one with some is rewritten with those rows (new shard first, then the old one goes,
    so a crash loses nothing but may leave a duplicate); more than :data:`MAX_SHARDS` are merged.
    Run it only while no other process writes to the folder (gc holds the writer lock).
    Returns ``{"entries_removed", "entries_kept", "bytes_freed", "shards_before", "shards_after"}``."""
    directory = Path(directory)
    keep = np.unique(np.asarray(keep, dtype=np.uint64))
    shards = sorted(directory.glob(f"{_SHARD_PREFIX}*.parquet"))
    removed = kept_rows = freed = 0
    survivors: list[tuple[Path, pa.Table]] = []
    for shard in shards:
        read = _read_shard(shard)
        size = shard.stat().st_size
        if read is None:  # damaged or foreign: nothing in it can be used
            removed_here = 0
            if not dry_run:
                shard.unlink(missing_ok=True)
            freed += size
            continue
        keys, vectors = read
        live = _among(vector_digests(vectors), keep)
        n_live = int(live.sum())
        removed_here = len(live) - n_live
        removed += removed_here
        kept_rows += n_live
        if n_live == 0:
            freed += size
            if not dry_run:
                shard.unlink(missing_ok=True)
            continue
        rows = np.flatnonzero(live)
        table = pa.table({"model_id": keys.column("model_id").take(rows).cast(pa.string()),
                          "text_hash": keys.column("text_hash").take(rows).cast(pa.string()),
                          "vector": vectors_to_arrow(vectors[rows])})
        if removed_here:
            freed += int(size * removed_here / len(live))  # estimate; the rewrite below is compressed again
            if not dry_run:
                name = f"{_SHARD_PREFIX}{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
                new = atomic_write_parquet(table, directory / name)
                shard.unlink(missing_ok=True)
                shard = new
        survivors.append((shard, table))
    shards_after = len(survivors)
    if len(survivors) > MAX_SHARDS and not dry_run:
        import polars as pl

        # one row per key (a sweep killed between writing a shard and deleting its old one leaves duplicates)
        both = pa.concat_tables([t for _, t in survivors])
        merged = pl.DataFrame(both).unique(["model_id", "text_hash"], keep="first", maintain_order=True).to_arrow().cast(both.schema)
        name = f"{_SHARD_PREFIX}{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
        atomic_write_parquet(merged, directory / name)
        for path, _ in survivors:
            path.unlink(missing_ok=True)
        shards_after = 1
    return {"entries_removed": removed, "entries_kept": kept_rows, "bytes_freed": freed,
            "shards_before": len(shards), "shards_after": shards_after}
