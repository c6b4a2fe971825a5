"""Fixtures of the server tests: one small built corpus per session, a shared resident model,
and real uvicorn servers on 127.0.0.1 (random free port) in a thread."""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from arborag.storage.leases import LEASES_DIR

REPO = Path(__file__).resolve().parents[2]
CINDERELLA = REPO / "examples" / "corpus" / "cinderella.txt"
QUESTION = "How did Cinderella reach her happy ending?"
LIGHTHOUSE = """The keeper of the northern lighthouse was an old sailor named Arvid. Every evening he climbed
the one hundred and twelve steps to light the great lamp. One winter a storm broke the lens, and the
ships in the bay could not see the rocks. Arvid gathered every candle in the village and set them
behind a mirror of polished copper. The fishermen came home safely that night, guided by the small
bright flame. In the spring the harbour master sent a new lens by boat, and the children of the
village carried it up the steps one piece at a time. Arvid kept the copper mirror above his door for
the rest of his life, and the villagers still call the rocks below the tower the Candle Rocks.
"""


def build(sources: list[Path], corpus: Path) -> str:
    from arborag.config import ArboragConfig
    from arborag.flows.build import run_build

    out = run_build([str(s) for s in sources], corpus, ArboragConfig(), use_prefect=False, progress=False)
    return str(out["snapshot"])


@pytest.fixture(scope="session")
def built_corpus(demo_corpus: Path) -> Path:
    """A corpus with one published build of examples/corpus/cinderella.txt: the session's demo
    corpus (tests/conftest.py), read-only — tests that publish use ``corpus_copy``."""
    return demo_corpus


@pytest.fixture()
def corpus_copy(built_corpus: Path, tmp_path: Path) -> Path:
    """A private copy of the built corpus, for tests that publish into it."""
    dst = tmp_path / "corpus"
    # not the reader leases: a lease is a claim on the original corpus (a copied one held by this
    # very pytest process would look live in the copy)
    shutil.copytree(built_corpus, dst, symlinks=True, ignore=shutil.ignore_patterns(LEASES_DIR))
    return dst


@pytest.fixture(scope="session")
def lighthouse_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("docs") / "lighthouse.txt"
    path.write_text(LIGHTHOUSE, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def embedders():
    """One resident query embedder for every app of the session (the model loads once)."""
    from arborag.serve.embedders import ResidentEmbedders

    return ResidentEmbedders()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def run_server() -> Iterator[Callable[..., str]]:
    """Start ``app`` under a real uvicorn on 127.0.0.1 in a thread; returns the base URL."""
    import uvicorn

    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(app) -> str:
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
        thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
        thread.start()
        deadline = time.monotonic() + 120
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        servers.append((server, thread))
        return f"http://127.0.0.1:{port}"

    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=30)
