"""The build flow runs in a process that never saw a Python config object: no process-global state.

A real ``prefect server start`` on 127.0.0.1 (its own PREFECT_HOME and SQLite database in a tmp
folder) is the API. A *separate* process serves the module-level flow ``arborag.flows.build:build``
as a deployment (``flow.serve``, entrypoint by module path, the way ``prefect.yaml`` names it);
the test process starts a run of that deployment through the API with JSON parameters only
(corpus folder, sources, config overrides). Prefect's runner then executes the flow in yet another
process (``python -m prefect.engine``). The run must complete, publish a snapshot, be visible
through the server API, and record itself in ``runs`` under its Prefect flow-run id.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.slow

DEPLOYMENT = "h1-separate-process"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 150) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"prefect server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"prefect server not healthy after {timeout} s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A real Prefect server on a free port; yields the environment a client process needs."""
    home = tmp_path_factory.mktemp("prefect_home")
    port = _free_port()
    env = {
        **os.environ,
        "PREFECT_HOME": str(home),
        "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{home}/prefect.db",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_UI_ENABLED": "false",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PREFECT_LOGGING_LEVEL": "WARNING",
    }
    env.pop("PREFECT_API_URL", None)
    log = home / "server.log"
    prefect = str(Path(sys.executable).with_name("prefect"))
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}/api"
    try:
        _wait_healthy(url, proc, log)
        yield {**env, "PREFECT_API_URL": url, "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    finally:
        _stop(proc)


SERVE = f"""
from arborag.flows.build import build
from prefect.deployments.runner import EntrypointType
build.serve(name={DEPLOYMENT!r}, limit=1, print_starting_message=False, entrypoint_type=EntrypointType.MODULE_PATH)
"""


READ_RUNS = """
import asyncio, json
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowFilter, FlowFilterName

async def main():
    async with get_client() as client:
        runs = await client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["arborag-build"])))
    print(json.dumps([{"id": str(r.id), "completed": r.state.is_completed(), "parameters": r.parameters} for r in runs]))

asyncio.run(main())
"""


def test_build_flow_runs_from_a_separate_process(prefect_server: dict[str, str], examples_dir: Path, tmp_path: Path) -> None:
    started = time.perf_counter()
    corpus = tmp_path / "corpus"
    source = examples_dir / "corpus" / "cinderella.txt"
    server_log = tmp_path / "serve.log"
    with open(server_log, "wb") as out:
        served = subprocess.Popen(
            [sys.executable, "-c", SERVE], env=prefect_server, cwd=tmp_path,
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    # The trigger runs in one more process too (nothing of this test process's state is shared).
    trigger = f"""
import json
from prefect.deployments import run_deployment
run = run_deployment("arborag-build/{DEPLOYMENT}", timeout=600, poll_interval=1, parameters={{
    "corpus_dir": {str(corpus)!r}, "sources": [{str(source)!r}], "config_overrides": {{"cluster": {{"seed": 224}}}},
}})
print(json.dumps({{"id": str(run.id), "state": run.state.type.value if run.state else None}}))
"""
    try:
        deadline = time.monotonic() + 120
        while True:  # the deployment exists once the serving process registered it
            res = subprocess.run([sys.executable, "-c", trigger], env=prefect_server, capture_output=True, text=True, timeout=700)
            if res.returncode == 0 or "not found" not in (res.stderr + res.stdout).lower() or time.monotonic() > deadline:
                break
            assert served.poll() is None, server_log.read_text()[-3000:]
            time.sleep(1)
        assert res.returncode == 0, res.stderr[-3000:] + server_log.read_text()[-3000:]
        run = json.loads(res.stdout.strip().splitlines()[-1])
        assert run["state"] == "COMPLETED", server_log.read_text()[-3000:]
    finally:
        _stop(served)

    # the snapshot is published and the run recorded under its Prefect flow-run id
    manifest = json.loads((corpus / "manifest.json").read_text())
    assert manifest["run_id"] == run["id"] and manifest["snapshot"].startswith("snap-")
    nodes = pq.read_table(corpus / "snapshots" / manifest["snapshot"] / "nodes.parquet")
    assert nodes.num_rows > 0 and set(nodes.column("created_by_run").to_pylist()) == {run["id"]}
    runs = pq.read_table(corpus / "tables" / "runs.parquet").to_pylist()
    assert runs[-1]["run_id"] == run["id"] and runs[-1]["flow"] == "build" and runs[-1]["status"] == "ok"

    # ... and visible through the server API
    res = subprocess.run([sys.executable, "-c", READ_RUNS], env=prefect_server, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    by_id = {r["id"]: r for r in json.loads(res.stdout.strip().splitlines()[-1])}
    assert run["id"] in by_id and by_id[run["id"]]["completed"]
    assert by_id[run["id"]]["parameters"]["sources"] == [str(source)]
    print(f"separate-process build: {time.perf_counter() - started:.1f} s")
