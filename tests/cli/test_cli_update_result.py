"""What `arborag update` prints of the tree update: the clusters touched per level and, when the
update opened clusters for new nodes no existing cluster admitted, those per level."""

from __future__ import annotations

import pytest

from arborag.cli.update import _print_result


def _result(opened: dict[str, int]) -> dict:
    return {"mode": "incremental", "reason": "38 of 81 leaves (47%) changed since the last full fit", "snapshot": "snap-1",
            "calls": {"summaries": 10, "embedded_texts": 48}, "seconds": 3.0,
            "tree-update": {"clusters_touched": {"1": 8, "2": 2}, "clusters_opened": opened}}


def test_update_prints_the_clusters_it_opened(capsys: pytest.CaptureFixture[str]) -> None:
    _print_result(_result({"1": 8, "2": 1}))
    out = capsys.readouterr().out
    assert "clusters touched per level: 1: 8, 2: 2" in out
    assert "clusters opened per level (for new nodes no existing cluster admitted): 1: 8, 2: 1" in out


def test_update_prints_no_opened_line_when_none_were_opened(capsys: pytest.CaptureFixture[str]) -> None:
    _print_result(_result({}))
    out = capsys.readouterr().out
    assert "clusters touched per level" in out and "opened" not in out
