"""Test doubles and a tiny HotpotQA-shaped data set for the evaluation tests.

``FakeBuilds`` and ``FakeIndex`` are test doubles of ``arborag.flows.build.run_build`` and
``query.open_index(...)``: same signatures and return shapes, word-overlap "retrieval".
Used by tests/test_evaluate.py (the flow) and tests/tasks/test_eval_*.py (the stage functions).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from arborag.config import ArboragConfig
from arborag.errors import QueryError
from arborag.hashing import hash_text, short_id
from arborag.storage.corpus import Corpus
from arborag.storage.schemas import DOCUMENTS, NODES

# --------------------------------------------------------------------------------------------
# A tiny HotpotQA-shaped data set
# --------------------------------------------------------------------------------------------
PARAGRAPHS = {
    "Alû": ["Alû is a demon of Akkadian mythology.", " It has no mouth and no limbs."],
    "Lilu (mythology)": ["Lilu is a masculine Akkadian spirit.", " Lilu is related to the wind."],
    "Paris": ["Paris is the capital of France.", " It lies on the Seine river."],
    "Seine": ["The Seine is a river in France.", " It flows through Paris to the English Channel."],
    "Mount Fuji": ["Mount Fuji is the highest mountain in Japan.", " It is an active volcano."],
    "Tokyo": ["Tokyo is the capital of Japan.", " It is near Mount Fuji."],
}
QUESTIONS = [
    {"_id": "q1", "question": "Lilu is what kind of Akkadian being?", "answer": "spirit", "type": "bridge",
     "supporting_facts": [["Alû", 0], ["Lilu (mythology)", 0]]},
    {"_id": "q2", "question": "Which river flows through the capital of France?", "answer": "The Seine", "type": "bridge",
     "supporting_facts": [["Paris", 0], ["Seine", 1]]},
    {"_id": "q3", "question": "Is Mount Fuji in Japan and near Tokyo?", "answer": "yes", "type": "comparison",
     "supporting_facts": [["Mount Fuji", 0], ["Tokyo", 1]]},
]


def write_hotpot_data(tmp_path: Path) -> Path:
    """The data set as ``<data dir>/hotpotqa/*.json`` under ``tmp_path``; returns the data dir."""
    root = tmp_path / "data" / "hotpotqa"
    root.mkdir(parents=True)
    qs = [{**q, "level": "easy", "context": [[t, s] for t, s in PARAGRAPHS.items()]} for q in QUESTIONS]
    (root / "hotpotqa_train.json").write_text(json.dumps(qs), encoding="utf-8")
    (root / "hotpotqa_train_corpus.json").write_text(json.dumps(PARAGRAPHS), encoding="utf-8")
    return tmp_path / "data"


# --------------------------------------------------------------------------------------------
# Test doubles
# --------------------------------------------------------------------------------------------
def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


class FakeBuilds:
    """A fake ``run_build``: ingests .txt files into ``documents``, publishes a snapshot whose
    nodes are one leaf per sentence plus one level-1 'summary' per two documents."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, sources: list[str], corpus_dir: str, config: ArboragConfig, *, progress: bool = True) -> dict[str, Any]:
        self.calls.append((corpus_dir, config.segment.strategy))
        corpus = Corpus(corpus_dir).ensure()
        files = sorted(p for s in sources for p in Path(s).glob("*.txt"))
        docs = []
        for p in files:
            text = p.read_text(encoding="utf-8")
            docs.append({"doc_id": hash_text(text), "uri": str(p), "title": text.splitlines()[0], "mime": "text/plain",
                         "n_chars": len(text), "text": text, "metadata": "{}", "ingested_at": None, "status": "ok", "error": None})
        corpus.write("documents", pa.Table.from_pylist(docs, schema=DOCUMENTS))
        nodes = []
        for d in docs:
            for sent in re.split(r"(?<=\.)\s+|\n", d["text"]):
                if sent.strip():
                    nodes.append({"node_id": short_id(d["doc_id"], sent), "level": 0, "text": sent.strip(), "n_tokens": len(_words(sent)),
                                  "doc_ids": [d["doc_id"]], "summary_of": None, "summarizer": "leaf", "summary_status": "leaf", "created_by_run": "fake"})
        for a, b in zip(docs[::2], docs[1::2]):
            text = a["text"].split(".")[0] + ". " + b["text"].split(".")[0] + "."
            nodes.append({"node_id": short_id("sum", a["doc_id"], b["doc_id"]), "level": 1, "text": text, "n_tokens": len(_words(text)),
                          "doc_ids": [a["doc_id"], b["doc_id"]], "summary_of": "c", "summarizer": "fake", "summary_status": "ok", "created_by_run": "fake"})
        snap = "snap-" + short_id([d["doc_id"] for d in docs], config.segment.strategy)
        partial = corpus.partial_dir(snap)
        pq.write_table(pa.Table.from_pylist(nodes, schema=NODES), partial / "nodes.parquet")
        corpus.publish(partial, snap, {"strategy": config.segment.strategy})
        return {"snapshot": snap, "status": "ok", "noop": False}


class FakeIndex:
    """A fake ``query.Index``: scores nodes by word overlap with the question."""

    def __init__(self, corpus_dir: str, *, config: ArboragConfig | None = None, broken_modes: tuple[str, ...] = ()) -> None:
        from arborag.query import Hit

        self.Hit = Hit
        nodes = pq.read_table(Corpus(corpus_dir).snapshot_table_path("nodes")).to_pylist()
        self.nodes = nodes
        self.broken_modes = broken_modes
        self.searches = 0

    def search(self, text: str, *, mode: str = "collapsed", budget: int | None = 2000, k: int = 5,
               levels: list[int] | None = None, doc_ids: list[str] | None = None, **options: Any) -> list[Any]:
        self.searches += 1
        if mode in self.broken_modes:
            raise QueryError(text, f"mode {mode} is broken in this fake")
        q = set(_words(text))
        cands = [n for n in self.nodes if levels is None or n["level"] in levels]
        if mode == "sparse":
            cands = [n for n in cands if n["level"] == 0]
        scored = sorted(((len(q & set(_words(n["text"]))) / (1 + len(_words(n["text"]))) ** 0.5, n) for n in cands),
                        key=lambda sn: (-sn[0], sn[1]["node_id"]))
        out, used = [], 0
        for score, n in scored:
            if score <= 0 or (budget is not None and used + n["n_tokens"] > budget):
                continue
            out.append(self.Hit(n["node_id"], n["level"], float(score), n["text"], tuple(n["doc_ids"]), n["n_tokens"]))
            used += n["n_tokens"]
        return out


class FakeOpener:
    def __init__(self) -> None:
        self.opened: list[str] = []

    def __call__(self, corpus_dir: str, *, config: ArboragConfig | None = None) -> FakeIndex:
        self.opened.append(str(corpus_dir))
        return FakeIndex(corpus_dir, config=config)


class FakeVectorIndex(FakeIndex):
    """A FakeIndex that, like query.Index, embeds queries and accepts a precomputed vector."""

    def __init__(self, corpus_dir: str, **kw: Any) -> None:
        super().__init__(corpus_dir, **kw)
        self.embedded: list[int] = []
        self.vectors_seen = 0

    def embed_queries(self, texts: list[str]) -> list[list[float]]:
        self.embedded.append(len(texts))
        return [[float(len(t))] for t in texts]

    def search(self, text: str, *, vector: Any = None, **kw: Any) -> list[Any]:  # type: ignore[override]
        if vector is not None:
            assert vector == [float(len(text))]
            self.vectors_seen += 1
        return super().search(text, **kw)

