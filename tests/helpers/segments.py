"""A tiny hand-made snapshot for the segments / rerank tests: two documents whose leaf chunks
overlap and leave gaps, real storage (Parquet + LanceDB), chunks.parquet and documents.parquet in
the snapshot, and a fake query embedder (``FakeQueryEmbedder``: "alpha" -> e1, "beta" -> e2).

Document ``d1`` is 12 numbered sentences; its chunks (ordinals 0..7):

* chunk 2 starts 6 characters before chunk 1 ends (overlap),
* chunk 4 starts 9 characters after chunk 3 ends (a gap no chunk holds),
* chunks 1 to 4 point at the query "alpha" (cosines 0.970, 0.981, 0.995, 0.958), the others are
  orthogonal to it (cosine 0).

Document ``d2`` has 4 chunks pointing at "beta".
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa

from arborag.storage.corpus import Corpus
from arborag.storage.schemas import CHUNKS, DOCUMENTS, EDGES, NODES
from arborag.storage.tables import write_table
from arborag.storage.vectors import write_vectors
from arborag.tokenizer import count_tokens
from tests.helpers.query import FakeQueryEmbedder, unit

__all__ = ["D1_SPANS", "D1_TEXT", "D2_TEXT", "FakeQueryEmbedder", "make_tiny_cross_encoder", "publish_segments_snapshot"]

D1_TEXT = "".join(f"Sentence {i:02d} of the first document tells part {i}. " for i in range(12))
D2_TEXT = "".join(f"Line {i} of document two is about beta things. " for i in range(4))
_S = len("Sentence 00 of the first document tells part 0. ")  # 49 characters per sentence

# (start, end) of d1's chunks, by ordinal: 2 overlaps 1 by 6 chars, a 9-char gap between 3 and 4
D1_SPANS = [(0, _S), (_S, 2 * _S), (2 * _S - 6, 3 * _S), (3 * _S, 4 * _S), (4 * _S + 9, 5 * _S),
            (5 * _S, 6 * _S), (6 * _S, 8 * _S), (8 * _S, 12 * _S)]
_D1_VECS = [unit(0, 0, 1, 0), unit(1, 0, 0.25, 0), unit(1, 0, 0.2, 0), unit(1, 0, 0.1, 0), unit(1, 0, 0.3, 0),
            unit(0, 0, 1, 0), unit(0, 0, 1, 0), unit(0, 0, 0, 1)]
_L2 = len(D2_TEXT) // 4
D2_SPANS = [(i * _L2, (i + 1) * _L2 if i < 3 else len(D2_TEXT)) for i in range(4)]
_D2_VECS = [unit(0, 1, 0, 0.1 * i) for i in range(4)]


def _documents() -> pa.Table:
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rows = [
        {"doc_id": d, "uri": f"/data/{d}.txt", "title": title, "mime": "text/plain", "n_chars": len(t), "text": t,
         "metadata": "{}", "ingested_at": now, "status": "ok", "error": None}
        for d, title, t in (("d1", "First document", D1_TEXT), ("d2", "Second document", D2_TEXT))
    ]
    return pa.Table.from_pylist(rows, schema=DOCUMENTS)


def publish_segments_snapshot(root: Path, *, headers: bool = True) -> Corpus:
    """Publish the snapshot described in the module docs under ``root``; returns the corpus."""
    corpus = Corpus(root).ensure()
    chunks, nodes, vecs = [], [], []
    for doc, text, spans, vectors in (("d1", D1_TEXT, D1_SPANS, _D1_VECS), ("d2", D2_TEXT, D2_SPANS, _D2_VECS)):
        for o, ((a, b), v) in enumerate(zip(spans, vectors)):
            cid = f"{doc}-c{o}"
            body = text[a:b]
            n = count_tokens(body)
            header = f"Document context: the following excerpt is from a document titled '{doc}'." if headers else ""
            chunks.append({"chunk_id": cid, "doc_id": doc, "section_id": None, "ordinal": o, "start_char": a, "end_char": b,
                           "n_tokens": n, "text": body, "header": header, "strategy": "sentence"})
            nodes.append({"node_id": cid, "level": 0, "text": body, "n_tokens": n, "doc_ids": [doc], "summary_of": None,
                          "summarizer": "leaf", "summary_status": "leaf", "created_by_run": "t"})
            vecs.append(v)
    # one summary node, so the snapshot is a tree (segments must ignore it)
    nodes.append({"node_id": "s1", "level": 1, "text": "summary of d1", "n_tokens": 4, "doc_ids": ["d1"], "summary_of": None,
                  "summarizer": "fake", "summary_status": "ok", "created_by_run": "t"})
    vecs.append(unit(1, 0, 0, 0))
    partial = corpus.partial_dir("seg1")
    node_table = pa.Table.from_pylist(nodes, schema=NODES)
    write_table("nodes", node_table, partial / "nodes.parquet")
    write_table("edges", pa.Table.from_pylist([{"parent_id": "s1", "child_id": "d1-c0", "probability": 1.0, "level": 1}], schema=EDGES),
                partial / "edges.parquet")
    write_table("chunks", pa.Table.from_pylist(chunks, schema=CHUNKS), partial / "chunks.parquet")
    write_table("documents", _documents(), partial / "documents.parquet")
    write_vectors(partial / "vectors.lance", node_table, np.stack(vecs))
    corpus.publish(partial, "seg1", {"build_key": "k", "corpus_name": "c"})
    return corpus


def make_tiny_cross_encoder(directory: Path) -> Path:
    """A **randomly initialised** 1-layer BERT with one output label and a tiny WordPiece vocab
    (transformers ``BertConfig`` + ``BertForSequenceClassification``), saved as a local
    cross-encoder directory. Nothing is downloaded; its scores mean nothing (plumbing tests only)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    words = ["sentence", "of", "the", "first", "document", "tells", "part", "line", "two", "is", "about", "beta", "things",
             "alpha", ".", "0", "1", "2", "3", "4"]
    (directory / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    tok = BertTokenizerFast(vocab_file=str(directory / "vocab.txt"))
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=128, num_labels=1)
    BertForSequenceClassification(cfg).save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory
