"""`arborag mcp` driven by the MCP SDK's own client over stdio, the server in a subprocess, over a
corpus built through the CLI (embeddings from tests/fake_embed_server.py, a named fake, so no
model loads): list the tools, call each with good and bad input, read the snapshot resource, and
see a newly published snapshot picked up between calls. Plus the HTTP transport's token rule.

One client session runs the whole scenario (a subprocess start costs seconds); the tests below
each check one part of what it recorded.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'arborag[mcp]'")

from mcp import Client, StdioServerParameters  # noqa: E402


def _command() -> tuple[str, list[str]]:
    script = Path(sys.executable).parent / "arborag"
    return (str(script), []) if script.exists() else (sys.executable, ["-m", "arborag.cli.app"])


def _text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


def _data(result: Any) -> dict[str, Any]:
    assert not result.is_error, _text(result)
    if result.structured_content is not None:
        data = result.structured_content
        return data.get("result", data) if set(data) == {"result"} else data
    return json.loads(_text(result))


def _republish(corpus: Path) -> str:
    """Publish a copy of the current snapshot under a new id (a real publish through the storage API)."""
    from arborag.storage.corpus import Corpus

    c = Corpus(corpus)
    current = c.published_dir()
    info = json.loads((current / "info.json").read_text())
    new_id = "snap-republished-" + str(time.time_ns())
    partial = c.partial_dir(new_id)
    for item in current.iterdir():
        if item.name == "info.json":
            continue
        (shutil.copytree if item.is_dir() else shutil.copy2)(item, partial / item.name)
    c.publish(partial, new_id, {k: v for k, v in info.items() if k not in ("snapshot", "published_at")})
    return new_id


@pytest.fixture(scope="module")
def session(openai_corpus) -> dict[str, Any]:
    """Everything one stdio session saw: {step name: result}."""
    import anyio

    _, corpus, env, _ = openai_corpus
    command, prefix = _command()
    params = StdioServerParameters(command=command, args=[*prefix, "mcp", "--corpus", str(corpus)], env=dict(env))
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        async with Client(params, read_timeout_seconds=120) as client:
            seen["tools"] = await client.list_tools()
            seen["resources"] = await client.list_resources()
            seen["info"] = await client.read_resource("arborag://snapshot/info")
            call = client.call_tool
            seen["search"] = await call("search", {"text": "glass slipper prince", "budget": 300})
            seen["search_sparse"] = await call("search", {"text": "slipper AND prince", "mode": "sparse", "budget": 500,
                                                          "lucene": True})
            seen["search_docs"] = await call("search", {"text": "orbit", "mode": "collapsed", "levels": [0]})
            seen["bad_mode"] = await call("search", {"text": "slipper", "mode": "telepathy"})
            seen["big_budget"] = await call("search", {"text": "slipper", "budget": 10_000_000})
            seen["question"] = await call("search", {"text": "What did Cinderella lose at the palace ball?"})
            seen["bad_lucene"] = await call("search", {"text": "title:(unclosed AND", "mode": "sparse", "lucene": True,
                                                       "strict_lucene": True})
            seen["lenient_lucene"] = await call("search", {"text": "title:(unclosed AND", "mode": "sparse", "lucene": True})
            seen["empty_text"] = await call("search", {"text": "   "})
            seen["wrong_type"] = await call("search", {"text": "slipper", "budget": "lots"})
            hit = _data(seen["search"])["hits"][0]
            seen["first_hit"] = hit
            seen["node"] = await call("get_node", {"node_id": hit["node_id"]})
            seen["no_node"] = await call("get_node", {"node_id": "nope"})
            doc = hit["sources"][0]["doc_id"]
            seen["doc_filter"] = await call("search", {"text": "sourdough orbit slipper", "doc_ids": [doc], "mode": "collapsed"})
            seen["chunk"] = await call("get_chunk", {"doc_id": doc, "start_char": 0, "end_char": 40})
            seen["bad_span"] = await call("get_chunk", {"doc_id": doc, "start_char": 30, "end_char": 10})
            seen["no_doc"] = await call("get_chunk", {"doc_id": "nope", "start_char": 0, "end_char": 10})
            seen["top"] = await call("tree_top", {"max_nodes": 5})
            seen["bad_top"] = await call("tree_top", {"max_nodes": 0})
            seen["unknown_tool"] = await call("teleport", {})
            seen["new_id"] = _republish(corpus)
            seen["after_publish"] = await call("search", {"text": "glass slipper", "budget": 200})
            seen["still_alive"] = await call("tree_top", {})

    anyio.run(scenario)
    return seen


def test_lists_its_tools_with_schemas(session) -> None:
    tools = {t.name: t for t in session["tools"].tools}
    assert {"search", "get_node", "get_chunk", "tree_top"} <= set(tools)
    assert "ask" not in tools  # no LLM configured: not offered
    props = tools["search"].input_schema["properties"]
    assert {"text", "mode", "budget", "lucene", "doc_ids", "levels"} <= set(props)
    assert all(t.description for t in tools.values())


def test_snapshot_info_resource(session) -> None:
    assert [str(r.uri) for r in session["resources"].resources] == ["arborag://snapshot/info"]
    info = json.loads(session["info"].contents[0].text)
    assert info["snapshot"].startswith("snap-") and info["info"]["embed"]["backend"] == "openai"
    assert "auto" in info["modes"] and info["levels"]["0"] >= 9


def test_search_returns_hits_within_the_budget(session) -> None:
    data = _data(session["search"])
    from arborag.query.modes import DEFAULT_MODE

    assert data["hits"] and data["tokens"] <= 300 and data["mode"] == DEFAULT_MODE
    assert "slipper" in data["hits"][0]["text"] and data["hits"][0]["sources"][0]["uri"].endswith(".txt")
    sparse = _data(session["search_sparse"])
    assert sparse["hits"] and all("slipper" in h["text"].lower() for h in sparse["hits"] if h["level"] == 0)
    leaves = _data(session["search_docs"])
    assert leaves["hits"] and {h["level"] for h in leaves["hits"]} == {0}


@pytest.mark.parametrize(("step", "says"), [
    ("bad_mode", "unknown mode 'telepathy': use one of"),
    ("big_budget", "budget 10000000 is out of range"),
    ("bad_lucene", "lucene=false"),
    ("bad_lucene", "unbalanced parenthesis"),
    ("empty_text", "text is empty"),
    ("wrong_type", "budget"),
    ("no_node", "no node 'nope'"),
    ("bad_span", "are not a span"),
    ("no_doc", "no document 'nope'"),
    ("bad_top", "max_nodes 0 is out of range"),
    ("unknown_tool", "teleport"),
])
def test_bad_input_is_a_tool_error_the_agent_can_read(session, step: str, says: str) -> None:
    result = session[step]
    assert result.is_error, f"{step} should be a tool error: {_text(result)}"
    assert says in _text(result)


def test_a_malformed_lucene_query_can_fall_back_to_words(session) -> None:
    data = _data(session["lenient_lucene"])
    assert data["lucene"]["retried_as"] == "plain words" and "unbalanced parenthesis" in data["lucene"]["error"]
    assert data["lucene"]["position"] == 6


def test_a_question_is_plain_text_by_default(session) -> None:
    """'?' is a Lucene wildcard: a question reaches the search as words unless lucene=true is asked for."""
    data = _data(session["question"])
    assert data["hits"] and data["lucene"] is None
    assert any("slipper" in h["text"] for h in data["hits"])
    props = {t.name: t for t in session["tools"].tools}["search"].input_schema["properties"]
    assert props["lucene"]["default"] is False and props["strict_lucene"]["default"] is False


def test_the_doc_filter_keeps_one_document(session) -> None:
    doc = session["first_hit"]["sources"][0]["doc_id"]
    hits = _data(session["doc_filter"])["hits"]
    assert hits and all(doc in [s["doc_id"] for s in h["sources"]] for h in hits)


def test_a_snapshot_of_another_embedder_is_a_tool_error_that_says_why(openai_corpus) -> None:
    """In process (the SDK's Client over an MCPServer object): no embeddings server configured here."""
    import anyio

    from arborag.config import ArboragConfig
    from arborag.mcpserver import create_server

    _, corpus, _, _ = openai_corpus
    server, _ = create_server(corpus, config=ArboragConfig())

    async def call() -> Any:
        async with Client(server) as client:
            return await client.call_tool("search", {"text": "glass slipper"})

    result = anyio.run(call)
    assert result.is_error and "no embeddings server is configured" in _text(result)
    assert "ARBORAG_EMBED__BASE_URL" in _text(result)


def test_get_node_has_parents_and_children(session) -> None:
    node = _data(session["node"])
    assert node["node_id"] == session["first_hit"]["node_id"] and node["text"]
    assert node["parents"] or node["children"]  # a node of a tree is linked to it
    assert all({"node_id", "level", "preview"} <= set(p) for p in node["parents"] + node["children"])


def test_get_chunk_reads_the_document(session) -> None:
    chunk = _data(session["chunk"])
    assert chunk["start_char"] == 0 and chunk["end_char"] == 40 and len(chunk["text"]) == 40


def test_tree_top_lists_summaries(session) -> None:
    top = _data(session["top"])
    assert top["nodes"] and top["nodes"][0]["level"] == max(int(k) for k in top["levels"])
    assert all(n["summary"] for n in top["nodes"])
    summaries = [n for n in top["nodes"] if n["level"] > 0]
    assert summaries and all(n["label"] and n["keywords"] for n in summaries)  # every summary node is labelled


def test_a_new_snapshot_is_picked_up_between_calls(session) -> None:
    assert _data(session["search"])["snapshot"] != session["new_id"]
    assert _data(session["after_publish"])["snapshot"] == session["new_id"]
    assert not session["still_alive"].is_error  # the server outlived every bad call above


# -- streamable HTTP: the bearer-token rule of `arborag serve` -------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_http_transport_needs_the_token(openai_corpus) -> None:
    import anyio
    import httpx

    _, corpus, env, _ = openai_corpus
    port = _free_port()
    command, prefix = _command()
    token = "mcp-test-token-0123456789"
    proc = subprocess.Popen([command, *prefix, "mcp", "--corpus", str(corpus), "--http", "--port", str(port), "--no-warm"],
                            env={**env, "ARBORAG_SERVE_TOKEN": token}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 90
        while True:
            try:
                r = httpx.post(url, json={}, timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read().decode() if proc.poll() else "no start"
                time.sleep(0.5)
        assert r.status_code == 401 and "bearer token" in r.json()["detail"]
        assert httpx.post(url, json={}, headers={"Authorization": "Bearer wrong"}, timeout=5).status_code == 403

        async def with_token() -> list[str]:
            from mcp.client.streamable_http import streamable_http_client

            import httpx2  # the SDK's HTTP client

            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
                async with Client(streamable_http_client(url, http_client=http)) as client:
                    names = [t.name for t in (await client.list_tools()).tools]
                    result = await client.call_tool("search", {"text": "sourdough starter", "budget": 200})
                    assert "sourdough" in _text(result).lower(), _text(result)
                    return names

        assert "search" in anyio.run(with_token)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_ask_is_offered_with_an_llm_and_cites(openai_corpus) -> None:
    """In process: an LLM configured (tests/fake_llm_server.py, a named fake that answers with a
    citation) -> the ask tool exists and returns the cited answer."""
    import anyio
    from fake_llm_server import FakeLLMServer, reply

    from arborag.config import ArboragConfig
    from arborag.mcpserver import create_server

    srv, corpus, _, _ = openai_corpus
    answer = json.dumps({"supported": True, "answer": "She lost a glass slipper at the ball [1].", "citations": [1]})
    with FakeLLMServer(model="fake-chat", default=reply(answer)) as llm:
        cfg = ArboragConfig().with_overrides(embed={"backend": "openai", "base_url": srv.base_url},
                                             summarize={"base_url": llm.base_url, "llm_model": "fake-chat"})
        server, _ = create_server(corpus, config=cfg)

        async def call() -> tuple[list[str], Any, Any]:
            async with Client(server) as client:
                names = [t.name for t in (await client.list_tools()).tools]
                good = await client.call_tool("ask", {"question": "What did Cinderella lose?", "budget": 400})
                bad = await client.call_tool("ask", {"question": "What did Cinderella lose?", "mode": "nope"})
                return names, good, bad

        names, good, bad = anyio.run(call)
    assert "ask" in names
    data = _data(good)
    assert data["status"] == "answered" and "[1]" in data["answer"] and data["cited"]
    assert bad.is_error and "unknown mode 'nope'" in _text(bad)


def test_the_embedder_stays_loaded_across_calls_and_snapshots(openai_corpus) -> None:
    """In process: the query embedder is made once (serve's ResidentEmbedders) and kept when a new
    snapshot is published between calls."""
    import anyio

    from arborag.config import ArboragConfig
    from arborag.embed.model import Embedder
    from arborag.mcpserver import create_server
    from arborag.serve.embedders import ResidentEmbedders

    srv, corpus, _, _ = openai_corpus
    made: list[str] = []

    def factory(cfg):
        made.append(cfg.api_model)
        return Embedder(cfg).embed

    cfg = ArboragConfig().with_overrides(embed={"backend": "openai", "base_url": srv.base_url})
    server, holder = create_server(corpus, config=cfg, embedders=ResidentEmbedders(factory))

    async def calls() -> list[str]:
        snaps = []
        async with Client(server) as client:
            for i in range(3):
                if i == 2:
                    _republish(corpus)
                snaps.append(_data(await client.call_tool("search", {"text": f"slipper {i}", "mode": "collapsed"}))["snapshot"])
        return snaps

    snaps = anyio.run(calls)
    assert made == ["fake-embed"], "one embedder for every call and both snapshots"
    assert snaps[0] == snaps[1] != snaps[2]


def test_instructions_name_the_servers_configured_mode_and_budget(tmp_path: Path) -> None:
    from arborag.config import ArboragConfig
    from arborag.mcpserver import create_server

    server, holder = create_server(tmp_path / "corpus", config=ArboragConfig().with_overrides(query={"mode": "sparse", "budget": 900}))
    try:
        text = server.instructions
        assert "configured mode, sparse" in text and "900 tokens" in text
        assert "hop" not in text and "measured default" not in text
    finally:
        holder.close()
