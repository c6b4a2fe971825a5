"""Crash safety: a build killed with SIGKILL at each stage boundary and mid-stage.

A first build publishes a snapshot over a few HotpotQA documents. Then more documents arrive
and a build over all of them runs in a subprocess; the test watches the corpus folder for
each stage's outputs (the flow code is not touched) and kills the build right then. Each kill
starts a new build, which must resume from what the killed ones staged. Meanwhile a second
process queries the published snapshot in a loop: every query must succeed. Last, a build
runs to completion; the ``runs`` table and the embedding cache show that nothing cached was
recomputed, and no staging litter is left or published.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from helpers.reliability import HOTPOT_CORPUS, PYTHON, REPO, cli_env, kill_tree, read_runs, wait_for, write_hotpot_docs

pytestmark = [pytest.mark.reliability, pytest.mark.slow, pytest.mark.shared_data]

N_FIRST, N_ALL = 24, 100

BUILD = r"""
import json, sys
from arborag.config import load_config
from arborag.flows.build import run_build
out = run_build([sys.argv[1]], sys.argv[2], load_config(), use_prefect=False, progress=False)
print("BUILD-SUMMARY " + json.dumps({k: out.get(k) for k in ("snapshot", "noop", "calls", "cached", "status")}, default=str))
"""

QUERY_LOOP = r"""
import json, sys, time, traceback
from pathlib import Path
from arborag.config import load_config
from arborag.query import open_index
from arborag.embed.model import Embedder

corpus, stop, result = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
embedder = Embedder(load_config().embed)
questions = ["Which game was created by Lester Smith?", "Who designed the dice game?", "river city history"]
n = errors = empty = 0
snapshots, messages = set(), []
Path(sys.argv[4]).write_text("ready")
while not stop.exists():
    for i, q in enumerate(questions):
        mode = ("collapsed", "sparse", "hybrid")[i % 3]
        n += 1
        try:
            index = open_index(corpus, embed_query=embedder.embed)
            hits = index.search(q, mode=mode, budget=300)
            snapshots.add(index.snapshot)
            empty += not hits
        except Exception as exc:
            errors += 1
            messages.append(traceback.format_exc()[-600:])
    time.sleep(0.05)
result.write_text(json.dumps({"queries": n, "errors": errors, "empty": empty, "snapshots": sorted(snapshots), "messages": messages[:5]}))
"""


def _staging(corpus: Path) -> list[Path]:
    root = corpus / "staging"
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def _staged(corpus: Path, name: str) -> bool:
    return any((d / name).exists() for d in _staging(corpus))


def _emb_shards(corpus: Path) -> int:
    return len(list((corpus / "cache" / "embeddings").glob("*.parquet")))


def _partial_snapshots(corpus: Path) -> list[Path]:
    return sorted((corpus / "snapshots").glob("*.partial"))


# (label, predicate factory(corpus, state at start) -> callable, extra delay before the kill)
KILLS = [
    ("mid-embed", lambda c, s: (lambda: bool(_staging(c))), 2.0),
    ("embed|tree", lambda c, s: (lambda: _staged(c, "leaf_vectors.parquet")), 0.0),
    ("mid-tree", lambda c, s: (lambda: _emb_shards(c) > s["shards"]), 0.0),
    ("tree|vectors", lambda c, s: (lambda: _staged(c, "node_vectors.parquet")), 0.0),
    ("mid-vectors", lambda c, s: (lambda: _staged(c, "vectors.partial")), 0.0),
    ("mid-sparse", lambda c, s: (lambda: _staged(c, "sparse.partial")), 0.0),
    ("publish", lambda c, s: (lambda: bool(_partial_snapshots(c))), 0.0),
]


def _start_build(src: Path, corpus: Path, log: Path) -> subprocess.Popen:
    fh = open(log, "w")
    return subprocess.Popen([PYTHON, "-c", BUILD, str(src), str(corpus)], env=cli_env(), cwd=str(REPO),
                            stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def _emb_hash_duplicates(corpus: Path) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    shards = sorted((corpus / "cache" / "embeddings").glob("*.parquet"))
    if not shards:
        return 0
    t = pa.concat_tables([pq.read_table(s, columns=["model_id", "text_hash"]) for s in shards])
    keys = [f"{m}\x00{h}" for m, h in zip(t.column("model_id").to_pylist(), t.column("text_hash").to_pylist())]
    return len(keys) - len(set(keys))


def test_sigkill_at_every_stage_while_queries_run(tmp_path, record_property) -> None:
    if not HOTPOT_CORPUS.is_file():
        pytest.skip(f"needs {HOTPOT_CORPUS}")
    src, corpus = tmp_path / "src", tmp_path / "corpus"
    write_hotpot_docs(src, N_FIRST)
    first = subprocess.run([PYTHON, "-c", BUILD, str(src), str(corpus)], env=cli_env(), cwd=str(REPO),
                           capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    manifest_before = (corpus / "manifest.json").read_bytes()
    snap_before = json.loads(manifest_before)["snapshot"]
    write_hotpot_docs(src, N_ALL - N_FIRST, start=N_FIRST)

    stop, result, ready = tmp_path / "stop", tmp_path / "queries.json", tmp_path / "ready"
    querier = subprocess.Popen([PYTHON, "-c", QUERY_LOOP, str(corpus), str(stop), str(result), str(ready)],
                               env=cli_env(), cwd=str(REPO), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
    kills: list[dict] = []
    try:
        assert wait_for(ready.exists, timeout=180, proc=querier), "query loop did not start"
        for label, make, delay in KILLS:
            state = {"shards": _emb_shards(corpus)}
            log = tmp_path / f"build-{len(kills)}.log"
            proc = _start_build(src, corpus, log)
            hit = wait_for(make(corpus, state), timeout=600, interval=0.01, proc=proc)
            if hit and delay:
                time.sleep(delay)
            landed = proc.poll() is None
            kill_tree(proc)
            kills.append({"at": label, "landed": landed, "rc": proc.returncode})
            assert json.loads((corpus / "manifest.json").read_bytes())["snapshot"] == snap_before or not landed, \
                f"after the kill at {label} the manifest moved: {(corpus / 'manifest.json').read_text()}"
            if not landed:  # the build finished before the kill: nothing more to interrupt
                break
            assert (corpus / "snapshots" / snap_before).is_dir()
        staged_keys = {d.name for d in _staging(corpus)}
        published_before_final = json.loads((corpus / "manifest.json").read_bytes())["snapshot"]
        final = subprocess.run([PYTHON, "-c", BUILD, str(src), str(corpus)], env=cli_env(), cwd=str(REPO),
                               capture_output=True, text=True, timeout=900)
        time.sleep(1.0)  # let the query loop see the new snapshot too
    finally:
        stop.write_text("stop")
        try:
            querier.wait(timeout=60)
        except subprocess.TimeoutExpired:
            kill_tree(querier)
    assert final.returncode == 0, final.stdout[-2000:] + final.stderr[-3000:]
    summary = json.loads(final.stdout.split("BUILD-SUMMARY ", 1)[1])
    queries = json.loads(result.read_text())
    landed = [k for k in kills if k["landed"]]
    record_property("kills", json.dumps(kills))
    record_property("queries", json.dumps({k: queries[k] for k in ("queries", "errors", "empty")}))
    print(f"\nRELIABILITY crash: kills={json.dumps(kills)} queries={queries['queries']} errors={queries['errors']} "
          f"final_calls={summary['calls']} cached={summary['cached']}")

    assert len(landed) >= 5, f"only {len(landed)} kills landed mid-build: {kills}"
    assert queries["errors"] == 0, queries["messages"]
    assert queries["queries"] >= 20 and queries["empty"] == 0, queries
    assert summary["snapshot"] != snap_before and summary["status"] == "ok", summary
    # Every text was embedded by a killed run and cached: the final run embeds nothing.
    assert summary["calls"]["embedded_texts"] == 0, summary
    same_key = any(summary["snapshot"] == "snap-" + k[:20] for k in staged_keys)
    print(f"RELIABILITY crash: final build key staged by the killed runs: {same_key}")
    # Nothing is summarized again either, whichever way the killed runs ended:
    assert summary["calls"] == {"embedded_texts": 0, "summaries": 0}, summary
    if same_key:  # resumed from what the killed runs staged
        assert {"embed", "tree", "vectors", "sparse"} <= set(summary["cached"]), summary
    else:  # a kill came too late: that build published, and the final run found its snapshot (a no-op)
        assert not all(k["landed"] for k in kills), f"every kill landed, yet the final key was never staged: {kills}"
        assert summary["snapshot"] == published_before_final != snap_before, (summary, published_before_final)
    runs = read_runs(corpus)
    assert runs[-1]["status"] == "ok" and runs[-1]["counts"]["calls"] == summary["calls"]
    assert _emb_hash_duplicates(corpus) == 0, "an embedding in the cache was computed twice"
    # No litter: staging of the published key is gone; no half-built snapshot remains or is published.
    # (Staging of another key - the code changed between a killed run and this one - stays: see
    # docs/RELIABILITY.md; it is never published.)
    assert not any(summary["snapshot"] == "snap-" + d.name[:20] for d in _staging(corpus)), _staging(corpus)
    assert len(_staging(corpus)) <= len(staged_keys - {d for d in staged_keys if summary["snapshot"] == "snap-" + d[:20]})
    assert _partial_snapshots(corpus) == []
    man = json.loads((corpus / "manifest.json").read_text())
    assert man["snapshot"] == summary["snapshot"] and not man["snapshot"].endswith(".partial")
    assert (corpus / "snapshots" / man["snapshot"] / "info.json").is_file()
