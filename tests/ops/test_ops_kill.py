"""kill -9 in the middle of a build, then of an update: the published snapshot stays intact and
queryable, the dead writer's lock is taken over (nobody waits for a dead pid), a rerun completes.

(tests/reliability/test_rel_crash.py kills a build at every stage boundary; this test is about the
writer lock and the update flow.)
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from arborag.storage.lock import lock_path, read_lock
from helpers.ops import write_small_docs
from helpers.reliability import PYTHON, REPO, cli, cli_env, kill_tree, read_runs, wait_for

pytestmark = pytest.mark.slow

WRITER = r"""
import json, sys
from arborag.config import load_config
what, corpus, src = sys.argv[1:4]
if what == "build":
    from arborag.flows.build import run_build
    out = run_build([src], corpus, load_config(), use_prefect=False, progress=False)
else:
    from arborag.flows.update import run_update
    out = run_update([src], corpus, load_config(), use_prefect=False, progress=False)
print("SUMMARY " + json.dumps({k: out.get(k) for k in ("snapshot", "status", "mode", "run_id")}))
"""


def _start(what: str, corpus: Path, src: Path, log: Path) -> subprocess.Popen:
    with open(log, "w") as fh:
        return subprocess.Popen([PYTHON, "-c", WRITER, what, str(corpus), str(src)], env=cli_env(OMP_NUM_THREADS="1"),
                                cwd=str(REPO), stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def _run(what: str, corpus: Path, src: Path, log: Path) -> dict:
    proc = _start(what, corpus, src, log)
    proc.wait(timeout=900)
    out = log.read_text()
    assert proc.returncode == 0, out[-4000:]
    assert "waiting for the lock" not in out, "a writer waited for a dead one"
    return json.loads(out.split("SUMMARY ", 1)[1].splitlines()[0])


def _staged_files(corpus: Path) -> set[Path]:
    root = corpus / "staging"
    return {p for p in root.rglob("*") if p.is_file()} if root.is_dir() else set()


def _kill_mid_run(what: str, corpus: Path, src: Path, log: Path) -> None:
    """Start ``what`` and SIGKILL it once it holds the lock and has staged its first new output."""
    before = _staged_files(corpus)
    proc = _start(what, corpus, src, log)
    try:
        held = wait_for(lambda: (o := read_lock(corpus)) is not None and o.pid == proc.pid, timeout=600, interval=0.01, proc=proc)
        assert held, f"the {what} never took the lock:\n{log.read_text()[-3000:]}"
        staged = wait_for(lambda: bool(_staged_files(corpus) - before), timeout=600, interval=0.01, proc=proc)
        assert staged and proc.poll() is None, f"the {what} finished before the kill:\n{log.read_text()[-3000:]}"
    finally:
        kill_tree(proc)
    assert proc.returncode == -9


def _check_published(corpus: Path, snapshot: str, question: str) -> None:
    manifest = json.loads((corpus / "manifest.json").read_text())
    assert manifest["snapshot"] == snapshot, "the manifest moved"
    assert (corpus / "snapshots" / snapshot / "info.json").is_file()
    proc = cli("query", question, "--corpus", str(corpus), "--mode", "sparse", timeout=120)
    assert proc.returncode == 0 and "hits" in proc.stdout, proc.output


def _doc_ids(corpus: Path, snapshot: str) -> set[str]:
    nodes = pq.read_table(corpus / "snapshots" / snapshot / "nodes.parquet", columns=["doc_ids"])
    return {d for ids in nodes.column("doc_ids").to_pylist() for d in ids}


def test_ops_kill9_mid_build_then_mid_update(tmp_path: Path) -> None:
    src, corpus = tmp_path / "src", tmp_path / "corpus"
    write_small_docs(src, 4)
    first = _run("build", corpus, src, tmp_path / "build-0.log")
    question = "Which town is known for a stone bridge?"

    # a build of more documents, killed mid-way: the old snapshot stays published; its lock stays behind
    write_small_docs(src, 2, start=4)
    _kill_mid_run("build", corpus, src, tmp_path / "build-killed.log")
    _check_published(corpus, first["snapshot"], question)
    dead = read_lock(corpus)
    assert dead is not None and dead.purpose == "build", "the killed build left no lock record"
    second = _run("build", corpus, src, tmp_path / "build-1.log")  # takes the stale lock over, completes
    assert second["status"] == "ok" and second["snapshot"] != first["snapshot"]
    _check_published(corpus, second["snapshot"], question)
    assert len(_doc_ids(corpus, second["snapshot"])) == 6 and not lock_path(corpus).exists()

    # an update (one document gone, two new), killed mid-way: same guarantees; the rerun completes
    (src / "note001.txt").unlink()
    write_small_docs(src, 2, start=6)
    _kill_mid_run("update", corpus, src, tmp_path / "update-killed.log")
    _check_published(corpus, second["snapshot"], question)
    third = _run("update", corpus, src, tmp_path / "update-1.log")
    assert third["status"] == "ok" and third["snapshot"] != second["snapshot"]
    _check_published(corpus, third["snapshot"], question)
    docs = pq.read_table(corpus / "tables" / "documents.parquet").to_pylist()
    assert len(docs) == 7 and not any(d["uri"].endswith("note001.txt") for d in docs)
    assert _doc_ids(corpus, third["snapshot"]) == {d["doc_id"] for d in docs}
    assert not lock_path(corpus).exists() and not list((corpus / "snapshots").glob("*.partial"))
    flows = [(r["flow"], r["status"]) for r in read_runs(corpus)]
    assert flows[-1] == ("update", "ok") and ("build", "ok") in flows
