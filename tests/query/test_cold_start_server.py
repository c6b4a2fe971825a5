"""`arborag query --server URL` against a real `arborag serve` app under uvicorn on 127.0.0.1:
the same hits as a local query, the bearer token from ARBORAG_SERVE_TOKEN, clear failures.
(The uvicorn-in-a-thread pattern follows tests/serve/conftest.py.)"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers.cold_start import QUESTION, publish_real_snapshot
from typer.testing import CliRunner

from arborag.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return publish_real_snapshot(tmp_path_factory.mktemp("cold-server") / "corpus")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(corpus: Path) -> Iterator[str]:
    """``arborag serve``'s app with token "tok" under a real uvicorn; the base URL."""
    import uvicorn

    from arborag.serve import create_app

    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(create_app(corpus, token="tok"), host="127.0.0.1", port=port,
                                        log_level="warning", lifespan="on"))
    thread = threading.Thread(target=srv.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not srv.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=30)


def query(*args: str, token: str | None = "tok") -> tuple[int, str]:
    env = {"ARBORAG_SERVE_TOKEN": token} if token else {"ARBORAG_SERVE_TOKEN": ""}
    result = runner.invoke(app, ["query", *args], env=env)
    return result.exit_code, result.output


@pytest.mark.parametrize("mode", ["auto", "collapsed", "sparse", "hybrid", "traversal"])
def test_server_and_local_print_the_same_hits(corpus: Path, server: str, mode: str) -> None:
    code, remote = query(QUESTION, "--server", server, "--mode", mode, "--budget", "150", "--json")
    assert code == 0, remote
    code, local = query(QUESTION, "--corpus", str(corpus), "--mode", mode, "--budget", "150", "--json")
    assert code == 0, local
    remote_hits, local_hits = json.loads(remote), json.loads(local)
    assert remote_hits and [h["node_id"] for h in remote_hits] == [h["node_id"] for h in local_hits]
    for r, lo in zip(remote_hits, local_hits):
        assert r["score"] == pytest.approx(lo["score"], abs=1e-5)
        assert (r["level"], r["n_tokens"], r["doc_ids"], r["text"]) == (lo["level"], lo["n_tokens"], lo["doc_ids"], lo["text"])


def test_table_output_and_levels(server: str) -> None:
    code, out = query(QUESTION, "--server", server, "--levels", "0", "--budget", "80")
    assert code == 0, out
    assert "2 hits, 80 tokens (budget 80); 0 summary nodes, 2 leaves — mode hop" in out  # query.mode default


def test_malformed_lucene_is_retried_with_a_warning(server: str) -> None:
    code, out = query('glass "slipper', "--server", server, "--mode", "sparse", "--lucene", "--json")
    assert code == 0, out
    assert "retrying as a plain match of the words" in out


def test_missing_token_unreachable_server_and_usage(corpus: Path, server: str) -> None:
    code, out = query(QUESTION, "--server", server, token=None)
    assert code == 1 and "401" in out and "ARBORAG_SERVE_TOKEN" in out
    code, out = query(QUESTION, "--server", f"http://127.0.0.1:{_free_port()}")
    assert code == 1 and "arborag serve is not reachable" in out
    code, out = query(QUESTION)
    assert code == 2 and "either --corpus DIR or --server URL" in out
    code, out = query(QUESTION, "--corpus", str(corpus), "--server", server)
    assert code == 2
