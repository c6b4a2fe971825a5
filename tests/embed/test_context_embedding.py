"""Long texts embedded whole; headers embedded and sparse-indexed with the chunk, part of cache keys.

- The real packaged embedder (max sequence length 256): for FFS/DFS/DDS windows of w = 1,024
  tokens, text edited in the last quarter of a window changes its vector under
  ``embed.long_text = "mean"``; under ``"truncate"`` (the model's own behaviour) it does not.
- The ``embed`` stage runner with a counting fake embedder (named so) and the real embedding
  cache: changing the header of one document's chunks re-embeds exactly those chunks.
- The sparse stage's input: a term only in a header finds the leaf; the node text stays the chunk.
- A long chunk's header starts every one of its windows (not only the first), so a question about
  the chunk's context reaches its vector.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers.embed import FakeEmbedder

from arborag.config import ArboragConfig, EmbedConfig, SegmentConfig, SparseConfig
from arborag.embed.model import Embedder, long_text_windows
from arborag.storage.corpus import Corpus
from arborag.storage.embedding_cache import EmbeddingCache
from arborag.storage.schemas import CHUNKS, NODES
from arborag.tasks.stages.chunks import segment_text
from arborag.tasks.stage_context import StageContext
from arborag.tasks.stages.leaf_vectors import run_leaf_vectors
from arborag.tasks.embedding.vector_files import read_vectors_file
from arborag.tasks.stages.sparse import with_leaf_headers

CINDERELLA = (Path(__file__).resolve().parents[2] / "examples" / "corpus" / "cinderella.txt").read_text(encoding="utf-8")
INSERT = " A dragon landed on the roof of the railway station in Tokyo and ate three spaceships. "


@pytest.fixture(scope="module")
def embedders() -> dict[str, Embedder]:
    out = {policy: Embedder(EmbedConfig(long_text=policy)) for policy in ("mean", "truncate")}
    out["truncate"]._model = out["mean"]._load()  # one model load: the policies differ only in what they feed it
    return out


def test_window_cutting() -> None:
    starts = list(range(0, 3000, 3))  # 1,000 tokens of 2 chars each, one space apart
    ends = [s + 2 for s in starts]
    text = " ".join(["ab"] * 1000)
    assert long_text_windows(text[:20], starts[:7], ends[:7], 256, 32) == [text[:20]]  # fits: the text itself
    wins = long_text_windows(text, starts, ends, 256, 32)
    width = 256 - 2 - 4  # [CLS]/[SEP] and 4 tokens of slack
    assert [len(w.split()) for w in wins[:-1]] == [width] * (len(wins) - 1)
    assert wins[0] == text[: ends[width - 1]] and wins[1].startswith(text[starts[width - 32] : starts[width - 32] + 2])
    assert wins[-1].endswith(text[-2:]) and len(wins) == 5  # starts 0, 218, 436, 654, 872 (the last reaches 999)


@pytest.mark.parametrize("strategy", ["ffs", "dfs", "dds"])
def test_the_last_quarter_of_a_1024_token_window_changes_its_vector(strategy: str, embedders: dict[str, Embedder]) -> None:
    cfg = SegmentConfig(ffs_window=1024, dfs_window=1024, dds_window=1024)
    span = segment_text(CINDERELLA, strategy, cfg)[0]  # type: ignore[arg-type]
    assert span.n_tokens >= 1024
    window = CINDERELLA[span.start : span.end]
    cut = window.index(" ", int(len(window) * 0.8))  # a word boundary in the last quarter
    edited = window[:cut] + INSERT + window[cut:]
    mean, trunc = embedders["mean"], embedders["truncate"]
    assert len(mean.windows(window)) >= 4
    a, b = mean.embed([window, edited])
    assert float(a @ b) < 0.999  # the end of the window is part of its vector
    c, d = trunc.embed([window, edited])
    assert float(c @ d) > 0.9999  # the model alone never sees it (what `mean` fixes)
    # the mean is a different vector from the truncated one, and still unit length
    assert float(a @ c) < 0.99 and np.allclose(np.linalg.norm(a), 1.0, atol=1e-5)
    # a text within the limit is embedded exactly as before
    short = window[:300]
    assert np.allclose(mean.embed([short]), trunc.embed([short]), atol=1e-6)


def _leaves(headers: dict[str, str]) -> pa.Table:
    rows = []
    for d, doc in enumerate(("doc-a", "doc-b")):
        for k in range(3):
            rows.append({"chunk_id": f"{doc}-{k}", "doc_id": doc, "section_id": f"{doc}-s", "ordinal": k, "start_char": 10 * k,
                         "end_char": 10 * k + 9, "n_tokens": 3, "text": f"chunk {k} of {doc}", "header": headers[doc],
                         "strategy": "sentence"})
    return pa.Table.from_pylist(rows, schema=CHUNKS)


def test_a_changed_header_re_embeds_exactly_its_chunks(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "c").ensure()
    fake = FakeEmbedder()  # fake embedder: counts what it embeds

    def run(headers: dict[str, str], key: str) -> tuple[np.ndarray, list[str]]:
        ctx = StageContext(corpus, ArboragConfig(), "run")
        ctx.resources.update(embedder=fake, embedding_cache=EmbeddingCache(corpus.cache_dir / "embeddings"),
                             leaves=_leaves(headers))
        before = len(fake.calls)
        summary = run_leaf_vectors(ctx, key)
        ids, vectors = read_vectors_file(Path(summary["path"]))
        assert ids.to_pylist() == [f"{d}-{k}" for d in ("doc-a", "doc-b") for k in range(3)]
        return vectors, [t for call in fake.calls[before:] for t in call]

    first, embedded = run({"doc-a": "Document context: A.", "doc-b": "Document context: B."}, "k1")
    assert len(embedded) == 6 and all(t.startswith("Document context: ") and "\n\nchunk " in t for t in embedded)
    again, embedded = run({"doc-a": "Document context: A.", "doc-b": "Document context: B."}, "k2")
    assert embedded == [] and np.array_equal(first, again)  # all from the cache
    changed, embedded = run({"doc-a": "Document context: A.", "doc-b": "Document context: B, retitled."}, "k3")
    assert sorted(embedded) == sorted(f"Document context: B, retitled.\n\nchunk {k} of doc-b" for k in range(3))
    assert np.array_equal(changed[:3], first[:3]) and not np.allclose(changed[3:], first[3:])


def test_headers_are_indexed_with_leaves_not_returned(tmp_path: Path) -> None:
    from arborag.storage.sparse import build_sparse_index, open_sparse_index

    leaves = _leaves({"doc-a": "Document context: a report titled 'Quarterly Zeppelin Ledger'.", "doc-b": ""})
    nodes = pa.Table.from_pylist(
        [{"node_id": r["chunk_id"], "level": 0, "text": r["text"], "n_tokens": 3, "doc_ids": [r["doc_id"]], "summary_of": None,
          "summarizer": "leaf", "summary_status": "leaf", "created_by_run": "r"} for r in leaves.to_pylist()]
        + [{"node_id": "sum-1", "level": 1, "text": "a summary of all chunks", "n_tokens": 5, "doc_ids": ["doc-a", "doc-b"],
            "summary_of": "c", "summarizer": "x", "summary_status": "ok", "created_by_run": "r"}],
        schema=NODES,
    )
    indexed = with_leaf_headers(nodes, leaves)
    assert indexed.column("text").to_pylist() == nodes.column("text").to_pylist()  # node text stays the chunk
    assert indexed.column("header").to_pylist()[:3] == [leaves.column("header")[0].as_py()] * 3
    assert indexed.column("header").to_pylist()[3:] == [None, None, None, None]
    build_sparse_index(indexed, tmp_path / "sparse", SparseConfig(), snapshot_id="s")
    hits = open_sparse_index(tmp_path / "sparse", SparseConfig()).search("zeppelin ledger", k=10, lucene=False)
    assert sorted(h.node_id for h in hits) == ["doc-a-0", "doc-a-1", "doc-a-2"]


def test_the_header_starts_every_window_of_a_long_chunk(embedders: dict[str, Embedder]) -> None:
    from arborag.tasks.embedding.cached import embed_cached
    from arborag.tasks.embedding.embedder import header_chars

    mean = embedders["mean"]
    span = segment_text(CINDERELLA, "ffs", SegmentConfig())[0]
    window = CINDERELLA[span.start : span.end]
    header = ("Document context: the following excerpt is from a document titled 'Quarterly report of Acme Steel "
              "Corporation'. This document is about: steel prices, furnaces and quarterly revenue.")
    text = f"{header}\n\n{window}"
    p = len(header) + 2
    assert header_chars(_leaves({"doc-a": header, "doc-b": ""})) == [p] * 3 + [0] * 3
    wins = mean.windows(text, p)
    assert len(wins) > len(mean.windows(text)) and all(w.startswith(header + "\n\n") for w in wins)
    plain, first_only = mean.embed([window, text])  # no prefix: the header is in the first window only
    every = mean.embed([text], prefix_chars=[p])[0]
    query = mean.embed(["quarterly revenue of Acme Steel"])[0]
    # the chunk's context reaches its vector: far more with the header in every window than in the first only
    assert float(query @ every) > float(query @ first_only) + 0.1 > float(query @ plain) + 0.1
    # through the cache: the prefix is part of the key, so both embeddings coexist
    class Cache(dict):
        def get_many(self, model_id, hashes):
            got = [self.get((model_id, h)) for h in hashes]
            return np.array([g is not None for g in got]), got

        def put_many(self, model_id, hashes, vectors):
            self.update({(model_id, h): v for h, v in zip(hashes, vectors)})

    cache = Cache()
    v1, n1 = embed_cached([text], mean, cache, prefix_chars=[p])
    v2, n2 = embed_cached([text], mean, cache)
    assert (n1, n2) == (1, 1) and np.allclose(v1[0], every, atol=1e-6) and np.allclose(v2[0], first_only, atol=1e-6)
    keys = sorted(h for _, h in cache)
    assert len(keys) == 2 and keys[1] == keys[0] + f"+p{p}"


def test_long_texts_are_found_slice_by_slice_with_the_same_vectors(embedders: dict[str, Embedder], monkeypatch: pytest.MonkeyPatch) -> None:
    """The tokenizer's offsets are taken a slice of texts at a time (memory); the windows and vectors do not depend on it."""
    import arborag.embed.model as model_module

    mean = embedders["mean"]
    texts = [CINDERELLA[i * 1500 : i * 1500 + 2500] for i in range(3)] + ["A short line.", CINDERELLA[:200]]
    whole = mean.embed(texts)
    pieces_whole = mean._split_long(mean._load(), texts)[0]
    monkeypatch.setattr(model_module, "_OFFSETS_SLICE", 2)
    sliced = mean.embed(texts)
    assert mean._split_long(mean._load(), texts)[0] == pieces_whole and len(pieces_whole) > len(texts)
    np.testing.assert_allclose(sliced, whole, atol=1e-6)
