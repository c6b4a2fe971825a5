"""``--mode level`` driven by a FAKE routed chat LLM: every branch of the high- and low-level searchers."""

from __future__ import annotations

import json
import logging

import pytest
from helpers.level import QUESTION, RoutedFakeChat, level_index  # noqa: F401 - fixture

import arborag.query.level as level
from arborag.errors import BackendUnavailable, QueryError
from arborag.query.level import LevelHits, LevelTrace
from arborag.query.level.searchers import compose, offline_lucene
from arborag.query.level.web import WebResult

ENOUGH = '{"sufficient": true, "action": "none", "keywords": []}'
DENSE_ENOUGH = '{"sufficient": true, "passage": ""}'


def _script(**over):
    """A quiet default script: no decomposition, simple rewrites, every verdict 'enough'."""
    s = {
        "level-decompose": ['{"questions": []}'],
        "level-sparse-rewrite": ['{"query": "\\"Xanadu\\" author"}'],
        "level-sparse-feedback": [ENOUGH],
        "level-hyde": ['{"passage": "Xanadu is a novel by an author who was born in a city."}'],
        "level-dense-feedback": [DENSE_ENOUGH],
        "level-summarize": ["The author is Mira Solberg."],
        "level-verify": ['{"sufficient": true, "reason": "", "questions": []}'],
    }
    s.update({k.replace("_", "-"): v for k, v in over.items()})
    return s


def _ids(hits):
    return [h.node_id for h in hits]


def test_level_offline_plan_without_llm(level_index, caplog, monkeypatch):
    monkeypatch.setattr(level, "_said_offline", False)
    with caplog.at_level(logging.WARNING, logger="arborag.query.level"):
        hits = level_index.search(QUESTION, mode="level", budget=60)
        again = level_index.search(QUESTION, mode="level", budget=60)
    assert isinstance(hits, LevelHits) and isinstance(hits.trace, LevelTrace)
    tr = hits.trace
    assert tr.plan == "offline" and "ARBORAG_LLM_BASE_URL" in tr.notice
    assert again.trace.notice == tr.notice
    said = [r for r in caplog.records if "no LLM configured" in r.getMessage()]
    assert len(said) == 1  # said once, not per query
    assert [s.text for s in tr.sub_questions] == [QUESTION]
    sparse, dense = tr.sub_questions[0].runs
    assert sparse.searcher == "sparse" and sparse.attempts[0].action == "offline"
    assert sparse.attempts[0].syntax == "lucene" and sparse.attempts[0].query == offline_lucene(QUESTION)
    assert dense.attempts[0].query == QUESTION and dense.attempts[0].action == "question"
    assert tr.calls == [] and tr.tokens_in == 0
    assert hits and sum(h.n_tokens for h in hits) <= 60
    assert {"xanadu", "sum-books"} & set(_ids(hits))


def test_level_offline_lucene_quotes_entities_and_drops_stop_words():
    q = offline_lucene("Who directed the film Blade Runner in 1982?")
    assert q.startswith('"Blade Runner"') and "directed" in q and "1982" in q
    for stop in (" the ", "Who", " in "):
        assert stop not in f" {q} "


def test_level_decomposes_into_many_sub_questions(level_index):
    fake = RoutedFakeChat(_script(level_decompose=['{"questions": ["Who wrote the novel Xanadu?", "Where was Mira Solberg born?"]}']))
    hits = level_index.search(QUESTION, mode="level", budget=200, llm=fake)
    tr = hits.trace
    assert tr.plan == "llm"
    assert [s.text for s in tr.sub_questions] == ["Who wrote the novel Xanadu?", "Where was Mira Solberg born?"]
    assert all(s.round == 1 for s in tr.sub_questions)
    assert fake.count("level-sparse-rewrite") == 2 and fake.count("level-hyde") == 2 and fake.count("level-summarize") == 2
    assert tr.sub_questions[0].summary == "The author is Mira Solberg."
    assert len(tr.verdicts) == 1 and tr.verdicts[0].enough
    # the second hop's page is found through its own sub-question's HyDE/rewrites
    assert {"xanadu", "solberg"} <= set(_ids(hits))
    assert tr.tokens_in > 0 and tr.tokens_out > 0 and len(tr.calls) == len(fake.calls)
    json.dumps(tr.to_dict())  # JSON-ready


@pytest.mark.parametrize("reply", ['{"questions": []}', '{"questions": ["Where was the author of Xanadu born"]}'])
def test_level_zero_or_one_sub_question(level_index, reply):
    fake = RoutedFakeChat(_script(level_decompose=[reply]))
    tr = level_index.search(QUESTION, mode="level", budget=100, llm=fake).trace
    assert len(tr.sub_questions) == 1
    assert tr.sub_questions[0].text.rstrip("?") == QUESTION.rstrip("?")


def test_level_verify_no_then_supplement_then_yes(level_index):
    fake = RoutedFakeChat(_script(
        level_decompose=['{"questions": ["Who wrote the novel Xanadu?"]}'],
        level_verify=['{"sufficient": false, "reason": "birthplace missing", "questions": ["Where was Mira Solberg born?"]}',
                      '{"sufficient": true, "reason": "", "questions": []}'],
    ))
    tr = level_index.search(QUESTION, mode="level", budget=200, llm=fake).trace
    assert [(s.text, s.round) for s in tr.sub_questions] == [("Who wrote the novel Xanadu?", 1), ("Where was Mira Solberg born?", 2)]
    assert [v.enough for v in tr.verdicts] == [False, True]
    assert tr.verdicts[0].supplements == ["Where was Mira Solberg born?"] and tr.verdicts[0].reason == "birthplace missing"
    assert fake.count("level-verify") == 2
    # the verifier saw the first round's finding
    verify_prompt = [m for n, m in fake.calls if n == "level-verify"][0][-1]["content"]
    assert "Who wrote the novel Xanadu? -> The author is Mira Solberg." in verify_prompt


def test_level_three_round_cap(level_index):
    never = [f'{{"sufficient": false, "questions": ["new question number {i}"]}}' for i in range(10)]
    fake = RoutedFakeChat(_script(level_verify=never))
    tr = level_index.search(QUESTION, mode="level", budget=200, llm=fake).trace
    assert tr.rounds == 3
    assert [s.round for s in tr.sub_questions] == [1, 2, 3]
    assert fake.count("level-verify") == 2  # no verify after the last allowed round
    tr1 = level_index.search(QUESTION, mode="level", budget=200, llm=RoutedFakeChat(_script(level_verify=never)), max_rounds=1).trace
    assert tr1.rounds == 1 and not tr1.verdicts


def test_level_never_repeats_a_sub_question(level_index):
    fake = RoutedFakeChat(_script(
        level_decompose=['{"questions": ["Who wrote the novel Xanadu?"]}'],
        level_verify=['{"sufficient": false, "questions": ["who wrote the novel  Xanadu", "Where was Mira Solberg born?"]}',
                      '{"sufficient": false, "questions": ["Where was Mira Solberg born?", "WHO WROTE THE NOVEL XANADU?"]}'],
    ))
    tr = level_index.search(QUESTION, mode="level", budget=200, llm=fake).trace
    texts = [s.text for s in tr.sub_questions]
    assert texts == ["Who wrote the novel Xanadu?", "Where was Mira Solberg born?"]
    assert tr.verdicts[0].dropped == ["who wrote the novel Xanadu"]
    assert tr.verdicts[1].supplements == [] and len(tr.verdicts[1].dropped) == 2
    assert "no new sub-question" in tr.verdicts[1].reason


def test_level_malformed_json_falls_back_per_step(level_index):
    fake = RoutedFakeChat(_script(
        level_decompose=["Sure! Here are some thoughts about the question."],
        level_sparse_feedback=["maybe, it depends"],
        level_dense_feedback=["{{{"],
        level_verify=['{"sufficient": "perhaps", "questions": 7}'],
    ))
    hits = level_index.search(QUESTION, mode="level", budget=100, llm=fake)
    tr = hits.trace
    assert [s.text for s in tr.sub_questions] == [QUESTION]  # decomposition fell back to the question
    errors = {c.step: c.error for c in tr.calls if c.error}
    assert "malformed" in errors["decompose"] and "malformed" in errors["sparse-feedback"]
    assert "malformed" in errors["dense-feedback"] and "malformed" in errors["verify"]
    assert tr.verdicts and "stopped" in tr.verdicts[0].reason
    assert hits  # the query still answers


def test_level_invalid_lucene_rewrite_is_reported_and_retried_plain(level_index):
    fake = RoutedFakeChat(_script(level_sparse_rewrite=['{"query": "\\"Mira Solberg AND (born"}']))
    tr = level_index.search("Where was Mira Solberg born?", mode="level", budget=100, llm=fake).trace
    attempts = tr.sub_questions[0].runs[0].attempts
    bad, retry = attempts[0], attempts[1]
    assert bad.syntax == "lucene" and bad.error and bad.error_position is not None and bad.hits == []
    assert "plain" in bad.note
    assert retry.action == "retry-plain" and retry.syntax == "plain" and retry.query == bad.query
    assert retry.hits and retry.hits[0][0] == "solberg"


def test_level_sparse_feedback_extend_filter_emphasize_really_execute(level_index):
    fake = RoutedFakeChat(_script(
        level_sparse_rewrite=['{"query": "Xanadu"}'],
        level_sparse_feedback=['{"sufficient": false, "action": "filter", "keywords": ["film"]}',
                               '{"sufficient": false, "action": "emphasize", "keywords": ["novel"]}'],
    ))
    tr = level_index.search(QUESTION, mode="level", budget=100, llm=fake, searchers=["sparse"]).trace
    a = tr.sub_questions[0].runs[0].attempts
    assert [x.action for x in a] == ["rewrite", "filter", "emphasize"]  # 3 rounds, the cap
    assert a[1].query == 'Xanadu -"film"' and a[2].query == 'Xanadu -"film" "novel"^2'
    assert "film" in [n for n, _ in a[0].hits] and "film" not in [n for n, _ in a[1].hits]  # the filter ran in the engine
    assert a[2].hits[0][0] == "xanadu"  # the boost ran too
    assert [x.verdict for x in a] == ["not enough", "not enough", None]
    assert fake.count("level-sparse-feedback") == 2
    assert compose("a", "extend", ["b c", "d"]) == 'a "b c" "d"'


def test_level_sparse_stops_on_a_repeated_query(level_index):
    fake = RoutedFakeChat(_script(
        level_sparse_rewrite=['{"query": "Xanadu"}'],
        level_sparse_feedback=['{"sufficient": false, "action": "filter", "keywords": ["film"]}'],
    ))
    a = level_index.search(QUESTION, mode="level", budget=100, llm=fake, searchers=["sparse"]).trace.sub_questions[0].runs[0].attempts
    assert [x.query for x in a] == ["Xanadu", 'Xanadu -"film"'] and "repeats" in a[1].note


def test_level_dense_hyde_rewrites_from_what_was_found(level_index):
    fake = RoutedFakeChat(_script(
        level_hyde=['{"passage": "The novel Xanadu was written by a Norwegian author."}'],
        level_dense_feedback=['{"sufficient": false, "passage": "Mira Solberg was born in a Norwegian city."}', DENSE_ENOUGH],
    ))
    tr = level_index.search(QUESTION, mode="level", budget=100, llm=fake, searchers=["dense"]).trace
    a = tr.sub_questions[0].runs[0].attempts
    assert [x.action for x in a] == ["hyde", "hyde"]
    assert a[0].query == QUESTION + "\nThe novel Xanadu was written by a Norwegian author."
    assert a[1].query.endswith("Mira Solberg was born in a Norwegian city.")
    assert a[1].hits[0][0] in ("solberg", "sum-books")
    feedback_prompt = [m for n, m in fake.calls if n == "level-dense-feedback"][0][-1]["content"]
    assert "Mira Solberg" in feedback_prompt  # conditioned on the hits it was shown


def test_level_scope_leaves_or_tree(level_index):
    q = "Xanadu Solberg Bergen summary"
    tree = level_index.search(q, mode="level", budget=None, k=20, llm=False)
    leaves = level_index.search(q, mode="level", budget=None, k=20, llm=False, scope="leaves")
    assert any(h.level == 1 for h in tree) and all(h.level == 0 for h in leaves)
    assert leaves.trace.scope == "leaves"
    with pytest.raises(QueryError, match="scope"):
        level_index.search(q, mode="level", llm=False, scope="roots")


def test_level_budget_and_unknown_option(level_index):
    for budget in (15, 40, 90):
        hits = level_index.search(QUESTION, mode="level", budget=budget, llm=False)
        assert 0 < sum(h.n_tokens for h in hits) <= budget
    with pytest.raises(QueryError, match="no option"):
        level_index.search(QUESTION, mode="level", n_variants=3)


class FakeWeb:
    """FAKE web provider (test double)."""

    name = "fake-web"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.queries: list[str] = []

    def search(self, query, *, k):
        self.queries.append(query)
        if self.fail:
            raise BackendUnavailable("fake-web", "http://127.0.0.1:9", "scripted outage")
        return [WebResult("https://example.org/solberg", "Mira Solberg", "Norwegian novelist, born in Bergen.")][:k]


def test_level_web_searcher_is_off_by_default_and_pluggable(level_index):
    off = level_index.search(QUESTION, mode="level", budget=200, llm=False)
    assert off.trace.searchers == ["sparse", "dense"]
    web = FakeWeb()
    hits = level_index.search(QUESTION, mode="level", budget=200, llm=False, web=web)
    assert hits.trace.searchers == ["sparse", "dense", "web"] and web.queries == [QUESTION]
    web_hits = [h for h in hits if h.node_id.startswith("web:")]
    assert web_hits and web_hits[0].level == -1 and web_hits[0].doc_ids == ("https://example.org/solberg",)
    broken = level_index.search(QUESTION, mode="level", budget=200, llm=False, web=FakeWeb(fail=True))
    run = broken.trace.sub_questions[0].runs[-1]
    assert run.searcher == "web" and "scripted outage" in run.attempts[0].error and broken


def test_level_a_rewrite_the_engine_refuses_even_plain_yields_no_hits_not_a_crash(level_index):
    from arborag.storage.lucene import MAX_CLAUSES

    huge = " ".join(f"w{i}" for i in range(MAX_CLAUSES + 5)) + " (unclosed"
    fake = RoutedFakeChat(_script(level_sparse_rewrite=[json.dumps({"query": huge})]))
    hits = level_index.search(QUESTION, mode="level", budget=100, llm=fake)
    bad, retry = hits.trace.sub_questions[0].runs[0].attempts[:2]
    assert bad.error and retry.action == "retry-plain" and "terms" in retry.error and retry.hits == []
    assert hits  # the dense searcher still found something
