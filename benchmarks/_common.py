"""Shared helpers of the benchmarks: environment, shared data, machine load, timing, Markdown.

Benchmarks are scripts, not tests: they print ratios measured side by side in one run and
write a Markdown report under ``benchmarks/results/``. Data comes from the evaluation data
directory (``$ARBORAG_DATA_DIR``, as ``arborag eval`` reads it; never copied into the repo).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arborag.tasks.evaluation.datasets import default_data_dir

REPO = Path(__file__).resolve().parents[1]
DATA = default_data_dir()
RESULTS = REPO / "benchmarks" / "results"

def setup_env() -> None:
    """What scripts/env.sh sets (offline models, no telemetry: :func:`arborag.env.offline_env`)."""
    from arborag.env import offline_env

    offline_env()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))


# -- shared data ---------------------------------------------------------------------------------
_SENT = re.compile(r"(?<=[.!?])\s+")


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENT.split(text) if s.strip()]


def cinderella_text() -> str:
    return (DATA / "raptor" / "cinderella.txt").read_text(encoding="utf-8")


def narrativeqa_records() -> list[dict[str, Any]]:
    path = DATA / "narrativeqa" / "test-tiny.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def narrativeqa_passages() -> list[str]:
    """The distinct passages, in first-seen order."""
    seen: dict[str, None] = {}
    for rec in narrativeqa_records():
        seen.setdefault(rec["passage"], None)
    return list(seen)


def narrativeqa_questions() -> list[str]:
    return [rec["question"] for rec in narrativeqa_records()]


def cli_build(name: str, sources: list[Path], work: Path, *, cold: bool = False) -> tuple[Path, float]:
    """``arborag build SOURCES --corpus WORK/NAME --no-prefect`` as a user runs it (a subprocess of
    this venv's console script); the corpus and the wall seconds. ``cold`` removes a corpus an
    earlier run left (a build over it would only update it). A failed build ends the benchmark
    with the command's output tail."""
    import shutil

    corpus = work / name
    if cold:
        shutil.rmtree(corpus, ignore_errors=True)
    arborag = Path(sys.executable).parent / "arborag"
    t0 = time.perf_counter()
    done = subprocess.run([str(arborag), "build", *map(str, sources), "--corpus", str(corpus), "--no-prefect"],
                          cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"{name}: arborag build failed with exit code {done.returncode}")
    return corpus, time.perf_counter() - t0


def hotpot_paragraphs() -> list[tuple[str, list[str]]]:
    """(title, sentences) of the HotpotQA corpus, sorted by title."""
    corpus = json.loads((DATA / "hotpotqa" / "hotpotqa_train_corpus.json").read_text(encoding="utf-8"))
    out = []
    for title in sorted(corpus):
        sents = [s.strip() for s in corpus[title] if s.strip()]
        if sents:
            out.append((title, sents))
    return out


def hotpot_questions() -> list[str]:
    data = json.loads((DATA / "hotpotqa" / "hotpotqa_train.json").read_text(encoding="utf-8"))
    return [q["question"] for q in data]


def financebench_texts() -> list[tuple[str, str]]:
    """(file name, extracted text) of the FinanceBench PDFs (pypdf); [] when pypdf is missing."""
    try:
        from pypdf import PdfReader
    except ImportError:
        return []
    out = []
    for pdf in sorted((DATA / "financebench" / "pdfs").glob("*.pdf")):
        text = "\n".join((p.extract_text() or "") for p in PdfReader(str(pdf)).pages)
        out.append((pdf.name, text))
    return out


# -- machine and load ----------------------------------------------------------------------------
def _proc_busy_seconds() -> float | None:
    """CPU seconds all processes spent busy since boot (from /proc/stat), or None."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    vals = [int(x) for x in fields]
    # user nice system idle iowait irq softirq steal ...
    busy = vals[0] + vals[1] + vals[2] + vals[5] + vals[6] + (vals[7] if len(vals) > 7 else 0)
    return busy / os.sysconf("SC_CLK_TCK")


def proc_stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3, the state, first: so
    ``[1]`` is the parent pid, ``[11:13]`` utime and stime, ``[13:15]`` the reaped children's, in
    clock ticks), or None when the process is gone or unreadable."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2:].split()


def _own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@dataclass
class Timing:
    """Wall seconds of one timed block, our own CPU seconds, and what others used meanwhile."""

    label: str
    wall: float = 0.0
    cpu: float = 0.0
    other_cores: float | None = None  # average cores busy with *other* processes during the block
    load1_before: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "wall": self.wall, "cpu": self.cpu, "other_cores": self.other_cores,
                "load1_before": self.load1_before, **self.extra}


@contextmanager
def timed(label: str) -> Iterator[Timing]:
    t = Timing(label, load1_before=os.getloadavg()[0])
    busy0, own0 = _proc_busy_seconds(), _own_cpu_seconds()
    t0 = time.perf_counter()
    try:
        yield t
    finally:
        t.wall = time.perf_counter() - t0
        t.cpu = _own_cpu_seconds() - own0
        busy1 = _proc_busy_seconds()
        if busy0 is not None and busy1 is not None and t.wall > 0:
            t.other_cores = max(0.0, (busy1 - busy0 - t.cpu) / t.wall)


def machine_line() -> str:
    from arborag.env import numeric_environment  # the CPU model as a snapshot's info.json names it

    cpu = numeric_environment()["cpu"]
    la = os.getloadavg()
    return f"{cpu}, {os.cpu_count()} cores; load average now {la[0]:.2f} / {la[1]:.2f} / {la[2]:.2f} (1/5/15 min)"



def provenance_lines(command: str, started: Any, load_before: str) -> list[str]:
    """The provenance list of a results report: command, date (``started``, a UTC datetime), the
    machine's load before and after, and the commit."""
    return [
        f"- command: `{command}`",
        f"- date: {started:%Y-%m-%d %H:%M} UTC",
        f"- machine before: {load_before}",
        f"- machine after: {machine_line()}",
        f"- commit: {git_commit()}",
    ]

def busy_processes(limit: int = 5, min_cpu: float = 20.0) -> list[str]:
    """Other processes using CPU right now (ps), for the report's load note."""
    try:
        out = subprocess.run(["ps", "-eo", "pid,pcpu,comm", "--sort=-pcpu"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = []
    me = os.getpid()
    for line in out.splitlines()[1:]:
        parts = line.split(None, 2)
        if len(parts) < 3:
            continue
        pid, pcpu, comm = parts
        try:
            if int(pid) == me or float(pcpu) < min_cpu:
                continue
        except ValueError:
            continue
        rows.append(f"{comm} ({pcpu}%)")
        if len(rows) >= limit:
            break
    return rows


def wait_for_quiet(max_load: float, max_wait_s: float, *, poll_s: float = 15.0) -> float:
    """Wait (up to ``max_wait_s``) until the 1-min load average is under ``max_load``; returns it."""
    t0 = time.time()
    while True:
        load = os.getloadavg()[0]
        if load <= max_load or time.time() - t0 >= max_wait_s:
            return load
        print(f"  load {load:.2f} > {max_load}; waiting ...", flush=True)
        time.sleep(poll_s)


def git_commit() -> str:
    """The checked-out commit (read-only ``git rev-parse``), whether tracked files differ from it
    and whether untracked (not ignored) ``.py`` files lie in the work tree."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10, check=False).stdout.strip()
        status = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=all"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    lines = status.splitlines()
    dirty = any(not line.startswith("??") for line in lines)
    untracked = any(line.startswith("??") and line.rstrip().endswith(".py") for line in lines)
    return head + (" + uncommitted changes" if dirty else "") + (" + untracked .py files" if untracked else "")


# -- formatting ----------------------------------------------------------------------------------
def fmt_s(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.3f}" if x < 1 else f"{x:.2f}" if x < 100 else f"{x:.1f}"


def fmt_ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}×"


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(str(h) for h in header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    for r in rows:
        lines.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(lines)


def verdict(value: float | None, target: float, *, at_least: bool) -> str:
    if value is None:
        return "not measured"
    ok = value >= target if at_least else value <= target
    return ("MET" if ok else "MISSED") + f" ({value:.2f}× vs target {'≥' if at_least else '≤'} {target:g}×)"


# -- build instrumentation -----------------------------------------------------------------------
STAGES = ("ingest", "segment", "embed", "tree", "vectors", "sparse", "publish")


@contextmanager
def instrument_build() -> Iterator[dict[str, Any]]:
    """Per-stage seconds of ``run_build(..., use_prefect=False)`` while it runs in this block.

    The build pipeline is data and every stage's wall time lands in the run's counters
    (``ctx.counters.seconds``, filled by :func:`arborag.flows.stage.run_stage`), with
    ``build_tree``'s per-level stats (``cluster_s``, ``summarize_s``, ``embed_s``) in
    ``ctx.counters.stages["tree"]``. This wraps :func:`arborag.flows.build.build_pipeline` only to
    read those counters when it returns; nothing else changes, and the original is restored on
    exit. Yields ``{"stages": {name: s}, "tree_stats": [...], "leaves": n}``, filled by the build.
    """
    import arborag.flows.build as fb

    rec: dict[str, Any] = {"stages": {}, "tree_stats": [], "leaves": None}
    original = fb.build_pipeline

    def wrapped(ctx: Any, *args: Any, **kw: Any) -> Any:
        try:
            return original(ctx, *args, **kw)
        finally:
            for name, seconds in ctx.counters.seconds.items():
                rec["stages"][name] = rec["stages"].get(name, 0.0) + float(seconds)
            rec["tree_stats"] = list((ctx.counters.stages.get("tree") or {}).get("stats") or [])
            rec["leaves"] = (ctx.counters.stages.get("embed") or {}).get("leaves")

    fb.build_pipeline = wrapped
    try:
        yield rec
    finally:
        fb.build_pipeline = original


def tree_breakdown(rec: dict[str, Any]) -> dict[str, float]:
    """Stage seconds with the tree split into cluster / summarize / summary-embed / other."""
    st = rec["stages"]
    levels = [s for s in rec["tree_stats"] if s.get("level", 0) >= 1]
    cluster = sum(float(s.get("cluster_s", 0.0)) for s in levels)
    summ = sum(float(s.get("summarize_s", 0.0)) for s in levels)
    emb = sum(float(s.get("embed_s", 0.0)) for s in levels)
    tree = float(st.get("tree", 0.0))
    return {
        "ingest": float(st.get("ingest", 0.0)),
        "segment": float(st.get("segment", 0.0)),
        "embed": float(st.get("embed", 0.0)),
        "cluster": cluster,
        "summarize": summ,
        "summary-embed": emb,
        "tree-other": max(0.0, tree - cluster - summ - emb),
        "vectors": float(st.get("vectors", 0.0)),
        "sparse": float(st.get("sparse", 0.0)),
        "publish": float(st.get("publish", 0.0)),
    }


def choose_torch_threads(arg: str) -> int | None:
    """``--threads``: 'auto' = 1 when the 1-min load exceeds the core count, else torch's default (None).

    Measured here: on a 2-core box busy with other work, torch with 2 intra-op threads took
    0.5-1.1 s per single-query encode versus 22-35 ms with 1 thread (OpenMP threads wait on
    each other when a core is taken). Both sides of a comparison always get the same setting.
    """
    if arg == "auto":
        return 1 if os.getloadavg()[0] > (os.cpu_count() or 1) else None
    if arg in ("default", "none", "0"):
        return None
    return int(arg)


def report_header(title: str, *, command: str, date: str, commit: str, machine_start: str, machine_end: str,
                  busy_end: str | Sequence[str], wall_s: float) -> list[str]:
    """The first lines of a results file: what ran, when, on which commit and how busy the machine was."""
    busy = busy_end if isinstance(busy_end, str) else ", ".join(busy_end)
    return [
        f"# {title}",
        "",
        f"Generated by `{command}` on {date}, commit {commit}.  ",
        f"Machine at start: {machine_start}  ",
        f"Machine at end: {machine_end}  ",
        f"Other busy processes at end: {busy or 'none above 20% CPU'}  ",
        f"Wall time of the whole benchmark: {wall_s:.0f} s",
    ]


def script_command() -> str:
    """The running benchmark's command line as typed: ``python benchmarks/<script> <args>``."""
    return f"python benchmarks/{Path(sys.argv[0]).name}" + "".join(f" {a}" for a in sys.argv[1:])


def run_header(title: str, *, date: str, machine_start: str, started: float) -> list[str]:
    """:func:`report_header` of the benchmark running now: its command line, this commit, the
    machine now, and the wall time since ``started`` (a ``time.perf_counter()`` reading)."""
    return report_header(title, command=script_command(), date=date, commit=git_commit(), machine_start=machine_start,
                         machine_end=machine_line(), busy_end=busy_processes(), wall_s=time.perf_counter() - started)
