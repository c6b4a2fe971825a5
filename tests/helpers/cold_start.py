"""A small snapshot with real 384-d vectors (the packaged model) for the cold-start tests:
the hand-made tree of tests/helpers/query.py, its node texts embedded for real, so a CLI
process can run a dense query end to end in a fresh interpreter."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from arborag.config import EmbedConfig, SparseConfig
from arborag.storage.corpus import Corpus

TEXT = "{} the glass slipper fitted her foot"
QUESTION = "a the glass slipper fitted her foot"


def publish_real_snapshot(root: Path, snapshot_id: str = "snap-cold") -> Path:
    from helpers.query import NODES_SPEC, publish_snapshot

    from arborag.embed.model import Embedder

    emb = Embedder(EmbedConfig())
    texts = [TEXT.format(node_id) for node_id, *_ in NODES_SPEC]
    vectors = np.vstack([emb.embed([t]) for t in texts])  # one text per call, as a query is embedded
    spec = [(nid, lvl, vectors[i], nt, docs) for i, (nid, lvl, _, nt, docs) in enumerate(NODES_SPEC)]
    corpus = Corpus(root).ensure()
    publish_snapshot(corpus, snapshot_id, spec=spec, text=TEXT, sparse=SparseConfig(),
                     info={"sparse_backend": "embedded", "embed": EmbedConfig().model_dump()})
    return corpus.root
