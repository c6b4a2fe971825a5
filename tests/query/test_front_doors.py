"""The four front doors take one set of defaults: with ``query.mode``, ``query.budget`` and
``query.k`` set in the config and nothing but a question (ending in '?') in the call, `arborag
query` (typer's CliRunner), `arborag serve` (FastAPI's TestClient), `arborag mcp` (the MCP SDK's
own client over the server object) and ``Index.search`` run the same search and return the same
hits — for every mode of the registry (``arborag.query.modes.MODE_NAMES``).

The corpus is the CLI build of conftest.py (embeddings from tests/fake_embed_server.py, a named
fake), so no model loads; no LLM is configured, so the LLM-optional modes run offline.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed: pip install 'arborag[mcp]'")

from fastapi.testclient import TestClient  # noqa: E402
from mcp import Client  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from arborag.cli import app  # noqa: E402
from arborag.config import load_config  # noqa: E402
from arborag.query.modes import MODE_NAMES  # noqa: E402

QUESTION = "What did Cinderella lose at the palace ball?"  # '?' is a Lucene wildcard: plain text unless asked
BUDGET, K = 300, 3  # not the built-in defaults (2000, 5): hits within 300 tokens show the config's budget arrived
LLM_VARS = ("ARBORAG_LLM_BASE_URL", "ARBORAG_LLM_MODEL", "ARBORAG_SUMMARIZE__BACKEND", "ARBORAG_SUMMARIZE__BASE_URL")


@pytest.fixture()
def configured(openai_corpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``(corpus, config file)`` for one mode: the build's embeddings settings in the environment."""
    _, corpus, env, _ = openai_corpus
    for key, value in env.items():
        if key.startswith("ARBORAG_"):
            monkeypatch.setenv(key, value)
    for var in LLM_VARS:
        monkeypatch.delenv(var, raising=False)

    def write(mode: str) -> Path:
        path = tmp_path / "arborag.yaml"
        path.write_text(f"query:\n  mode: {mode}\n  budget: {BUDGET}\n  k: {K}\n", encoding="utf-8")
        return path

    return corpus, write


def _cli(corpus: Path, config: Path) -> tuple[str | None, list[str], int]:
    result = CliRunner().invoke(app, ["query", QUESTION, "--corpus", str(corpus), "--config", str(config), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    hits = data["hits"] if isinstance(data, dict) else data  # a mode with a trace prints {mode, hits, trace}
    mode = data.get("mode") if isinstance(data, dict) else None
    return mode, [h["node_id"] for h in hits], sum(h["n_tokens"] for h in hits)


def _http(corpus: Path, cfg: Any) -> tuple[str, list[str], int, Any]:
    from arborag.serve import create_app

    with TestClient(create_app(corpus, config=cfg)) as client:
        resp = client.post("/search", json={"text": QUESTION})
        page = client.get("/").text
    assert resp.status_code == 200, resp.text
    selected = re.search(r'<option value="([^"]+)"[^>]* selected>', page)
    assert selected is not None and selected.group(1) == cfg.query.mode  # the search page offers the config's mode first
    data = resp.json()
    return data["mode"], [h["node_id"] for h in data["hits"]], data["tokens"], data["budget"]


def _mcp(corpus: Path, cfg: Any) -> tuple[str, list[str], int, Any]:
    import anyio

    from arborag.mcpserver import create_server

    server, _ = create_server(corpus, config=cfg)

    async def call() -> Any:
        async with Client(server) as client:
            return await client.call_tool("search", {"text": QUESTION})

    result = anyio.run(call)
    text = "\n".join(getattr(c, "text", "") for c in result.content)
    assert not result.is_error, text
    data = result.structured_content if result.structured_content is not None else json.loads(text)
    data = data.get("result", data)
    return data["mode"], [h["node_id"] for h in data["hits"]], data["tokens"], data["budget"]


def _api(corpus: Path, cfg: Any) -> tuple[list[str], list[str]]:
    """``Index.search`` with the question alone, and with the mode, budget and k spelled out."""
    from arborag.query import open_index

    index = open_index(corpus, config=cfg)
    try:
        implicit = [h.node_id for h in index.search(QUESTION)]
        explicit = [h.node_id for h in index.search(QUESTION, mode=cfg.query.mode, budget=BUDGET, k=K, lucene=False)]
    finally:
        index.close()
    return implicit, explicit


@pytest.mark.parametrize("mode", MODE_NAMES)
def test_every_front_door_runs_the_configured_mode_and_budget(configured, mode: str) -> None:
    corpus, write = configured
    path = write(mode)
    cfg = load_config(path)
    assert (cfg.query.mode, cfg.query.budget, cfg.query.k) == (mode, BUDGET, K)

    implicit, explicit = _api(corpus, cfg)
    assert explicit, f"{mode}: no hits for the question"
    assert implicit == explicit  # Index.search: the config's mode, budget and k

    cli_mode, cli_ids, cli_tokens = _cli(corpus, path)
    http_mode, http_ids, http_tokens, http_budget = _http(corpus, cfg)
    mcp_mode, mcp_ids, mcp_tokens, mcp_budget = _mcp(corpus, cfg)
    assert cli_mode in (None, mode) and http_mode == mode and mcp_mode == mode
    assert http_budget == mcp_budget == BUDGET
    assert cli_ids == http_ids == mcp_ids == explicit
    assert max(cli_tokens, http_tokens, mcp_tokens) <= BUDGET
