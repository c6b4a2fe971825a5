"""Relevant segment extraction (docs/METHODS.md §6.8): hand-computed selections for every preset,
the selection rules (tie, negative gap, overall_max_length), stitching and the token budget.

Every expected number is computed by hand in the comments (values rounded to 6 decimals).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from arborag.query.rse import (
    Preset,
    RSEParams,
    Segment,
    best_segments,
    chunk_values,
    fit_segments,
    relevant_segments,
    stitch_segment,
)

# One reranked result list, best first: (doc, ordinal, relevance). All chunks have 700 chars
# (length factor 1). Ranks 5..11 are seven chunks of an irrelevant document "z" (relevance 0);
# rank 12 is a very relevant chunk of "c", outside the first 10 results.
RESULTS = (
    [("a", 1, 0.9), ("a", 2, 0.8), ("a", 4, 0.4), ("b", 0, 0.6), ("b", 1, 0.5)]
    + [("z", i, 0.0) for i in range(7)]
    + [("c", 0, 0.9)]
)


def _run(preset: Preset) -> list[Segment]:
    docs, ords, rel = zip(*RESULTS)
    return relevant_segments(list(docs), list(ords), list(rel), [700] * len(docs), preset.value)


def _spans(segs: list[Segment]) -> list[tuple[str, int, int]]:
    return [(s.doc_id, s.start, s.end) for s in segs]


def test_balanced_preset_joins_across_a_cheap_gap() -> None:
    # balanced: penalty 0.18, decay 30, min 0.5; candidate docs = those in the first 10
    # results: a, b, z (c at rank 12 is not a candidate).
    # a0 missing: -0.18            a1 rank0: 1*0.9 - 0.18 = 0.72
    # a2 rank1: e^(-1/30)=0.967216; *0.8 = 0.773773 - 0.18 = 0.593773
    # a3 missing: -0.18            a4 rank2: e^(-2/30)=0.935507; *0.4 = 0.374203 - 0.18 = 0.194203
    # a[1:5] = 0.72 + 0.593773 - 0.18 + 0.194203 = 1.327976 > a[1:3] = 1.313773 -> pick a[1:5]
    # b0 rank3: e^(-3/30)=0.904837; *0.6 = 0.542902 - 0.18 = 0.362902
    # b1 rank4: e^(-4/30)=0.875173; *0.5 = 0.437587 - 0.18 = 0.257587
    # b[0:2] = 0.620489 >= 0.5 -> pick; then only single chunks < 0.5 or negatives remain: stop.
    segs = _run(Preset.BALANCED)
    assert _spans(segs) == [("a", 1, 5), ("b", 0, 2)]
    assert segs[0].score == pytest.approx(1.327976, abs=1e-6)
    assert segs[1].score == pytest.approx(0.620489, abs=1e-6)


def test_precision_preset_does_not_join_and_stops_at_its_minimum() -> None:
    # precision: penalty 0.2, decay 30, min 0.7.
    # a1 = 0.9 - 0.2 = 0.7; a2 = 0.773773 - 0.2 = 0.573773; a3 = -0.2; a4 = 0.374203 - 0.2 = 0.174203
    # a[1:3] = 1.273773 > a[1:5] = 1.273773 - 0.2 + 0.174203 = 1.247976 -> pick a[1:3]
    # b[0:2] = (0.542902 - 0.2) + (0.437587 - 0.2) = 0.580489 < 0.7 -> stop.
    segs = _run(Preset.PRECISION)
    assert _spans(segs) == [("a", 1, 3)]
    assert segs[0].score == pytest.approx(1.273773, abs=1e-6)


def test_find_all_preset_reaches_lower_ranks_and_more_documents() -> None:
    # find_all: penalty 0.18, decay 200, min 0.4, documents from the first 200 results (a,b,z,c).
    # a1 = 0.72; a2: e^(-1/200)=0.995012; *0.8 = 0.796010 - 0.18 = 0.616010
    # a4: e^(-2/200)=0.990050; *0.4 = 0.396020 - 0.18 = 0.216020; a[1:5] = 0.72+0.61601-0.18+0.21602 = 1.372030
    # b0: e^(-3/200)=0.985112; *0.6 = 0.591067 - 0.18 = 0.411067
    # b1: e^(-4/200)=0.980199; *0.5 = 0.490099 - 0.18 = 0.310099; b[0:2] = 0.721167
    # c0 rank12: e^(-12/200)=0.941765; *0.9 = 0.847588 - 0.18 = 0.667588 >= 0.4
    # picks by value: a[1:5] 1.372030, b[0:2] 0.721167, c[0:1] 0.667588; z is all -0.18.
    segs = _run(Preset.FIND_ALL)
    assert _spans(segs) == [("a", 1, 5), ("b", 0, 2), ("c", 0, 1)]
    assert [s.score for s in segs] == pytest.approx([1.372030, 0.721167, 0.667588], abs=1e-6)


def test_presets_hold_the_spec_numbers() -> None:
    assert Preset.named("balanced") == RSEParams(15, 30, 0.5, 0.18, 30, top_k_for_document_selection=10)
    assert Preset.named("precision") == RSEParams(15, 30, 0.7, 0.2, 30, top_k_for_document_selection=10)
    assert Preset.named("find_all") == RSEParams(40, 200, 0.4, 0.18, 200, top_k_for_document_selection=200)
    with pytest.raises(AttributeError):
        Preset.BALANCED.value.max_length = 3  # type: ignore[misc]  # frozen


def test_value_function_length_adjustment_and_missing_chunks() -> None:
    p = Preset.BALANCED.value
    # a1 rank0 with 2,100 chars: (0.9 - 0.18) * 2100/700 = 0.72 * 3 = 2.16
    # a3 rank1 with 350 chars (short chunks are not scaled down): e^(-1/30)*0.5 - 0.18 = 0.303608
    # a0, a2 missing: rank 1000, relevance 0, unknown length -> -0.18
    vals = chunk_values(["a", "a"], [1, 3], [0.9, 0.5], [2100, 350], p)
    assert list(vals) == ["a"]
    assert vals["a"] == pytest.approx([-0.18, 2.16, -0.18, 0.303608], abs=1e-6)
    # with the document's real length, trailing unretrieved chunks exist too
    assert len(chunk_values(["a"], [1], [0.9], [700], p, doc_lengths={"a": 6})["a"]) == 6
    # a repeated chunk keeps its best rank: rank 0 -> 0.72, not rank 1
    assert chunk_values(["a", "a"], [0, 0], [0.9, 0.9], [700, 700], p)["a"][0] == pytest.approx(0.72)
    # no length adjustment
    flat = RSEParams(15, 30, 0.5, 0.18, 30, chunk_length_adjustment=False)
    assert chunk_values(["a"], [0], [0.9], [2100], flat)["a"][0] == pytest.approx(0.72)


P = RSEParams(max_length=15, overall_max_length=30, minimum_value=0.5, irrelevant_chunk_penalty=0.18, decay_rate=30)


def test_negative_gap_splits_a_segment_and_a_tie_goes_to_the_earlier_start() -> None:
    # a = [0.6, 0.5, -1.2, 0.7, 0.4]
    # a[0:2] = 1.1, a[3:5] = 1.1 (a tie: the earlier start wins), a[0:5] = 1.1 - 1.2 + 1.1 = 1.0
    # pick 1: a[0:2]; pick 2: a[3:5] (1.1); a[2] is negative and cannot start a run: stop.
    segs = best_segments({"a": np.array([0.6, 0.5, -1.2, 0.7, 0.4])}, P)
    assert _spans(segs) == [("a", 0, 2), ("a", 3, 5)]
    assert [s.score for s in segs] == pytest.approx([1.1, 1.1])


def test_tie_between_lengths_goes_to_the_shorter_and_between_documents_to_the_earlier() -> None:
    # a = [0.6, 0.0, -0.5]: a[0:1] = a[0:2] = 0.6 -> the shorter a[0:1]
    # b = [0.6]: ties a[0:1] but b comes later -> picked second
    segs = best_segments({"a": np.array([0.6, 0.0, -0.5]), "b": np.array([0.6])}, P)
    assert _spans(segs) == [("a", 0, 1), ("b", 0, 1)]


def test_overall_max_length_cuts_the_last_pick() -> None:
    # overall_max_length 5. a = [1, 1, 1] -> pick a[0:3] = 3.0 (2 chunks left).
    # b = [0.6, 0.1, 0.6]: b[0:3] = 1.3 would need 3 chunks > 2 left, so only runs of <= 2:
    # b[0:2] = 0.7 and b[1:3] = 0.7 tie -> the earlier b[0:2]; total 5 -> stop.
    p = RSEParams(15, 5, 0.5, 0.18, 30)
    segs = best_segments({"a": np.ones(3), "b": np.array([0.6, 0.1, 0.6])}, p)
    assert _spans(segs) == [("a", 0, 3), ("b", 0, 2)]
    assert segs[1].score == pytest.approx(0.7)
    assert sum(len(s) for s in segs) == 5


def test_max_length_and_document_borders() -> None:
    # max_length 2: a[0:3] (3.0) is too long; a[0:2] = a[1:3] = 2.0 -> a[0:2]; then a[2:3] = 1.0.
    # runs never cross from a into b even though a[2] and b[0] are adjacent in the scan.
    p = RSEParams(2, 30, 0.5, 0.18, 30)
    segs = best_segments({"a": np.ones(3), "b": np.ones(1)}, p)
    assert _spans(segs) == [("a", 0, 2), ("a", 2, 3), ("b", 0, 1)]
    assert best_segments({}, p) == []


def _reference(values: dict[str, np.ndarray], p: RSEParams) -> list[tuple[str, int, int]]:
    """The selection written as the plain triple loop of docs/METHODS.md §6.8 (slow, obviously right)."""
    picks: list[tuple[str, int, int]] = []
    total = 0
    while total < p.overall_max_length:
        best, arg = -math.inf, None
        for d, v in values.items():
            for s in range(len(v)):
                if v[s] < 0:
                    continue
                for e in range(s + 1, min(s + p.max_length, len(v)) + 1):
                    if v[e - 1] < 0 or total + e - s > p.overall_max_length:
                        continue
                    if any(pd == d and s < pe and e > ps for pd, ps, pe in picks):
                        continue
                    val = float(np.sum(v[s:e]))
                    if val > best + 1e-12:
                        best, arg = val, (d, s, e)
        if arg is None or best < p.minimum_value:
            break
        picks.append(arg)
        total += arg[2] - arg[1]
    return picks


@pytest.mark.parametrize("seed", range(20))
def test_vectorised_selection_matches_the_plain_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = {f"d{i}": rng.normal(0.0, 0.5, rng.integers(1, 25)) for i in range(rng.integers(1, 5))}
    p = RSEParams(int(rng.integers(1, 8)), int(rng.integers(1, 20)), 0.3, 0.18, 30)
    assert _spans(best_segments(values, p)) == _reference(values, p)


def test_stitch_joins_from_the_document_text_without_duplicates_or_gaps() -> None:
    text = "abcdefghij"
    starts, ends = [0, 3, 8], [4, 7, 10]  # chunks 0 and 1 overlap ("d"); "h" lies between 1 and 2
    assert stitch_segment(Segment("a", 0, 3, 1.0), text, starts, ends) == (0, 10, "abcdefghij")
    assert stitch_segment(Segment("a", 1, 3, 1.0), text, starts, ends) == (3, 10, "defghij")
    assert stitch_segment(Segment("a", 0, 2, 1.0), text, starts, ends) == (0, 7, "abcdefg")
    with pytest.raises(IndexError):
        stitch_segment(Segment("a", 2, 4, 1.0), text, starts, ends)


def test_fit_segments_to_a_token_budget() -> None:
    def cost(s: Segment) -> int:
        return 10 * len(s)

    segs = [Segment("a", 0, 2, 0.9), Segment("b", 0, 5, 2.0), Segment("c", 0, 1, 0.6)]
    # best first: b (50 tokens) overflows a budget of 35 and is skipped; a (20) fits; c (10) fits.
    assert fit_segments(segs, cost, 35) == [segs[0], segs[2]]
    # with values, an overflowing segment is trimmed from its lower-valued end:
    # budget 45: b (50) drops b4 (-0.1 < b0 0.2) -> b[0:4] = 2.0 + 0.1 = 2.1, 40 tokens, kept;
    #   a (20) would make 60: trimmed to a[0:1] (10) -> 50, still over -> dropped; c likewise.
    # budget 35: b[0:4] (40) still over -> drop b0 (0.2 < b3 0.3) -> b[1:4] = 2.1 - 0.2 = 1.9, 30 tokens.
    values = {"b": np.array([0.2, 0.9, 0.7, 0.3, -0.1]), "a": np.array([0.5, 0.4]), "c": np.array([0.6])}
    fitted = fit_segments(segs, cost, 45, values=values)
    assert [(s.doc_id, s.start, s.end) for s in fitted] == [("b", 0, 4)]
    assert fitted[0].score == pytest.approx(2.1)
    fitted = fit_segments(segs, cost, 35, values=values)
    assert [(s.doc_id, s.start, s.end) for s in fitted] == [("b", 1, 4)]
    assert fitted[0].score == pytest.approx(1.9)
    assert fit_segments(segs, cost, None) == [segs[1], segs[0], segs[2]]


@pytest.mark.parametrize("seed", range(5))
def test_fit_segments_bisection_matches_trimming_one_chunk_at_a_time(seed: int) -> None:
    """The trims of an overflowing segment are searched by bisection; the result must be the one
    the plain loop (trim, re-cost, repeat) gives. Costs vary per chunk and never grow on a trim."""
    from arborag.query.rse import _trim

    rng = np.random.default_rng(seed)
    docs = {d: rng.normal(0.2, 0.5, 30) for d in "abcd"}
    sizes = {d: rng.integers(5, 60, 30) for d in docs}
    segs = []
    for d in docs:
        s = int(rng.integers(0, 20))
        e = s + int(rng.integers(1, 11))
        segs.append(Segment(d, s, e, float(docs[d][s:e].sum())))

    def cost(seg: Segment) -> int:
        return int(sizes[seg.doc_id][seg.start : seg.end].sum())

    def plain(budget: int) -> list[Segment]:
        out, used = [], 0
        for seg in sorted(segs, key=lambda s: -s.score):
            cur = seg
            while cur is not None and used + cost(cur) > budget:
                cur = _trim(cur, docs[cur.doc_id])
            if cur is None or (cur is not seg and cur.score <= 0):
                continue
            out.append(cur)
            used += cost(cur)
            if used >= budget:
                break
        return out

    for budget in (20, 60, 150, 400):
        assert fit_segments(segs, cost, budget, values=docs) == plain(budget)
