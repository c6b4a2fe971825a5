"""``arborag ask`` on the demo corpus: citations that point at the right nodes, refusals, no LLM.

The demo corpus (cinderella.txt) is built once for the session with the real embedder; the
LLM is a scripted fake (in-process) or the fake OpenAI-compatible server (over HTTP).
"""

from __future__ import annotations

import json
import re

import pytest
from fake_llm_server import FakeLLMServer, error, reply
from helpers.llm import ScriptedFakeChat

from arborag.errors import LLMError

pytestmark = pytest.mark.slow

Q = "How did Cinderella reach her happy ending?"
# The passage that tells the ending: the prince rides away with her, the doves call her the true bride.
ENDING = re.compile(r"true bride|took cinderella on his horse|rode away with her", re.IGNORECASE)


class CitingFake(ScriptedFakeChat):
    """FAKE LLM that reads the numbered passages of its prompt and cites the one that tells the
    ending (as a model would): it proves that [n] maps back to the passage it was shown as n."""

    def __init__(self) -> None:
        super().__init__()

    def complete(self, messages, *, max_tokens, temperature=0.0, prompt_tag=None, **params):
        from arborag.llm.types import Completion

        self.calls.append((prompt_tag, [dict(m) for m in messages]))
        prompt = messages[-1]["content"]
        numbers = [int(m.group(1)) for m in re.finditer(r"^\[(\d+)\] (.*)$", prompt, re.MULTILINE) if ENDING.search(m.group(2))]
        text = json.dumps({"supported": bool(numbers), "answer": f"The prince rode away with her as the true bride [{numbers[0]}]."
                           if numbers else "The passages do not say.", "citations": numbers[:1]})
        return Completion(text, 100, 20, False, True, "fake")


@pytest.fixture(scope="module")
def demo_index(demo_corpus):
    from arborag.config import load_config
    from arborag.query import open_index

    index = open_index(demo_corpus, config=load_config(), light=True)
    yield index
    index.close()


def _doc_text(index, doc_id: str) -> str:
    docs = index.documents()
    return docs.column("text").to_pylist()[docs.column("doc_id").to_pylist().index(doc_id)]


def test_searchers_ask_cites_the_right_node(demo_index):
    from arborag.query.answer import ask

    fake = CitingFake()
    ans = ask(demo_index, Q, llm=fake, mode="collapsed", budget=2000)
    assert ans.status == "answered", ans
    assert fake.tags == ["answer-with-citations@v2"]
    (cited,) = ans.cited
    # [n] is the n-th retrieved hit, and that node tells the ending
    hits = demo_index.search(Q, mode="collapsed", budget=2000)
    assert cited.node_id == hits[cited.n - 1].node_id
    assert ENDING.search(cited.text)
    assert cited.docs[0].title == "cinderella" and cited.docs[0].uri.endswith("cinderella.txt")
    if cited.level == 0:  # a leaf: its offsets cut its text out of the document
        doc = _doc_text(demo_index, cited.docs[0].doc_id)
        assert " ".join(doc[cited.start_char:cited.end_char].split()) == " ".join(cited.text.split())
    assert ans.usage.tokens_in == 100 and ans.usage.tokens_out == 20 and ans.cost > 0
    data = ans.to_dict()
    assert data["cited"] == [cited.node_id] and data["status"] == "answered"


def test_searchers_ask_every_leaf_source_has_offsets(demo_index):
    from arborag.query.answer import ask

    ans = ask(demo_index, Q, llm=None, mode="hybrid", budget=1000)
    assert ans.status == "no_llm" and ans.sources
    leaves = [s for s in ans.sources if s.level == 0]
    assert leaves and all(s.start_char is not None and s.end_char > s.start_char for s in leaves)
    assert all(s.start_char is None for s in ans.sources if s.level > 0)
    doc = _doc_text(demo_index, leaves[0].docs[0].doc_id)
    assert " ".join(doc[leaves[0].start_char:leaves[0].end_char].split()) == " ".join(leaves[0].text.split())


def test_searchers_ask_refuses_when_unsupported(demo_index):
    from arborag.query.answer import ask

    fake = ScriptedFakeChat('{"supported": false, "answer": "The passages do not name her shoe size.", "citations": []}')
    ans = ask(demo_index, "What was Cinderella's shoe size in centimetres?", llm=fake, budget=500)
    assert ans.status == "refused" and ans.citations == [] and "shoe size" in ans.answer
    assert ans.sources  # the context is still there to inspect


def test_searchers_ask_uncited_or_bad_citations(demo_index):
    from arborag.query.answer import ask

    uncited = ask(demo_index, Q, llm=ScriptedFakeChat('{"supported": true, "answer": "She married the prince.", "citations": []}'), budget=500)
    assert uncited.status == "refused" and any("without citing" in w for w in uncited.warnings)
    mixed = ask(demo_index, Q, llm=ScriptedFakeChat('{"supported": true, "answer": "She married him [1][99].", "citations": [1, 99]}'), budget=500)
    assert mixed.status == "answered" and mixed.citations == [1]
    assert any("[99]" in w for w in mixed.warnings)
    plain = ask(demo_index, Q, llm=ScriptedFakeChat("```\nShe went to the ball and the prince found her [2].\n```"), budget=500)
    assert plain.status == "answered" and plain.citations == [2] and plain.parse_status == "repaired:text"


def test_searchers_ask_llm_failure_is_reported(demo_index):
    from arborag.query.answer import ask

    ans = ask(demo_index, Q, llm=ScriptedFakeChat(LLMError("fake-chat", "timeout after 60s (4 attempts)")), budget=500)
    assert ans.status == "failed" and "timeout" in ans.answer and ans.sources
    assert ans.usage.failures == 1


def test_searchers_ask_multi_counts_its_tokens(demo_index):
    from arborag.query.answer import ask

    fake = ScriptedFakeChat('{"variants": ["Cinderella marries the prince", "golden slipper fits"]}',
                            '{"supported": true, "answer": "The slipper fit [1].", "citations": [1]}')
    ans = ask(demo_index, Q, llm=fake, mode="multi", budget=800)
    assert fake.tags == ["query-variants@v1", "answer-with-citations@v2"]
    assert ans.status == "answered" and ans.usage.calls == 2
    assert ans.retrieval is not None and ans.retrieval["source"] == "llm"


def _run_cli(args, env):
    from typer.testing import CliRunner

    from arborag.cli.app import app

    return CliRunner().invoke(app, args, env=env)


def test_searchers_ask_cli_without_llm(demo_corpus, monkeypatch):
    for var in ("ARBORAG_LLM_BASE_URL", "ARBORAG_SUMMARIZE__BASE_URL", "ARBORAG_SUMMARIZE__BACKEND"):
        monkeypatch.delenv(var, raising=False)
    res = _run_cli(["ask", Q, "--corpus", str(demo_corpus), "--budget", "500"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "needs an LLM" in res.output and "ARBORAG_LLM_BASE_URL" in res.output
    assert "retrieved context" in res.output and "cinderella" in res.output and "node " in res.output
    res = _run_cli(["ask", Q, "--corpus", str(demo_corpus), "--budget", "500", "--json"], env={})
    data = json.loads(res.output)
    assert data["status"] == "no_llm" and data["sources"] and data["sources"][0]["docs"][0]["title"] == "cinderella"


def test_searchers_ask_cli_with_fake_server(demo_corpus, monkeypatch):
    with FakeLLMServer(model="fake-model") as srv:
        srv.script("Question: " + Q, reply('{"supported": true, "answer": "She married the prince [1].", "citations": [1]}'))
        srv.script("Question: broken", error(500))
        env = {"ARBORAG_LLM_BASE_URL": srv.base_url, "ARBORAG_LLM_MODEL": "fake-model", "ARBORAG_SUMMARIZE__RETRIES": "0"}
        res = _run_cli(["ask", Q, "--corpus", str(demo_corpus), "--budget", "500", "--json"], env=env)
        assert res.exit_code == 0, res.output
        data = json.loads(res.output)
        assert data["status"] == "answered" and data["citations"] == [1]
        assert data["cited"] == [data["sources"][0]["node_id"]] and data["model"] == "fake-model"
        u = data["usage"]
        assert u["calls"] == 1 and (u["tokens_in"] > 0 or u["cache_hits"] == 1)  # the corpus's LLM cache may hold it
        res = _run_cli(["ask", "broken question", "--corpus", str(demo_corpus), "--budget", "300"], env={**env, "COLUMNS": "200"})
        assert res.exit_code == 0 and "LLM failed" in res.output and "http 500" in res.output


def test_searchers_ask_level_shares_the_llm_and_its_tokens(demo_index):
    from arborag.query.answer import ask

    # every level step gets the same (useless for it) reply and falls back; the answer step parses it
    fake = ScriptedFakeChat('{"supported": true, "answer": "At the ball [1].", "citations": [1]}', repeat_last=True)
    ans = ask(demo_index, Q, llm=fake, mode="level", budget=500)
    assert fake.tags[-1] == "answer-with-citations@v2" and len(fake.tags) > 1
    assert all(t.startswith("level-") for t in fake.tags[:-1])
    assert ans.status == "answered" and ans.usage.calls == len(fake.tags)
    assert ans.retrieval is not None and ans.usage.tokens_in > 0
