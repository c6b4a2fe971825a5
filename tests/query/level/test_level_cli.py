"""``arborag query --mode level``: ``--trace`` prints the search tree, ``--json`` carries the trace;
over the two-hop snapshot (FAKE embedder), with no LLM and with the FAKE LLM server; and the
SearXNG provider against a local stand-in server."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from fake_llm_server import FakeLLMServer, reply
from helpers.level import QUESTION
from helpers.llm import KEY_ENV
from typer.testing import CliRunner

from arborag.cli import app
from arborag.errors import BackendUnavailable
from arborag.query.level.web import SearxngProvider

runner = CliRunner()


def _run(level_corpus, *args, env=None):
    result = runner.invoke(app, ["query", QUESTION, "--corpus", str(level_corpus), "--mode", "level", *args], env=env)
    assert result.exit_code == 0, result.output
    return result.output


def test_level_cli_trace_tree_offline(level_corpus):
    out = " ".join(_run(level_corpus, "--trace", "--budget", "100").split())
    assert "mode level" in out and "plan offline" in out
    assert "round 1" in out and f"sub-question {QUESTION}" in out
    assert "r1 offline [lucene]" in out and "r1 question [text]" in out
    assert "found:" in out and "ARBORAG_LLM_BASE_URL" in out


def test_level_cli_json_includes_the_trace(level_corpus):
    data = json.loads(_run(level_corpus, "--json", "--budget", "100"))
    assert data["mode"] == "level" and data["hits"]
    assert data["trace"]["plan"] == "offline" and data["trace"]["sub_questions"][0]["text"] == QUESTION
    assert sum(h["n_tokens"] for h in data["hits"]) <= 100


def test_level_cli_trace_with_the_fake_llm_server(level_corpus):
    with FakeLLMServer(model="fake-model") as srv:
        srv.script("atomic sub-questions", reply('{"questions": ["Who wrote the novel Xanadu?", "Where was Mira Solberg born?"]}'))
        srv.script("Lucene query", reply('{"query": "\\"Mira Solberg AND (born"}'))  # invalid: reported, retried plain
        srv.script("Query sent:", reply('{"sufficient": true}'))
        srv.script("that would answer the question, as it", reply('{"passage": "Mira Solberg wrote Xanadu and was born in Bergen."}'))
        srv.script("write a new short", reply('{"sufficient": true}'))
        srv.script("state what the passages say", reply("Mira Solberg, born in Bergen."))
        srv.script("Facts found so far", reply('{"sufficient": true, "questions": []}'))
        env = {"ARBORAG_LLM_BASE_URL": srv.base_url, "ARBORAG_LLM_MODEL": "fake-model", "ARBORAG_SUMMARIZE__API_KEY_ENV": KEY_ENV,
               KEY_ENV: "sk-fake"}
        out = " ".join(_run(level_corpus, "--trace", "--budget", "100", env=env).split())
    assert "plan llm" in out and "sub-question Where was Mira Solberg born?" in out
    assert "error at" in out and "retry-plain [plain]" in out
    assert "verdict enough" in out and "LLM calls" in out and "level-decompose@v1" in out


class _SearxngStandIn(BaseHTTPRequestHandler):
    """A stand-in for a SearXNG instance's JSON API (not SearXNG itself)."""

    def log_message(self, *args):  # quiet
        pass

    def do_GET(self):  # noqa: N802
        if "format=json" not in self.path:
            self.send_response(403)
            self.end_headers()
            return
        body = json.dumps({"results": [{"url": "https://example.org/a", "title": "A", "content": "alpha"},
                                       {"url": "https://example.org/b", "title": "B", "content": "beta"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_level_searxng_provider_speaks_the_json_api():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _SearxngStandIn)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        prov = SearxngProvider(f"http://127.0.0.1:{httpd.server_address[1]}")
        res = prov.search("alpha", k=1)
        assert [(r.url, r.title, r.snippet) for r in res] == [("https://example.org/a", "A", "alpha")]
    finally:
        httpd.shutdown()
        httpd.server_close()
    with pytest.raises(BackendUnavailable, match="SearXNG"):
        SearxngProvider(f"http://127.0.0.1:{httpd.server_address[1]}", timeout_s=1).search("x", k=1)
