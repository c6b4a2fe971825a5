"""One CLI build with embed.backend = openai against tests/fake_embed_server.py (a named fake),
shared by the embeddings and MCP tests of this folder."""

from __future__ import annotations

import pytest
from fake_embed_server import FakeEmbedServer
from helpers.plugs import DOCS, KEY_ENV, SECRET
from helpers.reliability import cli, cli_env


@pytest.fixture(scope="session")
def openai_corpus(tmp_path_factory: pytest.TempPathFactory):
    """``(fake server, corpus dir, env of the build, build output)``: `arborag build` in a subprocess with
    ARBORAG_EMBED__BACKEND=openai and ARBORAG_EMBED__BASE_URL at the fake server (which stays up)."""
    root = tmp_path_factory.mktemp("plugs")
    src = root / "docs"
    src.mkdir()
    for name, text in DOCS.items():
        (src / name).write_text(text, encoding="utf-8")
    with FakeEmbedServer(models=["fake-embed"], dim=48) as srv:
        env = cli_env(ARBORAG_EMBED__BACKEND="openai", ARBORAG_EMBED__BASE_URL=srv.base_url, ARBORAG_EMBED__API_MODEL="fake-embed",
                      ARBORAG_EMBED__API_KEY_ENV=KEY_ENV, **{KEY_ENV: SECRET})
        done = cli("build", str(src), "--corpus", str(root / "corpus"), "--no-prefect", env=env, timeout=600)
        assert done.returncode == 0, done.output
        yield srv, root / "corpus", env, done
