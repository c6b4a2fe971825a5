"""The cold path: a CLI build and CLI updates in fresh processes, against the embedding floor.

Side by side in one run, on corpora made from the shared HotpotQA paragraphs, every step a
fresh ``arborag`` process as a user's shell (or a cron job) starts it:

- **cold build**: ``arborag build SRC --corpus C`` into an empty corpus folder (no embedding
  cache, no staged results), default settings;
- **embedding floor**: a fresh process that embeds exactly the texts that build embedded — every
  leaf's ``header + text`` (long texts by the same window policy) and every summary — with the
  same model and settings — once before the updates with :class:`arborag.embed.model.Embedder`
  (sentence-transformers), once after them with :class:`arborag.embed.light.LightEmbedder` (the
  class the build's embedding worker runs; bit-identical vectors), the faster of the two counting.
  Reported as *encode* seconds (model loaded and warmed: the cost nobody can avoid) and as the
  whole process (imports + model load + encode). Build / floor is computed against the encode
  seconds of the same run;
- **updates** (each a fresh ``arborag update SRC --corpus C``): no-op (nothing changed), +1%
  documents added, −1% deleted, ~1% changed (a sentence appended), then the source folder moved
  (renamed: every uri is new, no content changed; the tree must stay) — one after the other, each
  against the cold build of the same run. The +1% update runs ``--add-repeats`` times (3) from
  the same state — the corpus restored from a copy, the added files removed — and its row is the
  median run (one fresh process varies by about ±10% on this machine).

Corpora: ``1x`` = the 2,318 two-sentence pieces of the 994 HotpotQA paragraphs (as
``benchmarks/update.py`` cuts them; 99% form the base, the rest is what +1% adds); ``4x`` = four
cuts of the same paragraphs — cut r >= 1 rotates each paragraph's sentences by r before cutting
and marks its title line "recut r" — 9,272 documents, so every leaf text is distinct (content
addressing would otherwise collapse repeats) while the topics stay real.

Every child's wall seconds, CPU seconds (user + sys, ``wait4``), peak RSS and the cores other
processes kept busy meanwhile (``/proc/stat``) are recorded; a step run while others used more
than half a core is marked *busy*. The per-stage and per-phase seconds of the cold build and
the +1% update come from the runs table (``runs.counts``: stage seconds and start-up phases);
an import-time table comes from a separate fresh process.

Speed probes: this VM's speed moves by up to ~1.6x within hours and sometimes within a run, with
no other process busy and no steal time in ``/proc/stat`` (one 4x run: the build's own
leaf embedding 53.6 s, the floor's encode of the same leaves after it 72.8 s). It is torch's bf16
matrix work that moves: on the idle machine a pure-Python loop timed 0.021-0.022 s in 12 tries,
while the same bf16 block took 0.236-0.350 s on one thread, and medians of 15 such blocks (~2.5 s
each) taken one after another ranged 0.146-0.236 s (ad hoc) — the floor is the part
of a ratio that drifts most. Before every step the benchmark times such a median in its own
process (:func:`speed_probe`) and the results file lists the probes: they show the drift around
each step; they are too noisy to correct a ratio with.

The method's serial chain: a tree level cannot start clustering before every vector of the
level below exists, and its summaries cannot be embedded before its global fit (the global UMAP,
which seeded UMAP runs on one thread, then the BIC search) has ended — so the leaves' encode,
every level's global fit and the summaries' encode run one after the other, whatever runs beside
them. The encode floor plus the global fits' seconds (``global_s`` of each level in the build's
runs record, ``tasks/cluster/fit.py``) is therefore a lower bound for a cold build of this method
on this machine; the table prints it beside the build. It leaves out the local fits, the
summarizer and the start-up, which a perfect overlap could hide.

The method's CPU: the chain assumes free cores beside it; this machine has two. The encode floor's
CPU seconds (``time.process_time`` around its encode, both threads) plus the seconds of every UMAP
and GMM fit of the build (``umap_s`` and ``gmm_s`` of each level: each fit runs on one thread in the
default, so its wall seconds are its CPU seconds), divided by the cores, is the wall time of a
build that did nothing but encode and fit, perfectly spread over the cores: a second lower bound.
It also leaves out start-up, imports, segmentation, summarizing and table writes. Not printed when
settings come from the environment.
Below it, the build's own CPU seconds (its process and the embedding worker it started, ``wait4``)
over the cores: the build as it is, with no core ever idle. When that is above a target, no
reordering or overlap of the build's work can meet it; only less work can.

The method's critical path: the chain above counts each level's global fit whole and nothing else
of a level; the CPU bound below spreads all the work over the cores as if nothing ever had to
wait. A tighter bound follows from the method itself. While a level's global UMAP lays out its
points (seeded UMAP: one thread), nothing else of the method can run — every local fit, summary
and encode of that level and everything above it needs its coordinates, and everything below is
done — so the other cores wait for the method's sake; the rest of the work can at best keep
every core busy. And before the first encode a cold process has to import torch and load the
model, with no vector to fit yet. So the build takes at least the cold start plus (the encode
floor's CPU + the CPU of every fit + (cores − 1) × every global layout's CPU) / cores. The layout's
CPU is its thread's (``global_layout_s``, :func:`arborag.tasks.cluster.umap_import.layout_thread_seconds`),
the fits' each fit's thread's (``umap_cpu_s``, ``gmm_cpu_s``; work on other threads, like the
global fit's neighbour search on both cores, is left out), the cold start the build's own
recorded torch import and model load in its embedding process: every term is at most the true
one, so the sum is a lower bound. It leaves out the summarizer, segmentation, table writes and
the interpreter's start; no overlap or reordering of a build of this method on this machine is
faster. Printed for builds whose record has those fields.

CPU timeline of the cold build: while the build runs, its processes (the CLI, the embedding worker,
a helper) are sampled from ``/proc`` every 0.1 s (:class:`TreeSampler`; each process's user + system
ticks, all its threads) and binned per half second (:func:`cpu_timeline`). The report gives the
core-seconds the build left idle (the cores times the wall, minus what its processes used), how many
of them fell in each part of the build — the parts laid end to end from the run's recorded
durations (:func:`build_spans`: approximate, the stages record no start times) — and draws the
timeline (``<report>-timeline-<size>x.png``). It shows where the build is CPU-bound and where a
core waits beside a one-thread step: what a scheduling change could still win, and what only a
change of method could.

Bytecode: before anything runs, the project's modules are byte-compiled exactly as
``scripts/install.sh`` does (``python -m compileall``; a no-op when they are up to date) and
the results file says so — a shell with ``PYTHONDONTWRITEBYTECODE=1`` would otherwise make
every fresh process compile ~120 modules again (~0.3 s), which no installed user pays.
UMAP's numba code: compiled into arborag's user-level cache the same way, as
``scripts/install.sh`` does (``clustering.warm_up()`` in a fresh process; ~2 s when the machine
has compiled it, ~33 s when it has not) — on a machine that had never compiled it, the first cold
build paid that compile itself (52.6 s against 40.2 s once compiled).

Run::

    python benchmarks/cold_path.py                       # 1x and 4x, one round each
    python benchmarks/cold_path.py --sizes 1 --rounds 2  # 1x only, twice
    python benchmarks/cold_path.py --quick               # 300 documents: a small run
    python benchmarks/cold_path.py --smoke --out /tmp/cp/cold_path.md  # 40 documents, no waiting: a check run

Writes ``benchmarks/results/cold_path.md`` (and ``cold_path.json`` and the timeline plots beside
it; ``--out``: elsewhere).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    RESULTS,
    _proc_busy_seconds,
    busy_processes,
    fmt_ratio,
    fmt_s,
    git_commit,
    hotpot_paragraphs,
    machine_line,
    md_table,
    proc_stat,
    report_header,
    setup_env,
    wait_for_quiet,
)

from arborag.tasks.changes import source_stats  # noqa: E402

SEED = 26
#: time :func:`speed_probe` before every step (off in a ``--smoke`` run: its 15 timed blocks would
#: cost more than the tiny steps they stand beside)
PROBES = True
RACY_WAIT_S = source_stats.RACY_S + 0.1  # sources older than the update's "racily clean" window
BUILD_FLOOR_TARGET = {1: 1.5, 4: 1.25}
UPDATE_TARGET = 0.10  # +1% update / cold build
NOOP_TARGET_S = 1.5
BUSY_CORES = 0.5  # other processes' average cores during a step above which it is marked busy

ARBORAG = [str(Path(sys.executable).parent / "arborag")]  # the console script, as a shell starts it

# The embedding floor: exactly the texts the build embedded, same model and settings, fresh process.
FLOOR = r'''
import json, sys, time
t0 = time.perf_counter()
from arborag.env import offline_env
offline_env()
from arborag.config import load_config
from arborag.embed.model import Embedder
from arborag.storage.corpus import Corpus
from arborag.tasks.embedding.embedder import header_chars
from arborag.tasks.build.leaves import leaves_for
from arborag.tasks.tree.build import leaf_embed_texts
import pyarrow.compute as pc
import pyarrow.parquet as pq
cfg = load_config(None)
corpus = Corpus(sys.argv[1])
leaves = leaves_for(corpus.read("chunks"), cfg.segment.strategy)
nodes = pq.read_table(corpus.published_dir() / "nodes.parquet", columns=["level", "text"])
summaries = nodes.filter(pc.greater(nodes.column("level"), 0)).column("text").to_pylist()
texts, prefix = leaf_embed_texts(leaves), header_chars(leaves)
t_read = time.perf_counter()
if sys.argv[2] == "light":  # the embedding worker's class (arborag.embed.light): the same vectors
    from arborag.embed.light import LightEmbedder
    emb = LightEmbedder(cfg.embed)
    import torch, tokenizers  # noqa: F401  (what loading the model imports)
else:
    emb = Embedder(cfg.embed)
    import torch, sentence_transformers  # noqa: F401  (what loading the model imports)
t_import = time.perf_counter()
emb.embed(texts[:64])  # model load + first batches (kernels warmed)
t_load, cpu_load = time.perf_counter(), time.process_time()
emb.embed(texts, prefix_chars=prefix)
t_leaves = time.perf_counter()
emb.embed(summaries)
t_end, cpu_end = time.perf_counter(), time.process_time()
print(json.dumps({"leaves": len(texts), "summaries": len(summaries), "read_s": t_read - t0, "import_s": t_import - t_read,
                  "load_s": t_load - t_import, "leaves_s": t_leaves - t_load, "summaries_s": t_end - t_leaves,
                  "encode_s": t_end - t_load, "encode_cpu_s": cpu_end - cpu_load, "threads": torch.get_num_threads()}))
'''

# What a cold process imports, group by group (each group's own seconds: earlier groups are loaded).
IMPORTS = r'''
import json, time
out = []
def imp(label, stmt):
    t = time.perf_counter()
    exec(stmt, {})
    out.append([label, time.perf_counter() - t])
imp("python + arborag.cli.app (typer, rich, config)", "import arborag.cli.app")
imp("pyarrow + polars", "import pyarrow.parquet, polars")
imp("prefect (+ flows' module imports)", "from arborag.env import offline_env; offline_env(); import prefect")
imp("arborag.flows.build (tasks, storage)", "import arborag.flows.build")
imp("torch", "import torch")
imp("sentence_transformers (transformers, sklearn)", "import sentence_transformers")
imp("umap (numba, pynndescent, scipy)", "import umap")
imp("lancedb (as the build imports it: arborag.storage.lancedb_import)", "import arborag.storage.lancedb_import")
imp("tantivy", "import tantivy")
print(json.dumps(out))
'''


# -- corpora -------------------------------------------------------------------------------------
def pieces(replicas: int) -> list[tuple[str, str]]:
    """(file name, text): 2-sentence pieces of every HotpotQA paragraph, cut ``replicas`` ways, shuffled."""
    paras = hotpot_paragraphs()
    out: list[tuple[str, str]] = []
    for r in range(replicas):
        for p, (title, sents) in enumerate(paras):
            rot = sents[r % len(sents):] + sents[: r % len(sents)] if r else sents
            for k in range(0, len(rot), 2):
                body = " ".join(rot[k : k + 2])
                head = f"{title} (part {k // 2 + 1})" if r == 0 else f"{title} (part {k // 2 + 1}, recut {r})"
                out.append((f"r{r}-p{p:04d}-{k // 2}.txt", f"{head}\n\n{body}\n"))
    random.Random(SEED).shuffle(out)
    return out


# -- CPU timeline ----------------------------------------------------------------------------------
#: Sampling period of :class:`TreeSampler` and the bin of :func:`cpu_timeline` (seconds).
SAMPLE_S = 0.1
BIN_S = 0.5
ROLES = ("CLI", "embedding worker", "helper process")


def _role(pid: int, root: int) -> str:
    """Which of :data:`ROLES` process ``pid`` of the build's tree is (its command line says)."""
    if pid == root:
        return "CLI"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "helper process"
    if b"arborag.embed.worker_serve" in cmd:
        return "embedding worker" if b"model" in cmd else "helper process"
    return "helper process"


def _proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, user + system ticks) of every process now."""
    out: dict[int, tuple[int, int]] = {}
    for name in os.listdir("/proc"):
        fields = proc_stat(name) if name.isdigit() else None
        if fields is not None:
            out[int(name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    return out


class TreeSampler:
    """Samples the CPU ticks of process ``root`` and its descendants every :data:`SAMPLE_S` seconds
    on a thread, from ``start()`` to ``stop()``: ``samples`` = [(seconds since start, {pid: ticks})],
    ``roles`` = {pid: role}."""

    def __init__(self, root: int) -> None:
        self.root, self.samples, self.roles = root, [], {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cold-path-sampler", daemon=True)
        self._t0 = 0.0

    def start(self) -> "TreeSampler":
        self._t0 = time.perf_counter()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            table = _proc_table()
            tree, grew = {self.root}, True
            while grew:
                grew = False
                for pid, (ppid, _) in table.items():
                    if ppid in tree and pid not in tree:
                        tree.add(pid)
                        grew = True
            ticks = {pid: table[pid][1] for pid in tree if pid in table}
            for pid in ticks:
                if pid not in self.roles:
                    self.roles[pid] = _role(pid, self.root)
            self.samples.append((time.perf_counter() - self._t0, ticks))
            self._stop.wait(SAMPLE_S)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def cpu_timeline(samples: list[tuple[float, dict[int, int]]], roles: dict[int, str], *, tck: int, bin_s: float = BIN_S) -> dict[str, Any]:
    """Cores used per role per ``bin_s`` bin from :class:`TreeSampler` samples: each process's tick
    increase between two samples is spread over the time between them, each bin taking its share
    (a process's first sample counts from zero: it started after the previous one).
    {"bin_s", "cores": {role: [..]}}.

    Spread, not put whole in the bin of the later sample: the samples come every 0.1 s plus the
    time a scan of /proc takes, so a half-second bin ends three or four of them, and putting each
    increase in one bin drew a busy process as 1.6 cores in one bin and 2.1 in the next — and the idle count, which never goes below zero in a bin, grew by the dips (7.5 against
    5.9 core-seconds of a 1x build)."""
    n_bins = max(1, math.ceil(samples[-1][0] / bin_s)) if samples else 0
    cores = {role: [0.0] * n_bins for role in ROLES}
    last: dict[int, int] = {}
    before = 0.0
    for t, ticks in samples:
        for pid, v in ticks.items():
            _spread(cores[roles.get(pid, "helper process")], max(0, v - last.get(pid, 0)) / tck, before, t, bin_s)
            last[pid] = v
        before = t
    end = samples[-1][0] if samples else 0.0
    return {"bin_s": bin_s, "end_s": round(end, 3), "cores": {k: [round(x, 3) for x in v] for k, v in cores.items()}}


def _spread(row: list[float], seconds: float, a: float, b: float, bin_s: float) -> None:
    """Add ``seconds`` of CPU used between ``a`` and ``b`` to the bins of ``row`` (as cores), each
    bin in proportion to its part of [a, b]."""
    if not seconds:
        return
    if b <= a:
        row[min(len(row) - 1, int(b // bin_s))] += seconds / bin_s
        return
    i = int(a // bin_s)
    while i < len(row) and i * bin_s < b:
        part = min(b, (i + 1) * bin_s) - max(a, i * bin_s)
        row[i] += seconds * part / (b - a) / bin_s
        i += 1


def idle_core_seconds(timeline: dict[str, Any], cores: int, spans: list[tuple[str, float, float]] | None = None) -> dict[str, float]:
    """Core-seconds the build's processes left idle: ``cores`` per bin (the last one for the part of
    it the run lasted) minus what they used (never below zero), in all ("all") and within each of ``spans`` ((label, start s, end s): a bin counts
    for the part of it inside the span)."""
    bin_s = timeline["bin_s"]
    per_role = list(timeline["cores"].values())
    n = len(per_role[0]) if per_role else 0
    # the last bin holds only the part of it before the last sample ("end_s"; whole in older results)
    span = [bin_s] * n
    if n and timeline.get("end_s") is not None:
        span[-1] = max(0.0, min(bin_s, float(timeline["end_s"]) - (n - 1) * bin_s))
    idle = [max(0.0, cores * span[i] - sum(r[i] for r in per_role) * bin_s) for i in range(n)]
    out = {"all": sum(idle)}
    for label, a, b in spans or []:
        out[label] = out.get(label, 0.0) + sum(idle[i] * max(0.0, min(b, (i + 1) * bin_s) - max(a, i * bin_s)) / bin_s for i in range(n))
    return out


def build_spans(run: dict[str, Any] | None, order: tuple[str, ...]) -> list[tuple[str, float, float]]:
    """The parts of a cold build on its process's clock, laid end to end from its runs record (the
    run's start, then each stage's seconds in pipeline ``order``; inside the tree stage each level's
    global fit, its local fits, summarizing and the embedding of its summaries): approximate, as the
    stages record durations, not start times. A stage the pipeline runs *beside* the stages after it
    (``Stage.beside``) starts with the next one, and a stage that must wait for it
    (``flows.stage.must_wait``) starts when it ends."""
    from arborag.flows.pipelines import BUILD_PIPELINE
    from arborag.flows.stage import must_wait

    declared = {stage.name: stage for stage in BUILD_PIPELINE}
    counts = (run or {}).get("counts") or {}
    t = float(counts.get("process_age_at_start") or 0.0)
    secs = counts.get("seconds") or {}
    levels = [st for st in ((counts.get("tree") or {}).get("stats") or []) if st.get("level", 0) >= 1]
    spans: list[tuple[str, float, float]] = []
    pending: list[tuple[str, float]] = []  # beside stages running: (name, end)
    for stage in order:
        if stage not in secs:
            continue
        d = float(secs[stage])
        this = declared.get(stage)
        if this is not None:  # (every pending stage is a declared one)
            waited = [(name, end) for name, end in pending if must_wait(declared[name], this)]
            pending = [p for p in pending if p not in waited]
            t = max([t, *(end for _, end in waited)])
        if this is not None and this.beside:
            spans.append((f"stage {stage}", t, t + d))
            pending.append((stage, t + d))
            continue
        if stage == "tree" and levels and all(st.get("cluster_s") is not None for st in levels):
            u = t
            for st in levels:
                g = float(st.get("global_s") or 0.0)
                parts = [(f"level {st['level']} global fit", g), (f"level {st['level']} local fits", float(st["cluster_s"]) - g),
                         (f"level {st['level']} summarize + embed summaries", float(st.get("summarize_s") or 0) + float(st.get("embed_s") or 0))]
                for label, dur in parts:
                    spans.append((label, u, u + max(0.0, dur)))
                    u += max(0.0, dur)
            spans.append(("tree: tables", u, t + d))
        else:
            spans.append((f"stage {stage}" if stage != "embed" else "stage embed (the leaves)", t, t + d))
        t += d
    return spans


def plot_timeline(size: dict[str, Any], cores: int, path: Path) -> None:
    """The cold build's CPU timeline (:func:`cpu_timeline`) as a stacked area per process, the cores
    as a line and the build's parts (:func:`build_spans`) as bands above: ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tl = size["timeline"]
    bin_s = tl["bin_s"]
    roles = [r for r in ROLES if any(tl["cores"].get(r, []))]
    n = len(tl["cores"][ROLES[0]])
    x = [i * bin_s for i in range(n)]
    fig, ax = plt.subplots(figsize=(13, 4.8), dpi=110)
    colours = {"CLI": "#3b6fb6", "embedding worker": "#e08a2c", "helper process": "#5aa469"}
    ax.stackplot(x, *[tl["cores"][r] for r in roles], labels=[f"{r}" for r in roles], colors=[colours[r] for r in roles], step="post", alpha=0.9)
    ax.axhline(cores, color="black", lw=1, ls="--", label=f"{cores} cores")
    spans = [tuple(s) for s in size.get("spans") or []]
    shades = {"stage embed (the leaves)": "#e08a2c", "global fit": "#c0392b", "local fits": "#3b6fb6", "summarize + embed summaries": "#e6b35c"}
    top = cores + 1.0
    lo = (cores + 0.15) / top  # the parts as a strip above the cores line
    shown = 0
    for label, a, b in spans:
        key = next((k for k in shades if k in label), None)
        if key is None or b - a < 0.05:
            continue
        ax.axvspan(a, b, ymin=lo, ymax=1, color=shades[key], alpha=0.35, lw=0.5, ec="white")
        if b - a > (x[-1] if x else 1) * 0.02:
            short = label.replace("level ", "L").replace("summarize + embed summaries", "sum.+embed").replace("stage embed (the leaves)", "leaves embed")
            ax.text((a + b) / 2, top - 0.2 - 0.35 * (shown % 2), short, ha="center", va="center", fontsize=7)
            shown += 1
    idle = size.get("idle") or {}
    ax.set_xlim(0, x[-1] + bin_s if x else 1)
    ax.set_ylim(0, top)
    ax.set_yticks([i / 2 for i in range(2 * cores + 1)])
    ax.set_xlabel("seconds since the build's process started")
    ax.set_ylabel("cores busy")
    ax.set_title(f"Cold {size['mult']}x build: CPU of its processes every {bin_s:g} s — "
                 f"{idle.get('all', 0):.1f} core-seconds idle of {cores} × {size['rows']['build']['wall']:.1f} s", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# -- children ------------------------------------------------------------------------------------
def speed_probe() -> float | None:
    """Seconds of a fixed bf16 workload of the floor's kind (a MiniLM-shaped feed-forward block, 100
    times over 256 rows, on two threads; the median of 15, ~2.5 s in all) in this process, or None
    without torch. Run before every step: this VM's bf16 speed moves (module docs), and the probes
    show by how much around each step."""
    if not PROBES:
        return None
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 384, generator=g).to(torch.bfloat16)
    w1 = (torch.randn(384, 1536, generator=g) / 20).to(torch.bfloat16)
    w2 = (torch.randn(1536, 384, generator=g) / 40).to(torch.bfloat16)
    times = []
    with torch.inference_mode():
        for _ in range(15):
            t = time.perf_counter()
            h = x
            for _ in range(100):
                h = torch.nn.functional.gelu(h @ w1) @ w2
            times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def run_child(argv: list[str], label: str, env: dict[str, str] | None = None, *, timeline: bool = False) -> dict[str, Any]:
    """One fresh process: wall, CPU (user+sys), peak RSS, other processes' cores meanwhile, and the
    :func:`speed_probe` seconds just before it; ``timeline``: its processes' CPU every
    :data:`BIN_S` s (:func:`cpu_timeline`) as ``row["timeline"]``."""
    probe = speed_probe()
    load1 = os.getloadavg()[0]
    busy0 = _proc_busy_seconds()
    with tempfile.TemporaryFile("w+") as fout, tempfile.TemporaryFile("w+") as ferr:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=fout, stderr=ferr, env=env)
        sampler = TreeSampler(proc.pid).start() if timeline else None
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        if sampler is not None:
            sampler.stop()
        fout.seek(0)
        ferr.seek(0)
        out, err = fout.read(), ferr.read()
    busy1 = _proc_busy_seconds()
    cpu = usage.ru_utime + usage.ru_stime
    other = max(0.0, (busy1 - busy0 - cpu) / wall) if busy0 is not None and busy1 is not None and wall > 0 else None
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{label} failed (exit {code}): {' '.join(argv)}\n{out[-3000:]}\n{err[-3000:]}")
    row = {"step": label, "wall": wall, "cpu": cpu, "rss_mb": usage.ru_maxrss / 1024, "other_cores": other, "load1": load1,
           "busy": bool(other is not None and other > BUSY_CORES), "probe_s": probe, "stdout": out}
    if sampler is not None:
        row["timeline"] = cpu_timeline(sampler.samples, sampler.roles, tck=os.sysconf("SC_CLK_TCK"))
    print(f"  {label}: {wall:.2f} s wall, {cpu:.2f} s cpu, {row['rss_mb']:.0f} MB, others {other if other is None else round(other, 2)} cores"
          f"{' (busy)' if row['busy'] else ''}", flush=True)
    return row


def last_run(corpus: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    rows = pq.read_table(corpus / "tables" / "runs.parquet").to_pylist()
    row = rows[-1]
    return {"flow": row["flow"], "status": row["status"], "counts": json.loads(row["counts"] or "{}"),
            "seconds": (row["finished_at"] - row["started_at"]).total_seconds()}


def node_ids(corpus: Path) -> list[str]:
    import pyarrow.parquet as pq

    man = json.loads((corpus / "manifest.json").read_text())
    return sorted(pq.read_table(corpus / "snapshots" / man["snapshot"] / "nodes.parquet", columns=["node_id"]).column("node_id").to_pylist())


def restore(src: Path, corpus: Path, saved: Path, pool: list[tuple[str, str]]) -> None:
    """The state before an update adding ``pool`` again: its files gone from ``src``, ``corpus`` a
    fresh copy of ``saved``."""
    for name, _ in pool:
        (src / name).unlink(missing_ok=True)
    shutil.rmtree(corpus)
    shutil.copytree(saved, corpus)


def sources(mult: int, work: Path, n_docs: int | None = None, *, write: bool = True) -> tuple[Path, Path, list[tuple[str, str]], list[tuple[str, str]]]:
    """(source folder, corpus folder, the base documents, the last 1% held back to add) of the
    ``mult``x pieces under ``work``; ``write``: both folders emptied and the base written."""
    all_pieces = pieces(mult)
    if n_docs:
        all_pieces = all_pieces[:n_docs]
    one = max(1, round(len(all_pieces) * 0.01))
    base, pool = all_pieces[: len(all_pieces) - one], all_pieces[len(all_pieces) - one :]
    src, corpus = work / f"src-{mult}x", work / f"corpus-{mult}x"
    if write:
        for d in (src, corpus):
            shutil.rmtree(d, ignore_errors=True)
        src.mkdir(parents=True)
        for name, text in base:
            (src / name).write_text(text, encoding="utf-8")
        # a scheduled corpus's files are older than the 2 s "racily clean" window of
        # tasks/changes/source_stats.py; files read sooner after their last write are read again by the
        # next update (once). Nothing is timed here.
        time.sleep(RACY_WAIT_S)
    return src, corpus, base, pool


def one_size(mult: int, work: Path, n_docs: int | None, env: dict[str, str], extra: list[str], repeats: int = 1, *, cores: int = 2) -> dict[str, Any]:
    src, corpus, base, pool = sources(mult, work, n_docs)
    one = len(pool)
    print(f"{mult}x: {len(base)} documents in {src} (+{len(pool)} to add)", flush=True)
    rows: dict[str, dict[str, Any]] = {}
    runs: dict[str, dict[str, Any]] = {}

    rows["build"] = run_child(ARBORAG + ["build", str(src), "--corpus", str(corpus), *extra], "cold build", env, timeline=True)
    runs["build"] = last_run(corpus)
    timeline = rows["build"].pop("timeline")
    ids_build = node_ids(corpus)
    floor = run_child([sys.executable, "-c", FLOOR, str(corpus), "st"], "embedding floor", env)
    rows["floor"] = {**floor, **json.loads(floor["stdout"].strip().splitlines()[-1])}

    upd = ARBORAG + ["update", str(src), "--corpus", str(corpus), *extra]
    rows["noop"] = run_child(upd, "no-op update", env)
    # the +1% update, `repeats` times from the same state (the corpus restored from a copy, the
    # added files removed again): one fresh process varies by ±10% here; the median counts
    saved = work / f"saved-corpus-{mult}x"
    shutil.rmtree(saved, ignore_errors=True)
    shutil.copytree(corpus, saved)
    samples: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for k in range(repeats):
        if k:
            restore(src, corpus, saved, pool)
        for name, text in pool:
            (src / name).write_text(text, encoding="utf-8")
        row = run_child(upd, f"update +1% added ({k + 1}/{repeats})", env)
        samples.append((row, last_run(corpus)))
    shutil.rmtree(saved, ignore_errors=True)
    mid = sorted(range(repeats), key=lambda i: samples[i][0]["wall"])[repeats // 2]
    rows["add"] = {**samples[mid][0], "samples": [round(row["wall"], 3) for row, _ in samples]}
    runs["add"] = samples[mid][1]
    rng = random.Random(SEED + 1)
    present = sorted(p.name for p in src.iterdir())
    for name in rng.sample(present, one):
        (src / name).unlink()
    rows["delete"] = run_child(upd, "update -1% deleted", env)
    runs["delete"] = last_run(corpus)
    present = sorted(p.name for p in src.iterdir())
    for i, name in enumerate(rng.sample(present, one)):
        path = src / name
        path.write_text(path.read_text(encoding="utf-8") + f"Revised in edition {i + 2}.\n", encoding="utf-8")
    rows["change"] = run_child(upd, "update ~1% changed", env)
    runs["change"] = last_run(corpus)
    # the source folder moved (a new disk, a renamed folder): every uri is new, no content is
    ids_before = node_ids(corpus)
    moved = work / f"src-{mult}x-moved"
    shutil.rmtree(moved, ignore_errors=True)
    src.rename(moved)
    rows["move"] = run_child(ARBORAG + ["update", str(moved), "--corpus", str(corpus), *extra], "update, source folder moved", env)
    runs["move"] = last_run(corpus)
    rows["move"]["tree_unchanged"] = node_ids(corpus) == ids_before
    moved.rename(src)
    floor2 = run_child([sys.executable, "-c", FLOOR, str(corpus), "light"], "embedding floor (after updates)", env)
    rows["floor2"] = {**floor2, **json.loads(floor2["stdout"].strip().splitlines()[-1])}
    for r in rows.values():
        r.pop("stdout", None)
    spans = build_spans(runs["build"], build_order())
    return {"mult": mult, "documents": len(base), "added": len(pool), "one_percent": one, "rows": rows, "runs": runs,
            "nodes": len(ids_build), "node_ids_hash": __import__("hashlib").sha256("\n".join(ids_build).encode()).hexdigest()[:16],
            "timeline": timeline, "spans": spans, "idle": idle_core_seconds(timeline, cores, spans)}


def build_order() -> tuple[str, ...]:
    """The build's stage names in the order it runs them (flows/pipelines.py)."""
    from arborag.flows.pipelines import BUILD_PIPELINE

    return tuple(stage.name for stage in BUILD_PIPELINE)


#: the project's source folders, as scripts/install.sh byte-compiles them (tests/house/test_package_folders.py keeps the lists equal)
PROJECT_FOLDERS = ("arborag", "flows", "tasks", "storage", "query")


def compile_project(env: dict[str, str]) -> str:
    """Byte-compile the project's modules as scripts/install.sh does; what the results file says of it."""
    root = Path(__file__).resolve().parent.parent
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "compileall", "-q", *PROJECT_FOLDERS], cwd=root, env=env, check=True, stdout=subprocess.DEVNULL)
    flag = "PYTHONDONTWRITEBYTECODE=1 in this environment" if env.get("PYTHONDONTWRITEBYTECODE") else "Python writes bytecode itself here"
    return f"project modules byte-compiled as scripts/install.sh does ({time.perf_counter() - t:.2f} s; {flag})"


def warm_numba(env: dict[str, str]) -> str:
    """UMAP's numba code compiled into the user-level cache as scripts/install.sh does; what the results file says of it."""
    row = run_child([sys.executable, "-c", "from arborag.tasks.cluster.fit import warm_up; print(warm_up())"], "numba warm-up (as install.sh)", env)
    seconds = float(row["stdout"].strip().splitlines()[-1])
    state = "the cache was already there" if seconds < 10 else "this machine compiled it now"
    return f"UMAP's numba code warmed as scripts/install.sh does ({seconds:.1f} s; {state})"


def env_line(e: dict[str, Any]) -> str:
    """The numeric environment (arborag.env.numeric_environment) as one line of the report."""
    pkgs = ", ".join(f"{k} {v}" for k, v in e["packages"].items() if v)
    return f"Numeric environment (a snapshot's info.json records the same): Python {e['python']}, {e['cpu']} ({', '.join(e['cpu_flags'])}); {pkgs}."


def import_table(env: dict[str, str]) -> list[list[Any]]:
    row = run_child([sys.executable, "-c", IMPORTS], "import times", env)
    return json.loads(row["stdout"].strip().splitlines()[-1])


# -- report --------------------------------------------------------------------------------------
def stage_table(run: dict[str, Any], wall: float) -> list[list[str]]:
    counts = run["counts"]
    secs = counts.get("seconds") or {}
    phases = counts.get("phases") or {}
    rows = [[f"stage {k}", fmt_s(v)] for k, v in secs.items()]
    tree = counts.get("tree") or {}
    for st in tree.get("stats") or []:
        if st.get("level", 0) >= 1:
            rows.append([f"  tree level {st['level']}: cluster (UMAP {fmt_s(st.get('umap_s'))} over {st.get('umap_fits')} fits, "
                         f"GMM {fmt_s(st.get('gmm_s'))}) / summarize / embed summaries",
                         f"{fmt_s(st.get('cluster_s'))} / {fmt_s(st.get('summarize_s'))} / {fmt_s(st.get('embed_s'))}"])
    rows += [[f"phase {k} (beside the stages: in the embedding worker process — arborag/embed/worker.py — or on a background thread)" if "torch" in k or "model" in k
              else f"phase {k}", fmt_s(v)] for k, v in phases.items()]
    if counts.get("process_age_at_start") is not None:
        rows.append(["process start → run start (interpreter, imports, config, discovery)", fmt_s(counts["process_age_at_start"])])
    flow = run["seconds"]
    rows.append(["the run (started → finished, as recorded)", fmt_s(flow)])
    rows.append(["process wall outside the run (interpreter, imports before the run, Prefect, exit)", fmt_s(max(0.0, wall - flow))])
    rows.append(["process wall", fmt_s(wall)])
    return rows


def probe_lines(rows: dict[str, dict[str, Any]]) -> list[str]:
    """The speed probes of one size's steps (:func:`speed_probe`) as one line, with their spread."""
    named = [(label, rows[key].get("probe_s")) for key, label in (("build", "build"), ("floor", "floor"), ("noop", "no-op"),
             ("add", "+1% (its median run)"), ("delete", "−1%"), ("change", "~1% changed"), ("floor2", "floor after")) if key in rows]
    got = [p for _, p in named if p]
    if not got:
        return []
    spread = max(got) / min(got) - 1
    text = ("Speed probe before each step (a fixed bf16 workload of the floor's kind, two threads, median of 15 — lower is faster): "
            + ", ".join(f"{label} {fmt_s(p)} s" for label, p in named if p)
            + f"; slowest / fastest − 1 = {spread:.0%} (module docs: the probe's own windows a few seconds apart differ by up to ~±25% on this VM).")
    return [text, ""]


def encode_floor(rows: dict[str, dict[str, Any]]) -> float:
    """A size's embedding floor: the faster of its two encodes of the build's texts (sentence-transformers
    right after the build, LightEmbedder after the updates)."""
    return min(float(rows["floor"]["encode_s"]), float(rows["floor2"]["encode_s"]))


def _levels(run: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The tree levels' stats (level >= 1) of a build's runs record."""
    return [st for st in (((run or {}).get("counts") or {}).get("tree") or {}).get("stats") or [] if st.get("level", 0) >= 1]


def serial_chain(run: dict[str, Any] | None) -> tuple[float, str] | None:
    """(seconds of every level's global fit, "level 1 a s (UMAP b s), ...") of a build's runs
    record, or None when the record has no ``global_s`` (a build before it was recorded)."""
    stats = _levels(run)
    if not stats or any(st.get("global_s") is None for st in stats):
        return None
    total = sum(float(st["global_s"]) for st in stats)
    detail = ", ".join(f"level {st['level']} {fmt_s(st['global_s'])} s (UMAP {fmt_s(st.get('global_umap_s'))} s)" for st in stats)
    return total, detail


def _fits_cpu(st: dict[str, Any]) -> tuple[float, float, bool]:
    """(UMAP, GMM) seconds of one level's fits: their CPU on the fits' threads when the record has
    it (``umap_cpu_s``, ``gmm_cpu_s``), else their wall seconds (older records); and which."""
    if st.get("umap_cpu_s") is not None and st.get("gmm_cpu_s") is not None:
        return float(st["umap_cpu_s"]), float(st["gmm_cpu_s"]), True
    return float(st["umap_s"]), float(st["gmm_s"]), False


def method_cpu(run: dict[str, Any] | None) -> tuple[float, str] | None:
    """(seconds of every UMAP and GMM fit of a build, "UMAP a s, GMM b s") from its runs record, or
    None without them: each fit's CPU on its thread where recorded (module docs), else its wall
    seconds — each fit runs on one thread in the default (seeded UMAP's layout, and the fits under
    a one-thread BLAS limit), so on an uncontended core those are its CPU seconds too."""
    stats = _levels(run)
    if not stats or any(st.get("umap_s") is None or st.get("gmm_s") is None for st in stats):
        return None
    parts = [_fits_cpu(st) for st in stats]
    umap, gmm = sum(u for u, _, _ in parts), sum(g for _, g, _ in parts)
    what = "CPU" if all(c for _, _, c in parts) else "wall"
    return umap + gmm, f"UMAP {fmt_s(umap)} s, GMM {fmt_s(gmm)} s ({what} seconds of the fits)"


def critical_path(run: dict[str, Any] | None, cores: int) -> tuple[float, float, str] | None:
    """(every level's fits' CPU plus (cores - 1) x its global layout's CPU, the cold start, detail) of a
    build's runs record (module docs: the method's critical path), or None for a record without
    the global layout's CPU (``global_layout_s``) or the fits' CPU — and
    for a build of several trees a level (``tree.scope: document``), whose global fits could run
    side by side."""
    stats = _levels(run)
    if not stats or any(st.get("global_layout_s") is None or st.get("umap_cpu_s") is None or st.get("gmm_cpu_s") is None
                        or int(st.get("n_trees", 1)) > 1 for st in stats):
        return None
    total, parts = 0.0, []
    for st in stats:
        umap, gmm, _ = _fits_cpu(st)
        layout = float(st["global_layout_s"])
        total += umap + gmm + (cores - 1) * layout
        parts.append(f"level {st['level']}: fits {fmt_s(umap + gmm)} CPU s, global layout {fmt_s(layout)} s")
    phases = ((run or {}).get("counts") or {}).get("phases") or {}
    start = sum(float(v) for k, v in phases.items() if k.startswith("import torch") or k == "embedding model load")
    return total, start, "; ".join(parts) + f"; cold start {fmt_s(start)} s (the embedding process's torch import and model load)"


def verdict(ok: bool, *steps: dict[str, Any], absolute: bool = False) -> str:
    """MET / MISSED — or, when any step it compares ran while other processes kept more than
    BUSY_CORES busy, the same word marked as no verdict: a shared machine slows torch's encode
    (the floor) far more than the rest, so ratios against it are not the idle machine's.
    ``absolute``: a time target, which a busy machine can only make harder — met there, it is met."""
    word = "MET" if ok else "MISSED"
    if absolute and ok and any(st.get("busy") for st in steps):
        return "MET (on a busy machine: the time is an upper bound)"
    if any(st.get("busy") for st in steps):
        return f"{word.lower()} on a busy machine (no verdict: re-run idle)"
    return word


def idle_lines(size: dict[str, Any], cores: int, plot: str | None) -> list[str]:
    """The cold build's idle core-seconds (:func:`idle_core_seconds`) in all and by part, and its plot."""
    idle = size.get("idle")
    if not idle:
        return []
    wall = size["rows"]["build"]["wall"]
    parts = sorted(((k, v) for k, v in idle.items() if k != "all" and v >= 0.05 * max(idle["all"], 1e-9)), key=lambda kv: -kv[1])
    text = (f"CPU timeline of the cold build (its processes sampled from /proc every {SAMPLE_S:g} s, binned per {size['timeline']['bin_s']:g} s): "
            f"they left **{idle['all']:.1f} core-seconds idle** of {cores} × {wall:.1f} s ({idle['all'] / (cores * wall):.0%}); "
            + (", ".join(f"{label} {v:.1f}" for label, v in parts) if parts else "no part of it above 5% of that")
            + " (the parts laid end to end from the run's recorded durations: approximate).")
    return [text, "", *([f"![CPU timeline of the cold {size['mult']}x build]({plot})", ""] if plot else [])]


def markdown(result: dict[str, Any]) -> str:
    lines = [
        *report_header("The cold path: CLI build and updates against the embedding floor", command=result["command"],
                       date=result["date"], commit=result["commit"], machine_start=result["machine_start"],
                       machine_end=result["machine_end"], busy_end=result["busy_end"], wall_s=result.get("wall_s", 0)),
        "",
        *([f"Report re-rendered from its .json by commit {result['rendered_by']} (`--report-only`): every number is the run's.", ""]
          if result.get("rendered_by") else []),
        *([f"Bytecode: {result['bytecode']}.", ""] if result.get("bytecode") else []),
        *([f"Numba: {result['numba']}.", ""] if result.get("numba") else []),
        *([env_line(result["environment"]), ""] if result.get("environment") else []),
        ("Every step is a fresh process (`arborag build|update ...`, default settings). \"others\" = average cores" if not result.get("settings") else
         "Every step is a fresh process (`arborag build|update ...`) with these settings from the environment, the rest default: "
         + ", ".join(f"`{k}={v}`" for k, v in sorted(result["settings"].items())) + ". \"others\" = average cores"),
        "other processes kept busy during the step (/proc/stat); *busy* marks a step where that exceeded "
        f"{BUSY_CORES} of the 2 cores. Ratios are within one size of one round.",
        "",
    ]
    for size in result["sizes"]:
        r = size["rows"]
        floor_enc = encode_floor(r)
        floor_proc = min(r["floor"]["wall"], r["floor2"]["wall"])
        build = r["build"]["wall"]
        mult = size["mult"]
        lines += [f"## {mult}x: {size['documents']:,} documents (round {size.get('round', 1)})", "",
                  f"Leaves {r['floor']['leaves']:,}, summaries {r['floor']['summaries']:,} (texts embedded by the build: "
                  f"{r['floor']['leaves'] + r['floor']['summaries']:,}); nodes {size['nodes']:,}; node ids hash {size['node_ids_hash']}.",
                  ""]
        table = []

        def add(label: str, row: dict[str, Any], ratio: float | str | None, target: str, table: list[list[Any]] = table) -> None:
            table.append([label, fmt_s(row["wall"]), fmt_s(row["cpu"]), f"{row['rss_mb']:.0f}",
                          "—" if row.get("other_cores") is None else f"{row['other_cores']:.2f}" + (" busy" if row.get("busy") else ""),
                          ratio if isinstance(ratio, str) else fmt_ratio(ratio), target])

        enc_line = (f"encode {fmt_s(r['floor']['encode_s'])} (sentence-transformers) / {fmt_s(r['floor2']['encode_s'])} s (LightEmbedder) "
                    f"(leaves {fmt_s(r['floor']['leaves_s'])}, summaries {fmt_s(r['floor']['summaries_s'])}; "
                    f"import {fmt_s(r['floor']['import_s'])}, load {fmt_s(r['floor']['load_s'])}; {r['floor']['threads']} threads)")
        add("embedding floor, whole process (before / after the updates: min)", {**r["floor"], "wall": floor_proc}, "1.00×", enc_line)
        tgt = BUILD_FLOOR_TARGET.get(mult)
        ratio = build / floor_enc
        add("cold CLI build", r["build"], f"{ratio:.2f}× encode floor, {build / floor_proc:.2f}× floor process",
            f"≤ {tgt}× encode floor: {verdict(ratio <= tgt, r['build'], r['floor'], r['floor2'])}" if tgt else "")
        chain = serial_chain(size["runs"].get("build"))
        if chain is not None:
            fits, detail = chain
            table.append(["the method's serial chain: encode floor + every level's global fit (as timed in this build)", fmt_s(floor_enc + fits),
                          "—", "—", "—", f"{(floor_enc + fits) / floor_enc:.2f}× encode floor",
                          f"a lower bound for a build of this method here (module docs); global fits {detail}"])
        cores = result.get("cores") or 2
        enc_cpu = min((x for x in (r["floor"].get("encode_cpu_s"), r["floor2"].get("encode_cpu_s")) if x is not None), default=None)
        crit = critical_path(size["runs"].get("build"), cores)
        if crit is not None and enc_cpu is not None:
            work, start, detail = crit
            bound = start + (enc_cpu + work) / cores
            table.append([f"the method's critical path on {cores} cores: cold start + (encode floor's CPU + every fit's CPU + "
                          f"{cores - 1} × every global layout's CPU) / {cores}", fmt_s(bound), "—", "—", "—",
                          f"{bound / floor_enc:.2f}× encode floor",
                          f"a lower bound for a cold build of this method here (module docs); encode CPU {fmt_s(enc_cpu)} s; {detail}"])
        fits_cpu = method_cpu(size["runs"].get("build"))
        if fits_cpu is not None and enc_cpu is not None and not result.get("settings"):
            need, detail = fits_cpu
            bound = (enc_cpu + need) / cores
            table.append([f"the method's CPU on {cores} cores: (encode floor's CPU + every UMAP and GMM fit of this build) / {cores}", fmt_s(bound),
                          fmt_s(enc_cpu + need), "—", "—", f"{bound / floor_enc:.2f}× encode floor",
                          f"a lower bound with perfect overlap and no start-up (module docs); encode CPU {fmt_s(enc_cpu)} s, {detail}"])
        if result.get("cores"):
            spread = r["build"]["cpu"] / cores
            table.append([f"this build's own CPU seconds over the {cores} cores", fmt_s(spread), fmt_s(r["build"]["cpu"]), "—", "—",
                          f"{spread / floor_enc:.2f}× encode floor",
                          "the build with no core ever idle: no scheduling of this build's work is faster (module docs)"])
        for key, label in (("noop", "no-op update"), ("add", "update +1% added"), ("delete", "update −1% deleted"), ("change", "update ~1% changed"),
                           ("move", "update, source folder moved (every uri new, no content)")):
            if key not in r:  # results written before the moved-folder step existed
                continue
            row = r[key]
            share = row["wall"] / build
            target = ""
            if key == "noop":
                target = f"≤ {NOOP_TARGET_S} s: {verdict(row['wall'] <= NOOP_TARGET_S, row, absolute=True)}"
            elif key == "add":
                target = f"≤ {UPDATE_TARGET:.0%} of build: {verdict(share <= UPDATE_TARGET, row, r['build'])}"
                if len(row.get("samples") or []) > 1:
                    n = len(row["samples"])  # an even count has no middle run: the row is the upper of the two
                    which = "median" if n % 2 else "upper middle"
                    label = f"update +1% added ({which} of {n}: " + " / ".join(fmt_s(x) for x in row["samples"]) + " s)"
            if key == "move":
                plan = (size["runs"].get("move") or {}).get("counts", {}).get("seconds", {}).get("plan")
                target = ("tree unchanged" if row.get("tree_unchanged") else "TREE CHANGED") + (f"; plan stage {fmt_s(plan)} s" if plan else "")
            add(label, row, f"{share:.1%} of build", target)
        lines += [md_table(["step", "wall s", "cpu s", "peak MB", "others (cores)", "ratio", "target / detail"], table), ""]
        lines += probe_lines(r)
        lines += idle_lines(size, cores, (result.get("plots") or {}).get(str(mult)))
        for key, label in (("build", "cold build"), ("add", "update +1% added")):
            if key in size["runs"]:
                lines += [f"Where the {label} spends its {fmt_s(r[key]['wall'])} s (runs table of that run):", "",
                          md_table(["part", "seconds"], stage_table(size["runs"][key], r[key]["wall"])), ""]
    if result.get("imports"):
        lines += ["Import seconds of a fresh process, group by group (each group on top of the ones above):", "",
                  md_table(["imports", "seconds"], [[a, fmt_s(b)] for a, b in result["imports"]]), ""]
    return "\n".join(lines)


def write_plots(result: dict[str, Any], out: Path) -> dict[str, str]:
    """Each size's cold-build CPU timeline beside the report (``<out stem>-timeline-<size>x.png``; the
    last round's when there are several): {size: file name}."""
    plots: dict[str, str] = {}
    for size in result["sizes"]:
        if size.get("timeline"):
            name = f"{out.stem}-timeline-{size['mult']}x.png"
            plot_timeline(size, result.get("cores") or 2, out.with_name(name))
            plots[str(size["mult"])] = name
    return plots


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1,4", help="corpus multiples to run (1 = ~2,300 documents, 4 = ~9,300)")
    ap.add_argument("--rounds", type=int, default=1, help="repeat every size this many times (fresh corpora each round)")
    ap.add_argument("--quick", action="store_true", help="300 documents, one size: a small run")
    ap.add_argument("--smoke", action="store_true", help="40 documents, one size, one repeat, no waiting for a quiet machine: a check run")
    ap.add_argument("--work", type=Path, default=Path("/tmp/arborag-bench-cold"))
    ap.add_argument("--max-load", type=float, default=1.0, help="wait (up to --max-wait s) for the 1-min load to fall under this first")
    ap.add_argument("--max-wait", type=float, default=300.0)
    ap.add_argument("--add-repeats", type=int, default=3,
                    help="run the +1%% update this many times from the same state; its row is the median run")
    ap.add_argument("--extra", default="", help="extra CLI options for build and update (e.g. --no-prefect)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--report-only", type=Path, default=None, metavar="JSON",
                    help="re-render the markdown of a saved cold_path.json (nothing is run)")
    args = ap.parse_args()
    if args.smoke:
        global PROBES
        args.quick, args.max_wait, args.add_repeats, PROBES = True, 0.0, 1, False
    if args.report_only is not None:
        saved = json.loads(args.report_only.read_text(encoding="utf-8"))
        saved["rendered_by"] = git_commit()
        out = args.out or args.report_only.with_suffix(".md")
        saved["plots"] = write_plots(saved, out)
        out.write_text(markdown(saved), encoding="utf-8")
        return
    t_bench = time.perf_counter()
    setup_env()
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(os.cpu_count() or 2))
    args.work.mkdir(parents=True, exist_ok=True)
    sizes = [1] if args.quick else [int(x) for x in args.sizes.split(",") if x.strip()]
    result: dict[str, Any] = {
        "command": "python benchmarks/cold_path.py " + " ".join(sys.argv[1:]),
        "date": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "commit": git_commit(),
        "machine_start": machine_line(), "sizes": [], "cores": len(os.sched_getaffinity(0)),
        # config set through the environment (e.g. ARBORAG_CLUSTER__UMAP_EPOCHS=200): the report names it, and the
        # CPU bound (one thread per fit) is left out when any is set
        "settings": {k: v for k, v in os.environ.items() if k.startswith("ARBORAG_") and "__" in k},
    }
    load = wait_for_quiet(args.max_load, args.max_wait)
    result["load_at_start"] = load
    result["bytecode"] = compile_project(env)
    result["numba"] = warm_numba(env)
    from arborag.env import numeric_environment

    result["environment"] = numeric_environment()  # what the trees' numbers come from (node-id hashes differ across these)
    print(f"load at start {load:.2f}", flush=True)
    result["imports"] = import_table(env)
    for rnd in range(1, args.rounds + 1):
        for mult in sizes:
            wait_for_quiet(args.max_load, args.max_wait)
            size = one_size(mult, args.work, (40 if args.smoke else 300) if args.quick else None, env, args.extra.split(), repeats=max(1, args.add_repeats),
                            cores=result["cores"])
            size["round"] = rnd
            result["sizes"].append(size)
    result["machine_end"] = machine_line()
    result["wall_s"] = time.perf_counter() - t_bench
    result["busy_end"] = ", ".join(busy_processes())
    out = args.out or (RESULTS / "cold_path.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    result["plots"] = write_plots(result, out)
    report = markdown(result)
    out.write_text(report, encoding="utf-8")
    out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    print(report)
    print(f"benchmark wall time: {result['wall_s']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
