"""``benchmarks/cold_path.py``'s report: the lower bounds it prints beside the build are the
arithmetic its module docs state, from the run's own numbers (the README quotes them).

The run is the committed ``benchmarks/results/cold_path.json`` (nothing is run here); the
report is rendered again and its rows are recomputed from the JSON.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAVED = REPO / "benchmarks" / "results" / "cold_path.json"


@pytest.fixture(scope="module")
def cold_path():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import cold_path as module
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return module


def _row(report: str, starts: str) -> list[str]:
    line = next(line for line in report.splitlines() if line.startswith(f"| {starts}"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def _seconds(cell: str) -> float:
    return float(re.sub(r"[^0-9.]", "", cell))


def test_the_bounds_are_the_runs_own_arithmetic(cold_path) -> None:
    saved = json.loads(SAVED.read_text(encoding="utf-8"))
    report = cold_path.markdown(saved)
    size = saved["sizes"][0]
    rows, stats = size["rows"], [s for s in size["runs"]["build"]["counts"]["tree"]["stats"] if s["level"] >= 1]
    cores = saved["cores"]
    floor = min(rows["floor"]["encode_s"], rows["floor2"]["encode_s"])
    enc_cpu = min(rows["floor"]["encode_cpu_s"], rows["floor2"]["encode_cpu_s"])
    fits = sum(s["umap_s"] + s["gmm_s"] for s in stats)

    chain = _row(report, "the method's serial chain")
    assert _seconds(chain[1]) == pytest.approx(floor + sum(s["global_s"] for s in stats), abs=0.01)
    method = _row(report, "the method's CPU")
    assert _seconds(method[1]) == pytest.approx((enc_cpu + fits) / cores, abs=0.01)
    assert method[5].startswith(f"{(enc_cpu + fits) / cores / floor:.2f}×")
    own = _row(report, "this build's own CPU")
    assert _seconds(own[1]) == pytest.approx(rows["build"]["cpu"] / cores, abs=0.01)
    assert own[5].startswith(f"{rows['build']['cpu'] / cores / floor:.2f}×")
    build = _row(report, "cold CLI build")
    assert build[5].startswith(f"{rows['build']['wall'] / floor:.2f}×")


def test_settings_from_the_environment_are_named_and_drop_the_one_thread_bound(cold_path) -> None:
    saved = copy.deepcopy(json.loads(SAVED.read_text(encoding="utf-8")))
    saved["settings"] = {"ARBORAG_CLUSTER__UMAP_LAYOUT_BLOCKS": "2"}
    report = cold_path.markdown(saved)
    assert "`ARBORAG_CLUSTER__UMAP_LAYOUT_BLOCKS=2`" in report and "default settings" not in report
    assert "| the method's CPU" not in report  # fits are no longer one thread each
    assert "| this build's own CPU" in report  # measured CPU: true whatever the settings


def test_a_re_rendered_report_says_so(cold_path) -> None:
    saved = json.loads(SAVED.read_text(encoding="utf-8"))
    assert "re-rendered" not in cold_path.markdown({**saved, "rendered_by": None})
    assert "re-rendered from its .json by commit abc1234" in cold_path.markdown({**saved, "rendered_by": "abc1234"})
