"""The history views of `arborag sql`: nodes_all / edges_all / documents_all /
chunks_all over every retained snapshot, `--snapshot`, and the leases held while a query runs."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from helpers.query import NODES_SPEC, publish_snapshot

from arborag.config import RetentionConfig
from arborag.errors import SnapshotNotFound
from arborag.storage.corpus import Corpus
from arborag.storage.leases import live_leases
from arborag.storage.schemas import SCHEMAS
from arborag.storage.snapshots import collect_garbage
from arborag.storage.sql import run_sql
from arborag.storage.tables import write_table

REPO = Path(__file__).resolve().parents[2]

def _readme_query() -> str:
    """docs/OPERATIONS.md's example (a ```sql block over nodes_all): what one update did to the tree, per level."""
    text = (REPO / "docs" / "OPERATIONS.md").read_text(encoding="utf-8")
    block = next(b for b in text.split("```sql")[1:] if "nodes_all" in b.split("```")[0])
    return block.split("```")[0]


def _documents(ids: list[str]) -> pa.Table:
    rows = [{"doc_id": d, "uri": f"/src/{d}.txt", "title": d, "mime": "text/plain", "n_chars": 4, "text": "text",
             "metadata": None, "ingested_at": None, "status": "ok", "error": None} for d in ids]
    return pa.Table.from_pylist(rows, schema=SCHEMAS["documents"])


@pytest.fixture()
def corpus(tmp_path: Path) -> Path:
    """snap-one: the 9-node tree over d1, d2; snap-two: leaves a, b, c replaced by x and the
    level-1/2 nodes gone (a hand-made "update"); both carry their documents."""
    c = Corpus(tmp_path / "c").ensure()
    write_table("documents", _documents(["d1", "d2"]), c.table_path("documents"))
    p1 = publish_snapshot(c, "snap-one")
    write_table("documents", _documents(["d1", "d2"]), p1 / "documents.parquet")  # sealed before: add the copy by hand
    time.sleep(0.02)
    spec = [n for n in NODES_SPEC if n[1] == 0 and n[0] not in "abc"] + [("x", 0, NODES_SPEC[0][2], 40, ["d3"])]
    p2 = publish_snapshot(c, "snap-two", spec=spec, edges_spec=[])
    write_table("documents", _documents(["d2", "d3"]), p2 / "documents.parquet")
    write_table("documents", _documents(["d2", "d3"]), c.table_path("documents"))
    return c.root


def test_one_query_compares_two_snapshots(corpus: Path) -> None:
    cols, rows = run_sql(corpus, "SELECT snapshot, level, count(*) AS n FROM nodes_all GROUP BY ALL ORDER BY snapshot, level")
    assert cols == ["snapshot", "level", "n"]
    assert rows == [("snap-one", 0, 6), ("snap-one", 1, 2), ("snap-one", 2, 1), ("snap-two", 0, 4)]
    query = _readme_query()
    assert "'snap-OLD'" in query and "'snap-NEW'" in query
    cols, rows = run_sql(corpus, query.replace("snap-OLD", "snap-one").replace("snap-NEW", "snap-two"))
    assert cols == ["level", "removed", "added", "kept"]
    assert rows == [(0, 3, 1, 3), (1, 2, 0, 0), (2, 1, 0, 0)]
    _, rows = run_sql(corpus, "SELECT snapshot, list(doc_id ORDER BY doc_id) FROM documents_all GROUP BY ALL ORDER BY 1")
    assert rows == [("snap-one", ["d1", "d2"]), ("snap-two", ["d2", "d3"])]
    _, rows = run_sql(corpus, "SELECT DISTINCT snapshot, snapshot_published_at IS NOT NULL FROM edges_all")
    assert rows == [("snap-one", True)]  # snap-two has no edges rows: the view still carries snap-one's


def test_snapshot_option_reads_that_snapshot(corpus: Path) -> None:
    assert run_sql(corpus, "SELECT count(*) FROM nodes")[1] == [(4,)]
    assert run_sql(corpus, "SELECT count(*) FROM nodes", snapshot="snap-one")[1] == [(9,)]
    assert run_sql(corpus, "SELECT list(doc_id ORDER BY doc_id) FROM documents", snapshot="one")[1] == [(["d1", "d2"],)]
    with pytest.raises(SnapshotNotFound, match="retained: snap-two, snap-one"):
        run_sql(corpus, "SELECT 1", snapshot="snap-zzz")


def test_the_snapshots_a_query_reads_are_leased_while_it_runs(corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gc during a query keeps every snapshot the query's views read; after it, they can go."""
    import arborag.storage.sql as sql

    c = Corpus(corpus)
    seen: dict[str, list[str]] = {}
    gc_removed: list[str] = []
    original = sql._run

    def during(query, views):  # runs where the real query runs: leases are held now
        seen.update({k: [r["holder"] for r in v] for k, v in live_leases(c).items()})
        report = collect_garbage(c, RetentionConfig(keep_last=1, keep_days=None, grace_s=0, auto=False))
        gc_removed.extend(r["id"] for r in report.removed)
        return original(query, views)

    monkeypatch.setattr(sql, "_run", during)
    assert run_sql(corpus, "SELECT count(DISTINCT snapshot) FROM nodes_all")[1] == [(2,)]
    assert seen == {"snap-one": ["sql"], "snap-two": ["sql"]} and gc_removed == []
    assert not live_leases(c)
    monkeypatch.setattr(sql, "_run", original)
    report = collect_garbage(c, RetentionConfig(keep_last=1, keep_days=None, grace_s=0, auto=False))
    assert [r["id"] for r in report.removed] == ["snap-one"]
    assert run_sql(corpus, "SELECT DISTINCT snapshot FROM nodes_all")[1] == [("snap-two",)]


def test_history_views_stay_read_only(corpus: Path) -> None:
    from arborag.errors import QueryError

    for bad in ("CREATE VIEW x AS SELECT * FROM nodes_all", "COPY nodes_all TO 'x.parquet'", "DROP VIEW nodes_all"):
        with pytest.raises(QueryError, match="refused"):
            run_sql(corpus, bad)


def test_cli_sql_snapshot_and_history(corpus: Path) -> None:
    script = Path(sys.executable).parent / "arborag"
    out = subprocess.run([str(script), "sql", "SELECT snapshot, count(*) AS n FROM nodes_all GROUP BY ALL ORDER BY 1", "-c",
                          str(corpus), "--format", "json"], capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [{"snapshot": "snap-one", "n": 9}, {"snapshot": "snap-two", "n": 4}]
    out = subprocess.run([str(script), "sql", "SELECT count(*) AS n FROM nodes", "-c", str(corpus), "--snapshot", "snap-one",
                          "--format", "json"], capture_output=True, text=True, timeout=120, cwd=str(REPO))
    assert out.returncode == 0 and json.loads(out.stdout) == [{"n": 9}], out.stderr
    out = subprocess.run([str(script), "sql", "SELECT 1", "-c", str(corpus), "--snapshot", "nope"], capture_output=True, text=True,
                         timeout=120, cwd=str(REPO))
    assert out.returncode != 0 and "nope" in out.stderr and "arborag snapshots list" in out.stderr
