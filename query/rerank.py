"""Rerankers and score calibration (docs/METHODS.md §6.7).

A :class:`Reranker` rescores candidate texts against a query and returns **raw** scores (higher
is better) as a float array; :func:`calibrate` maps raw scores to [0, 1] in two steps so that
RSE (:mod:`arborag.query.rse`) can use them as absolute relevance:

1. a fixed normalisation of the reranker's kind into [0, 1] (:func:`normalise`):

   ============== ======================================= ==========================================
   kind           raw score                               normalised
   ============== ======================================= ==========================================
   cosine         cosine of unit vectors, [-1, 1]         ``clip(raw, 0, 1)`` (no relevance below 0)
   cross_encoder  a single-logit classifier's logit       ``sigmoid(raw)`` (what the model was
                                                          trained to output as a probability)
   llm            the model's 0–10 relevance rating       ``clip(raw / 10, 0, 1)``
   ============== ======================================= ==========================================

2. the Beta CDF ``scipy.stats.beta.cdf(x, a, b)`` with configurable ``a, b``; dsRAG's 0.4/0.4
   (its Cohere setting) spreads scores bunched near 0 and 1 towards a uniform distribution.

The three rerankers:

- :class:`CosineReranker` (offline default): cosine between the query and the *full* text of
  each candidate, through an injected ``embed`` function (texts -> vectors); no model import here.
- :class:`CrossEncoderReranker`: sentence-transformers ``CrossEncoder`` loaded from a local
  model directory (nothing is downloaded; the model loads on first use).
- :class:`LLMReranker`: asks an LLM, through an injected :class:`Complete` callable, to rate each
  passage 0–10. A call that fails with an arborag error or an answer without a number scores 0
  and is counted in ``failures``.

dsRAG reranks ``header + "\\n\\n" + text``; the caller chooses what text to pass.

Wiring (config section ``rerank``: ``kind``, ``model_path``, ``a``, ``b``, ``top_n``):

- :func:`score_relevance`: candidates' calibrated relevance; where the reranker has no usable
  score (a failed or malformed LLM rating, a candidate past ``top_n``) the calibrated cosine is
  used instead and recorded (:class:`Relevance` ``fallback``/``failures``);
- :func:`leaf_candidates`: the best leaves of an index by cosine (the stored vectors embed the
  whole chunk, header included: that *is* the offline cosine reranker, with no re-embedding),
  rescored by the configured reranker, best first — shared by ``--mode rerank`` (:func:`search`,
  this module) and ``--mode segments`` (:mod:`arborag.query.segments`).
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from arborag.errors import ArboragError, ConfigError
from arborag.llm.prompts import RERANK_RELEVANCE

__all__ = [
    "Calibration",
    "Candidates",
    "ClientComplete",
    "Complete",
    "CosineReranker",
    "CrossEncoderReranker",
    "LLMReranker",
    "LLM_PROMPT",
    "LLM_PROMPT_TAG",
    "LLM_PROMPT_VERSION",
    "Relevance",
    "RerankKind",
    "Reranker",
    "calibrate",
    "leaf_candidates",
    "normalise",
    "reranker_from_config",
    "score_relevance",
    "search",
]

RerankKind = Literal["cosine", "cross_encoder", "llm"]


@runtime_checkable
class Reranker(Protocol):
    """Rescores texts for a query. ``rerank`` returns one raw score per text (higher = better)."""

    kind: RerankKind
    name: str

    def rerank(self, query: str, texts: Sequence[str]) -> np.ndarray: ...


@dataclass(frozen=True, slots=True)
class Calibration:
    """Beta CDF shape applied after normalisation (dsRAG: a = b = 0.4 for Cohere-like scores)."""

    a: float = 0.4
    b: float = 0.4


def normalise(raw: np.ndarray | Sequence[float], kind: RerankKind) -> np.ndarray:
    """Map raw scores of a reranker ``kind`` into [0, 1] (see the table in the module docs)."""
    x = np.asarray(raw, dtype=np.float64)
    if kind == "cosine":
        return np.clip(x, 0.0, 1.0)
    if kind == "cross_encoder":
        return 1.0 / (1.0 + np.exp(-x))
    if kind == "llm":
        return np.clip(x / 10.0, 0.0, 1.0)
    raise ValueError(f"unknown reranker kind {kind!r}")  # programming error: kind is a Literal


def calibrate(raw: np.ndarray | Sequence[float], kind: RerankKind, calibration: Calibration = Calibration()) -> np.ndarray:
    """Raw scores -> [0, 1]: :func:`normalise`, then ``scipy.stats.beta.cdf(x, a, b)``."""
    from scipy.stats import beta

    return np.asarray(beta.cdf(normalise(raw, kind), calibration.a, calibration.b), dtype=np.float64)


# -- (a) embedding cosine ---------------------------------------------------------------------
EmbedFn = Callable[[Sequence[str]], np.ndarray]


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(norms == 0, 1.0, norms)


class CosineReranker:
    """Cosine between the query and each full text, with vectors from ``embed``.

    ``embed`` must embed a whole text however long it is (the embedder's long-text mode); the
    vectors are normalised here, so it may return unnormalised ones.
    """

    kind: RerankKind = "cosine"

    def __init__(self, embed: EmbedFn, *, name: str = "cosine") -> None:
        self._embed = embed
        self.name = name

    def rerank(self, query: str, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float64)
        vecs = _unit(self._embed([query, *texts]))
        return (vecs[1:] @ vecs[0]).astype(np.float64)


# -- (b) cross-encoder ------------------------------------------------------------------------
class CrossEncoderReranker:
    """sentence-transformers ``CrossEncoder`` from a local directory; raw scores are logits."""

    kind: RerankKind = "cross_encoder"

    def __init__(self, model_path: str | Path, *, batch_size: int = 32, device: str = "cpu", max_length: int | None = None) -> None:
        self.model_path = Path(model_path)
        if not self.model_path.is_dir():
            raise ConfigError(
                f"cross-encoder model directory {str(self.model_path)!r} does not exist; "
                "point the reranker at a local model (nothing is downloaded)"
            )
        self.name = f"cross_encoder:{self.model_path.name}"
        self.batch_size = batch_size
        self.device = device
        self.max_length = max_length
        self._model: Any = None

    def _load(self) -> Any:
        if self._model is None:
            from sentence_transformers import CrossEncoder

            self._model = CrossEncoder(str(self.model_path), device=self.device, max_length=self.max_length, local_files_only=True)
        return self._model

    def rerank(self, query: str, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float64)
        import torch

        scores = self._load().predict(
            [(query, t) for t in texts],
            batch_size=self.batch_size,
            activation_fn=torch.nn.Identity(),
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        return np.asarray(scores, dtype=np.float64).reshape(len(texts))


# -- (c) LLM relevance rating -----------------------------------------------------------------
@runtime_checkable
class Complete(Protocol):
    """One prompt in, the model's text out (e.g. a thin adapter over the project's LLM client).
    Raises an :class:`~arborag.errors.ArboragError` (``LLMError``, ``BackendUnavailable``) on failure."""

    def __call__(self, prompt: str, /, *, max_tokens: int) -> str: ...


# the versioned prompt lives with every other prompt (arborag.llm.prompts); its tag is in the cache key
LLM_PROMPT_VERSION = RERANK_RELEVANCE.version
LLM_PROMPT_TAG = RERANK_RELEVANCE.tag
LLM_PROMPT = RERANK_RELEVANCE.user
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


class LLMReranker:
    """Rates each passage 0–10 with one LLM call.

    A failed call (an arborag error such as ``LLMError`` after the client's retries, or a
    ``TimeoutError``) or a malformed answer (no number, or a number outside 0–10) scores ``nan``,
    is counted in ``failures`` and its reason kept in ``failure_reasons``; :func:`score_relevance`
    replaces such scores with a fallback (cosine). With a ``complete`` that has ``many(prompts,
    max_tokens=...)`` (:class:`ClientComplete`) the calls run concurrently.
    """

    kind: RerankKind = "llm"

    def __init__(self, complete: Complete, *, model: str = "llm", max_tokens: int = 4, max_passage_chars: int = 6000) -> None:
        self._complete = complete
        self.name = f"llm:{model}:{LLM_PROMPT_VERSION}"
        self.max_tokens = max_tokens
        self.max_passage_chars = max_passage_chars
        self.failures = 0
        self.failure_reasons: list[str] = []

    def _prompt(self, query: str, passage: str) -> str:
        return LLM_PROMPT.format(query=query, passage=passage[: self.max_passage_chars])

    def _fail(self, reason: str) -> float:
        self.failures += 1
        self.failure_reasons.append(reason)
        return float("nan")

    def parse(self, answer: str | None) -> float:
        """The rating in an answer, or ``nan`` (recorded as a failure) when it has none in 0–10."""
        m = _NUMBER.search(answer or "")
        if m is None:
            return self._fail(f"malformed answer {str(answer)[:60]!r}")
        value = float(m.group())
        if not 0.0 <= value <= 10.0:
            return self._fail(f"rating {value:g} outside 0-10")
        return value

    def score_one(self, query: str, passage: str) -> float:
        try:
            answer = self._complete(self._prompt(query, passage), max_tokens=self.max_tokens)
        except (ArboragError, TimeoutError) as exc:
            return self._fail(f"{type(exc).__name__}: {exc}")
        return self.parse(answer)

    def rerank(self, query: str, texts: Sequence[str]) -> np.ndarray:
        many = getattr(self._complete, "many", None)
        if many is None or not texts:
            return np.asarray([self.score_one(query, t) for t in texts], dtype=np.float64)
        answers = many([self._prompt(query, t) for t in texts], max_tokens=self.max_tokens)
        out = []
        for a in answers:
            out.append(self._fail(f"{type(a).__name__}: {a}") if isinstance(a, BaseException) else self.parse(a))
        return np.asarray(out, dtype=np.float64)


class ClientComplete:
    """:class:`Complete` over the shared LLM client (:class:`arborag.llm.LLMClient` or any
    ``ChatLLM``): one user message per prompt, the rerank prompt's tag in the cache key;
    ``many`` uses the client's bounded-concurrency ``complete_many`` when it has one."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm
        self.model = getattr(llm, "model", "llm")

    def __call__(self, prompt: str, /, *, max_tokens: int) -> str:
        return self.llm.complete([{"role": "user", "content": prompt}], max_tokens=max_tokens, prompt_tag=LLM_PROMPT_TAG).text

    def many(self, prompts: Sequence[str], *, max_tokens: int) -> list[str | BaseException]:
        batch = getattr(self.llm, "complete_many", None)
        if batch is None:
            out: list[str | BaseException] = []
            for p in prompts:
                try:
                    out.append(self(p, max_tokens=max_tokens))
                except (ArboragError, TimeoutError) as exc:
                    out.append(exc)
            return out
        try:
            results = batch([[{"role": "user", "content": p}] for p in prompts], max_tokens=max_tokens, prompt_tag=LLM_PROMPT_TAG)
        except ArboragError as exc:  # the whole batch cannot succeed (unreachable, bad key)
            return [exc] * len(prompts)
        return [r if isinstance(r, BaseException) else r.text for r in results]


# -- relevance of candidates: rerank, fall back, calibrate --------------------------------------
@dataclass(frozen=True, slots=True)
class Relevance:
    """Calibrated relevance of candidates (in the order given) and how it was obtained.

    ``fallback[i]`` is True where the reranker gave no usable score (a failed or malformed LLM
    rating, or a candidate past ``top_n``) and the fallback (cosine) score was used instead."""

    relevance: np.ndarray
    normalised: np.ndarray
    fallback: np.ndarray
    reranker: str
    failures: tuple[str, ...] = ()


def score_relevance(
    reranker: Reranker | None,
    query: str,
    texts: Sequence[str],
    cosine: np.ndarray | Sequence[float],
    calibration: Calibration = Calibration(),
    *,
    top_n: int | None = None,
) -> Relevance:
    """Calibrated relevance of ``texts`` (candidates, best dense first) for ``query``.

    ``cosine`` holds each candidate's cosine to the query (the stored full-chunk vectors: the
    offline score). ``reranker=None``: relevance = ``calibrate(cosine, "cosine")``. Otherwise the
    first ``top_n`` texts are rescored and calibrated by the reranker's kind; a ``nan`` score
    (failure) and every text past ``top_n`` fall back to the calibrated cosine (see :class:`Relevance`).
    """
    cos = np.asarray(cosine, dtype=np.float64)
    n = len(texts)
    if len(cos) != n:
        raise ValueError("texts and cosine must have the same length")  # programming error
    norm = normalise(cos, "cosine")
    fallback = np.zeros(n, dtype=bool)
    failures: tuple[str, ...] = ()
    name = "cosine"
    if reranker is not None and n:
        m = n if top_n is None else min(int(top_n), n)
        before = len(getattr(reranker, "failure_reasons", ()))
        raw = np.asarray(reranker.rerank(query, list(texts[:m])), dtype=np.float64)
        ok = np.isfinite(raw)
        norm[:m] = np.where(ok, normalise(np.nan_to_num(raw), reranker.kind), norm[:m])
        fallback[:m] = ~ok
        fallback[m:] = True
        failures = tuple(getattr(reranker, "failure_reasons", ())[before:])
        name = reranker.name
    from scipy.stats import beta

    rel = np.asarray(beta.cdf(norm, calibration.a, calibration.b), dtype=np.float64)
    return Relevance(rel, norm, fallback, name, failures)


def reranker_from_config(config: Any, *, cache_dir: str | Path | None = None) -> Reranker | None:
    """The reranker ``config.rerank`` asks for (``None`` for cosine: the stored full-chunk
    vectors already give it). ``cross_encoder`` needs ``rerank.model_path``; ``llm`` uses the
    LLM of ``summarize.*`` through :class:`arborag.llm.LLMClient` (calls cached in ``cache_dir``)."""
    rc = config.rerank
    if rc.kind == "cosine":
        return None
    if rc.kind == "cross_encoder":
        if not rc.model_path:
            raise ConfigError("rerank.kind is cross_encoder but rerank.model_path is not set; point it at a local "
                              "sentence-transformers cross-encoder directory (ARBORAG_RERANK__MODEL_PATH)")
        return CrossEncoderReranker(rc.model_path, batch_size=rc.batch_size, device=config.embed.device)
    from arborag.llm.configured import HOW_TO_CONFIGURE, llm_from_config

    client = llm_from_config(config, cache_dir=cache_dir)
    if client is None:
        raise ConfigError("rerank.kind is llm but no LLM is configured.\n" + HOW_TO_CONFIGURE)
    return LLMReranker(ClientComplete(client), model=client.model, max_passage_chars=rc.max_passage_chars)


# -- leaf candidates (shared by the `rerank` and `segments` modes) -------------------------------
@dataclass(frozen=True, slots=True)
class Candidates:
    """Leaf rows of the index, best first after reranking, with their calibrated relevance."""

    rows: np.ndarray
    relevance: np.ndarray
    info: dict[str, Any]


# per-index caches (entries die with their index): the configured reranker, the chunk headers
_RERANKERS: weakref.WeakKeyDictionary[Any, tuple[str, Reranker | None]] = weakref.WeakKeyDictionary()
_HEADERS: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()


def _reranker_for(index: Any, rerank: Any) -> Reranker | None:
    """``rerank``: a Reranker, ``"cosine"``/``"none"`` (no rescoring), or None = from the index's config
    (built once per index: a cross-encoder loads once)."""
    if rerank is not None and not isinstance(rerank, str):
        return rerank
    cfg = index.config
    if isinstance(rerank, str):
        if rerank in ("cosine", "none"):
            return None
        cfg = cfg.with_overrides(rerank={"kind": rerank})
    key = cfg.rerank.model_dump_json()
    cached = _RERANKERS.get(index)
    if cached is not None and cached[0] == key:
        return cached[1]
    rr = reranker_from_config(cfg, cache_dir=index.corpus.cache_dir / "llm" if hasattr(index, "corpus") else None)
    _RERANKERS[index] = (key, rr)
    return rr


def leaf_candidates(
    index: Any,
    text: str,
    *,
    vector: np.ndarray | None,
    doc_ids: Sequence[str] | None,
    n: int,
    rerank: Any = None,
    top_n: int | None = None,
    calibration: Calibration | None = None,
) -> Candidates:
    """The ``n`` best leaves by cosine, rescored by the reranker, calibrated, best first.

    The reranker sees ``header + "\\n\\n" + text`` of a chunk (as dsRAG) when the snapshot's
    chunks carry headers. ``info`` records the reranker, its failures and how many scores fell
    back to cosine (a failed LLM rating is not an error: the query goes on, and says so)."""
    if vector is None:
        vector = index.embed_queries([text])[0]
    ranked = index.vectors.search(vector, k=max(1, int(n)), levels=[0], doc_ids=doc_ids)
    rows = np.fromiter((r for r, _ in ranked), dtype=np.int64, count=len(ranked))
    cos = np.fromiter((s for _, s in ranked), dtype=np.float64, count=len(ranked))
    rc = index.config.rerank
    cal = calibration or Calibration(rc.a, rc.b)
    reranker = _reranker_for(index, rerank)
    texts: list[str] = []
    if reranker is not None and rows.size:
        m = rows.size if top_n is None and reranker.kind == "cosine" else min(rows.size, int(top_n or rc.top_n))
        headers = _headers(index)
        for r in rows[:m]:
            nid = index.vectors.node_ids[r]
            h = headers.get(nid) or ""
            texts.append(f"{h}\n\n{index.vectors.texts[r]}" if h else index.vectors.texts[r])
        texts += [""] * (rows.size - m)
        rel = score_relevance(reranker, text, texts, cos, cal, top_n=m)
    else:
        rel = score_relevance(None, text, [""] * rows.size, cos, cal)
    order = np.lexsort((np.arange(rows.size), -rel.relevance))  # stable: dense order breaks ties
    info: dict[str, Any] = {"reranker": rel.reranker, "candidates": int(rows.size), "fallback": int(rel.fallback[: len(texts)].sum()) if texts else 0}
    if rel.failures:
        info["rerank_failures"] = list(rel.failures)
        import logging

        logging.getLogger(__name__).warning(
            "reranker %s failed on %d of %d candidates (cosine used instead): %s", rel.reranker, len(rel.failures), rows.size, rel.failures[0]
        )
    return Candidates(rows[order], rel.relevance[order], info)


def _headers(index: Any) -> dict[str, str]:
    """chunk_id -> header of the snapshot's leaf chunks (empty when none carry headers)."""
    cached = _HEADERS.get(index)
    if cached is None:
        try:
            t = index.leaf_chunks()
            cached = {c: h for c, h in zip(t.column("chunk_id").to_pylist(), t.column("header").to_pylist()) if h}
        except (OSError, KeyError):
            cached = {}
        _HEADERS[index] = cached
    return cached


# -- the `rerank` plug-in mode ---------------------------------------------------------------------
def search(index: Any, text: str, *, budget: int | None, k: int, levels: Sequence[int] | None = None,
           doc_ids: Sequence[str] | None = None, vector: np.ndarray | None = None, lucene: bool = False,
           rerank: Any = None, candidates: int | None = None, trace: dict | None = None, **options: Any) -> list[Any]:
    """``--mode rerank``: the best leaves by cosine, rescored by the configured reranker
    (``rerank=`` overrides: a Reranker or ``"cosine"``/``"cross_encoder"``/``"llm"``), then added
    best calibrated relevance first until ``budget`` tokens are full (``k`` hits when ``budget`` is
    None). A hit's score is its calibrated relevance. Leaves only: ``levels`` without 0 is an error."""
    from arborag.errors import QueryError
    from arborag.query.hits import Hit

    if options:
        raise QueryError(text, f"mode 'rerank' takes no option {', '.join(sorted(options))} (it takes rerank=, candidates=, trace=)")
    if levels is not None and 0 not in levels:
        raise QueryError(text, "mode 'rerank' ranks leaf chunks (level 0); drop --levels or include 0")
    n = int(candidates or max(k, 64 if budget is None else max(64, budget // 20)))
    cand = leaf_candidates(index, text, vector=vector, doc_ids=doc_ids, n=n, rerank=rerank)
    if trace is not None:
        trace.update(cand.info)
    v = index.vectors
    out: list[Any] = []
    used = 0
    for r, s in zip(cand.rows.tolist(), cand.relevance.tolist()):
        if budget is None and len(out) >= k:
            break
        nt = int(v.n_tokens[r])
        if budget is not None and used + nt > budget:
            continue
        out.append(Hit(v.node_ids[r], int(v.levels[r]), float(s), v.texts[r], tuple(v.doc_ids[r]), nt))
        used += nt
        if budget is not None and used >= budget:
            break
    return out

