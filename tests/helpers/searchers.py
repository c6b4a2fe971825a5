"""Data of the searcher tests: a small word-level snapshot with a fake embedder (``hops_index`` in
tests/conftest.py), and the demo corpus built with the real embedder (``demo_corpus``)."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa

from arborag.config import SparseConfig
from arborag.storage.corpus import Corpus
from arborag.storage.schemas import EDGES, NODES
from arborag.storage.sparse import build_sparse_index
from arborag.storage.tables import write_table
from arborag.storage.vectors import write_vectors

REPO = Path(__file__).resolve().parents[2]  # tests/helpers/<this> -> the checkout
FAKE_DIM = 512

# A two-hop corpus: the novel's page names its author; only the author's page says where she
# was born. Nothing in the question ("Where was the author of Xanadu born?") names her.
HOP_TEXTS = {
    "xanadu": "Xanadu is a novel written by Mira Solberg and published in 1990 by Fjord Press.",
    "solberg": "Mira Solberg was raised in Bergen, Norway, and studied literature in Oslo.",
    "kubla": "Kubla Khan is a poem by Samuel Taylor Coleridge about the summer palace Xanadu of the Mongol ruler.",
    "film": "Xanadu is a 1980 musical film starring Olivia Newton-John and Gene Kelly.",
    "bergen": "Bergen is a city on the west coast of Norway, known for its fish market.",
    "press": "Fjord Press is a small publisher of Scandinavian fiction and poetry.",
    "rain": "Rain falls often on the west coast, where weather changes fast.",
    "market": "The fish market sells salmon, crab and shrimp to tourists every morning.",
}


def fake_embed(texts: list[str]) -> np.ndarray:
    """FAKE embedder: a bag of content words (stop words dropped) hashed into FAKE_DIM buckets, unit length."""
    from arborag.query.prf import terms

    out = np.zeros((len(texts), FAKE_DIM), dtype=np.float32)
    for i, text in enumerate(texts):
        for word in terms(text):
            out[i, zlib.crc32(word.encode()) % FAKE_DIM] += 1.0
        n = np.linalg.norm(out[i])
        if n:
            out[i] /= n
    return out


def publish_texts(corpus_dir: Path, texts: dict[str, str], snapshot_id: str = "snap-search") -> Corpus:
    """Publish a one-level snapshot of ``texts`` (node_id -> text) with fake vectors and a sparse index."""
    corpus = Corpus(corpus_dir).ensure()
    ids = list(texts)
    nodes = pa.Table.from_pylist(
        [
            {"node_id": i, "level": 0, "text": texts[i], "n_tokens": len(texts[i].split()), "doc_ids": [f"doc-{i}"],
             "summary_of": None, "summarizer": "leaf", "summary_status": "leaf", "created_by_run": "t"}
            for i in ids
        ],
        schema=NODES,
    )
    partial = corpus.partial_dir(snapshot_id)
    write_table("nodes", nodes, partial / "nodes.parquet")
    write_table("edges", pa.Table.from_pylist([], schema=EDGES), partial / "edges.parquet")
    write_vectors(partial / "vectors.lance", nodes, fake_embed([texts[i] for i in ids]))
    build_sparse_index(nodes, partial / "sparse", SparseConfig(), snapshot_id=snapshot_id)
    corpus.publish(partial, snapshot_id, {"build_key": "k", "corpus_name": "hops"})
    return corpus


DEMO_DIR = Path(os.environ.get("ARBORAG_TEST_DEMO_DIR", "")) if os.environ.get("ARBORAG_TEST_DEMO_DIR") else None


def build_demo_corpus(out: Path) -> Path:
    """Build the demo corpus (examples/corpus/cinderella.txt) into ``out`` in-process with the real
    embedder and the extractive summarizer (~25 s idle)."""
    from arborag.config import ArboragConfig
    from arborag.flows.build import run_build

    run_build([str(REPO / "examples" / "corpus" / "cinderella.txt")], out, ArboragConfig(), use_prefect=False, progress=False)
    return out
