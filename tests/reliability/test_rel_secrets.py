"""Secrets never leak: an LLM API key, an Elasticsearch password and API key, and the serve
bearer token set to unique markers; ingest, build (Prefect, LLM summaries from a fake endpoint
that echoes the Authorization header back in an error), query, eval and serve run; every file
under the corpus, the Prefect home, the eval output, and every captured output is searched.
Config dumps and ``--help`` say a secret is set, never its value.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from fake_llm_server import FakeLLMServer, error, reply
from helpers.reliability import HOTPOT_CORPUS, PYTHON, REPO, cli, cli_env, find_markers, kill_tree, python, wait_for, write_hotpot_docs

pytestmark = [pytest.mark.reliability, pytest.mark.slow, pytest.mark.shared_data]

MARKERS = {
    "OPENAI_API_KEY": "sk-H6MARKERopenai7f3a9c",
    "ARBORAG_ES_PASSWORD": "H6MARKERespass91b2",
    "ARBORAG_ES_API_KEY": "H6MARKEResapikeyc4d1",
    "ARBORAG_SERVE_TOKEN": "H6MARKERservetoken5e6f",
}

SERVE_SCRIPT = r"""
import sys, typer
from arborag.cli.serve import register
app = typer.Typer()
@app.callback()
def _root() -> None: pass
register(app)
app()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http(url: str, body: dict | None = None, token: str | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def _serve(corpus: Path, env: dict, log: Path) -> list[str]:
    """Start `arborag serve` (or the serve CLI module when the command is not registered yet),
    query it with the right and a wrong token, stop it; return the texts it produced."""
    port = _free_port()
    registered = cli("serve", "--help", env=env).returncode == 0
    args = ["serve", "--corpus", str(corpus), "--port", str(port), "--no-warm"]
    cmd = [str(Path(PYTHON).parent / "arborag"), *args] if registered else [PYTHON, "-c", SERVE_SCRIPT, *args]
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, env=env, cwd=str(REPO), stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    texts = []
    try:
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return _http(base + "/health")[0] == 200
            except OSError:
                return False

        assert wait_for(up, timeout=180, interval=0.5, proc=proc), log.read_text()[-3000:]
        for token in (MARKERS["ARBORAG_SERVE_TOKEN"], "wrong-token", None):
            status, body = _http(base + "/search", {"text": "Which game was created by Lester Smith?", "mode": "sparse"}, token)
            texts.append(body)
            assert status == 200 if token == MARKERS["ARBORAG_SERVE_TOKEN"] else status in (401, 403), (status, body)
        texts += [_http(base + "/health")[1], _http(base + "/stats", token=MARKERS["ARBORAG_SERVE_TOKEN"])[1]]
    finally:
        kill_tree(proc)
    return texts + [log.read_text(errors="replace")]


def test_markers_never_appear(tmp_path) -> None:
    if not HOTPOT_CORPUS.is_file():
        pytest.skip(f"needs {HOTPOT_CORPUS}")
    src, corpus, prefect_home, eval_out = tmp_path / "src", tmp_path / "corpus", tmp_path / "prefect_home", tmp_path / "eval"
    write_hotpot_docs(src, 20, start=500)
    outputs: list[str] = []
    with FakeLLMServer() as llm:
        # The first LLM call is rejected with the Authorization header echoed back in the error body.
        llm.script("", error(400, echo_auth=True), reply())
        env = cli_env(**MARKERS, PREFECT_HOME=str(prefect_home), ARBORAG_LLM_BASE_URL=llm.base_url,
                      ARBORAG_LLM_MODEL="secret-test-model", ARBORAG_SUMMARIZE__RETRIES="0")
        runs = [
            # --prefect: runs through Prefect's temporary API, whose database (PREFECT_HOME) is searched too
            cli("ingest", str(src), "--corpus", str(corpus), "--prefect", env=env),
            cli("build", str(src), "--corpus", str(corpus), "--summarizer", "openai", "--prefect", env=env),
            cli("query", "Which game was created by Lester Smith?", "--corpus", str(corpus), env=env),
            cli("query", "dice", "--corpus", str(corpus), "--mode", "sparse", "--json", env=env),
            cli("eval", "hotpotqa", "--out", str(eval_out), "--limit", "3", "--no-prefect", "--strategies", "sentence",
                "--systems", "bm25,flat", "--budgets", "500", "--no-progress", env=env),
        ]
        sent = [r.headers.get("authorization", "") for r in llm.requests]
    for run in runs:
        assert "Traceback" not in run.output, run.output[-3000:]
        assert run.returncode in (0, 3), (run.args, run.output[-3000:])
        outputs.append(run.output)
    assert any(MARKERS["OPENAI_API_KEY"] in s for s in sent), "the LLM key was never sent: the test proves nothing"
    outputs += _serve(corpus, env, tmp_path / "serve.log")
    helps = [cli(*cmd, "--help", env=env) for cmd in ([], ["ingest"], ["build"], ["query"], ["eval"], ["sql"], ["serve"])]
    outputs += [h.output for h in helps]
    dump = python(
        "from arborag.config import load_config; c = load_config(); "
        "print(repr(c)); print(c.model_dump_json()); print(c.public_dict()); print(c.config_hash())", env=env)
    assert dump.returncode == 0, dump.output
    outputs.append(dump.output)

    found = find_markers(list(MARKERS.values()), corpus, prefect_home, eval_out, texts=outputs)
    n_files = sum(1 for _ in __import__("helpers.reliability", fromlist=["iter_files"]).iter_files(corpus, prefect_home, eval_out))
    print(f"\nRELIABILITY secrets: files searched={n_files} texts={len(outputs)} markers found={len(found)}")
    assert found == [], found
    # a config dump shows the secret is set without its value
    assert "es_password=SecretStr('**********')" in dump.stdout, dump.stdout[:2000]
    assert n_files > 20
