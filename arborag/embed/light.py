"""The packaged BERT sentence model run with torch + ``tokenizers`` only: the build's vectors, bit for bit.

:class:`arborag.embed.model.Embedder` loads the model through sentence-transformers, whose import
chain (transformers, scikit-learn, scipy) costs ~6 s of a cold process before the first text
(torch alone ~2 s; ``benchmarks/results/cold_path.md``). :class:`LightEmbedder` is an
``Embedder`` whose network is written here with the torch ops transformers' ``BertModel`` runs
(embedding sum + LayerNorm, SDPA attention with transformers' boolean padding mask — none when a
batch has no padding —, exact GELU), sentence-transformers' mean ``Pooling`` (products in the
model dtype, sums in float32) and its ``Normalize`` module; the tokenizer is the model's
``tokenizer.json`` through ``tokenizers`` (padded to the longest text of a batch, truncated to
``max_seq_length``). Everything around the network is ``Embedder``'s own: long-text windows and
prefixes, the length-sorted groups, the batches sentence-transformers' ``encode`` forms inside a
group (sorted by ``-len(text)`` the way it sorts them), the thread rule (``embed.threads = auto``:
torch's default for batches, one thread for a single text) and the float32 L2 normalisation.
Weights are cast to the configured dtype as ``from_pretrained(dtype=...)`` does.

Same batches, same ops, same threads: the vectors equal ``Embedder.embed``'s bit for bit, padding
noise included (``tests/embed/test_embedder_light.py`` compares real texts of the shared
corpora, long texts with prefixes, both dtypes). Only plain BERT sentence-transformers folders
(Transformer -> mean Pooling -> Normalize) qualify; :func:`light_supported` says whether a folder
does, otherwise use :class:`~arborag.embed.model.Embedder`. Used for one-off queries
(``arborag query``) and by the embedding worker of a cold CLI build or update
(:mod:`arborag.embed.worker_serve`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from arborag.embed.model import Embedder, _torch_threads, max_seq_length, torch_dtype

if TYPE_CHECKING:
    from arborag.config import EmbedConfig

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


class _Bert:
    """The network of a supported folder: tokenizer, weights in the configured dtype, forward."""

    def __init__(self, path: Path, cfg: EmbedConfig) -> None:
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        config = _json_object(path / "config.json")
        self.max_seq_length = max_seq_length(path)
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=self.max_seq_length)
        self.tokenizer.enable_padding()  # to the longest text of the batch, as sentence-transformers pads
        self.whole = Tokenizer.from_file(str(path / "tokenizer.json"))  # untruncated: offsets of long texts
        self.whole.no_padding()
        self.whole.no_truncation()
        self.device = cfg.device
        dtype = torch_dtype(cfg)
        with _torch_threads(1):  # the cast: 0.08 s on one thread vs 0.76 s on two (shared 2-core box)
            weights = {k: v.to(dtype) if v.is_floating_point() else v
                       for k, v in load_file(str(path / "model.safetensors"), device=cfg.device).items()}
        self.w = {k.removeprefix("bert."): v for k, v in weights.items()}
        self.layers = int(config["num_hidden_layers"])
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.dim = int(config["hidden_size"])

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        """float32 sentence vectors of ``texts`` (the Normalize module's, not re-normalised), formed
        into batches exactly as sentence-transformers' ``encode`` forms them."""
        import torch

        order = np.argsort([-len(t) for t in texts])  # sentence-transformers' order (its argsort, not stable)
        ranked = [texts[i] for i in order]
        rows: list[Any] = []
        with torch.inference_mode():
            for start in range(0, len(ranked), batch_size):
                rows.extend(self.forward(self.tokenizer.encode_batch(ranked[start : start + batch_size])))
            out = torch.stack([rows[i] for i in np.argsort(order)])
            return np.asarray(out.float().cpu().numpy(), dtype=np.float32)

    def forward(self, batch: list[Any]) -> Any:
        """The pooled, normalised vectors (model dtype) of one padded batch of encodings."""
        import torch
        import torch.nn.functional as F

        w, eps, dim, dev = self.w, self.eps, self.dim, self.device
        ids = torch.tensor([e.ids for e in batch], dtype=torch.long, device=dev)
        types = torch.tensor([e.type_ids for e in batch], dtype=torch.long, device=dev)
        attention = torch.tensor([e.attention_mask for e in batch], dtype=torch.long, device=dev)
        b, n = ids.shape
        positions = torch.arange(n, dtype=torch.long, device=dev).unsqueeze(0)

        def ln(x: Any, prefix: str) -> Any:
            return F.layer_norm(x, (dim,), w[prefix + ".weight"], w[prefix + ".bias"], eps)

        def lin(x: Any, prefix: str) -> Any:
            return F.linear(x, w[prefix + ".weight"], w[prefix + ".bias"])

        h = F.embedding(ids, w["embeddings.word_embeddings.weight"])
        h = h + F.embedding(types, w["embeddings.token_type_embeddings.weight"])
        h = h + F.embedding(positions, w["embeddings.position_embeddings.weight"])
        h = ln(h, "embeddings.LayerNorm")
        # transformers' bidirectional mask for SDPA: none without padding, else (b, 1, n, n) booleans
        mask = None if bool(attention.all()) else attention.bool()[:, None, None, :].expand(b, 1, n, n)
        head_dim = dim // self.heads
        shape = (b, n, -1, head_dim)
        for i in range(self.layers):
            p = f"encoder.layer.{i}"
            q = lin(h, f"{p}.attention.self.query").view(shape).transpose(1, 2)
            k = lin(h, f"{p}.attention.self.key").view(shape).transpose(1, 2)
            v = lin(h, f"{p}.attention.self.value").view(shape).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, scale=head_dim**-0.5, is_causal=False)
            a = a.transpose(1, 2).contiguous().reshape(b, n, -1).contiguous()
            a = ln(lin(a, f"{p}.attention.output.dense") + h, f"{p}.attention.output.LayerNorm")
            m = F.gelu(lin(a, f"{p}.intermediate.dense"))
            h = ln(lin(m, f"{p}.output.dense") + a, f"{p}.output.LayerNorm")
        # sentence-transformers Pooling (mean): products in the model dtype, sums in float32
        keep = attention.unsqueeze(-1).to(h.dtype)
        summed = (h * keep).sum(dim=1, dtype=torch.float32)
        count = torch.clamp(keep.sum(dim=1, dtype=torch.float32), min=1e-9)
        pooled = (summed / count).to(h.dtype)
        return F.normalize(pooled, p=2, dim=-1)  # the Normalize module


class LightEmbedder(Embedder):
    """:class:`~arborag.embed.model.Embedder`'s vectors for a supported model (module docs), without
    importing sentence-transformers or transformers. Loads lazily on first use; never routes to
    an embedding worker (it is what the worker runs)."""

    def _worker(self) -> Any:
        return None

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        with self._lock:
            if self._model is None:
                from arborag import phases

                with phases.phase("import torch + tokenizers"):
                    import torch
                    import tokenizers  # noqa: F401
                if isinstance(self._threads, int):
                    torch.set_num_threads(max(1, int(self._threads)))
                with phases.phase("embedding model load"):
                    model = _Bert(self.path, self.cfg)
                self._dim = model.dim  # max_len: Embedder's, from the same max_seq_length(path)
                self._model = model
        return self._model

    def _offsets(self, model: Any, texts: list[str]) -> list[Any]:
        return [e.offsets for e in model.whole.encode_batch(texts, add_special_tokens=False)]

    def _encode_group(self, texts: list[str]) -> np.ndarray:
        return self._load().encode(texts, self.cfg.batch_size)

    def __repr__(self) -> str:
        return f"LightEmbedder({self.model_id!r}, batch_size={self.cfg.batch_size})"
