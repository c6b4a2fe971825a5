"""``benchmarks/cold_path.py``'s report: the lower bounds it prints beside the build are the
arithmetic its module docs state, from the run's own numbers (the README quotes them).

The run is the committed ``benchmarks/results/cold_path.json`` (nothing is run here); the
report is rendered again and its rows are recomputed from the JSON.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from helpers.ops import benchmark_module

REPO = Path(__file__).resolve().parents[2]
SAVED = REPO / "benchmarks" / "results" / "cold_path.json"


@pytest.fixture(scope="module")
def cold_path():
    return benchmark_module("cold_path")


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
    # the fits' CPU on their threads where the record has it, else their wall
    fits = sum(s.get("umap_cpu_s", s["umap_s"]) + s.get("gmm_cpu_s", s["gmm_s"]) for s in stats)

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


def test_the_critical_path_is_the_cold_start_plus_the_work_with_one_core_per_global_layout(cold_path) -> None:
    """cold start + (encode floor's CPU + every fit's CPU + (cores - 1) x every global layout's CPU) / cores,
    from the fits' thread CPU (not their wall); absent from a record without the layouts' CPU."""
    saved = copy.deepcopy(json.loads(SAVED.read_text(encoding="utf-8")))
    saved["sizes"] = saved["sizes"][:1]  # one size, so no other size's row stands in for it
    size = saved["sizes"][0]
    run = size["runs"]["build"]
    stats = [s for s in run["counts"]["tree"]["stats"] if s["level"] >= 1]
    for i, st in enumerate(stats):  # numbers of their own, so the row cannot be another row's
        st.update(global_layout_s=1.5 + i, umap_cpu_s=st["umap_s"] * 0.9, gmm_cpu_s=st["gmm_s"] * 0.8)
    run["counts"]["phases"] = {**run["counts"].get("phases", {}), "import torch + tokenizers": 1.25, "embedding model load": 0.25,
                               "import umap (numba's cached code)": 9.0}
    rows, cores = size["rows"], saved["cores"]
    floor = min(rows["floor"]["encode_s"], rows["floor2"]["encode_s"])
    enc_cpu = min(rows["floor"]["encode_cpu_s"], rows["floor2"]["encode_cpu_s"])
    work = sum(s["umap_cpu_s"] + s["gmm_cpu_s"] + (cores - 1) * s["global_layout_s"] for s in stats)
    want = 1.5 + (enc_cpu + work) / cores
    crit = _row(cold_path.markdown(saved), "the method's critical path")
    assert _seconds(crit[1]) == pytest.approx(want, abs=0.01)
    assert crit[5].startswith(f"{want / floor:.2f}×") and "cold start 1.50 s" in crit[6]
    method = _row(cold_path.markdown(saved), "the method's CPU")  # the CPU bound takes the fits' CPU too, and says so
    assert "CPU seconds of the fits" in method[6]
    stats[0]["n_trees"] = 3  # per-document trees: their global fits could run side by side
    assert "| the method's critical path" not in cold_path.markdown(saved)
    stats[0]["n_trees"] = 1
    for st in stats:
        del st["global_layout_s"]
    assert "| the method's critical path" not in cold_path.markdown(saved)


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


def test_the_cpu_timeline_spreads_each_processs_ticks_and_counts_the_idle_cores(cold_path) -> None:
    """cpu_timeline: a process's tick increase between two samples is spread over the time between
    them (a new process from zero; a bin takes its share), cores = ticks / tck / bin;
    idle_core_seconds: the cores minus their sum, per bin, whole and inside spans (a span takes its
    share of a bin it covers in part)."""
    roles = {10: "CLI", 11: "embedding worker", 12: "helper process"}
    samples = [(0.25, {10: 5}), (0.75, {10: 30, 11: 50}), (1.25, {10: 55, 11: 100, 12: 10}), (1.5, {10: 55, 11: 150})]
    tl = cold_path.cpu_timeline(samples, roles, tck=100, bin_s=0.5)
    assert tl["bin_s"] == 0.5
    # CLI: 5 ticks over [0, 0.25], then 25 over [0.25, 0.75] (half in each bin), 25 over [0.75, 1.25]
    assert tl["cores"]["CLI"] == pytest.approx([(5 + 12.5) / 100 / 0.5, (12.5 + 12.5) / 100 / 0.5, 12.5 / 100 / 0.5])
    # first seen with 50 at 0.75: counted from zero over [0.25, 0.75]; then 50 over [0.75, 1.25], 50 over [1.25, 1.5]
    assert tl["cores"]["embedding worker"] == pytest.approx([25 / 50, (25 + 25) / 50, (25 + 50) / 50])
    assert tl["cores"]["helper process"] == pytest.approx([0.0, 0.1, 0.1])
    used = sum(sum(v) for v in tl["cores"].values()) * 0.5
    assert used == pytest.approx((55 + 150 + 10) / 100)  # every tick counted once
    idle = cold_path.idle_core_seconds(tl, 2, [("first bin", 0.0, 0.5), ("half of the last", 1.25, 1.5)])
    per_bin = [(2 - 0.35 - 0.5) * 0.5, (2 - 0.5 - 1.0 - 0.1) * 0.5, (2 - 0.25 - 1.5 - 0.1) * 0.5]
    assert idle["all"] == pytest.approx(sum(per_bin))
    assert idle["first bin"] == pytest.approx(per_bin[0])
    assert idle["half of the last"] == pytest.approx(per_bin[2] / 2)
    # a run that ended 0.1 s before its last bin did: that bin holds 2 x 0.4 core-seconds, all used
    ended = dict(tl, end_s=1.4)
    assert cold_path.idle_core_seconds(ended, 2)["all"] == pytest.approx(per_bin[0] + per_bin[1] + max(0.0, 2 * 0.4 - (0.25 + 1.5 + 0.1) * 0.5))
    assert cold_path.idle_core_seconds(ended, 2)["all"] < idle["all"]


def test_a_busy_process_sampled_off_the_bins_reads_as_busy(cold_path) -> None:
    """Samples every 0.13 s (0.1 s plus a /proc scan) of two busy cores: every whole bin reads 2
    cores, none 1.6 (the old binning's dips, which the idle count took for idle cores)."""
    samples = [(0.13 * k, {10: round(0.13 * k * 200)}) for k in range(1, 40)]
    tl = cold_path.cpu_timeline(samples, {10: "embedding worker"}, tck=100, bin_s=0.5)
    whole = tl["cores"]["embedding worker"][1:-1]
    assert whole and all(abs(c - 2.0) < 0.05 for c in whole), whole


def test_the_builds_parts_are_its_recorded_durations_as_the_pipeline_runs_them(cold_path) -> None:
    """End to end up to the tree's tables; then the stages run beside each other (vectors, sparse)
    start with links, and publish starts when the last of them ends (flows/stage.py ``beside``)."""
    saved = json.loads(SAVED.read_text(encoding="utf-8"))
    run = saved["sizes"][0]["runs"]["build"]
    spans = cold_path.build_spans(run, ("ingest", "sections", "context", "segment", "embed", "tree", "vectors", "sparse", "links", "publish"))
    counts, secs = run["counts"], run["counts"]["seconds"]
    assert spans[0][1] == pytest.approx(counts["process_age_at_start"])
    names = [s[0] for s in spans]
    serial = spans[: names.index("tree: tables") + 1]
    for (_, _, end), (_, start, _) in zip(serial, serial[1:]):
        assert start == pytest.approx(end)  # end to end
    by = {name: (start, end) for name, start, end in spans}
    tree_end = counts["process_age_at_start"] + sum(secs[s] for s in ("ingest", "segment", "embed", "tree") if s in secs)
    assert by["tree: tables"][1] == pytest.approx(tree_end)
    for stage in ("vectors", "sparse", "links"):
        assert by[f"stage {stage}"] == pytest.approx((tree_end, tree_end + secs[stage]))
    last = tree_end + max(secs[s] for s in ("vectors", "sparse", "links"))
    assert by["stage publish"] == pytest.approx((last, last + secs["publish"]))
    level1 = next(st for st in counts["tree"]["stats"] if st["level"] == 1)
    glob = next(s for s in spans if s[0] == "level 1 global fit")
    assert glob[2] - glob[1] == pytest.approx(level1["global_s"])
    assert names.index("stage embed (the leaves)") < names.index("level 1 global fit")


def test_the_report_gives_the_idle_core_seconds_and_its_plot(cold_path, tmp_path: Path) -> None:
    saved = copy.deepcopy(json.loads(SAVED.read_text(encoding="utf-8")))
    saved["sizes"] = saved["sizes"][:1]  # the 1x size alone: one plot
    size = saved["sizes"][0]
    if not size.get("timeline"):  # a results file from before the timeline: give it one
        n = int(size["rows"]["build"]["wall"] / 0.5) + 1
        size["timeline"] = {"bin_s": 0.5, "cores": {"CLI": [0.5] * n, "embedding worker": [1.0] * n, "helper process": [0.0] * n}}
        size["spans"] = cold_path.build_spans(size["runs"]["build"], ("ingest", "segment", "embed", "tree", "vectors", "sparse", "links", "publish"))
        size["idle"] = cold_path.idle_core_seconds(size["timeline"], saved["cores"], size["spans"])
    plots = cold_path.write_plots(saved, tmp_path / "report.md")
    assert plots == {"1": "report-timeline-1x.png"} and (tmp_path / "report-timeline-1x.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = cold_path.markdown({**saved, "plots": plots})
    assert f"**{size['idle']['all']:.1f} core-seconds idle**" in report
    assert "![CPU timeline of the cold 1x build](report-timeline-1x.png)" in report
