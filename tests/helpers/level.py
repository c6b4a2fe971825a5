"""Fixtures of the LevelRAG tests (tests/query/level): a small two-level snapshot with a FAKE
word-hash embedder, and a FAKE chat LLM that answers per prompt (by the prompt's name).

Nothing here is a language model: :class:`RoutedFakeChat` replies from a script keyed by the
prompt name (``"level-decompose"``, ``"level-sparse-rewrite"``, ...), in call order per name.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from arborag.config import SparseConfig
from arborag.llm.types import Completion
from arborag.storage.corpus import Corpus
from arborag.storage.schemas import EDGES, NODES
from arborag.storage.sparse import build_sparse_index
from arborag.storage.tables import write_table
from arborag.storage.vectors import write_vectors

FAKE_DIM = 256
STOP = {"the", "a", "an", "of", "in", "is", "was", "by", "and", "where", "who", "what", "which", "did", "to", "on", "for"}

# A two-hop corpus: the question "Where was the author of Xanadu born?" needs the novel's page
# (its author) and the author's page (her birthplace). One summary node (level 1) over two leaves.
LEVEL_TEXTS = {
    "xanadu": (0, "Xanadu is a novel written by Mira Solberg and published in 1990 by Fjord Press."),
    "solberg": (0, "Mira Solberg was born in Bergen, Norway, and studied literature in Oslo."),
    "kubla": (0, "Kubla Khan is a poem by Samuel Taylor Coleridge about the summer palace Xanadu."),
    "film": (0, "Xanadu is a 1980 musical film starring Olivia Newton-John and Gene Kelly."),
    "bergen": (0, "Bergen is a city on the west coast of Norway, known for its fish market."),
    "press": (0, "Fjord Press is a small publisher of Scandinavian fiction and poetry."),
    "rain": (0, "Rain falls often on the west coast, where the weather changes fast."),
    "market": (0, "The fish market sells salmon, crab and shrimp to tourists every morning."),
    "sum-books": (1, "Summary: the novel Xanadu by Mira Solberg, published by Fjord Press; Solberg was born in Bergen."),
}
EDGES_SPEC = [("sum-books", "xanadu"), ("sum-books", "solberg")]
QUESTION = "Where was the author of Xanadu born?"


def fake_embed(texts: Sequence[str]) -> np.ndarray:
    """FAKE embedder: content words hashed into FAKE_DIM buckets, unit length."""
    out = np.zeros((len(texts), FAKE_DIM), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in "".join(c.lower() if c.isalnum() else " " for c in text).split():
            if word not in STOP:
                out[i, zlib.crc32(word.encode()) % FAKE_DIM] += 1.0
        n = np.linalg.norm(out[i])
        if n:
            out[i] /= n
    return out


def publish_level_snapshot(corpus_dir: Path, snapshot_id: str = "snap-level") -> Corpus:
    corpus = Corpus(corpus_dir).ensure()
    ids = list(LEVEL_TEXTS)
    nodes = pa.Table.from_pylist(
        [
            {"node_id": i, "level": lvl, "text": text, "n_tokens": len(text.split()),
             "doc_ids": ["doc-books"] if i in ("xanadu", "solberg", "sum-books") else [f"doc-{i}"],
             "summary_of": None, "summarizer": "leaf" if lvl == 0 else "fake", "summary_status": "leaf" if lvl == 0 else "ok",
             "created_by_run": "t"}
            for i, (lvl, text) in LEVEL_TEXTS.items()
        ],
        schema=NODES,
    )
    edges = pa.Table.from_pylist([{"parent_id": p, "child_id": c, "probability": 1.0, "level": 1} for p, c in EDGES_SPEC], schema=EDGES)
    partial = corpus.partial_dir(snapshot_id)
    write_table("nodes", nodes, partial / "nodes.parquet")
    write_table("edges", edges, partial / "edges.parquet")
    write_vectors(partial / "vectors.lance", nodes, fake_embed([LEVEL_TEXTS[i][1] for i in ids]))
    build_sparse_index(nodes, partial / "sparse", SparseConfig(), snapshot_id=snapshot_id)
    corpus.publish(partial, snapshot_id, {"build_key": "k", "corpus_name": "level"})
    return corpus


LLM_VARS = ("ARBORAG_LLM_BASE_URL", "ARBORAG_LLM_MODEL", "ARBORAG_SUMMARIZE__BACKEND", "ARBORAG_SUMMARIZE__BASE_URL")


@pytest.fixture
def level_index(tmp_path, monkeypatch):
    """The two-hop snapshot, opened with the fake embedder and no LLM configured."""
    from arborag.config import load_config
    from arborag.query import open_index

    for var in LLM_VARS:
        monkeypatch.delenv(var, raising=False)
    publish_level_snapshot(tmp_path / "level")
    index = open_index(tmp_path / "level", config=load_config(), embed_query=fake_embed)
    yield index
    index.close()


class RoutedFakeChat:
    """FAKE chat LLM (the ChatLLM protocol): ``script={"level-decompose": [reply, ...], ...}``.

    A call with prompt ``name@version`` takes the next reply scripted for ``name`` (the last one
    repeats); an Exception in the script is raised. An unscripted prompt fails the test.
    Records every call as ``(name, messages)``.
    """

    def __init__(self, script: dict[str, list[str | Exception]], *, model: str = "fake-routed") -> None:
        self.script = {k: list(v) for k, v in script.items()}
        self.model = model
        self.calls: list[tuple[str, list[dict[str, str]]]] = []

    def complete(self, messages, *, max_tokens: int, temperature: float = 0.0, prompt_tag: str | None = None, **params):
        name = (prompt_tag or "").split("@")[0]
        self.calls.append((name, [dict(m) for m in messages]))
        replies = self.script.get(name)
        if not replies:
            raise AssertionError(f"RoutedFakeChat: nothing scripted for prompt {name!r}")
        answer = replies.pop(0) if len(replies) > 1 else replies[0]
        if isinstance(answer, Exception):
            raise answer
        n_in = sum(len(str(m.get("content", "")).split()) for m in messages)
        return Completion(answer, n_in, len(answer.split()), False, True, f"fake-{len(self.calls)}")

    def names(self) -> list[str]:
        return [n for n, _ in self.calls]

    def count(self, name: str) -> int:
        return sum(1 for n, _ in self.calls if n == name)
