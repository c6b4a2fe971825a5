"""Rerankers and score calibration (SPEC §6 ``rerank``).

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
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from arborag.errors import ArboragError, ConfigError

__all__ = [
    "Calibration",
    "Complete",
    "CosineReranker",
    "CrossEncoderReranker",
    "LLMReranker",
    "LLM_PROMPT",
    "LLM_PROMPT_VERSION",
    "RerankKind",
    "Reranker",
    "calibrate",
    "normalise",
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


LLM_PROMPT_VERSION = "rerank-v1"
LLM_PROMPT = (
    "Rate how relevant the passage is to the query, from 0 (unrelated) to 10 (answers it "
    "completely). Reply with the number only.\n\nQuery: {query}\n\nPassage:\n{passage}\n\nRating:"
)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


class LLMReranker:
    """Rates each passage 0–10 with one LLM call; see the module docs for failures."""

    kind: RerankKind = "llm"

    def __init__(self, complete: Complete, *, model: str = "llm", max_tokens: int = 4, max_passage_chars: int = 6000) -> None:
        self._complete = complete
        self.name = f"llm:{model}:{LLM_PROMPT_VERSION}"
        self.max_tokens = max_tokens
        self.max_passage_chars = max_passage_chars
        self.failures = 0

    def score_one(self, query: str, passage: str) -> float:
        prompt = LLM_PROMPT.format(query=query, passage=passage[: self.max_passage_chars])
        try:
            answer = self._complete(prompt, max_tokens=self.max_tokens)
        except ArboragError:
            self.failures += 1
            return 0.0
        m = _NUMBER.search(answer or "")
        if m is None:
            self.failures += 1
            return 0.0
        return min(max(float(m.group()), 0.0), 10.0)

    def rerank(self, query: str, texts: Sequence[str]) -> np.ndarray:
        return np.asarray([self.score_one(query, t) for t in texts], dtype=np.float64)
