"""Rerankers and Beta-CDF calibration (docs/METHODS.md §6.7).

The cross-encoder test uses a tiny **randomly initialised** BERT built in the test
(transformers ``BertConfig`` + ``BertForSequenceClassification`` with one label) and a
WordPiece tokenizer built from a 20-word vocabulary written in the test — nothing is
downloaded; its scores are meaningless, the test checks the plumbing (pairs, logits, shapes).
The LLM reranker is tested with ``ScriptedFakeLLM``, a fake completion function.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import beta

from arborag.errors import ConfigError, LLMError
from arborag.query.rerank import (
    Calibration,
    Complete,
    CosineReranker,
    CrossEncoderReranker,
    LLMReranker,
    Reranker,
    calibrate,
    normalise,
)


def test_normalisation_per_kind() -> None:
    assert normalise([-0.3, 0.0, 0.42, 1.0], "cosine") == pytest.approx([0.0, 0.0, 0.42, 1.0])
    assert normalise([0.0, 2.0, -2.0], "cross_encoder") == pytest.approx([0.5, 0.880797, 0.119203], abs=1e-6)
    assert normalise([0, 7, 10, 12], "llm") == pytest.approx([0.0, 0.7, 1.0, 1.0])


def test_calibration_is_the_beta_cdf_of_the_normalised_score() -> None:
    raw = np.array([-1.0, 0.1, 0.5, 0.9, 1.0])
    got = calibrate(raw, "cosine")
    # symmetric Beta(0.4, 0.4): cdf(0) = 0, cdf(0.5) = 0.5, cdf(1) = 1, cdf(0.1) = 1 - cdf(0.9)
    assert got[[0, 2, 4]] == pytest.approx([0.0, 0.5, 1.0])
    assert got[1] == pytest.approx(1 - got[3])
    assert got[1] == pytest.approx(beta.cdf(0.1, 0.4, 0.4))
    assert got[1] > 0.1  # a = b < 1 spreads scores bunched near 0 and 1 away from the ends
    shaped = calibrate(raw, "cosine", Calibration(a=0.5, b=1.8))
    assert shaped[1] == pytest.approx(beta.cdf(0.1, 0.5, 1.8))
    assert np.all(np.diff(calibrate(np.linspace(-5, 5, 11), "cross_encoder")) > 0)  # monotone


def test_cosine_reranker_scores_full_texts_with_the_injected_embedder() -> None:
    vocab = ["cat", "dog", "mat", "sun"]

    def bag_of_words(texts: Sequence[str]) -> np.ndarray:  # unnormalised counts on purpose
        return np.array([[t.split().count(w) for w in vocab] for t in texts], dtype=np.float32)

    rr = CosineReranker(bag_of_words)
    assert isinstance(rr, Reranker)
    scores = rr.rerank("cat mat", ["cat cat mat mat", "dog sun", "cat dog"])
    assert scores == pytest.approx([1.0, 0.0, 0.5], abs=1e-6)
    assert rr.rerank("cat", []).shape == (0,)


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 1-layer BERT with one output label and a 20-word WordPiece vocab."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    d = tmp_path_factory.mktemp("tiny-cross-encoder")
    words = ["the", "cat", "sat", "on", "mat", "dog", "ran", "what", "did", "do", "?", ".", "a", "sun", "is", "hot"]
    (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    tok = BertTokenizerFast(vocab_file=str(d / "vocab.txt"))
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=tok.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=64, num_labels=1,
    )
    BertForSequenceClassification(cfg).save_pretrained(d)
    tok.save_pretrained(d)
    return d


def test_cross_encoder_returns_the_models_logit_per_pair(tiny_cross_encoder: Path) -> None:
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    rr = CrossEncoderReranker(tiny_cross_encoder)
    assert isinstance(rr, Reranker)
    query, texts = "what did the cat do ?", ["the cat sat on the mat .", "the sun is hot .", "a dog ran ."]
    scores = rr.rerank(query, texts)
    assert scores.shape == (3,) and np.all(np.isfinite(scores))
    # the same logits computed directly with transformers: pairs are (query, text), no activation
    tok = AutoTokenizer.from_pretrained(tiny_cross_encoder)
    model = BertForSequenceClassification.from_pretrained(tiny_cross_encoder).eval()
    with torch.no_grad():
        enc = tok([query] * 3, texts, padding=True, return_tensors="pt")
        logits = model(**enc).logits[:, 0].numpy()
    assert scores == pytest.approx(logits, abs=1e-4)
    assert np.all((calibrate(scores, "cross_encoder") >= 0) & (calibrate(scores, "cross_encoder") <= 1))
    assert rr.rerank(query, []).shape == (0,)


def test_cross_encoder_needs_a_local_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        CrossEncoderReranker(tmp_path / "missing-model")


class ScriptedFakeLLM:
    """Fake completion function: answers from a script keyed by a word of the passage; records prompts."""

    def __init__(self, script: dict[str, str | Exception]) -> None:
        self.script = script
        self.prompts: list[str] = []

    def __call__(self, prompt: str, /, *, max_tokens: int) -> str:
        self.prompts.append(prompt)
        passage = prompt.split("Passage:\n", 1)[1]
        for key, answer in self.script.items():
            if key in passage:
                if isinstance(answer, Exception):
                    raise answer
                return answer
        return "0"


def test_llm_reranker_parses_ratings_and_marks_failures_nan() -> None:
    fake = ScriptedFakeLLM({
        "alpha": "8",
        "beta": " Rating: 3.5/10",
        "gamma": "no idea",
        "delta": LLMError("fake-model", "server said 500 after 3 retries"),
        "omega": "15",
        "zeta": TimeoutError("read timed out"),
    })
    assert isinstance(fake, Complete)
    rr = LLMReranker(fake, model="fake-model")
    scores = rr.rerank("which letter?", ["alpha text", "beta text", "gamma text", "delta text", "omega text", "zeta text"])
    assert scores[:2] == pytest.approx([8.0, 3.5])
    assert np.isnan(scores[2:]).all()  # malformed, failed call, off the 0-10 scale, timeout
    assert rr.failures == 4 and len(rr.failure_reasons) == 4
    assert "malformed" in rr.failure_reasons[0] and "LLMError" in rr.failure_reasons[1]
    assert "outside 0-10" in rr.failure_reasons[2] and "TimeoutError" in rr.failure_reasons[3]
    assert len(fake.prompts) == 6 and "Query: which letter?" in fake.prompts[0]
    assert calibrate(scores[:1], "llm")[0] == pytest.approx(beta.cdf(0.8, 0.4, 0.4))
    assert rr.name == "llm:fake-model:rerank-v1"
