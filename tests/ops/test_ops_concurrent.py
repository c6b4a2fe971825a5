"""Two writers on one corpus, in real processes: they take turns, nobody corrupts anything.

The test holds the corpus lock itself while two builds start (so both must wait), then lets
go: one build takes the lock, the other waits for *it* (its message names the winner's pid),
and a third writer started with ``--no-wait`` fails at once naming the holder. Both builds
finish; the published snapshot is the second build's, holds both sources and is queryable;
the runs table has both builds, no staging or partial snapshot is left, and the lock is gone.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from arborag.storage.lock import lock_path, read_lock
from helpers.ops import hold_lock, stop, write_small_docs
from helpers.reliability import PYTHON, REPO, cli, cli_env, read_runs, wait_for

pytestmark = pytest.mark.slow

BUILD = r"""
import json, sys
from arborag.config import load_config
from arborag.flows.build import run_build
out = run_build(sys.argv[2:], sys.argv[1], load_config(), use_prefect=False, progress=False)
print("BUILD-SUMMARY " + json.dumps({k: out.get(k) for k in ("snapshot", "noop", "status", "run_id")}))
"""


def _summary(stdout: str) -> dict:
    line = [ln for ln in stdout.splitlines() if ln.startswith("BUILD-SUMMARY ")]
    assert line, stdout
    return json.loads(line[-1].split(" ", 1)[1])


def test_ops_two_builds_in_two_processes_take_turns(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    write_small_docs(first, 3)
    write_small_docs(second, 3, start=3)
    corpus = tmp_path / "corpus"
    env = cli_env(OMP_NUM_THREADS="1")
    procs: list[subprocess.Popen] = []
    logs = [tmp_path / "build-1.err", tmp_path / "build-2.err"]
    try:
        with hold_lock(corpus, purpose="test-holder") as (holder, release):
            for sources, log in zip(([first], [first, second]), logs):
                with open(log, "w") as err:
                    procs.append(subprocess.Popen(
                        [PYTHON, "-c", BUILD, str(corpus), *map(str, sources)], env=env, cwd=str(REPO),
                        stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True,
                    ))
            # both builds start, find the lock held and wait (they say so on stderr)
            waiting = f"waiting for the lock held by pid {holder.pid} "
            assert wait_for(lambda: all(waiting in log.read_text() for log in logs), timeout=300), \
                "a build did not wait for the lock: " + " | ".join(log.read_text()[-1000:] for log in logs)
            assert all(p.poll() is None for p in procs)
            release.touch()
            # the holder lets go; one build takes the lock
            assert wait_for(lambda: (o := read_lock(corpus)) is not None and o.pid in {p.pid for p in procs}, timeout=120)
        winner = read_lock(corpus).pid
        # a third writer that will not wait fails at once, naming the writer that holds the corpus
        refused = cli("ingest", str(second), "--corpus", str(corpus), "--no-prefect", "--no-wait", env=env, timeout=300)
        outs = []
        for p, log in zip(procs, logs):
            out, _ = p.communicate(timeout=600)
            outs.append((p.returncode, out, log.read_text()))
    finally:
        for p in procs:
            stop(p, grace=0)

    assert refused.returncode == 1, refused.output
    # the owner it names is a build (the winner, or the other one if the winner finished meanwhile)
    assert "is locked by another writer: pid " in refused.stderr and "(build)" in refused.stderr, refused.output
    for rc, out, err in outs:
        assert rc == 0, err[-3000:]
        assert f"waiting for the lock held by pid {holder.pid}" in err and "(test-holder)" in err
    loser = next(i for i, p in enumerate(procs) if p.pid != winner)
    assert f"waiting for the lock held by pid {winner} " in outs[loser][2], outs[loser][2][-2000:]

    # the published snapshot is the one built last, it holds both sources, and it is queryable
    summaries = [_summary(out) for _, out, _ in outs]
    last = summaries[loser]
    manifest = json.loads((corpus / "manifest.json").read_text())
    assert manifest["snapshot"] == last["snapshot"]
    snap = corpus / "snapshots" / manifest["snapshot"]
    nodes = pq.read_table(snap / "nodes.parquet")
    docs = pq.read_table(corpus / "tables" / "documents.parquet").to_pylist()
    assert len(docs) == 6 and {d["status"] for d in docs} == {"ok"}
    leaf_docs = {d for ids in nodes.column("doc_ids").to_pylist() for d in ids}
    assert leaf_docs == {d["doc_id"] for d in docs}
    runs = [r for r in read_runs(corpus) if r["flow"] == "build"]
    assert sorted(r["status"] for r in runs) == ["ok", "ok"] and len({r["run_id"] for r in runs}) == 2
    assert not list((corpus / "snapshots").glob("*.partial")) and not lock_path(corpus).exists()
    query = cli("query", "Which town has a salt market?", "--corpus", str(corpus), "--mode", "sparse", env=env, timeout=120)
    assert query.returncode == 0 and "salt market" in query.stdout and "note003" in query.stdout, query.output
