"""`arborag query --mode segments` shows a segment's document title and character offsets (table
and --json), over the tiny snapshot of tests/helpers/segments.py; the query embedder is the
fake one (``FakeQueryEmbedder``), put in place of the model by patching ``open_index``."""

from __future__ import annotations

import json

from typer.testing import CliRunner

import arborag.query as query_pkg
from arborag.cli import app
from tests.helpers.segments import D1_SPANS, D1_TEXT, FakeQueryEmbedder, publish_segments_snapshot

runner = CliRunner()


def test_segments_cli_prints_title_offsets_and_stitched_text(tmp_path, monkeypatch):
    corpus = publish_segments_snapshot(tmp_path / "c")
    real_open = query_pkg.open_index
    monkeypatch.setattr(query_pkg, "open_index", lambda root, **kw: real_open(root, config=kw.get("config"), embed_query=FakeQueryEmbedder()))
    res = runner.invoke(app, ["query", "alpha", "--corpus", str(corpus.root), "--mode", "segments", "--budget", "500", "--json"])
    assert res.exit_code == 0, res.output
    hits = json.loads(res.output)
    lo, hi = D1_SPANS[1][0], D1_SPANS[4][1]
    assert [(h["node_id"], h["title"], h["start_char"], h["end_char"]) for h in hits] == [("seg:d1:1-4", "First document", lo, hi)]
    assert hits[0]["text"] == D1_TEXT[lo:hi] and "Document context" not in res.output
    table = runner.invoke(app, ["query", "alpha", "--corpus", str(corpus.root), "--mode", "segments", "--budget", "500"])
    assert table.exit_code == 0, table.output
    flat = " ".join(table.output.split())
    assert "First document" in flat and f"chars {lo:,}–{hi:,}" in flat and "mode segments" in flat
