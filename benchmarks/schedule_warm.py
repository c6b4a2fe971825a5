"""What a scheduled update costs: `arborag schedule` warm (runs in its process) vs --isolated (a subprocess per run).

A real ``prefect server start`` on 127.0.0.1 (PREFECT_HOME in the work folder) schedules the
``update`` deployment every ``--every`` seconds; ``arborag schedule`` serves it, first in its
default warm mode, then with ``--isolated`` (Prefect's serve: each run in a new subprocess). The
corpus is the shared HotpotQA 2-sentence pieces (as benchmarks/cold_path.py cuts them), built once
with ``arborag build`` before each mode. Between scheduled runs the benchmark changes the sources,
so the runs are, in order:

1. no change (the first run of the serving process: a no-op update);
2. +1% documents added (the first run that embeds: in warm mode it loads the model now);
3. no change;
4. +1% added (warm mode: everything loaded);
5. +1% added.

Each run's seconds come from the Prefect server (the flow run's start → end, what the UI shows)
and, for the isolated mode, that excludes the subprocess start before the engine reports
Running — so the wall from the run's scheduled time to its end is reported too. Ratios are warm /
isolated per step, measured in the same benchmark run.

    python benchmarks/schedule_warm.py                 # ~2,300 documents, 30 s interval
    python benchmarks/schedule_warm.py --docs 300 --every 20   # a smoke run

Writes ``benchmarks/results/schedule_warm.md`` (+ ``.json``; ``--docs`` under 2,000: ``schedule_warm-smoke``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS, busy_processes, git_commit, machine_line, md_table, proc_stat, setup_env  # noqa: E402
from cold_path import pieces  # noqa: E402

BIN = Path(sys.executable).parent
IDLE_SERVICES = ("CANCELLATION_CLEANUP", "DB_VACUUM", "EVENT_LOGGER", "FOREMAN", "LATE_RUNS", "PAUSE_EXPIRATIONS",
                 "REPOSSESSOR", "CLEANUP_RECONCILER", "TRIGGERS", "TASK_RUN_RECORDER", "EVENT_PERSISTER")
STEPS = ("no change", "+1% added", "no change", "+1% added", "+1% added")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the process group we started, then SIGKILL if it lingers."""
    import signal

    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=30)


def post(url: str, path: str, body: dict[str, Any]) -> Any:
    import httpx

    resp = httpx.post(f"{url}{path}", json=body, timeout=30)
    resp.raise_for_status()
    return resp.json()


def start_server(home: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    import httpx

    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    senv = {**env, "PREFECT_HOME": str(home), "PREFECT_API_URL": url, "PREFECT_SERVER_API_HOST": "127.0.0.1",
            "PREFECT_SERVER_API_PORT": str(port), "PREFECT_UI_ENABLED": "false",
            **{f"PREFECT_SERVER_SERVICES_{n}_ENABLED": "false" for n in IDLE_SERVICES}}
    log = open(home / "server.log", "w")
    proc = subprocess.Popen([str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env=senv, cwd=str(home), start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(1)
    stop(proc)
    raise SystemExit(f"prefect server did not start:\n{(home / 'server.log').read_text()[-3000:]}")


def finished_runs(url: str, name: str) -> list[dict[str, Any]]:
    deps = {d["name"]: d for d in post(url, "/deployments/filter", {})}
    if name not in deps:
        return []
    runs = post(url, "/flow_runs/filter", {
        "deployments": {"id": {"any_": [deps[name]["id"]]}},
        "flow_runs": {"state": {"type": {"any_": ["COMPLETED", "FAILED", "CRASHED"]}}},
        "sort": "EXPECTED_START_TIME_ASC",
    })
    return list(runs)


def tree_cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` and of its children it has reaped (utime+stime+cutime+cstime)."""
    fields = proc_stat(pid)
    if fields is None:
        return float("nan")
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _t(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def one_mode(mode: str, work: Path, base: list[tuple[str, str]], pool: list[tuple[str, str]], every: int, env: dict[str, str]) -> list[dict[str, Any]]:
    src, corpus, home = work / f"src-{mode}", work / f"corpus-{mode}", work / f"prefect-{mode}"
    for d in (src, corpus, home):
        shutil.rmtree(d, ignore_errors=True)
    src.mkdir(parents=True)
    home.mkdir(parents=True)
    for name, text in base:
        (src / name).write_text(text, encoding="utf-8")
    print(f"{mode}: building {len(base)} documents ...", flush=True)
    subprocess.run([str(BIN / "arborag"), "build", str(src), "--corpus", str(corpus), "--no-prefect"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    server, url = start_server(home, env)
    name = f"update-{mode}"
    log_path = work / f"schedule-{mode}.log"
    senv = {**env, "PREFECT_API_URL": url, "PREFECT_HOME": str(home), "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    args = [str(BIN / "arborag"), "schedule", str(src), "--corpus", str(corpus), "--update-every", f"{every}s",
            "--no-rebuild", "--name-suffix", f"-{mode}"] + (["--isolated"] if mode == "isolated" else [])
    rows: list[dict[str, Any]] = []
    step_of_pool = iter(range(0, len(pool), max(1, len(pool) // 3)))
    with open(log_path, "w") as log:
        proc = subprocess.Popen(args, env=senv, stdout=log, stderr=subprocess.STDOUT, cwd=str(work), start_new_session=True)
    try:
        counted: set[str] = set()
        armed_at = datetime.now(timezone.utc)  # a run counts as the next step only if it started after this
        cpu_before = tree_cpu(proc.pid)
        deadline = time.monotonic() + every * (3 * len(STEPS) + 4) + 900
        while len(rows) < len(STEPS) and time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"arborag schedule exited:\n{log_path.read_text()[-4000:]}")
            for run in finished_runs(url, name):
                if run["id"] in counted:
                    continue
                counted.add(run["id"])
                start, end, expected = _t(run.get("start_time")), _t(run.get("end_time")), _t(run.get("expected_start_time"))
                if start is None or start <= armed_at or len(rows) >= len(STEPS):
                    continue  # started before the sources were set for this step (a late run): not a step
                step = STEPS[len(rows)]
                row = {"step": step, "state": run["state"]["type"], "run_s": (end - start).total_seconds() if end else None,
                       "from_scheduled_s": (end - expected).total_seconds() if end and expected else None,
                       "load1": round(os.getloadavg()[0], 2), "id": run["id"]}
                cpu_now = tree_cpu(proc.pid)
                row["cpu_s"], cpu_before = cpu_now - cpu_before, cpu_now  # since the last counted run (serving process + reaped runs)
                rows.append(row)
                print(f"  {mode} run {len(rows)} ({step}): {row['state']} {row['run_s']} s (scheduled → end {row['from_scheduled_s']} s)",
                      flush=True)
                if len(rows) < len(STEPS) and STEPS[len(rows)].startswith("+1%"):
                    start_i = next(step_of_pool)
                    for fname, text in pool[start_i:start_i + max(1, len(pool) // 3)]:
                        (src / fname).write_text(text, encoding="utf-8")
                armed_at = datetime.now(timezone.utc)
            time.sleep(1)
    finally:
        stop(proc)
        stop(server)
    if len(rows) < len(STEPS):
        raise SystemExit(f"{mode}: only {len(rows)} runs finished:\n{log_path.read_text()[-4000:]}")
    runs_table = __import__("pyarrow.parquet", fromlist=["x"]).read_table(corpus / "tables" / "runs.parquet").to_pylist()
    by_id = {r["run_id"]: r for r in runs_table}
    for row in rows:
        rec = by_id.get(row["id"])
        counts = json.loads(rec["counts"]) if rec and rec["counts"] else {}
        row["mode_run"] = counts.get("mode")
        row["embedded"] = (counts.get("calls") or {}).get("embedded_texts")
        row["phases"] = counts.get("phases")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=2318, help="documents (HotpotQA pieces); 1% of them are added per +1% step")
    ap.add_argument("--every", type=int, default=30, help="seconds between scheduled updates")
    ap.add_argument("--work", type=Path, default=Path("/tmp/arborag-bench-schedule"))
    args = ap.parse_args()
    setup_env()
    env = dict(os.environ)
    all_pieces = pieces(1)[: args.docs]
    one = max(1, round(len(all_pieces) * 0.01))
    base, pool = all_pieces[: len(all_pieces) - 3 * one], all_pieces[len(all_pieces) - 3 * one:]
    args.work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"command": "python benchmarks/schedule_warm.py " + " ".join(sys.argv[1:]),
                              "date": f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "commit": git_commit(),
                              "machine_start": machine_line(), "documents": len(base), "added_per_step": one, "modes": {}}
    for mode in ("warm", "isolated"):
        result["modes"][mode] = one_mode(mode, args.work, base, pool, args.every, env)
    result["machine_end"] = machine_line()
    result["busy_end"] = ", ".join(busy_processes())
    warm, iso = result["modes"]["warm"], result["modes"]["isolated"]
    table = []
    for i, step in enumerate(STEPS):
        w, s = warm[i], iso[i]
        ratio = (w["from_scheduled_s"] / s["from_scheduled_s"]) if w["from_scheduled_s"] and s["from_scheduled_s"] else None
        cpu_ratio = w["cpu_s"] / s["cpu_s"] if s["cpu_s"] else None
        table.append([f"{i + 1}. {step}", f"{w['run_s']:.2f}", f"{w['cpu_s']:.2f}", f"{s['run_s']:.2f}", f"{s['cpu_s']:.2f}",
                      "—" if ratio is None else f"{ratio:.2f}×", "—" if cpu_ratio is None else f"{cpu_ratio:.2f}×",
                      f"{w['load1']} / {s['load1']}"])
    report = "\n".join([
        "# What a scheduled update costs: `arborag schedule` warm vs --isolated",
        "",
        f"Generated by `{result['command']}` on {result['date']}, commit {result['commit']}.  ",
        f"Machine at start: {result['machine_start']}  ",
        f"Machine at end: {result['machine_end']}  ",
        f"Other busy processes at end: {result['busy_end'] or 'none above 20% CPU'}",
        "",
        f"{len(base):,} HotpotQA documents; each +1% step adds {one} documents. \"run\" = the flow run's start → end as the",
        "Prefect server recorded it; \"scheduled → end\" = from the run's scheduled time to its end (it includes the",
        "poll delay; Prefect's runner may start an --isolated run's subprocess up to 10 s before that time). Shared box: see the",
        "load column (1-min load at the end of each run, warm / isolated).",
        "",
        md_table(["step", "warm run s", "warm cpu s", "isolated run s", "isolated cpu s",
                  "warm / isolated (scheduled → end)", "warm / isolated (cpu)", "load"], table),
        "",
        "cpu s = CPU seconds of the serving process and the run subprocesses it reaped, from the previous counted run's",
        "end to this one's (so an isolated run's interpreter start and imports count, even when Prefect's runner",
        "started the subprocess before the scheduled time).",
        "",
    ])
    suffix = "" if args.docs >= 2000 else "-smoke"
    (RESULTS / f"schedule_warm{suffix}.md").write_text(report, encoding="utf-8")
    (RESULTS / f"schedule_warm{suffix}.json").write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    print(report)


if __name__ == "__main__":
    main()
