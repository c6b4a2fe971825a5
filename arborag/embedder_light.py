"""A light query embedder: the packaged BERT sentence model run with torch + ``tokenizers`` only.

:class:`arborag.embedder.Embedder` loads the model through sentence-transformers, whose import
chain (transformers, scikit-learn, scipy) costs seconds before the first query. For a one-off
query (``arborag query``) this module runs the same network directly: the ``tokenizers`` fast
tokenizer from the model's ``tokenizer.json`` (truncated to ``max_seq_length`` from
``sentence_bert_config.json``), the BERT forward written with the same torch ops transformers
uses (embedding sum + LayerNorm, SDPA attention, exact GELU), mean pooling accumulated in
float32 like sentence-transformers' ``Pooling``, then the ``Normalize`` module and the final
float32 L2 normalisation of :class:`~arborag.embedder.Embedder`. Weights are cast to the
configured dtype (bfloat16 by default) exactly as ``from_pretrained(dtype=...)`` does.

Texts are embedded one at a time, without padding, on one torch thread unless
``embed.threads`` says otherwise: the same computation as ``Embedder.embed([text])`` (tests/foundation/test_embedder_light.py checks the vectors agree
to 1e-5). Only plain BERT sentence-transformers folders (Transformer -> mean Pooling ->
Normalize) qualify; :func:`light_supported` says whether a folder does, otherwise use
:class:`~arborag.embedder.Embedder`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from arborag.config import EmbedConfig
from arborag.embedder import _l2_normalise, long_text_windows, max_seq_length, model_id_for, resolve_model_path

__all__ = ["LightEmbedder", "light_supported"]

_MODULES = ["sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
            "sentence_transformers.models.Normalize"]


def _read_json(path: Path) -> dict[str, Any] | list[Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` ({} when the file is missing, unreadable or not an object)."""
    data = _read_json(path)
    return data if isinstance(data, dict) else {}


def light_supported(path: Path) -> bool:
    """True when ``path`` is a BERT sentence-transformers folder this module reproduces exactly:
    modules Transformer -> Pooling (mean only) -> Normalize, a ``tokenizer.json`` and safetensors weights."""
    modules = _read_json(path / "modules.json")
    pooling = _read_json(path / "1_Pooling" / "config.json")
    config = _read_json(path / "config.json")
    if not isinstance(modules, list) or [m.get("type") for m in modules] != _MODULES:
        return False
    if not isinstance(pooling, dict) or not isinstance(config, dict):
        return False
    modes = {k for k, v in pooling.items() if k.startswith("pooling_mode") and v}
    return (
        modes == {"pooling_mode_mean_tokens"}
        and config.get("model_type") == "bert"
        and config.get("hidden_act") == "gelu"
        and config.get("position_embedding_type", "absolute") == "absolute"
        and (path / "tokenizer.json").is_file()
        and (path / "model.safetensors").is_file()
    )


class LightEmbedder:
    """Same vectors as :class:`~arborag.embedder.Embedder` for a supported model, without
    importing sentence-transformers or transformers. Loads lazily on first use."""

    def __init__(self, cfg: EmbedConfig) -> None:
        self.cfg = cfg
        self.path, self.name = resolve_model_path(cfg.model)
        self.max_len = max_seq_length(self.path)
        self.model_id = model_id_for(self.name, cfg, self.max_len)
        self._state: dict[str, Any] | None = None
        self._lock = threading.Lock()

    # -- loading ----------------------------------------------------------------------------
    def _load(self) -> dict[str, Any]:
        if self._state is not None:
            return self._state
        with self._lock:
            if self._state is None:
                self._state = self._load_state()
        return self._state

    def _load_state(self) -> dict[str, Any]:
        import torch
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        # One short text per forward pass: a single intra-op thread is the fastest here (measured
        # on the shared 2-core box: weights cast 0.08 s vs 0.76 s, first forward 0.03 s vs 0.36 s
        # with 2 threads); embed.threads overrides. This sets torch's process-wide thread count.
        torch.set_num_threads(max(1, int(self.cfg.threads)) if isinstance(self.cfg.threads, int) else 1)
        config = _json_object(self.path / "config.json")
        st_config = _json_object(self.path / "sentence_bert_config.json")
        max_len = int(st_config.get("max_seq_length") or config.get("max_position_embeddings", 512))
        tokenizer = Tokenizer.from_file(str(self.path / "tokenizer.json"))
        tokenizer.no_padding()
        whole = Tokenizer.from_file(str(self.path / "tokenizer.json"))  # untruncated: offsets of long texts
        whole.no_padding()
        whole.no_truncation()
        tokenizer.enable_truncation(max_length=max_len)
        dtype = torch.bfloat16 if self.cfg.dtype == "bfloat16" else torch.float32
        weights = {k: v.to(dtype) if v.is_floating_point() else v
                   for k, v in load_file(str(self.path / "model.safetensors"), device=self.cfg.device).items()}
        weights = {k.removeprefix("bert."): v for k, v in weights.items()}
        return {
            "tokenizer": tokenizer,
            "whole": whole,
            "max_len": max_len,
            "w": weights,
            "layers": int(config["num_hidden_layers"]),
            "heads": int(config["num_attention_heads"]),
            "eps": float(config.get("layer_norm_eps", 1e-12)),
            "dim": int(config["hidden_size"]),
        }

    @property
    def dim(self) -> int:
        cfg = _json_object(self.path / "config.json")
        return int(cfg.get("hidden_size", 0)) if self._state is None else int(self._state["dim"])

    # -- the network --------------------------------------------------------------------------
    def _forward(self, ids: list[int], type_ids: list[int]) -> Any:
        import torch
        import torch.nn.functional as F

        s = self._load()
        w, eps, dim, heads = s["w"], s["eps"], s["dim"], s["heads"]
        dev = self.cfg.device
        input_ids = torch.tensor([ids], dtype=torch.long, device=dev)
        token_types = torch.tensor([type_ids], dtype=torch.long, device=dev)
        n = input_ids.shape[1]
        positions = torch.arange(n, dtype=torch.long, device=dev).unsqueeze(0)

        def ln(x: Any, prefix: str) -> Any:
            return F.layer_norm(x, (dim,), w[prefix + ".weight"], w[prefix + ".bias"], eps)

        def lin(x: Any, prefix: str) -> Any:
            return F.linear(x, w[prefix + ".weight"], w[prefix + ".bias"])

        h = F.embedding(input_ids, w["embeddings.word_embeddings.weight"])
        h = h + F.embedding(token_types, w["embeddings.token_type_embeddings.weight"])
        h = h + F.embedding(positions, w["embeddings.position_embeddings.weight"])
        h = ln(h, "embeddings.LayerNorm")
        head_dim = dim // heads
        shape = (1, n, -1, head_dim)
        for i in range(s["layers"]):
            p = f"encoder.layer.{i}"
            q = lin(h, f"{p}.attention.self.query").view(shape).transpose(1, 2)
            k = lin(h, f"{p}.attention.self.key").view(shape).transpose(1, 2)
            v = lin(h, f"{p}.attention.self.value").view(shape).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, scale=head_dim**-0.5, is_causal=False)
            a = a.reshape(a.shape[0], -1, n, v.shape[-1]).transpose(1, 2).contiguous()
            a = a.reshape(1, n, -1).contiguous()
            a = ln(lin(a, f"{p}.attention.output.dense") + h, f"{p}.attention.output.LayerNorm")
            m = F.gelu(lin(a, f"{p}.intermediate.dense"))
            h = ln(lin(m, f"{p}.output.dense") + a, f"{p}.output.LayerNorm")
        # sentence-transformers Pooling (mean): products in the model dtype, sums in float32
        mask = torch.ones((1, n, 1), dtype=h.dtype, device=dev)
        summed = (h * mask).sum(dim=1, dtype=torch.float32)
        count = torch.clamp(mask.sum(dim=1, dtype=torch.float32), min=1e-9)
        pooled = (summed / count).to(h.dtype)
        return F.normalize(pooled, p=2, dim=-1)  # the Normalize module

    # -- embedding ----------------------------------------------------------------------------
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 ``(len(texts), dim)`` L2-normalised vectors, one forward pass per text (per
        window of a text over the model's limit, averaged as :class:`~arborag.embedder.Embedder` does)."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        import torch

        state = self._load()
        tok = state["tokenizer"]
        pieces, owner = self._pieces(texts, state)
        out = np.empty((len(pieces), self.dim), dtype=np.float32)
        with torch.inference_mode():
            for i, enc in enumerate(tok.encode_batch(pieces)):
                out[i] = self._forward(enc.ids, enc.type_ids).float().cpu().numpy()[0]
        out = _l2_normalise(out)
        if len(pieces) == len(texts):
            return out
        summed = np.zeros((len(texts), out.shape[1]), dtype=np.float64)
        np.add.at(summed, owner, out.astype(np.float64))
        return _l2_normalise(summed)

    def _pieces(self, texts: list[str], state: dict[str, Any]) -> tuple[list[str], np.ndarray]:
        """The texts to run (long texts cut into windows under ``long_text = "mean"``) and their owners."""
        max_len = int(state["max_len"])
        pieces: list[str] = []
        owner: list[int] = []
        for i, text in enumerate(texts):
            wins = [text]
            if self.cfg.long_text == "mean" and len(text) > (max_len - 2) // 4:
                enc = state["whole"].encode(text, add_special_tokens=False)
                if len(enc.ids) > max_len - 2:
                    offs = enc.offsets
                    wins = long_text_windows(text, [a for a, _ in offs], [b for _, b in offs], max_len, self.cfg.long_text_overlap)
            pieces.extend(wins)
            owner.extend([i] * len(wins))
        return pieces, np.asarray(owner, dtype=np.int64)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)

    def __repr__(self) -> str:
        return f"LightEmbedder({self.model_id!r})"
