"""The tree views (query/treeview.py, `arborag inspect tree | topics`) over hand-made snapshots:
one labelled, one written before labels existed (still opens, shows text instead)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.query import publish_labelled, publish_snapshot
from typer.testing import CliRunner

from arborag.cli import app
from arborag.cli.common import EXIT_OK
from arborag.query.treeview import render_tree_html, topics, tree_outline
from arborag.storage.corpus import Corpus

runner = CliRunner()


def test_outline_shows_titles_sizes_and_keywords_depth_limited(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "c").ensure()
    publish_labelled(corpus, "snap-l")
    lines = tree_outline(corpus.root, depth=2)
    # a lone class at its level: c-TF-IDF ranks by coverage (apple: 3 leaves; harbour, ship: 2)
    assert lines[0].startswith("L2  Apple · Harbour · Ship")
    assert "(6 leaves, 2 children, 2 docs)" in lines[0]
    assert any(line.startswith("├─ L1  Apple") and "(3 leaves, 3 children, 1 docs)" in line and "[apple" in line for line in lines)
    assert len(lines) == 3 and not any("leaf " in line for line in lines)
    assert len(tree_outline(corpus.root, depth=3)) == 9  # the leaves too
    assert tree_outline(corpus.root, depth=2, max_children=1)[-1].endswith("… 1 more")


def test_topics_rows_and_cli_json(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "c").ensure()
    publish_labelled(corpus, "snap-l")
    rows = topics(corpus.root, levels=2)
    assert [r["level"] for r in rows] == [2, 1, 1]
    assert rows[0]["leaves"] == 6 and rows[0]["share"] == 1.0 and rows[0]["n_docs"] == 2
    fruit = next(r for r in rows if r["level"] == 1 and r["title"].startswith("Apple"))
    assert fruit["documents"] == [{"doc_id": "d1", "title": "d1", "leaves": 3}] and fruit["keywords"][0] == "apple"
    res = runner.invoke(app, ["inspect", "topics", "--corpus", str(corpus.root), "--levels", "1", "--json"])
    assert res.exit_code == EXIT_OK, res.output
    assert [r["node_id"] for r in json.loads(res.output)] == ["r"]
    res = runner.invoke(app, ["inspect", "topics", "--corpus", str(corpus.root)])
    assert res.exit_code == EXIT_OK and "Apple" in res.output and "share" in res.output


def test_html_page_shows_labels(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "c").ensure()
    publish_labelled(corpus, "snap-l")
    page = render_tree_html(corpus.root, tmp_path / "t.html").read_text(encoding="utf-8")
    assert '<span class="title">Apple · ' in page and "<b>apple</b>" in page and "3 leaves" in page


def test_a_snapshot_without_labels_still_opens_everywhere(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "c").ensure()
    publish_snapshot(corpus, "snap-old")  # nodes written with no labels (null)
    lines = tree_outline(corpus.root, depth=2)
    assert lines[0].startswith("L2  text of r  (6 leaves") and "[" not in lines[0]
    assert topics(corpus.root, levels=1)[0]["title"] == "text of r"
    assert "text of s1" in render_tree_html(corpus.root, tmp_path / "t.html").read_text(encoding="utf-8")
    res = runner.invoke(app, ["inspect", "tree", "--corpus", str(corpus.root)])
    assert res.exit_code == EXIT_OK and "text of s2" in res.output
    res = runner.invoke(app, ["sql", "select count(*) as n from nodes where title is null", "--corpus", str(corpus.root)])
    assert res.exit_code == EXIT_OK and "9" in res.output


def test_nodes_all_over_a_pre_label_and_a_labelled_snapshot(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "c").ensure()
    publish_snapshot(corpus, "snap-old")
    publish_labelled(corpus, "snap-new")
    sql = ("select snapshot, count(title) as titled, count(*) filter (where level > 0) as summaries "
           "from nodes_all group by snapshot order by snapshot")
    res = runner.invoke(app, ["sql", sql, "--corpus", str(corpus.root), "--format", "json"])
    assert res.exit_code == EXIT_OK, res.output
    rows = {r["snapshot"]: (r["titled"], r["summaries"]) for r in json.loads(res.output)}
    assert rows == {"snap-new": (3, 3), "snap-old": (0, 3)}
