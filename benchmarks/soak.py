"""The soak: a corpus that lives for many update cycles, with a server answering
throughout and the writer killed with ``kill -9`` in some cycles.

What one run does (all state in ``--work``, so ``--resume`` continues it, now or later):

1. **Sources.** Every HotpotQA paragraph of the shared corpus is cut into consecutive 2-sentence
   pieces, one ``.txt`` document per piece (2,318 pieces, the same cut as ``benchmarks/update.py``);
   ``--docs`` of them (default 2,000) are the first sources, the rest is the pool later adds draw
   from (a deleted piece goes back to the pool).
2. **Cold build** through the real CLI (``arborag build SRC --corpus C --no-prefect``).
3. **Server.** ``arborag serve`` on 127.0.0.1 (a real process); a client thread sends one
   ``POST /search`` (HotpotQA questions; hop / auto / collapsed / traversal in turn) every
   ``--client-interval`` seconds for the whole run and counts every answer that is not a 200.
4. **Cycles.** Each cycle draws (seeded by ``--seed`` and the cycle number: the same run gives the
   same edits) adds, changes and deletes of 1-5 % of the documents each, applies them to the
   sources, and runs ``arborag update SRC --corpus C --no-prefect`` in a subprocess (``--writer
   cli``, the default). In a seeded ``--kill-share`` of the cycles (at least one in every ten) the
   writer is killed with SIGKILL at a random point of its expected run time; the next cycle must
   recover (take over the dead writer's lock) and complete. Retention is whatever the corpus's
   default config does after each publish (no overrides here).
5. **Per cycle** one line of ``cycles.jsonl``: disk bytes (total and per part: snapshots, staging,
   each cache, prefect, tables, leases/pins, other), number of snapshots kept, update seconds,
   the run's mode, summaries rewritten, whether the drift guard re-fitted the tree, and the
   published document set against the sources (documents lost, extra or stale), plus the client's
   answers and errors during the cycle.
6. **At the end** (``--cycles`` reached, or the file ``WORK/STOP`` exists): query errors, documents
   lost, the slope of update seconds over the cycles, the size after cycle 10 vs the last, and
   retrieval against a full rebuild of the final sources (``hop`` — the default mode, whose links
   table every update rewrites —, ``auto``, ``collapsed``, ``traversal``
   on the 100 HotpotQA questions, hit rate and recall at ``--budget`` through the eval code:
   :func:`arborag.tasks.evaluation.retrieve.run_queries` + :func:`~arborag.tasks.evaluation.score.score_hits`).
   A gold paragraph counts as found when any of its pieces is in the context.

``--writer warm`` runs the same ``run_update`` (what ``arborag update`` calls) in one long-lived
worker subprocess instead of a fresh CLI process per cycle — the kill then kills that worker and
the next cycle starts a new one. The short version in the test suite uses it
(``tests/ops/test_soak_short.py``) to stay near a minute; the full soak uses the CLI.

Run::

    OMP_NUM_THREADS=1 nohup python benchmarks/soak.py --cycles 100 --resume > /tmp/soak.log 2>&1 &
    touch /tmp/arborag-soak/STOP        # stop after the current cycle, evaluate and write the results
    python benchmarks/soak.py --resume --cycles 150    # extend a finished run by 50 cycles

Writes ``benchmarks/results/soak.json`` + ``soak.md`` (rewritten after every cycle: a run cut short
still leaves its trends) and copies ``cycles.jsonl`` to ``benchmarks/results/soak-cycles.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, git_commit, hotpot_paragraphs, hotpot_questions, machine_line, md_table, setup_env  # noqa: E402

setup_env()

MODES = ("hop", "auto", "collapsed", "traversal")
PIECE_SENTENCES = 2


# -- sources --------------------------------------------------------------------------------------
def pieces() -> tuple[dict[str, str], dict[str, str]]:
    """(file name -> text, file name -> paragraph title) of every 2-sentence HotpotQA piece."""
    texts: dict[str, str] = {}
    titles: dict[str, str] = {}
    for p, (title, sents) in enumerate(hotpot_paragraphs()):
        for k in range(0, len(sents), PIECE_SENTENCES):
            name = f"p{p:04d}-{k // PIECE_SENTENCES}.txt"
            body = " ".join(sents[k:k + PIECE_SENTENCES])
            texts[name] = f"{title} (part {k // PIECE_SENTENCES + 1})\n\n{body}\n"
            titles[name] = title
    return texts, titles


def changed_text(original: str, cycle: int) -> str:
    """A changed document: its original text plus one revision line (not cumulative, so texts do not grow)."""
    return original + f"Revised in update cycle {cycle}.\n"


def plan_edits(present: list[str], pool: list[str], cycle: int, seed: int, lo: float, hi: float) -> dict[str, list[str]]:
    """Seeded adds / changes / deletes of ``lo``-``hi`` of the documents each (at least one each)."""
    rng = random.Random(f"{seed}-edits-{cycle}")
    n = len(present)

    def count() -> int:
        return max(1, round(n * rng.uniform(lo, hi)))

    present = sorted(present)
    deleted = rng.sample(present, min(count(), max(0, n - 2)))
    rest = sorted(set(present) - set(deleted))
    changed = rng.sample(rest, min(count(), len(rest)))
    added = rng.sample(sorted(pool), min(count(), len(pool)))
    return {"added": sorted(added), "changed": sorted(changed), "deleted": sorted(deleted)}


def apply_edits(src: Path, edits: dict[str, list[str]], texts: dict[str, str], cycle: int) -> None:
    """Idempotent: applying the same edits twice leaves the same folder (``--resume`` after a crash)."""
    for name in edits["deleted"]:
        (src / name).unlink(missing_ok=True)
    for name in edits["added"]:
        (src / name).write_text(texts[name], encoding="utf-8")
    for name in edits["changed"]:
        (src / name).write_text(changed_text(texts[name], cycle), encoding="utf-8")


# -- processes ------------------------------------------------------------------------------------
def arborag_cmd(*args: str) -> list[str]:
    script = Path(sys.executable).parent / "arborag"
    return [str(script), *args] if script.exists() else [sys.executable, "-m", "arborag.cli.app", *args]


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1",
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "COLUMNS": "160", "NO_COLOR": "1"})
    return env


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group we started (``start_new_session``) — only it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


WORKER = r"""
import json, sys, time, traceback
corpus, src = sys.argv[1], sys.argv[2]
from arborag.config import load_config
from arborag.flows.update import run_update
print("READY", flush=True)
for line in sys.stdin:
    if line.strip() != "update":
        continue
    t0 = time.perf_counter()
    try:
        out = run_update([src], corpus, load_config(), use_prefect=False, progress=False)
        print("DONE " + json.dumps({"ok": True, "seconds": time.perf_counter() - t0, "mode": out.get("mode")}), flush=True)
    except Exception as exc:
        print("DONE " + json.dumps({"ok": False, "seconds": time.perf_counter() - t0, "error": traceback.format_exc()[-3000:]}), flush=True)
"""


class Writer:
    """Runs one update of ``corpus`` from ``src``: a fresh ``arborag update`` per call (``cli``) or one
    long-lived worker process (``warm``); either can be killed with SIGKILL after ``kill_after`` s."""

    def __init__(self, kind: str, corpus: Path, src: Path, log: Path) -> None:
        self.kind, self.corpus, self.src, self.log = kind, corpus, src, log
        self.worker: subprocess.Popen | None = None
        self._lines: list[str] = []
        self._cond = threading.Condition()

    def _start_worker(self) -> None:
        fh = open(self.log, "a")
        self.worker = subprocess.Popen([sys.executable, "-c", WORKER, str(self.corpus), str(self.src)], env=child_env(),
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=fh, text=True,
                                       start_new_session=True)
        self._lines = []
        worker = self.worker

        def pump() -> None:
            assert worker.stdout is not None
            for line in worker.stdout:
                with self._cond:
                    self._lines.append(line.rstrip("\n"))
                    self._cond.notify_all()
            with self._cond:
                self._lines.append("EOF")
                self._cond.notify_all()

        threading.Thread(target=pump, daemon=True).start()

    def _next_line(self, prefix: str, deadline: float) -> str | None:
        with self._cond:
            while True:
                for i, line in enumerate(self._lines):
                    if line.startswith(prefix) or line == "EOF":
                        del self._lines[: i + 1]
                        return None if line == "EOF" else line
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(min(left, 1.0))

    def update(self, *, kill_after: float | None, timeout: float) -> dict[str, Any]:
        t0 = time.perf_counter()
        if self.kind == "cli":
            with open(self.log, "a") as fh:
                fh.write(f"\n=== arborag update ({time.strftime('%H:%M:%S')}) ===\n")
                fh.flush()
                proc = subprocess.Popen(arborag_cmd("update", str(self.src), "--corpus", str(self.corpus), "--no-prefect"),
                                        env=child_env(), stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                proc.wait(timeout=kill_after if kill_after is not None else timeout)
            except subprocess.TimeoutExpired:
                if kill_after is None:
                    kill_group(proc)
                    return {"ok": False, "killed": False, "seconds": time.perf_counter() - t0, "error": f"timed out after {timeout} s"}
                kill_group(proc)
                return {"ok": False, "killed": True, "seconds": time.perf_counter() - t0, "returncode": proc.returncode}
            return {"ok": proc.returncode == 0, "killed": False, "seconds": time.perf_counter() - t0, "returncode": proc.returncode}
        # warm worker
        if self.worker is None or self.worker.poll() is not None:
            self._start_worker()
            if self._next_line("READY", time.monotonic() + timeout) is None:
                return {"ok": False, "killed": False, "seconds": time.perf_counter() - t0, "error": "worker did not start"}
        assert self.worker is not None and self.worker.stdin is not None
        self.worker.stdin.write("update\n")
        self.worker.stdin.flush()
        line = self._next_line("DONE ", time.monotonic() + (kill_after if kill_after is not None else timeout))
        if line is None:
            killed = kill_after is not None
            kill_group(self.worker)
            self.worker = None
            return {"ok": False, "killed": killed, "seconds": time.perf_counter() - t0,
                    **({} if killed else {"error": "worker died or timed out"})}
        done = json.loads(line[5:])
        return {"ok": bool(done.get("ok")), "killed": False, "seconds": time.perf_counter() - t0,
                **({"error": done["error"]} if "error" in done else {})}

    def close(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            assert self.worker.stdin is not None
            self.worker.stdin.close()
            try:
                self.worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                kill_group(self.worker)
        self.worker = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def post_json(url: str, body: dict[str, Any], timeout: float) -> tuple[int, dict[str, Any] | None]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read())
        except ValueError:
            return exc.code, None


class Server:
    """``arborag serve`` on 127.0.0.1 (a real process) and a bounded client loop against it."""

    def __init__(self, corpus: Path, log: Path, questions: list[str], *, interval: float, budget: int = 500) -> None:
        self.corpus, self.log, self.questions, self.interval, self.budget = corpus, log, questions, interval, budget
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.ok = 0
        self.errors: list[dict[str, Any]] = []
        self.snapshots: set[str] = set()
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 600) -> None:
        with open(self.log, "a") as fh:
            self.proc = subprocess.Popen(
                arborag_cmd("serve", "--corpus", str(self.corpus), "--port", str(self.port), "--embed-threads", "1",
                            "--log-level", "warning"),
                env=child_env(), stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"arborag serve exited with {self.proc.returncode}; see {self.log}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as resp:
                    if json.loads(resp.read()).get("status") == "ok":
                        break
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        else:
            raise RuntimeError(f"arborag serve did not answer /health within {timeout} s; see {self.log}")
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        i = 0
        while not self._stop.is_set():
            q = self.questions[i % len(self.questions)]
            mode = MODES[i % len(MODES)]
            i += 1
            t0 = time.perf_counter()
            try:
                code, body = post_json(self.url + "/search", {"text": q, "mode": mode, "budget": self.budget}, timeout=120)
                err = None if code == 200 else f"HTTP {code}: {str((body or {}).get('detail'))[:300]}"
            except Exception as exc:  # noqa: BLE001 - every failure of a request is what we count
                code, body, err = None, None, f"{type(exc).__name__}: {exc}"[:300]
            with self.lock:
                if err is None:
                    self.ok += 1
                    if body and body.get("snapshot"):
                        self.snapshots.add(body["snapshot"])
                else:
                    self.errors.append({"at": time.strftime("%H:%M:%S"), "mode": mode, "error": err,
                                        "seconds": round(time.perf_counter() - t0, 2)})
            self._stop.wait(self.interval)

    def counts(self) -> tuple[int, int]:
        with self.lock:
            return self.ok, len(self.errors)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=150)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                kill_group(self.proc)


# -- measurements ---------------------------------------------------------------------------------
def tree_bytes(path: Path) -> int:
    total = 0
    try:
        entries = list(os.scandir(path))
    except (FileNotFoundError, NotADirectoryError):
        return 0
    for e in entries:
        try:
            if e.is_dir(follow_symlinks=False):
                total += tree_bytes(Path(e.path))
            elif e.is_file(follow_symlinks=False):
                total += e.stat(follow_symlinks=False).st_size
        except FileNotFoundError:  # removed while we walk (gc)
            continue
    return total


def disk_parts(corpus: Path) -> dict[str, Any]:
    """Bytes of the corpus and of each part: sealed snapshots, staging (``staging/`` and
    ``snapshots/*.partial``), each cache, Prefect records, working tables, leases + pins, the rest."""
    parts: dict[str, int] = {"snapshots": 0, "staging": tree_bytes(corpus / "staging"), "prefect": tree_bytes(corpus / "prefect"),
                             "tables": tree_bytes(corpus / "tables"), "leases_pins": tree_bytes(corpus / "leases") + tree_bytes(corpus / "pins")}
    n_snapshots = 0
    snaps = corpus / "snapshots"
    if snaps.is_dir():
        for d in snaps.iterdir():
            size = tree_bytes(d) if d.is_dir() else (d.stat().st_size if d.exists() else 0)
            if d.name.endswith(".partial") or not (d / "info.json").exists():
                parts["staging"] += size
            else:
                parts["snapshots"] += size
                n_snapshots += 1
    caches: dict[str, int] = {}
    if (corpus / "cache").is_dir():
        for d in sorted((corpus / "cache").iterdir()):
            caches[d.name] = tree_bytes(d) if d.is_dir() else d.stat().st_size
    parts["caches"] = sum(caches.values())
    total = tree_bytes(corpus)
    parts["other"] = total - sum(v for k, v in parts.items())
    return {"total": total, **parts, "cache_parts": caches, "n_snapshots": n_snapshots}


def published_check(corpus: Path, src: Path) -> dict[str, Any]:
    """The published snapshot's documents against the source folder: lost, extra, stale (text differs)."""
    import polars as pl
    import pyarrow.parquet as pq

    man = json.loads((corpus / "manifest.json").read_text(encoding="utf-8"))
    snap = corpus / "snapshots" / man["snapshot"]
    docs = pl.from_arrow(pq.read_table(snap / "documents.parquet", columns=["uri", "text", "status"])).filter(pl.col("status") == "ok")
    docs = docs.with_columns(pl.col("uri").str.extract(r"([^/\\]+)$").alias("name"),
                             pl.col("text").str.replace_all(r"\s+", " ").str.strip_chars().alias("norm"))
    sources = {p.name: " ".join(p.read_text(encoding="utf-8").split()) for p in src.iterdir() if p.is_file()}
    srcf = pl.DataFrame({"name": list(sources), "src_norm": list(sources.values())}, schema={"name": pl.String, "src_norm": pl.String})
    joined = srcf.join(docs.select("name", "norm"), on="name", how="full", coalesce=True)
    lost = joined.filter(pl.col("norm").is_null())["name"].to_list()
    extra = joined.filter(pl.col("src_norm").is_null())["name"].to_list()
    stale = joined.filter(pl.col("norm").is_not_null() & pl.col("src_norm").is_not_null() & (pl.col("norm") != pl.col("src_norm")))["name"].to_list()
    return {"snapshot": man["snapshot"], "sources": len(sources), "published": docs.height, "lost": sorted(lost)[:20],
            "n_lost": len(lost), "extra": sorted(extra)[:20], "n_extra": len(extra), "stale": sorted(stale)[:20], "n_stale": len(stale)}


def last_run(corpus: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    rows = pq.read_table(corpus / "tables" / "runs.parquet").to_pylist()
    if not rows:
        return {}
    row = rows[-1]
    counts = json.loads(row.get("counts") or "{}")
    return {"run_id": row["run_id"], "flow": row["flow"], "status": row["status"], "mode": counts.get("mode"),
            "reason": counts.get("reason"), "full_rebuild": bool(counts.get("full_rebuild")),
            "summaries_rewritten": counts.get("summaries_rewritten"), "embedded_texts": (counts.get("calls") or {}).get("embedded_texts"),
            "stage_seconds": counts.get("seconds")}


# -- state ----------------------------------------------------------------------------------------
def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError:  # a torn last line of a killed run
                pass
    return out


def append_jsonl(path: Path, rec: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(rec, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def kill_cycles(seed: int, cycles: int, share: float) -> set[int]:
    """Seeded cycles whose writer is killed: ``share`` of each block of ten (at least one per block),
    never the first cycle of a block (so two kills are never back to back across blocks)."""
    out: set[int] = set()
    per_block = max(1, round(10 * share))
    for b in range(0, cycles, 10):
        rng = random.Random(f"{seed}-kills-{b}")
        out.update(b + i for i in rng.sample(range(1, 10), min(per_block, 9)) if b + i < cycles)
    # no two kills in a row: the cycle after a kill must complete by itself
    return {c for c in sorted(out) if c - 1 not in out}


def slope(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3:
        return None
    import numpy as np

    return float(np.polyfit(np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), 1)[0])


# -- evaluation -----------------------------------------------------------------------------------
def evaluate_against_rebuild(work: Path, corpus: Path, src: Path, titles: dict[str, str], budget: int, limit: int | None) -> dict[str, Any]:
    """Retrieval of the soaked corpus vs a full rebuild of the final sources (same embedding cache)."""
    import polars as pl

    from arborag.config import load_config
    from arborag.flows.build import run_build
    from arborag.query import open_index
    from arborag.storage.corpus import Corpus
    from arborag.tasks.evaluation.datasets import prepare_dataset
    from arborag.tasks.evaluation.retrieve import run_queries
    from arborag.tasks.evaluation.score import score_hits

    full = work / "full-rebuild"
    shutil.rmtree(full, ignore_errors=True)
    full.mkdir(parents=True)
    if (corpus / "cache" / "embeddings").is_dir():  # the same vectors, without paying for them again
        shutil.copytree(corpus / "cache" / "embeddings", full / "cache" / "embeddings")
    t0 = time.perf_counter()
    run_build([src], full, load_config(), use_prefect=False, progress=False)
    rebuild_s = time.perf_counter() - t0
    # the method's own noise: the same final sources rebuilt with another cluster seed. A soaked tree
    # cannot be expected to sit closer to the rebuild than two full rebuilds sit to each other.
    other = work / "full-rebuild-seed"
    shutil.rmtree(other, ignore_errors=True)
    other.mkdir(parents=True)
    if (corpus / "cache" / "embeddings").is_dir():
        shutil.copytree(corpus / "cache" / "embeddings", other / "cache" / "embeddings")
    base_seed = load_config().cluster.seed
    run_build([src], other, load_config(overrides={"cluster": {"seed": base_seed + 1}}), use_prefect=False, progress=False)
    prepared = prepare_dataset("hotpotqa", work / "hotpot-ds", limit=limit)
    queries = prepared.queries()

    def metrics(root: Path) -> dict[str, dict[str, float]]:
        docs = Corpus(root).read_snapshot("documents")
        gold: dict[str, set[str]] = {}
        for did, uri in zip(docs.column("doc_id").to_pylist(), docs.column("uri").to_pylist()):
            title = titles.get(Path(uri).name)
            if title is not None:
                gold.setdefault(title, set()).add(did)
        gold_ids = {g for ids in queries.column("gold_ids").to_pylist() for g in ids}
        gold_docs = {"sentence": {g: frozenset(gold.get(g, ())) for g in gold_ids}}
        index = open_index(root)
        hits = run_queries(index, queries, "sentence", list(MODES), [budget])
        res = pl.from_arrow(score_hits(hits, queries, gold_docs, dataset="hotpotqa", match=prepared.match))
        agg = res.group_by("system").agg(pl.col("recall_at_budget").mean().alias("recall"), pl.col("answer_hit").mean().alias("hit"))
        return {r["system"]: {"recall": round(r["recall"], 4), "hit": round(r["hit"], 4)} for r in agg.iter_rows(named=True)}

    soaked, rebuilt, reseeded = metrics(corpus), metrics(full), metrics(other)
    rows = []
    for m in MODES:
        a, b, c = soaked.get(m, {}), rebuilt.get(m, {}), reseeded.get(m, {})
        rows.append({"mode": m, "soaked": a, "rebuild": b, "rebuild_other_seed": c,
                     "hit_diff": round(a["hit"] - b["hit"], 4) if a and b else None,
                     "recall_diff": round(a["recall"] - b["recall"], 4) if a and b else None,
                     "seed_hit_diff": round(c["hit"] - b["hit"], 4) if c and b else None,
                     "seed_recall_diff": round(c["recall"] - b["recall"], 4) if c and b else None})
    shutil.rmtree(full, ignore_errors=True)
    shutil.rmtree(other, ignore_errors=True)
    return {"budget": budget, "questions": queries.num_rows, "rebuild_seconds": round(rebuild_s, 1), "modes": rows,
            "other_seed": base_seed + 1}


# -- summary --------------------------------------------------------------------------------------
def summarize(cycles: list[dict[str, Any]], build: dict[str, Any], meta: dict[str, Any], evaluation: dict[str, Any] | None) -> dict[str, Any]:
    done = [c for c in cycles if c.get("completed")]
    killed = [c for c in cycles if c.get("killed")]
    after_kill = [c for c in cycles if c["cycle"] - 1 in {k["cycle"] for k in killed}]
    incremental = [c for c in done if c.get("run", {}).get("mode") == "incremental"]
    by_cycle = {c["cycle"]: c for c in cycles}
    size10 = by_cycle.get(10, {}).get("disk", {}).get("total")
    last = cycles[-1] if cycles else {}
    size_last = last.get("disk", {}).get("total")
    parts = ("snapshots", "staging", "caches", "prefect", "tables", "leases_pins", "other")
    growth = {}
    for p in parts:
        a = by_cycle.get(10, {}).get("disk", {}).get(p)
        b = last.get("disk", {}).get(p)
        growth[p] = {"cycle10": a, "last": b, "ratio": round(b / a, 3) if a and b is not None else None}
    return {
        **meta,
        "build": build,
        "cycles_run": len(cycles),
        "cycles_completed": len(done),
        "cycles_killed": len(killed),
        "cycles_after_kill_completed": sum(1 for c in after_kill if c.get("completed")),
        "cycles_after_kill": len(after_kill),
        "cycles_failed": [c["cycle"] for c in cycles if not c.get("completed") and not c.get("killed")],
        "query_ok": sum(c.get("queries", {}).get("ok", 0) for c in cycles) + build.get("queries_ok_before_cycles", 0),
        "query_errors": sum(c.get("queries", {}).get("errors", 0) for c in cycles),
        "query_error_samples": [e for c in cycles for e in c.get("queries", {}).get("error_samples", [])][:20],
        "documents_lost": sum(c.get("check", {}).get("n_lost", 0) for c in done),
        "documents_extra": sum(c.get("check", {}).get("n_extra", 0) for c in done),
        "documents_stale": sum(c.get("check", {}).get("n_stale", 0) for c in done),
        "drift_refits": sum(1 for c in done if c.get("run", {}).get("full_rebuild")),
        "update_seconds_slope_all": slope([c["cycle"] for c in done], [c["update_s"] for c in done]),
        "update_seconds_slope_incremental": slope([c["cycle"] for c in incremental], [c["update_s"] for c in incremental]),
        "update_seconds_median_incremental": round(statistics.median([c["update_s"] for c in incremental]), 2) if incremental else None,
        "size_cycle10": size10,
        "size_last": size_last,
        "size_ratio_last_vs_10": round(size_last / size10, 3) if size10 and size_last else None,
        "parts_growth": growth,
        "commits_run": sorted({c.get("commit", "?") for c in cycles}),  # the code the cycles' writers ran
        "evaluation": evaluation,
    }


def _mb(x: int | None) -> str:
    return "—" if x is None else f"{x / 1e6:.1f}"


def markdown(summary: dict[str, Any], cycles: list[dict[str, Any]]) -> str:
    s = summary
    lines = [
        "# Soak: a corpus through many update cycles",
        "",
        f"- command: `{s['command']}`",
        f"- date: {s['when']} (started {s['started']})",
        f"- commit: {s['commit']} (this invocation); the cycles' writers ran {', '.join(s.get('commits_run') or [])}"
        + (" (the branch moved while the soak ran; each cycle records its own in the JSONL)" if len(s.get("commits_run") or []) > 1 else ""),
        f"- machine: {s['machine']}",
        f"- load average during the run: mean {s.get('load_mean', '—')}, max {s.get('load_max', '—')} (1-min), the soak's own "
        "writer, server and client included" + (f" — {s['machine_note']}" if s.get("machine_note") else "") + "; seconds are upper bounds",
        f"- corpus: {s['docs']} documents to start (HotpotQA 2-sentence pieces), seed {s['seed']}, writer `{s['writer']}`, "
        f"edits {s['edit_lo'] * 100:.0f}-{s['edit_hi'] * 100:.0f}% each of adds / changes / deletes per cycle, default retention",
        "- updates run with `--no-prefect` (what `arborag update` does without a Prefect server), so the Prefect-records part "
        "stays empty here; tests/storage/test_gc.py covers it under Prefect",
        "",
        "## Totals",
        "",
        md_table(["what", "value"], [
            ["cycles run (completed / writer killed)", f"{s['cycles_run']} ({s['cycles_completed']} / {s['cycles_killed']})"],
            ["cycles after a kill that completed", f"{s['cycles_after_kill_completed']} of {s['cycles_after_kill']}"],
            ["cycles that failed without a kill", ", ".join(map(str, s["cycles_failed"])) or "none"],
            ["queries answered / failed", f"{s['query_ok']} / {s['query_errors']}"],
            ["documents lost / extra / stale (summed over completed cycles)", f"{s['documents_lost']} / {s['documents_extra']} / {s['documents_stale']}"],
            ["drift-guard refits (full rebuilds)", s["drift_refits"]],
            ["update seconds: median of incremental cycles", s["update_seconds_median_incremental"]],
            ["slope of update seconds per cycle (all completed / incremental only)",
             f"{_f(s['update_seconds_slope_all'])} / {_f(s['update_seconds_slope_incremental'])}"],
            ["corpus MB after cycle 10 / last", f"{_mb(s['size_cycle10'])} / {_mb(s['size_last'])}"],
            ["size ratio last / cycle 10 (target <= 1.5)", s["size_ratio_last_vs_10"]],
        ]),
        "",
        "## Parts after cycle 10 and at the last cycle (MB)",
        "",
        md_table(["part", "cycle 10", "last", "ratio"], [[p, _mb(g["cycle10"]), _mb(g["last"]), g["ratio"]] for p, g in s["parts_growth"].items()]),
    ]
    ev = s.get("evaluation")
    lines += ["", "## Retrieval after the cycles vs a full rebuild of the final sources", ""]
    if ev:
        lines.append(f"{ev['questions']} HotpotQA questions, budget {ev['budget']} tokens; target: within 0.02 hit and recall.")
        last = next((c for c in reversed(cycles) if c.get("completed")), None)
        last_mode = (last or {}).get("run", {}).get("mode")
        if last is not None:
            lines.append(f"The soaked tree is the one of cycle {last['cycle']}, whose update was **{last_mode}**"
                         + (": a full re-fit of the final sources, so the tree modes match the rebuild by construction."
                            if last_mode == "full" else "."))
        lines.append("")
        lines.append(md_table(["mode", "hit soaked", "hit rebuild", "diff", "recall soaked", "recall rebuild", "diff"], [
            [r["mode"], _f(r["soaked"].get("hit")), _f(r["rebuild"].get("hit")), _f(r["hit_diff"], sign=True),
             _f(r["soaked"].get("recall")), _f(r["rebuild"].get("recall")), _f(r["recall_diff"], sign=True)] for r in ev["modes"]]))
        if any(r.get("rebuild_other_seed") for r in ev["modes"]):
            lines += ["", f"The method's own noise: the same final sources rebuilt in full with cluster seed {ev.get('other_seed')} "
                      "instead of the default, against the default-seed rebuild (no soak involved).", ""]
            lines.append(md_table(["mode", "hit other seed", "diff vs rebuild", "recall other seed", "diff vs rebuild"], [
                [r["mode"], _f(r["rebuild_other_seed"].get("hit")), _f(r.get("seed_hit_diff"), sign=True),
                 _f(r["rebuild_other_seed"].get("recall")), _f(r.get("seed_recall_diff"), sign=True)] for r in ev["modes"]]))
    else:
        lines.append("not run yet (the evaluation runs when the cycles end: `--cycles` reached or `WORK/STOP`).")
    lines += ["", "## Per cycle", "",
              md_table(["cycle", "+/~/-", "killed", "update s", "mode", "summaries", "snapshots", "total MB", "snap MB", "cache MB",
                        "staging MB", "prefect MB", "lost", "queries ok/err", "load"], [
                  [c["cycle"], "/".join(str(len(c["edits"][k])) for k in ("added", "changed", "deleted")), "yes" if c.get("killed") else "",
                   _f(c.get("update_s")), c.get("run", {}).get("mode", "") if c.get("completed") else ("killed" if c.get("killed") else "failed"),
                   c.get("run", {}).get("summaries_rewritten", "") if c.get("completed") else "", c["disk"]["n_snapshots"],
                   _mb(c["disk"]["total"]), _mb(c["disk"]["snapshots"]), _mb(c["disk"]["caches"]), _mb(c["disk"]["staging"]),
                   _mb(c["disk"]["prefect"]), c.get("check", {}).get("n_lost", ""),
                   f"{c['queries']['ok']}/{c['queries']['errors']}", c.get("load1")] for c in cycles])]
    return "\n".join(lines) + "\n"


def _f(x: float | None, *, sign: bool = False) -> str:
    if x is None:
        return "—"
    return f"{x:+.3f}" if sign else f"{x:.3f}"


# -- main -----------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See the module docstring (python -m pydoc benchmarks/soak.py) for what each cycle does.")
    ap.add_argument("--work", type=Path, default=Path("/tmp/arborag-soak"), help="sources, corpus, logs and cycles.jsonl")
    ap.add_argument("--docs", type=int, default=2000, help="documents to start with")
    ap.add_argument("--cycles", type=int, default=100, help="total cycles of the run (with --resume: continue up to this many)")
    ap.add_argument("--seed", type=int, default=24)
    ap.add_argument("--edit-lo", type=float, default=0.01, help="smallest share of documents added / changed / deleted per cycle")
    ap.add_argument("--edit-hi", type=float, default=0.05, help="largest share")
    ap.add_argument("--kill-share", type=float, default=0.2, help="share of cycles whose writer is killed (>= 1 per 10)")
    ap.add_argument("--writer", choices=["cli", "warm"], default="cli")
    ap.add_argument("--client-interval", type=float, default=1.0, help="seconds between two client requests")
    ap.add_argument("--budget", type=int, default=1000, help="token budget of the final retrieval comparison")
    ap.add_argument("--questions", type=int, default=None, help="evaluate on the first N HotpotQA questions (default: all 100)")
    ap.add_argument("--no-eval", action="store_true", help="skip the final comparison with a full rebuild")
    ap.add_argument("--update-timeout", type=float, default=3600)
    ap.add_argument("--resume", action="store_true", help="continue the run in --work (a fresh run when there is none)")
    ap.add_argument("--out", type=Path, default=RESULTS / "soak", help="results prefix: writes .json, .md and -cycles.jsonl")
    ap.add_argument("--machine-note", default="", help="what else ran on the machine meanwhile (written beside the load average)")
    ap.add_argument("--smoke", action="store_true", help="a tiny run that checks the script works (20 documents, 2 cycles, no evaluation)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.docs, args.cycles, args.no_eval, args.client_interval = 20, 2, True, 0.5

    work: Path = args.work
    src, corpus, logs = work / "src", work / "corpus", work / "logs"
    state_path, cycles_path, pending_path, stop_path = work / "state.json", work / "cycles.jsonl", work / "pending.json", work / "STOP"
    texts, titles = pieces()
    fresh = not (args.resume and state_path.exists())
    if fresh:
        if work.exists():
            shutil.rmtree(work)
        src.mkdir(parents=True)
        logs.mkdir()
        names = sorted(texts)
        random.Random(args.seed).shuffle(names)
        if len(names) < args.docs + 10:
            raise SystemExit(f"only {len(names)} pieces: cannot start with {args.docs} documents and keep a pool to add from")
        for name in names[: args.docs]:
            (src / name).write_text(texts[name], encoding="utf-8")
        state = {"docs": args.docs, "seed": args.seed, "edit_lo": args.edit_lo, "edit_hi": args.edit_hi, "writer": args.writer,
                 "kill_share": args.kill_share, "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "build": None}
        state_path.write_text(json.dumps(state, indent=2))
    else:
        state = json.loads(state_path.read_text())
        stop_path.unlink(missing_ok=True)
        print(f"soak: resuming {work} ({len(read_jsonl(cycles_path))} cycles recorded)", flush=True)
    seed, lo, hi = state["seed"], state["edit_lo"], state["edit_hi"]
    meta = {"command": "python " + " ".join(["benchmarks/soak.py", *(argv if argv is not None else sys.argv[1:])]),
            "machine": machine_line(), "commit": git_commit(), "docs": state["docs"], "seed": seed, "edit_lo": lo, "edit_hi": hi,
            "writer": args.writer, "started": state["started"], "cycles_target": args.cycles, "machine_note": args.machine_note}
    loads: list[float] = [os.getloadavg()[0]]

    def write_results(cycles: list[dict[str, Any]], evaluation: dict[str, Any] | None) -> dict[str, Any]:
        meta["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        seen = [float(c["load1"]) for c in cycles if c.get("load1") is not None] or loads  # over every cycle, resumes included
        meta["load_mean"] = round(statistics.mean(seen), 2)
        meta["load_max"] = round(max(seen), 2)
        summary = summarize(cycles, state.get("build") or {}, meta, evaluation)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        Path(f"{args.out}.json").write_text(json.dumps(summary, indent=2, default=str))
        Path(f"{args.out}.md").write_text(markdown(summary, cycles))
        if cycles_path.exists():
            shutil.copyfile(cycles_path, f"{args.out}-cycles.jsonl")
        return summary

    writer = Writer(args.writer, corpus, src, logs / "writer.log")
    if state.get("build") is None:
        print(f"soak: cold build of {state['docs']} documents in {corpus} ...", flush=True)
        t0 = time.perf_counter()
        if args.writer == "warm":  # the worker's first update of an empty corpus is the full build (one process, one JIT)
            res = writer.update(kill_after=None, timeout=args.update_timeout)
            if not res.get("ok"):
                raise SystemExit(f"the cold build failed: {res.get('error')}; see {logs / 'writer.log'}")
        else:
            with open(logs / "build.log", "a") as fh:
                rc = subprocess.run(arborag_cmd("build", str(src), "--corpus", str(corpus), "--no-prefect"), env=child_env(),
                                    stdout=fh, stderr=subprocess.STDOUT, check=False).returncode
            if rc != 0:
                raise SystemExit(f"the cold build failed ({rc}); see {logs / 'build.log'}")
        state["build"] = {"seconds": round(time.perf_counter() - t0, 1), "disk": disk_parts(corpus), "run": last_run(corpus),
                          "load1": round(os.getloadavg()[0], 2)}
        state_path.write_text(json.dumps(state, indent=2))
        print(f"soak: built in {state['build']['seconds']} s", flush=True)

    server = Server(corpus, logs / "serve.log", hotpot_questions(), interval=args.client_interval)
    kills = kill_cycles(seed, max(args.cycles, 1), args.kill_share)
    cycles = read_jsonl(cycles_path)
    try:
        server.start()
        print(f"soak: server on {server.url}; cycles {len(cycles) + 1}..{args.cycles}, kills in {sorted(k + 1 for k in kills if k >= len(cycles))}",
              flush=True)
        typical = [c["update_s"] for c in cycles if c.get("completed")][-5:]
        while len(cycles) < args.cycles and not stop_path.exists():
            n = len(cycles) + 1  # cycles count from 1
            pending = json.loads(pending_path.read_text()) if pending_path.exists() else None
            if pending and pending.get("cycle") == n:
                edits = pending["edits"]
            else:
                present = sorted(p.name for p in src.iterdir())
                pool = sorted(set(texts) - set(present))
                edits = plan_edits(present, pool, n, seed, lo, hi)
                pending_path.write_text(json.dumps({"cycle": n, "edits": edits}))
            apply_edits(src, edits, texts, n)
            kill_after = None
            if (n - 1) in kills:
                expected = statistics.median(typical) if typical else 20.0
                kill_after = round(random.Random(f"{seed}-killat-{n}").uniform(0.15, 0.9) * expected, 2)
            ok0, err0 = server.counts()
            loads.append(os.getloadavg()[0])
            res = writer.update(kill_after=kill_after, timeout=args.update_timeout)
            ok1, err1 = server.counts()
            rec: dict[str, Any] = {"cycle": n, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "edits": edits,
                                   "killed": bool(res.get("killed")), "kill_after_s": kill_after, "completed": bool(res.get("ok")),
                                   "update_s": round(res["seconds"], 2), "load1": round(os.getloadavg()[0], 2),
                                   "commit": git_commit().split(" (")[0]}  # the code this cycle's writer ran
            if kill_after is not None and not res.get("killed"):
                rec["kill_missed"] = "the update finished before the kill point"
            if res.get("error"):
                rec["error"] = res["error"][-1500:]
            if rec["completed"]:
                rec["run"] = last_run(corpus)
                rec["check"] = published_check(corpus, src)
                typical = (typical + [rec["update_s"]])[-5:]
            time.sleep(0.2)
            rec["disk"] = disk_parts(corpus)
            with server.lock:
                samples = server.errors[err0:err1]
            rec["queries"] = {"ok": ok1 - ok0, "errors": err1 - err0, "error_samples": samples[:5],
                              "snapshots_seen": len(server.snapshots)}
            append_jsonl(cycles_path, rec)
            pending_path.unlink(missing_ok=True)
            cycles.append(rec)
            print(f"cycle {n}: +{len(edits['added'])} ~{len(edits['changed'])} -{len(edits['deleted'])} "
                  f"{'KILLED at ' + str(kill_after) + ' s' if rec['killed'] else ('ok' if rec['completed'] else 'FAILED')} "
                  f"{rec['update_s']} s, mode {rec.get('run', {}).get('mode')}, {rec['disk']['n_snapshots']} snapshots, "
                  f"{rec['disk']['total'] / 1e6:.1f} MB, lost {rec.get('check', {}).get('n_lost')}, "
                  f"queries {rec['queries']['ok']}/{rec['queries']['errors']} err, load {rec['load1']}", flush=True)
            write_results(cycles, None)
    finally:
        writer.close()
        server.stop()
    evaluation = None
    if not args.no_eval and cycles:
        print("soak: retrieval vs a full rebuild of the final sources ...", flush=True)
        evaluation = evaluate_against_rebuild(work, corpus, src, titles, args.budget, args.questions)
    summary = write_results(cycles, evaluation)
    print(markdown(summary, [])[:4000])
    print(f"wrote {args.out}.json, {args.out}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
