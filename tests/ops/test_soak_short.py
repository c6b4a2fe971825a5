"""The short soak: ``benchmarks/soak.py`` itself, 15 cycles on a small corpus, kills included.

A real ``arborag serve`` answers a client loop on 127.0.0.1 throughout; each cycle adds, changes
and deletes documents and runs the update in the warm writer process (``--writer warm``, the
same ``run_update`` as ``arborag update``), which is killed with SIGKILL in a seeded share of the
cycles. Retention is tightened through the environment (keep 3, no grace window) so 15 short
cycles show it working; the full soak runs the defaults.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
CYCLES = 15
KEEP_LAST = 3


@pytest.fixture(scope="module")
def soak(tmp_path_factory: pytest.TempPathFactory) -> dict:
    work = tmp_path_factory.mktemp("soak")
    out = work / "results" / "soak-short"
    env = dict(os.environ, OMP_NUM_THREADS="1", ARBORAG_RETENTION__KEEP_LAST=str(KEEP_LAST), ARBORAG_RETENTION__GRACE_S="0")
    cmd = [sys.executable, str(REPO / "benchmarks" / "soak.py"), "--work", str(work / "w"), "--docs", "30", "--cycles", str(CYCLES),
           "--writer", "warm", "--kill-share", "0.2", "--client-interval", "0.3", "--no-eval", "--out", str(out)]
    done = subprocess.run(cmd, cwd=str(REPO), env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    summary = json.loads(Path(f"{out}.json").read_text())
    cycles = [json.loads(line) for line in Path(f"{out}-cycles.jsonl").read_text().splitlines() if line.strip()]
    return {"summary": summary, "cycles": cycles, "stdout": done.stdout, "work": work / "w"}


def test_every_cycle_ran_and_the_kills_recovered(soak: dict) -> None:
    s, cycles = soak["summary"], soak["cycles"]
    assert s["cycles_run"] == CYCLES == len(cycles)
    killed = [c["cycle"] for c in cycles if c["killed"]]
    assert killed, f"no writer was killed mid-update: {[c.get('kill_missed') for c in cycles]}"
    assert not s["cycles_failed"], [c.get("error") for c in cycles if c["cycle"] in s["cycles_failed"]]
    after = [c for c in cycles if c["cycle"] - 1 in killed]
    assert after and all(c["completed"] for c in after), after
    assert s["cycles_completed"] == CYCLES - len(killed)


def test_no_query_failed_and_no_document_was_lost(soak: dict) -> None:
    s, cycles = soak["summary"], soak["cycles"]
    assert s["query_errors"] == 0, s["query_error_samples"]
    assert s["query_ok"] >= CYCLES, "the client loop barely ran"
    for c in cycles:
        if c["completed"]:
            chk = c["check"]
            assert (chk["n_lost"], chk["n_extra"], chk["n_stale"]) == (0, 0, 0), (c["cycle"], chk)
            assert chk["published"] == chk["sources"]
    # the server followed the publishes: it answered from more than one snapshot
    assert cycles[-1]["queries"]["snapshots_seen"] >= 2


def test_retention_keeps_the_snapshot_count_bounded(soak: dict) -> None:
    from arborag.config import ArboragConfig

    if "retention" not in ArboragConfig.model_fields:
        pytest.skip("retention is not in this tree yet (branch life: arborag.config.RetentionConfig)")
    counts = [c["disk"]["n_snapshots"] for c in soak["cycles"]]
    # kept: the last KEEP_LAST published + the one the server may still hold a lease on
    assert max(counts[3:]) <= KEEP_LAST + 1, counts
    assert soak["cycles"][-1]["disk"]["staging"] == 0 or soak["cycles"][-1]["killed"], soak["cycles"][-1]["disk"]
