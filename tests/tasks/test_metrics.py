"""Metrics against hand-computed values, including the edge cases (empty retrieval, an answer
that spans two nodes, Unicode)."""

from __future__ import annotations

import math

import pytest

from arborag.tasks.evaluation import metrics as M
from arborag.tasks.evaluation.metrics import GoldItem, Retrieved


# -- normalization ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The  Cat, sat!", "cat sat"),
        ("An apple a day", "apple day"),
        ("  Théâtre   du Soleil ", "théâtre du soleil"),
        ("“Maha Sona” — demon", "maha sona demon"),  # Unicode quotes and dash are punctuation
        ("Alu\u0302", "alû"),  # NFKC composes u + combining circumflex
        ("the", ""),
        ("", ""),
    ],
)
def test_normalize_answer(text: str, expected: str) -> None:
    assert M.normalize_answer(text) == expected


def test_span_answers_exclude_yes_no_and_empty() -> None:
    assert M.is_span_answer("a spirit")
    assert not M.is_span_answer("Yes")
    assert not M.is_span_answer("no.")
    assert not M.is_span_answer("The")


# -- answer in context -------------------------------------------------------------------------
def test_answer_hit_basic_and_word_boundaries() -> None:
    assert M.answer_hit(["a spirit"], ["Lilu is a Spirit of the air."]) == 1.0
    # "spirit" must match whole words: "spiritual" does not count
    assert M.answer_hit(["spirit"], ["a spiritual being"]) == 0.0


def test_answer_hit_empty_retrieval() -> None:
    assert M.answer_hit(["Paris"], []) == 0.0


def test_answer_hit_not_applicable_for_yes_no() -> None:
    assert M.answer_hit(["yes"], ["yes it is"]) is None
    assert M.answer_hit([], ["anything"]) is None


def test_answer_hit_any_reference_counts() -> None:
    assert M.answer_hit(["schoolmistresses", "a school"], ["they set up a school."]) == 1.0


def test_answer_applicable_needs_the_answer_in_the_gold_evidence() -> None:
    assert M.answer_applicable(["a school"], ["They set up a school in town."])
    assert not M.answer_applicable(["They are schoolmistresses."], ["They set up a school in town."])
    assert M.answer_applicable(["They are schoolmistresses.", "a school"], ["They set up a school."])
    assert M.answer_applicable(["Paris"], None)  # no gold text known: applicable
    assert not M.answer_applicable(["yes"], ["yes"])


def test_answer_spanning_two_adjacent_nodes_counts() -> None:
    ctx = ["He was born in New", "York City in 1950."]
    assert M.answer_hit(["New York City"], ctx) == 1.0
    # not adjacent in the retrieved order: the reader never sees the span
    assert M.answer_hit(["New York City"], ["He was born in New", "unrelated text", "York City in 1950."]) == 0.0


def test_answer_hit_unicode() -> None:
    assert M.answer_hit(["Alû"], ["Gallu and Alu\u0302 are demons"]) == 1.0
    assert M.answer_hit(["東京"], ["首都は 東京 です"]) == 1.0


# -- evidence ----------------------------------------------------------------------------------
GOLD = [GoldItem("A", frozenset({"dA"}), "Alpha paragraph about the first gold thing here"),
        GoldItem("B", frozenset({"dB"}), "Beta paragraph about the second gold thing here")]


def test_evidence_matches_leaves_by_document() -> None:
    hits = [
        Retrieved(0, "x", ("dX",)),
        Retrieved(0, "alpha chunk", ("dA",)),
        Retrieved(0, "another alpha chunk", ("dA",)),
        Retrieved(0, "beta chunk", ("dB",)),
    ]
    m = M.evidence_matches(hits, GOLD)
    assert m == [frozenset(), frozenset({0}), frozenset({0}), frozenset({1})]
    assert M.recall_at(m, 2, 1) == 0.0
    assert M.recall_at(m, 2, 2) == 0.5
    assert M.recall_at(m, 2, 3) == 0.5
    assert M.recall_at(m, 2) == 1.0
    assert M.full_support(m, 2, 3) == 0.0
    assert M.full_support(m, 2) == 1.0
    assert M.reciprocal_rank(m) == 0.5
    # gains at ranks 2 and 4 (rank 3 repeats gold A): (1/log2 3 + 1/log2 5) / (1 + 1/log2 3)
    expected = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert M.ndcg_at(m, 2, 10) == pytest.approx(expected)
    assert M.ndcg_at(m, 2, 10) == pytest.approx(0.650921, abs=1e-6)


def test_summary_nodes_count_only_by_text_overlap() -> None:
    descends = Retrieved(1, "a summary about many unrelated things entirely", ("dA", "dB", "dC"))
    quotes = Retrieved(1, "Summary: alpha paragraph about the first gold thing here, and more", ("dC",))
    m = M.evidence_matches([descends, quotes], GOLD)
    assert m == [frozenset(), frozenset({0})]


def test_text_and_doc_plus_text_matching() -> None:
    gold = [GoldItem("p1", frozenset({"d1"}), "net sales increased nine percent to four billion dollars in the quarter")]
    inside = Retrieved(0, "Net sales increased nine percent to four billion dollars", ("d1",))
    other_doc = Retrieved(0, "Net sales increased nine percent to four billion dollars", ("d2",))
    off_topic = Retrieved(0, "The board approved the dividend", ("d1",))
    assert M.evidence_matches([inside, other_doc, off_topic], gold, match="text") == [frozenset({0}), frozenset({0}), frozenset()]
    assert M.evidence_matches([inside, other_doc, off_topic], gold, match="doc+text") == [frozenset({0}), frozenset(), frozenset()]


def test_text_overlap_values() -> None:
    # articles are dropped: 5 tokens vs 8 tokens, the single 5-gram of a lies in b
    assert M.text_overlap("the cat sat on the mat today", "cat sat on mat today and then left") == 1.0
    assert M.text_overlap("", "x") == 0.0
    # short texts use n = their length: 2 words, one of the 2 bigrams of b is shared
    assert M.text_overlap("red fox", "red fox jumps") == 1.0
    assert M.text_overlap("one two three four five six", "one two three four five seven") == pytest.approx(0.5)


def test_empty_retrieval_metrics() -> None:
    m = M.evidence_matches([], GOLD)
    assert m == []
    assert M.recall_at(m, 2, 5) == 0.0
    assert M.recall_at(m, 2) == 0.0
    assert M.full_support(m, 2) == 0.0
    assert M.reciprocal_rank(m) == 0.0
    assert M.ndcg_at(m, 2) == 0.0
    assert M.level_mix([]) is None


def test_no_gold_is_not_applicable() -> None:
    assert M.recall_at([frozenset()], 0) is None
    assert M.reciprocal_rank([frozenset()], 0) is None
    assert M.ndcg_at([frozenset()], 0) is None


def test_ndcg_perfect_and_truncated() -> None:
    assert M.ndcg_at([frozenset({0}), frozenset({1})], 2) == pytest.approx(1.0)
    # one gold item found at rank 1, the other beyond k=1: DCG 1, IDCG 1 (min(n_gold, k) = 1)
    assert M.ndcg_at([frozenset({0}), frozenset({1})], 2, k=1) == pytest.approx(1.0)
    # one node covering both gold items gains once
    assert M.ndcg_at([frozenset({0, 1})], 2) == pytest.approx(1 / (1 + 1 / math.log2(3)))


def test_level_mix() -> None:
    assert M.level_mix([0, 0, 1, 2]) == 0.5
    assert M.level_mix([0]) == 0.0


def test_percentile_and_mean() -> None:
    assert M.percentile([4, 1, 3, 2], 50) == 2.5
    assert M.percentile([1, 2, 3, 4], 95) == pytest.approx(3.85)
    assert M.percentile([7], 95) == 7
    assert M.percentile([], 50) is None
    assert M.mean([1.0, None, 0.0, float("nan")]) == 0.5
    assert M.mean([None]) is None


# -- answer quality ----------------------------------------------------------------------------
def test_token_f1_and_em() -> None:
    # pred tokens [cat, sat], ref [cat, sat, down]: P = 1, R = 2/3, F1 = 0.8
    assert M.token_f1("The cat sat", ["a cat sat down"]) == pytest.approx(0.8)
    assert M.token_f1("The cat sat", ["dog", "the cat sat!"]) == 1.0
    assert M.token_f1("", ["x"]) == 0.0
    assert M.token_f1("anything", []) == 0.0
    assert M.exact_match("The Cat sat.", ["cat sat"]) == 1.0
    assert M.exact_match("cat", ["cat sat"]) == 0.0


def test_rouge_l() -> None:
    # LCS 3 of 3 predicted / 4 reference tokens: P = 1, R = 0.75, F = 6/7
    assert M.rouge_l("the cat sat", ["the cat sat on"]) == pytest.approx(6 / 7)
    assert M.rouge_l("Alû est là", ["alû est là"]) == pytest.approx(1.0)
    assert M.rouge_l("Alû", ["Ala"]) == 0.0  # the default rouge tokenizer would reduce both to "al"
    assert M.rouge_l("x", []) == 0.0


def test_bleu() -> None:
    hyp, ref = "the cat sat on the mat", "the cat sat on a mat"
    # unigram precision 5/6, BP 1
    assert M.bleu(hyp, [ref], n=1) == pytest.approx(5 / 6, abs=1e-4)
    # (5/6 * 3/5 * 2/4 * 1/3) ** (1/4)
    assert M.bleu(hyp, [ref], n=4) == pytest.approx((5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25, abs=1e-4)
    assert M.bleu("", [ref]) == 0.0
    assert M.bleu(hyp, [hyp]) == pytest.approx(1.0)
    assert M.corpus_bleu([hyp, "a b"], [[ref], ["a b", "a c"]], n=1) > 0.8
