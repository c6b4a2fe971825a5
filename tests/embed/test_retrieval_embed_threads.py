"""embed.threads = "auto" (the default): one torch thread for a single text (a query), torch's
default for batches; the thread count is restored after a query."""

from __future__ import annotations

import numpy as np
import pytest

from arborag.config import EmbedConfig
from arborag.embed.model import Embedder


def test_retrieval_embed_threads_default_is_auto():
    assert EmbedConfig().threads == "auto"


def test_retrieval_single_query_uses_one_thread_then_restores(monkeypatch):
    torch = pytest.importorskip("torch")
    emb = Embedder(EmbedConfig(long_text="truncate"))
    seen: list[int] = []
    monkeypatch.setattr(emb, "_embed", lambda texts, progress, prefix_chars=None: (seen.append(torch.get_num_threads()), np.zeros((len(texts), 3)))[1])
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        emb.embed(["one query"])
        emb.embed(["a", "batch"])
        assert seen == [1, 2]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    fixed = Embedder(EmbedConfig(threads=None, long_text="truncate"))
    monkeypatch.setattr(fixed, "_embed", lambda texts, progress, prefix_chars=None: (seen.append(torch.get_num_threads()), np.zeros((1, 3)))[1])
    fixed.embed(["one query"])
    assert seen[-1] == torch.get_num_threads()  # None: torch's default, untouched
