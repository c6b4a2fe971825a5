"""arborag.query.fusion: reciprocal rank fusion and MMR, against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from arborag.query.fusion import mmr, rrf


def test_rrf_hand_computed_k60() -> None:
    fused = rrf([["a", "b", "c"], ["b", "c", "d"]], k=60)
    # a: 1/61; b: 1/62 + 1/61; c: 1/63 + 1/62; d: 1/63
    assert [item for item, _ in fused] == ["b", "c", "a", "d"]
    expected = {"a": 1 / 61, "b": 1 / 62 + 1 / 61, "c": 1 / 63 + 1 / 62, "d": 1 / 63}
    for item, score in fused:
        assert math.isclose(score, expected[item], rel_tol=1e-12)


def test_rrf_default_k_is_60() -> None:
    assert rrf([["x"]]) == [("x", 1 / 61)]


def test_rrf_small_k_changes_the_winner() -> None:
    # k=0: a = 1/1 = 1.0 (first in one list only); b = 1/2 + 1/2 = 1.0 ... tie broken by best rank
    rankings = [["a", "b"], ["c", "b"]]
    assert rrf(rankings, k=0)[0] == ("a", 1.0)
    # k=60: b = 2/62 = 0.03226 beats a = 1/61 = 0.01639
    assert rrf(rankings, k=60)[0][0] == "b"


def test_rrf_ties_are_deterministic() -> None:
    # x and y both score 1/2 + 1/3 with k=1, and both reached rank 1: first appearance wins.
    assert [i for i, _ in rrf([["x", "y"], ["y", "x"]], k=1)] == ["x", "y"]
    assert [i for i, _ in rrf([["y", "x"], ["x", "y"]], k=1)] == ["y", "x"]


def test_rrf_counts_a_repeated_id_once_per_ranking() -> None:
    fused = dict(rrf([["a", "a", "b"]], k=1))
    assert fused == {"a": 1 / 2, "b": 1 / 4}


def test_rrf_empty_inputs() -> None:
    assert rrf([]) == []
    assert rrf([[], []]) == []


def test_rrf_rejects_negative_k() -> None:
    with pytest.raises(ValueError):
        rrf([["a"]], k=-1)


# q = e1; d0 close to q, d1 a near-duplicate of d0, d2 less relevant but different.
Q = np.array([1.0, 0.0])
D = np.array([[0.96, 0.28], [0.936, 0.352], [0.6, -0.8]])


def test_mmr_hand_computed_lambda_half() -> None:
    # step 1: 0.5*sim(q,d): d0 .48, d1 .468, d2 .30                     -> d0
    # step 2: d1: .468 - .5*sim(d1,d0)=.468-.5*.99712 = -.03056;  d2: .30 - .5*.352 = .124 -> d2
    # step 3: d1 is left                                                 -> d1
    assert mmr(Q, D, k=3) == [0, 2, 1]
    assert mmr(Q, D, k=2, lambda_=0.5) == [0, 2]


def test_mmr_lambda_one_is_relevance_order_and_zero_is_diversity() -> None:
    assert mmr(Q, D, k=3, lambda_=1.0) == [0, 1, 2]
    # lambda 0: first pick has no penalty anywhere (all 0) -> index 0; then least similar to d0: d2
    assert mmr(Q, D, k=2, lambda_=0.0) == [0, 2]


def test_mmr_normalises_vectors_and_uses_relevance_override() -> None:
    assert mmr(Q * 7, D * 3, k=3) == [0, 2, 1]
    # relevance puts d2 first; then d0 (.5*.5 - .5*.352 = .074) beats d1 (.5*.4 - .5*.28 = .06)
    assert mmr(Q, D, k=2, relevance=[0.5, 0.4, 0.9]) == [2, 0]


def test_mmr_edge_cases() -> None:
    assert mmr(Q, D, k=0) == []
    assert mmr(Q, D, k=10) == [0, 2, 1]  # k larger than n
    assert mmr(Q, np.zeros((0, 2)), k=3) == []
    with pytest.raises(ValueError):
        mmr(Q, D, k=1, lambda_=1.5)
    with pytest.raises(ValueError):
        mmr(Q, D, k=1, relevance=[1.0])


# -- fuse / normalize (score fusion over node rows) -------------------------------------------
from arborag.query.fusion import fuse, normalize  # noqa: E402


def test_fuse_rrf_matches_rrf_on_ids() -> None:
    dense = (np.array([3, 1, 2]), np.array([0.9, 0.8, 0.1]))
    sparse = (np.array([2, 5]), np.array([4.0, 1.0]))
    rows, scores = fuse([dense, sparse], method="rrf", k=60)
    by_row = dict(zip(rows.tolist(), scores.tolist()))
    expected = dict(rrf([[3, 1, 2], [2, 5]], k=60))
    assert by_row.keys() == expected.keys()
    for r, s in expected.items():
        assert math.isclose(by_row[r], s, rel_tol=1e-12)


def test_fuse_minmax_is_a_convex_combination_of_normalized_scores() -> None:
    dense = (np.array([3, 1, 2]), np.array([0.9, 0.8, 0.1]))
    sparse = (np.array([2, 5]), np.array([4.0, 1.0]))
    rows, scores = fuse([dense, sparse], method="minmax", weights=[0.5, 0.5], absent=[None, 0.0])
    got = dict(zip(rows.tolist(), scores.tolist()))
    # dense: (s - 0.1) / 0.8; sparse: (s - 1) / 3, a row absent from BM25 counts as score 0 -> -1/3;
    # row 5 is absent from the dense list: its lowest normalized value (0)
    assert got[3] == pytest.approx(0.5 * 1.0 + 0.5 * (-1 / 3))
    assert got[1] == pytest.approx(0.5 * 0.875 + 0.5 * (-1 / 3))
    assert got[2] == pytest.approx(0.5 * 0.0 + 0.5 * 1.0)
    assert got[5] == pytest.approx(0.5 * 0.0 + 0.5 * 0.0)


def test_fuse_zscore_and_the_weights_decide() -> None:
    dense = (np.array([0, 1]), np.array([1.0, 0.0]))
    sparse = (np.array([0, 1]), np.array([0.0, 1.0]))
    rows, s = fuse([dense, sparse], method="zscore", weights=[0.8, 0.2])
    assert rows[np.argmax(s)] == 0  # the heavier list wins
    rows, s = fuse([dense, sparse], method="zscore", weights=[0.2, 0.8])
    assert rows[np.argmax(s)] == 1


def test_normalize_anchors_on_the_head_and_keeps_the_tail_order() -> None:
    s = np.array([10.0, 9.0, 8.0, 1.0, 0.5])
    out, miss = normalize(s, "minmax", depth=3, absent=0.0)
    assert out[:3].tolist() == [1.0, 0.5, 0.0] and out[3] < 0 and out[3] > out[4]
    assert miss == pytest.approx((0.0 - 8.0) / 2.0)
    z, _ = normalize(s, "zscore", depth=3)
    assert z[:3].mean() == pytest.approx(0.0, abs=1e-12)


def test_fuse_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown method"):
        fuse([(np.array([1]), np.array([1.0]))], method="nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="weights"):
        fuse([(np.array([1]), np.array([1.0]))], method="minmax", weights=[0.5, 0.5])
    assert fuse([], method="zscore")[0].size == 0
