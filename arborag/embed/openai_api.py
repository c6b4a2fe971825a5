"""Embeddings from any OpenAI-compatible server: ``POST /v1/embeddings`` (``embed.backend = openai``).

:class:`OpenAIEmbedder` has the interface of :class:`arborag.embed.model.Embedder` (``model_id``,
``dim``, ``embed(texts, progress=, prefix_chars=)``), and ``Embedder(cfg)`` returns one when
``cfg.backend == "openai"``, so the build stages, the query index and the server use it unchanged.

- **One HTTP layer.** Requests go through :class:`arborag.llm.transport.Transport` (the LLM
  client's): the ``openai`` client, the key read from the variable named by ``embed.api_key_env``
  at the first request and scrubbed from every message (never in the config, its hash, files or
  logs), timeouts, retries of timeouts / connection errors / 408 / 409 / 429 / 5xx after the
  server's ``Retry-After`` (else exponential backoff), 401/403/404 at once with what to check.
- **Batching** by count (``embed.batch_size`` inputs) and by tokens (``embed.request_tokens``
  per request), at most ``embed.concurrency`` requests in flight.
- **Long texts** follow ``embed.long_text`` with the server's limit ``embed.max_input_tokens``:
  ``mean`` embeds token windows (the same windows and header-prefix rule as the local model,
  :mod:`arborag.embed.windows`) and averages them; ``truncate`` sends the first
  ``max_input_tokens`` tokens. Tokens are counted with arborag's tokenizer.
- **Identity.** ``model_id = "openai:<api_model>@<dimensions|native>+<long-text policy>"``: the
  embedding cache is keyed by (backend, model, dimension, policy, text), so vectors of two
  models or sizes never mix. The endpoint URL is not part of it (the same model served
  elsewhere gives the same vectors).
- **Replies are checked**: one finite vector per input, all of one dimension (``dimensions``
  when set, else the first reply's); an empty reply, a wrong count or a wrong dimension is an
  :class:`~arborag.errors.EmbedError` that says so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import numpy as np

from arborag.config import EmbedConfig
from arborag.embed.windows import l2_normalise, text_windows
from arborag.errors import ConfigError, EmbedError, LLMError
from arborag.llm.transport import AbortBatch, Transport, _status_hint
from arborag.llm.types import OPENAI_DEFAULT_URL, LLMStats

__all__ = ["OpenAIEmbedder", "openai_model_id"]

Progress = Callable[[int], None] | None


def openai_model_id(cfg: EmbedConfig) -> str:
    """The cache identity of a server embedder: backend, model, dimension and long-text policy."""
    dim = cfg.dimensions if cfg.dimensions is not None else "native"
    policy = f"mean{cfg.max_input_tokens}o{cfg.long_text_overlap}" if cfg.long_text == "mean" else f"trunc{cfg.max_input_tokens}"
    return f"openai:{cfg.api_model}@{dim}+{policy}"


class OpenAIEmbedder(Transport):
    """Vectors of ``embed.api_model`` at ``embed.base_url`` (``None``: OpenAI itself); float32, L2-normalised."""

    _kind = "embedding"
    _unreachable_hint = (
        "start the server or fix embed.base_url (ARBORAG_EMBED__BASE_URL); a snapshot's vectors come from one embedder, "
        "so switching to ARBORAG_EMBED__BACKEND=local means a rebuild"
    )

    def __init__(self, cfg: EmbedConfig, *, map: Any = None, tokenizer: Any = None) -> None:
        if cfg.backend != "openai":
            raise ConfigError(f"OpenAIEmbedder needs embed.backend = openai, not {cfg.backend!r}")
        self.cfg = cfg
        self.model = cfg.api_model
        self.base_url = cfg.base_url.rstrip("/") if cfg.base_url else None
        self.api_key_env = cfg.api_key_env
        self.timeout_s = float(cfg.timeout_s)
        self.retries = int(cfg.retries)
        self.backoff_s = 1.0
        self.backoff_max_s = 30.0
        self.retry_after_max_s = 60.0
        self.stats = LLMStats()
        self.model_id = openai_model_id(cfg)
        self.name = cfg.api_model
        self._dim: int | None = cfg.dimensions
        self._tokenizer = tokenizer
        self._lock = threading.Lock()
        self._openai: Any = None

    # -- the Embedder interface -------------------------------------------------------------
    @property
    def dim(self) -> int:
        """The vector size: ``embed.dimensions``, else learned from the server (one short request
        when nothing has been embedded yet)."""
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    @property
    def loaded(self) -> bool:
        return self._openai is not None

    def load(self) -> None:
        """Nothing to load: check the key rule now (the first request would)."""
        self._client()

    def embed(self, texts: Sequence[str], *, progress: Progress = None, prefix_chars: Sequence[int] | None = None) -> np.ndarray:
        """float32 ``(len(texts), dim)`` L2-normalised vectors, rows in the order of ``texts``.

        Raises :class:`~arborag.errors.BackendUnavailable` (endpoint unreachable after the
        retries), :class:`~arborag.errors.EmbedError` (a refused request, unknown model, or an
        unusable reply) or :class:`~arborag.errors.ConfigError` (no key for OpenAI itself).
        """
        texts = list(texts)
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        pieces, owner, counts = self._split(texts, prefix_chars)
        done = [0]

        def step(k: int) -> None:  # piece counts -> text counts (the calls sum to len(texts))
            if progress is None:
                return
            before = done[0] * len(texts) // len(pieces)
            done[0] += k
            progress(done[0] * len(texts) // len(pieces) - before)

        vecs = self._embed_pieces(pieces, counts, step)
        if len(pieces) == len(texts):
            return l2_normalise(vecs)
        out = np.zeros((len(texts), vecs.shape[1]), dtype=np.float64)
        np.add.at(out, owner, l2_normalise(vecs).astype(np.float64))
        return l2_normalise(out)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)

    def windows(self, text: str, prefix_chars: int = 0) -> list[str]:
        """The texts :meth:`embed` sends for ``text`` (one, or its long-text windows)."""
        return self._pieces([text], [prefix_chars])[0]

    # -- pickling (Dask workers): no client, no lock -----------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.update(_openai=None, _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIEmbedder({self.model_id!r}, base_url={self.url!r}, batch_size={self.cfg.batch_size})"

    # -- Transport hooks ---------------------------------------------------------------------
    def _error(self, reason: str) -> LLMError:
        return EmbedError(self.model, reason)

    def _status_hint(self, status: int) -> str:
        if status in (401, 403):
            return f" — check the key in ${self.api_key_env} (embed.api_key_env)"
        if status == 404:
            return (" — the server does not know this model or path: check embed.api_model (ARBORAG_EMBED__API_MODEL) "
                    "and embed.base_url (it usually ends in /v1)")
        if status in (400, 413, 422):
            return (" — the server refused the input: a model it does not serve (check embed.api_model), inputs over its "
                    "limit (lower embed.max_input_tokens or embed.request_tokens), or embed.dimensions it cannot honour")
        return _status_hint(status, self.api_key_env)

    def _client(self) -> Any:
        import os

        if self.base_url is None and not os.environ.get(self.api_key_env, "").strip():
            raise ConfigError(
                f"no API key for {OPENAI_DEFAULT_URL}: set the environment variable {self.api_key_env} "
                "(or embed.api_key_env), or set embed.base_url to a local OpenAI-compatible server"
            )
        return super()._client()

    # -- internals ---------------------------------------------------------------------------
    def _tok(self) -> Any:
        if self._tokenizer is None:
            from arborag.tokenizer import get_tokenizer

            self._tokenizer = get_tokenizer()
        return self._tokenizer

    def _pieces(self, texts: list[str], prefix_chars: Sequence[int] | None) -> tuple[list[str], np.ndarray]:
        """Every text's pieces (itself, its windows, or its truncation) and the text each belongs to."""
        pieces, owner, _ = self._split(texts, prefix_chars)
        return pieces, owner

    def _split(self, texts: list[str], prefix_chars: Sequence[int] | None) -> tuple[list[str], np.ndarray, list[int]]:
        """:meth:`_pieces` plus every piece's token count (each text is tokenized once; only a text
        over the limit is tokenized again, with offsets, to cut it)."""
        limit = self.cfg.max_input_tokens
        tok = self._tok()
        counts = tok.count_many(texts)
        cut: dict[int, list[str]] = {}
        for i in (i for i, n in enumerate(counts) if n > limit):
            starts, ends = tok.offsets(texts[i])
            if self.cfg.long_text == "truncate":
                cut[i] = [texts[i][: int(ends[limit - 1])]]
                continue
            p = int(prefix_chars[i]) if prefix_chars is not None else 0
            offs = list(zip(starts.tolist(), ends.tolist()))
            # the windows' max_len counts two special tokens, as a local model's does
            cut[i] = text_windows(texts[i], offs, p, limit + 2, self.cfg.long_text_overlap)
        if not cut:
            return texts, np.arange(len(texts), dtype=np.int64), counts
        pieces: list[str] = []
        owner: list[int] = []
        sizes: list[int] = []
        for i, text in enumerate(texts):
            got = cut.get(i)
            if got is None:
                pieces.append(text)
                owner.append(i)
                sizes.append(counts[i])
            else:
                pieces.extend(got)
                owner.extend([i] * len(got))
                sizes.extend(tok.count_many(got))
        return pieces, np.asarray(owner, dtype=np.int64), sizes

    def _batches(self, counts: Sequence[int]) -> list[list[int]]:
        """Consecutive runs of piece indices: at most ``batch_size`` inputs and ``request_tokens`` tokens each."""
        out: list[list[int]] = []
        cur: list[int] = []
        tokens = 0
        for i, n in enumerate(counts):
            if cur and (len(cur) >= self.cfg.batch_size or tokens + n > self.cfg.request_tokens):
                out.append(cur)
                cur, tokens = [], 0
            cur.append(i)
            tokens += n
        if cur:
            out.append(cur)
        return out

    def _embed_pieces(self, pieces: list[str], counts: Sequence[int], progress: Callable[[int], None]) -> np.ndarray:
        batches = self._batches(counts)
        results: list[np.ndarray | None] = [None] * len(batches)
        abort: BaseException | None = None
        with ThreadPoolExecutor(max_workers=min(self.cfg.concurrency, len(batches)), thread_name_prefix="embed") as pool:
            futures: dict[Future[np.ndarray], int] = {
                pool.submit(self._request_vectors, [pieces[i] for i in batch]): b for b, batch in enumerate(batches)
            }
            pending = set(futures)
            while pending and abort is None:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    try:
                        results[futures[fut]] = fut.result()
                    except AbortBatch as exc:
                        abort = abort or exc.error
                        continue
                    except BaseException as exc:  # noqa: BLE001 - re-raised below, after the pool stops
                        abort = abort or exc
                        continue
                    progress(len(batches[futures[fut]]))
            for fut in pending:
                fut.cancel()
        if abort is not None:
            raise abort
        out = np.empty((len(pieces), self._dim or 0), dtype=np.float32)
        for batch, vecs in zip(batches, results):
            out[batch] = vecs
        return out

    def _request_vectors(self, inputs: list[str]) -> np.ndarray:
        params: dict[str, Any] = {"model": self.model, "input": inputs, "encoding_format": "float"}
        if self.cfg.dimensions is not None:
            params["dimensions"] = self.cfg.dimensions
        response = self._send(lambda client: client.embeddings.create(**params))
        with self._lock:
            self.stats.calls += 1
            usage = getattr(response, "usage", None)
            n_in = getattr(usage, "prompt_tokens", None) if usage is not None else None
            if isinstance(n_in, int):
                self.stats.tokens_in += n_in
        return self._parse_vectors(response, len(inputs))

    def _parse_vectors(self, response: Any, n: int) -> np.ndarray:
        data = getattr(response, "data", None)
        if not data:
            raise EmbedError(self.model, f"empty reply: no vectors for {n} input(s); is {self.url} an embeddings endpoint, "
                                         "and does the model embed (not chat)?")
        if len(data) != n:
            raise EmbedError(self.model, f"the server sent {len(data)} vectors for {n} inputs")
        try:
            order = [int(getattr(d, "index", k)) for k, d in enumerate(data)]
            rows = [list(d.embedding) for d in data]
        except (TypeError, ValueError, AttributeError) as exc:
            raise EmbedError(self.model, f"bad reply: not an embeddings list ({type(exc).__name__})") from None
        sizes = {len(r) for r in rows}
        if len(sizes) != 1 or 0 in sizes:
            raise EmbedError(self.model, f"bad reply: vectors of sizes {sorted(sizes)} in one reply")
        size = sizes.pop()
        with self._lock:
            expected = self._dim
            if expected is None:
                self._dim = expected = size
        if size != expected:
            asked = "embed.dimensions" if self.cfg.dimensions is not None else "the first reply"
            raise EmbedError(self.model, f"wrong dimension: the server sent {size}-dimensional vectors, {asked} says {expected}; "
                                         "a server that ignores `dimensions` needs embed.dimensions unset (and a rebuild)")
        if sorted(order) != list(range(n)):
            raise EmbedError(self.model, f"bad reply: vector indices {sorted(order)[:5]}… do not cover the {n} inputs")
        try:
            vecs = np.asarray(rows, dtype=np.float32)
        except (TypeError, ValueError):
            raise EmbedError(self.model, "bad reply: vectors hold values that are not numbers") from None
        if not np.isfinite(vecs).all():
            raise EmbedError(self.model, "bad reply: vectors hold NaN or infinite values")
        out = np.empty_like(vecs)
        out[order] = vecs
        return out
