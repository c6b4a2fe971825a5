"""Leaves stream through embedding: a corpus over ``STREAM_ROWS`` leaves is embedded slice by
slice and its vectors written as they come — the same file content as embedding all at once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from arborag.config import ArboragConfig
from arborag.storage.corpus import Corpus
from arborag.tasks.stages import leaf_vectors
from arborag.tasks.stage_context import StageContext
from arborag.tasks.embedding.vector_files import read_vectors_file


class CountingEmbedder:
    """A fake embedder (deterministic vectors from the text's hash); records each call's size."""

    model_id = "fake-embedder"
    dim = 8

    def __init__(self) -> None:
        self.calls: list[int] = []

    def embed(self, texts, *, progress=None):
        self.calls.append(len(texts))
        out = np.stack([np.random.default_rng(abs(hash(t)) % 2**32).standard_normal(8) for t in texts]).astype(np.float32)
        if progress is not None:
            progress(len(texts))
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def _leaves(n: int) -> pa.Table:
    return pa.table({"chunk_id": [f"c{i:05d}" for i in range(n)], "text": [f"leaf text number {i}" for i in range(n)]})


@pytest.mark.parametrize("rows", [5, 23])
def test_scale_leaf_vectors_stream_in_slices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    monkeypatch.setattr(leaf_vectors, "STREAM_ROWS", 10)
    monkeypatch.setattr(leaf_vectors, "load_leaves", lambda ctx: _leaves(rows))
    emb = CountingEmbedder()
    ctx = StageContext(Corpus(tmp_path / "c").ensure(), ArboragConfig(), "run-1")
    ctx.resources["embedder"] = emb
    ctx.resources["embedding_cache"] = None
    out = leaf_vectors.run_leaf_vectors(ctx, "k")
    ids, vecs = read_vectors_file(Path(out["path"]))
    assert ids.to_pylist() == _leaves(rows).column("chunk_id").to_pylist()
    assert emb.calls == ([5] if rows == 5 else [10, 10, 3])  # one call per slice of at most STREAM_ROWS
    whole = CountingEmbedder().embed(_leaves(rows).column("text").to_pylist())
    assert np.array_equal(vecs, whole) and ctx.counters.embedded_texts == rows
