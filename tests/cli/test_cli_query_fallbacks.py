"""`arborag query` says in its default output (no --json, no --trace) when an LLM-backed mode did
something else than ask the LLM: `multi` variants from PRF, `level`'s offline plan or failed steps.

Over the two-hop snapshot of helpers/level.py (FAKE embedder), with no LLM and with the FAKE LLM server.
"""

from __future__ import annotations

from fake_llm_server import FakeLLMServer, error, reply
from helpers.level import QUESTION
from helpers.llm import KEY_ENV
from typer.testing import CliRunner

from arborag.cli import app

runner = CliRunner()


def _query(level_corpus, mode, env=None) -> str:
    result = runner.invoke(app, ["query", QUESTION, "--corpus", str(level_corpus), "--mode", mode, "--budget", "100"], env=env)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def _env(srv: FakeLLMServer) -> dict[str, str]:
    return {"ARBORAG_LLM_BASE_URL": srv.base_url, "ARBORAG_LLM_MODEL": "fake-model",
            "ARBORAG_SUMMARIZE__API_KEY_ENV": KEY_ENV, KEY_ENV: "sk-fake", "ARBORAG_SUMMARIZE__RETRIES": "0"}


def _script_level(srv: FakeLLMServer, hyde=None) -> None:
    srv.script("Split the question into at most", reply('{"questions": ["Who wrote the novel Xanadu?", "Where was Mira Solberg born?"]}'))
    srv.script("Lucene query", reply('{"query": "Mira Solberg born"}'))
    srv.script("Query sent:", reply('{"sufficient": true}'))
    srv.script("that would answer the question, as it", hyde or reply('{"passage": "Mira Solberg wrote Xanadu and was born in Bergen."}'))
    srv.script("write a new short", reply('{"sufficient": true}'))
    srv.script("state what the passages say", reply("Mira Solberg, born in Bergen."))
    srv.script("Facts found so far", reply('{"sufficient": true, "questions": []}'))


def test_multi_without_an_llm_says_prf(level_corpus):
    out = _query(level_corpus, "multi")
    assert "note: multi: the query variants came from PRF" in out and "no LLM configured" in out


def test_multi_whose_llm_reply_is_unusable_says_why(level_corpus):
    with FakeLLMServer(model="fake-model") as srv:
        srv.script("", reply("not json at all"))
        out = _query(level_corpus, "multi", env=_env(srv))
        assert srv.completions(), "the LLM was not asked"
    assert "note: multi: the query variants came from PRF" in out and "fallback:" in out


def test_multi_with_working_llm_variants_says_nothing(level_corpus):
    with FakeLLMServer(model="fake-model") as srv:
        srv.script("", reply('{"queries": ["Xanadu novel author", "Mira Solberg birthplace", "author of Xanadu born"]}'))
        out = _query(level_corpus, "multi", env=_env(srv))
    assert "note:" not in out, out


def test_level_offline_plan_is_said(level_corpus):
    out = _query(level_corpus, "level")
    assert "note: level ran its offline plan, without an LLM" in out and "ARBORAG_LLM_BASE_URL" in out


def test_level_failed_steps_are_said(level_corpus):
    with FakeLLMServer(model="fake-model") as srv:
        _script_level(srv, hyde=error(500, message="HyDE is down"))  # every HyDE call fails
        out = _query(level_corpus, "level", env=_env(srv))
    assert "LLM step(s) failed and fell back" in out and "hyde" in out and "--trace shows each step" in out


def test_level_with_a_working_llm_says_nothing(level_corpus):
    with FakeLLMServer(model="fake-model") as srv:
        _script_level(srv)
        out = _query(level_corpus, "level", env=_env(srv))
    assert "note:" not in out, out
