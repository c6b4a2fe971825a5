"""embed.backend = openai against tests/fake_embed_server.py (a named fake, real HTTP on 127.0.0.1):
batching, concurrency, every failure mode with the error the user sees, long texts, the cache
identity, and the key that never leaves the environment."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest
from fake_embed_server import FakeEmbedServer, empty, error, fake_vector, reply, slow, wrong_dim

from arborag.config import ArboragConfig, EmbedConfig, load_config
from arborag.embed.model import Embedder
from arborag.embed.openai_api import OpenAIEmbedder
from arborag.errors import BackendUnavailable, ConfigError, EmbedError
from arborag.storage.embedding_cache import EmbeddingCache
from arborag.tasks.embedding.cached import embed_cached

KEY_ENV = "ARBORAG_TEST_EMBED_KEY"
SECRET = "sk-embed-TOPSECRET-0123456789abcdef"


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)


@pytest.fixture
def server():
    with FakeEmbedServer(models=["fake-embed"], dim=64) as srv:
        yield srv


def embedder(srv: FakeEmbedServer, **kw) -> OpenAIEmbedder:
    cfg = EmbedConfig(backend="openai", base_url=srv.base_url, api_model="fake-embed", api_key_env=KEY_ENV, **kw)
    e = Embedder(cfg)
    assert isinstance(e, OpenAIEmbedder)
    e.backoff_s, e.backoff_max_s = 0.001, 0.01  # backoff delays made tiny (Retry-After still honoured)
    return e


def test_vectors_are_the_servers_normalised_in_order(server: FakeEmbedServer) -> None:
    texts = ["the glass slipper", "a pumpkin coach", "the glass slipper fits", "midnight"]
    got = embedder(server).embed(texts)
    want = np.asarray([fake_vector(t, 64) for t in texts], dtype=np.float32)
    assert got.shape == (4, 64) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert float(got[0] @ got[2]) > float(got[0] @ got[1])  # shared words: closer
    (req,) = server.embedding_requests()
    assert req.body["model"] == "fake-embed" and req.body["encoding_format"] == "float" and "dimensions" not in req.body
    assert req.headers["authorization"] == f"Bearer {SECRET}"  # the key goes to the server, and only there


def test_batching_by_count_and_by_tokens(server: FakeEmbedServer) -> None:
    texts = [f"text number {i} with some words" for i in range(10)]
    e = embedder(server, batch_size=4)
    e.embed(texts)
    assert sorted(len(r.inputs) for r in server.embedding_requests()) == [2, 4, 4]  # requests run concurrently
    server2_count = len(server.embedding_requests())
    # by tokens (arborag's tokenizer): no request over 20 tokens, and as full as that allows
    from arborag.tokenizer import get_tokenizer

    per_text = get_tokenizer().count(texts[0])
    embedder(server, batch_size=100, request_tokens=20).embed(texts)
    reqs = server.embedding_requests()[server2_count:]
    assert sum(len(r.inputs) for r in reqs) == 10
    assert all(len(r.inputs) == 20 // per_text for r in reqs[:-1] if len(r.inputs) != 10 % (20 // per_text))
    assert all(sum(get_tokenizer().count_many(r.inputs)) <= 20 for r in reqs)
    assert len(reqs) == -(-10 // (20 // per_text))


def test_concurrency_is_bounded(server: FakeEmbedServer) -> None:
    server.default = slow(0.15)
    texts = [f"t{i}" for i in range(12)]
    t0 = time.perf_counter()
    embedder(server, batch_size=1, concurrency=3).embed(texts)
    took = time.perf_counter() - t0
    assert server.max_in_flight == 3  # never more, and it does use them
    assert took >= 4 * 0.15 - 0.05  # 12 requests, 3 at a time


def test_429_waits_for_retry_after_then_succeeds(server: FakeEmbedServer) -> None:
    server.script("busy", error(429, retry_after="0.4"), error(429, retry_after="0.4"), reply())  # two 429s, then a reply
    e = embedder(server, retries=3)
    t0 = time.perf_counter()
    vec = e.embed(["busy server"])
    took = time.perf_counter() - t0
    assert took >= 0.8 - 0.05, "both Retry-After waits were honoured"
    assert len(server.embedding_requests()) == 3 and e.stats.retries == 2
    np.testing.assert_allclose(vec[0], fake_vector("busy server", 64), atol=1e-6)


def test_500_is_retried_then_reported(server: FakeEmbedServer) -> None:
    server.script("broken", error(500, message="internal"))
    e = embedder(server, retries=2)
    with pytest.raises(EmbedError) as info:
        e.embed(["broken input"])
    assert "http 500" in str(info.value) and "3 attempts" in str(info.value)
    assert len(server.embedding_requests()) == 3


def test_a_timeout_is_retried_then_reported(server: FakeEmbedServer) -> None:
    server.script("sleepy", slow(2.0))
    e = embedder(server, retries=1, timeout_s=0.3)
    t0 = time.perf_counter()
    with pytest.raises(EmbedError) as info:
        e.embed(["sleepy text"])
    assert "timeout after 0.3s (2 attempts)" in str(info.value)
    assert time.perf_counter() - t0 < 1.9


def test_wrong_dimension_is_refused(server: FakeEmbedServer) -> None:
    e = embedder(server, dimensions=32)
    assert e.dim == 32  # known without a request
    out = e.embed(["fine"])
    assert out.shape == (1, 32) and server.embedding_requests()[-1].body["dimensions"] == 32
    server.script("odd", wrong_dim(48))
    with pytest.raises(EmbedError, match=r"wrong dimension: the server sent 48-dimensional vectors, embed.dimensions says 32"):
        e.embed(["odd one"])


def test_a_server_that_ignores_dimensions_is_caught() -> None:
    with FakeEmbedServer(models=["fake-embed"], dim=64, honour_dimensions=False) as srv:
        with pytest.raises(EmbedError, match=r"sent 64-dimensional vectors, embed.dimensions says 32.*embed.dimensions unset"):
            embedder(srv, dimensions=32).embed(["a"])


def test_an_empty_reply_is_an_error_not_zero_vectors(server: FakeEmbedServer) -> None:
    server.script("void", empty())
    with pytest.raises(EmbedError, match=r"empty reply: no vectors for 1 input\(s\)"):
        embedder(server).embed(["void"])


def test_unknown_model_says_what_to_check(server: FakeEmbedServer) -> None:
    e = Embedder(EmbedConfig(backend="openai", base_url=server.base_url, api_model="no-such-model", api_key_env=KEY_ENV))
    with pytest.raises(EmbedError) as info:
        e.embed(["a", "b"])
    msg = str(info.value)
    assert "http 404" in msg and "no-such-model" in msg and "embed.api_model" in msg
    assert len(server.embedding_requests()) == 1  # not retried: it cannot succeed


def test_unreachable_endpoint(server: FakeEmbedServer) -> None:
    url = server.base_url
    server.stop()
    e = Embedder(EmbedConfig(backend="openai", base_url=url, api_model="fake-embed", retries=1, api_key_env=KEY_ENV))
    e.backoff_s = 0.001
    with pytest.raises(BackendUnavailable) as info:
        e.embed(["a"])
    assert info.value.url == url and "embed.base_url" in str(info.value) and "ARBORAG_EMBED__BASE_URL" in str(info.value)


def test_openai_itself_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    e = Embedder(EmbedConfig(backend="openai"))
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        e.embed(["a"])


def test_long_texts_are_windowed_under_the_servers_limit() -> None:
    words = " ".join(f"word{i}" for i in range(900))
    with FakeEmbedServer(models=["fake-embed"], max_input_words=120) as srv:
        e = embedder(srv, max_input_tokens=120, long_text="mean")
        out = e.embed([words, "short"])
        assert out.shape == (2, 64)
        sent = [t for r in srv.embedding_requests() for t in r.inputs]
        assert len(sent) > 8 and all(len(t.split()) <= 120 for t in sent)  # no 400 from the server
        np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
        # truncate: one input, the first max_input_tokens tokens
        t = embedder(srv, max_input_tokens=120, long_text="truncate")
        n = len(srv.embedding_requests())
        t.embed([words])
        (req,) = srv.embedding_requests()[n:]
        assert len(req.inputs) == 1 and words.startswith(req.inputs[0]) and len(req.inputs[0]) < len(words)
        # and a server limit the client does not know is a clear error
        with pytest.raises(EmbedError, match=r"http 400.*lower embed.max_input_tokens"):
            embedder(srv, max_input_tokens=2000).embed([words])


def test_the_cache_is_keyed_by_backend_model_dimension(server: FakeEmbedServer, tmp_path) -> None:
    cache = EmbeddingCache(tmp_path / "emb")
    texts = ["one text", "two texts", "one text"]
    e = embedder(server)
    assert e.dim == 64  # without embed.dimensions the size is learned: one short request
    assert [r.inputs for r in server.embedding_requests()] == [["dimension probe"]]
    v1, computed = embed_cached(texts, e, cache)
    assert computed == 2 and sorted(server.embedding_requests()[-1].inputs) == ["one text", "two texts"]  # each text once
    again = embedder(server, dimensions=64)  # the size known: no probe either
    n = len(server.embedding_requests())
    v2, computed = embed_cached(texts, again, EmbeddingCache(tmp_path / "emb"))
    assert computed == 2, "dimensions=64 asked of the server is another identity than the native size"
    v2, computed = embed_cached(texts, e, EmbeddingCache(tmp_path / "emb"))
    assert computed == 0 and len(server.embedding_requests()) == n + 1  # from the cache, no request
    np.testing.assert_array_equal(v1, v2)
    short, computed = embed_cached(texts, embedder(server, dimensions=16), cache)
    assert computed == 2 and short.shape == (3, 16)  # another dimension: another cache entry
    ids = {embedder(server).model_id, embedder(server, dimensions=16).model_id, Embedder(EmbedConfig()).model_id}
    assert len(ids) == 3 and all(i.startswith("openai:fake-embed@") for i in ids if "openai" in i)


def test_the_key_is_in_no_config_hash_error_or_log(server: FakeEmbedServer, monkeypatch, caplog) -> None:
    monkeypatch.setenv("ARBORAG_EMBED__BACKEND", "openai")
    monkeypatch.setenv("ARBORAG_EMBED__BASE_URL", server.base_url)
    monkeypatch.setenv("ARBORAG_EMBED__API_KEY_ENV", KEY_ENV)
    cfg = load_config()
    assert cfg.embed.backend == "openai"
    assert SECRET not in str(cfg.public_dict()) and SECRET not in cfg.model_dump_json()
    server.script("echo", error(401, message=f"bad key {SECRET}"))  # a server that echoes the key
    caplog.set_level(logging.DEBUG)
    e = embedder(server)
    with pytest.raises(EmbedError) as info:
        e.embed(["echo"])
    assert "***" in str(info.value) and SECRET not in str(info.value) and f"${KEY_ENV}" in str(info.value)
    server.script("flaky", error(503, message=SECRET), server.default)
    e.embed(["flaky"])
    assert SECRET not in caplog.text and SECRET not in repr(e)


def test_a_base_url_with_a_password_is_refused() -> None:
    with pytest.raises(ConfigError, match="must not hold a password"):
        ArboragConfig().with_overrides(embed={"backend": "openai", "base_url": "http://u:pw@127.0.0.1:1/v1"})


def test_local_config_hash_is_unchanged_by_the_server_settings() -> None:
    base = ArboragConfig()
    assert "api_model" not in base.public_dict()["embed"]
    assert base.with_overrides(embed={"timeout_s": 5.0}).config_hash() == base.config_hash()
    assert base.with_overrides(embed={"backend": "openai"}).config_hash() != base.config_hash()
