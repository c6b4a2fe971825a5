"""Pseudo-relevance feedback (RM3), pure: query/prf.py."""

from __future__ import annotations

import pytest

from arborag.query.prf import STOP_WORDS, Expansion, prf_variants, relevance_model, rm3, terms
from arborag.storage.lucene.parser import parse_query


def test_searchers_prf_terms_drop_stop_words_and_punctuation():
    assert terms("Who was THE author of Xanadu, (1990)?") == ["author", "xanadu", "1990"]
    assert {"and", "or", "not", "to"} <= STOP_WORDS  # Lucene operators never reach a query


def test_searchers_prf_relevance_model_by_hand():
    docs = ["solberg solberg bergen", "solberg oslo"]
    # P(w|d): d1 solberg 2/3, bergen 1/3; d2 solberg 1/2, oslo 1/2; doc weights 3:1
    rm = dict(relevance_model(docs, [3.0, 1.0], n_terms=10))
    assert rm["solberg"] == pytest.approx(0.75 * 2 / 3 + 0.25 * 0.5)
    assert rm["bergen"] == pytest.approx(0.75 / 3)
    assert rm["oslo"] == pytest.approx(0.25 * 0.5)
    assert sum(rm.values()) == pytest.approx(1.0)
    top1 = relevance_model(docs, [3.0, 1.0], n_terms=1)
    assert top1 == [("solberg", pytest.approx(1.0))]


def test_searchers_prf_rm3_interpolates_with_the_query():
    exp = rm3("xanadu author", ["mira solberg wrote xanadu"], n_terms=10, orig_weight=0.5)
    w = dict(exp.weighted)
    assert sum(w.values()) == pytest.approx(1.0)
    assert w["author"] == pytest.approx(0.25)  # 0.5 * 1/2, not in the feedback
    assert w["xanadu"] == pytest.approx(0.25 + 0.5 * 0.25)  # query and feedback
    assert w["solberg"] == pytest.approx(0.125)
    assert exp.weighted[0][0] == "xanadu"
    # no feedback terms: the query alone; no query terms: the feedback alone
    assert dict(rm3("xanadu", ["the of and"]).weighted) == {"xanadu": 1.0}
    assert dict(rm3("who is it", ["bergen"]).weighted) == {"bergen": 1.0}
    with pytest.raises(ValueError):
        rm3("x", ["y"], orig_weight=1.5)


def test_searchers_prf_expansion_renders_parseable_lucene():
    exp = rm3('What "is" AND-NOT x^2 field:y?', ["C++ (and) -minus +plus \"quotes\" ^caret 1990"])
    query = exp.lucene()
    parse_query(query)  # raises on a syntax error
    assert "^" in query and ":" not in query
    assert exp.text().split()[0] == exp.weighted[0][0]
    assert Expansion(()).lucene() == "" and not Expansion(())


def test_searchers_prf_variants_pull_toward_different_documents():
    docs = ["Xanadu novel by Mira Solberg", "Kubla Khan poem by Coleridge", "Xanadu film with Olivia"]
    vs = prf_variants("Who wrote Xanadu?", docs, [3.0, 2.0, 1.0], n=3, n_terms=5)
    assert len(vs) == 3
    assert "solberg" in dict(vs[1].weighted) and "solberg" not in dict(vs[2].weighted)
    assert "coleridge" in dict(vs[2].weighted)
    assert prf_variants("q", [], n=3) == []
    # identical documents give one distinct variant, not three copies
    assert len(prf_variants("q", ["same words here", "same words here"], n=3)) == 1
