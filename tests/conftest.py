"""Shared test fixtures: those used by tests in more than one folder. A fixture of one module or
one folder lives there; data and functions shared by tests live in tests/helpers/."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not found at {SHARED_DATA} (clone beside ../shared to run this test)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    return REPO / "examples"


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    """A temporary Prefect API + database for the whole session (no server needed; ~16-40 s once)."""
    from arborag.flows.common import prefect_env_defaults

    prefect_env_defaults()
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


@pytest.fixture(scope="session")
def demo_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo corpus (examples/corpus/cinderella.txt) built once per session in-process with the
    real embedder and the extractive summarizer (~25 s idle); read-only (copy it to publish into it).
    ``ARBORAG_TEST_DEMO_DIR`` reuses a corpus built before (``arborag build examples/corpus --corpus DIR``)."""
    from helpers.searchers import DEMO_DIR, build_demo_corpus

    if DEMO_DIR is not None and (DEMO_DIR / "manifest.json").exists():
        return DEMO_DIR
    return build_demo_corpus(tmp_path_factory.mktemp("demo") / "corpus")


@pytest.fixture
def hops_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The two-hop snapshot of helpers.searchers, opened with its FAKE embedder and no LLM configured."""
    from helpers.searchers import HOP_TEXTS, fake_embed, publish_texts

    from arborag.config import load_config
    from arborag.query import open_index

    for var in ("ARBORAG_LLM_BASE_URL", "ARBORAG_LLM_MODEL", "ARBORAG_SUMMARIZE__BACKEND", "ARBORAG_SUMMARIZE__BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    publish_texts(tmp_path / "hops", HOP_TEXTS)
    index = open_index(tmp_path / "hops", config=load_config(), embed_query=fake_embed)
    yield index
    index.close()


@pytest.fixture(scope="session")
def openai_corpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Path, dict[str, str], Any]]:
    """``(fake server, corpus dir, env of the build, build output)``: `arborag build` in a subprocess with
    ARBORAG_EMBED__BACKEND=openai and ARBORAG_EMBED__BASE_URL at tests/fake_embed_server.py (a named
    FAKE, which stays up for the session)."""
    from fake_embed_server import FakeEmbedServer
    from helpers.plugs import DOCS, KEY_ENV, SECRET
    from helpers.reliability import cli, cli_env

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


@pytest.fixture(scope="session")
def rolled_back_history(tmp_path_factory: pytest.TempPathFactory, examples_dir: Path) -> dict[str, Any]:
    """A corpus with two snapshots — a build of helpers.update's sources, then an update that adds
    zebra2.txt — rolled back to the first; built once per session, read-only.

    Keys: ``corpus``, ``src``, ``config`` (automatic retention off), ``first`` and ``second``
    (snapshot ids), and ``catalogs``: copies of ``CORPUS/published.duckdb`` as the build and as the
    update left it (``[after build, after update]``)."""
    from helpers.update import CONFIG, make_sources

    from arborag.flows.build import run_build
    from arborag.flows.update import run_update
    from arborag.storage.corpus import Corpus
    from arborag.storage.snapshots import rollback
    from arborag.storage.sql import CATALOG_FILE

    config = CONFIG.with_overrides(retention={"auto": False})
    root = tmp_path_factory.mktemp("history")
    src = make_sources(root, examples_dir)
    corpus = root / "c"
    catalogs = [root / "catalog-after-build.duckdb", root / "catalog-after-update.duckdb"]
    first = run_build([src], corpus, config, use_prefect=False, progress=False)
    shutil.copyfile(corpus / CATALOG_FILE, catalogs[0])
    (src / "zebra2.txt").write_text("The zebra king counted his seventeen silver spoons at dawn.\n", encoding="utf-8")
    second = run_update([src], corpus, config)
    assert first["status"] == second["status"] == "ok" and first["snapshot"] != second["snapshot"]
    shutil.copyfile(corpus / CATALOG_FILE, catalogs[1])
    rollback(Corpus(corpus), first["snapshot"], policy=config.retention)
    return {"corpus": corpus, "src": src, "config": config, "first": first["snapshot"], "second": second["snapshot"],
            "catalogs": catalogs}


@pytest.fixture
def level_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The two-level snapshot of helpers.level, no LLM configured, and ``arborag.query.open_index``
    patched to embed queries with its FAKE embedder (for CLI tests of the LLM-backed modes)."""
    from helpers.level import LLM_VARS, fake_embed, publish_level_snapshot

    import arborag.query as q

    for var in LLM_VARS:
        monkeypatch.delenv(var, raising=False)
    publish_level_snapshot(tmp_path / "c")
    real = q.open_index
    monkeypatch.setattr(q, "open_index", lambda *a, **kw: real(*a, **{**kw, "embed_query": fake_embed, "light": False}))
    return tmp_path / "c"
