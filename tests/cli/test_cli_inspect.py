"""`arborag inspect snapshot | tree` over a small hand-made corpus (tests/helpers/query.py)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.query import publish_snapshot
from typer.testing import CliRunner

from arborag.cli import app
from arborag.cli.common import EXIT_ERROR, EXIT_OK
from arborag.storage.corpus import Corpus

runner = CliRunner()


def test_snapshot_prints_the_manifest_or_says_to_build(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "c").ensure()
    result = runner.invoke(app, ["inspect", "snapshot", "--corpus", str(corpus.root)])
    assert result.exit_code == EXIT_ERROR and "arborag build" in " ".join(result.output.split())
    publish_snapshot(corpus, "snap-i", info={"sparse_backend": "embedded"})
    result = runner.invoke(app, ["inspect", "snapshot", "--corpus", str(corpus.root)])
    assert result.exit_code == EXIT_OK, result.output
    manifest = json.loads(result.output)
    assert manifest["snapshot"] == "snap-i" and manifest["sparse_backend"] == "embedded"


def test_tree_writes_a_self_contained_page(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "c").ensure()
    publish_snapshot(corpus, "snap-t")
    out = tmp_path / "tree.html"
    result = runner.invoke(app, ["inspect", "tree", "--corpus", str(corpus.root), "--html", str(out)])
    assert result.exit_code == EXIT_OK, result.output
    page = out.read_text(encoding="utf-8")
    assert page.lstrip().lower().startswith("<!doctype html") and "text of s1" in page
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "tree.html"]  # no temporary left behind
