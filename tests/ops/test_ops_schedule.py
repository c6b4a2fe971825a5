"""Scheduled runs for real: a local Prefect server, `arborag schedule`, a scheduled `update` that publishes.

A real ``prefect server start`` on 127.0.0.1 (PREFECT_HOME in tmp) is the API; ``arborag schedule``
runs in a subprocess with the update every 3 s and the rebuild on a cron that never fires during
the test; the server's scheduler creates the runs, the serving process runs them (each in its
own subprocess). The test polls the REST API until a run of the ``update`` deployment completes,
then checks it published the corpus's snapshot and recorded itself in ``runs``. Every process is
stopped however the test ends.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from helpers.ops import prefect_server, stop
from helpers.reliability import PYTHON, REPO, cli_env

pytestmark = pytest.mark.slow

NEVER = "0 3 29 2 1"  # 03:00 on a Monday 29 February: not during a test run


def _post(url: str, path: str, body: dict) -> list[dict]:
    resp = httpx.post(f"{url}{path}", json=body, timeout=20)
    resp.raise_for_status()
    return resp.json()


def test_ops_schedule_serves_update_and_rebuild_and_an_update_publishes(tmp_path: Path) -> None:
    t0 = time.monotonic()
    src = tmp_path / "src"
    src.mkdir()
    (src / "bridges.txt").write_text(
        "The river town of Arden had two bridges. The old bridge was wooden and creaked in winter. "
        "The new bridge was stone and carried the mail coach every morning.\n")
    (src / "mill.txt").write_text(
        "A water mill stood below the weir at Arden. Its wheel turned a pair of millstones that ground "
        "barley for the whole valley until the flood of 1893 broke the race.\n")
    corpus = tmp_path / "corpus"
    home = tmp_path / "prefect-home"
    home.mkdir()
    with prefect_server(home) as url:
        t_server = time.monotonic() - t0
        env = cli_env(PREFECT_API_URL=url, PREFECT_HOME=str(home), PREFECT_RUNNER_POLL_FREQUENCY="1",
                      PREFECT_LOGGING_LEVEL="INFO", OMP_NUM_THREADS="1")
        log_path = tmp_path / "schedule.log"
        with open(log_path, "w") as log:
            served = subprocess.Popen(
                [str(Path(PYTHON).parent / "arborag"), "schedule", str(src), "--corpus", str(corpus),
                 "--update-every", "3s", "--rebuild-cron", NEVER, "--name-suffix", "-served"],
                env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(tmp_path), start_new_session=True,
            )
        # meanwhile, the other way: deploy/prefect.yaml through `prefect deploy` into a process work pool
        prefect = str(Path(PYTHON).parent / "prefect")
        deployed = []
        for args in (["work-pool", "create", "arborag-process", "--type", "process"],
                     ["--no-prompt", "deploy", "--all", "--prefect-file", str(REPO / "deploy" / "prefect.yaml")]):
            deployed.append(subprocess.run([prefect, *args], env=env, cwd=str(REPO), capture_output=True, text=True, timeout=300))
        done: dict | None = None
        deployments: dict[str, dict] = {}
        try:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and done is None:
                assert served.poll() is None, f"arborag schedule exited:\n{log_path.read_text()[-4000:]}"
                deployments = {d["name"]: d for d in _post(url, "/deployments/filter", {})}
                if "update-served" in deployments:
                    runs = _post(url, "/flow_runs/filter", {
                        "deployments": {"id": {"any_": [deployments["update-served"]["id"]]}},
                        "flow_runs": {"state": {"type": {"any_": ["COMPLETED", "FAILED", "CRASHED"]}}},
                    })
                    failed = [r for r in runs if r["state"]["type"] != "COMPLETED"]
                    assert not failed, f"{failed[0]['state']}\n{log_path.read_text()[-4000:]}"
                    done = runs[0] if runs else None
                time.sleep(1)
        finally:
            stop(served, grace=0)
        assert done is not None, f"no scheduled update completed in time:\n{log_path.read_text()[-4000:]}"
        t_run = time.monotonic() - t0

        # both deployments were served with their schedules and JSON parameters, no work pool
        deployments = {d["name"]: d for d in _post(url, "/deployments/filter", {})}
        upd, reb = deployments["update-served"], deployments["rebuild-served"]
        assert upd["work_pool_name"] is None and reb["work_pool_name"] is None
        assert upd["schedules"][0]["schedule"]["interval"] == 3.0
        assert reb["schedules"][0]["schedule"]["cron"] == NEVER
        assert upd["parameters"] == {"corpus_dir": str(corpus.resolve()), "sources": [str(src.resolve())], "prune": True}
        assert reb["parameters"] == {"corpus_dir": str(corpus.resolve()), "sources": [str(src.resolve())]}
        assert done["auto_scheduled"] is True  # created by the server's scheduler, not by us

        # deploy/prefect.yaml deployed both of its deployments, anchors resolved, into the work pool
        for proc in deployed:
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        flows = {f["id"]: f["name"] for f in _post(url, "/flows/filter", {})}
        upd, reb = deployments["update"], deployments["rebuild"]
        assert (flows[upd["flow_id"]], upd["entrypoint"]) == ("arborag-update", "flows/update.py:update")
        assert (flows[reb["flow_id"]], reb["entrypoint"]) == ("arborag-build", "flows/build.py:build")
        assert upd["work_pool_name"] == reb["work_pool_name"] == "arborag-process"
        assert upd["schedules"][0]["schedule"]["interval"] == 900.0 and reb["schedules"][0]["schedule"]["cron"] == "0 3 * * 0"
        shared = {"corpus_dir": "/srv/arborag/corpus", "sources": ["/srv/arborag/docs"], "config_path": None}
        assert reb["parameters"] == shared and upd["parameters"] == {**shared, "prune": True}

    # the scheduled run published the corpus and recorded itself under its flow-run id
    manifest = json.loads((corpus / "manifest.json").read_text())
    runs = pq.read_table(corpus / "tables" / "runs.parquet").to_pylist()
    mine = [r for r in runs if r["run_id"] == done["id"]]
    assert mine and mine[0]["flow"] == "update" and mine[0]["status"] == "ok"
    published_by = {r["run_id"] for r in runs if r["flow"] == "update"}
    assert manifest["run_id"] in published_by and (corpus / "snapshots" / manifest["snapshot"] / "nodes.parquet").exists()
    query = subprocess.run(
        [str(Path(PYTHON).parent / "arborag"), "query", "Which bridge carried the mail coach?", "--corpus", str(corpus), "--mode", "sparse"],
        env=cli_env(), capture_output=True, text=True, timeout=120, cwd=str(REPO),
    )
    assert query.returncode == 0 and "mail coach" in query.stdout, query.stdout + query.stderr
    assert not (corpus / "writer.lock").exists()
    print(f"prefect server up after {t_server:.1f} s; first scheduled update completed at {t_run:.1f} s")
