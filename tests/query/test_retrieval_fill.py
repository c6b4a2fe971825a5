"""Best-first budget fill over every node (regression tests), on hand-made snapshots.

Reproduction from the issue: 70 nodes of 1,500 tokens rank above one node of 10 tokens; with a
2,000-token budget the fill must take one large node and then the small one (1,510 used), not
stop inside a candidate window at 1,500. The same for the ``sparse`` and ``hybrid`` modes, and
the vectorized fill is checked against the obvious loop on random inputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.query import FakeQueryEmbedder, publish_snapshot, unit

from arborag.config import SparseConfig
from arborag.query import open_index
from arborag.query.index import greedy_fill, top_order
from arborag.storage.corpus import Corpus


def _big_then_small_spec() -> list:
    # 70 large leaves, all close to "alpha", then one small leaf a little further away
    spec = [(f"big{i:02d}", 0, unit(1, 0.001 * i, 0, 0), 1500, [f"d{i}"]) for i in range(70)]
    # a longer text: the weakest BM25 match for "alpha" too (length normalization)
    spec.append(("small-leaf-with-more-words", 0, unit(1, 0.2, 0, 0), 10, ["dsmall"]))
    return spec


@pytest.fixture()
def big_small_dir(tmp_path):
    corpus = Corpus(tmp_path / "c").ensure()
    publish_snapshot(corpus, "snap-fill", spec=_big_then_small_spec(), edges_spec=[], text="alpha {}",
                     sparse=SparseConfig(backend="embedded"))
    return corpus.root


@pytest.mark.parametrize("mode", ["collapsed", "hybrid"])
def test_retrieval_small_node_fills_after_large_ones(big_small_dir, mode):
    index = open_index(big_small_dir, embed_query=FakeQueryEmbedder())
    hits = index.search("alpha", mode=mode, budget=2000)
    used = sum(h.n_tokens for h in hits)
    assert used == 1510, [(h.node_id, h.n_tokens) for h in hits]
    assert hits[-1].node_id == "small-leaf-with-more-words"


def test_retrieval_sparse_fill_reaches_past_its_first_candidates(big_small_dir):
    index = open_index(big_small_dir, embed_query=FakeQueryEmbedder())
    hits = index.search("alpha", mode="sparse", budget=2000)
    assert sum(h.n_tokens for h in hits) == 1510


def _loop_fill(sizes: np.ndarray, budget: int) -> list[int]:
    out, used = [], 0
    for i, n in enumerate(sizes.tolist()):
        if used + n <= budget:
            out.append(i)
            used += n
    return out


def test_retrieval_greedy_fill_equals_the_plain_loop():
    rng = np.random.default_rng(12)
    for _ in range(200):
        n = int(rng.integers(0, 60))
        sizes = rng.integers(1, 900, size=n)
        budget = int(rng.integers(1, 3000))
        assert greedy_fill(sizes, budget).tolist() == _loop_fill(sizes, budget)


def test_retrieval_top_order_is_score_then_row():
    rng = np.random.default_rng(3)
    for _ in range(100):
        n = int(rng.integers(1, 80))
        rows = rng.permutation(1000)[:n]
        scores = rng.integers(0, 5, size=n).astype(np.float64)  # many ties
        m = int(rng.integers(1, n + 1))
        expected = sorted(range(n), key=lambda i: (-scores[i], rows[i]))[:m]
        assert top_order(rows, scores, m).tolist() == expected
