"""`arborag update` carries labels with their summaries: an unchanged summary keeps its published
label, a rewritten one gets a new one (a real small build + incremental update)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from arborag.flows.build import run_build
from arborag.flows.update import run_update
from arborag.storage.tables import read_table, write_table
from tests.helpers.update import CONFIG, make_sources, nodes_of, published

pytestmark = pytest.mark.slow


def test_update_keeps_labels_of_unchanged_summaries_and_labels_rewritten_ones(tmp_path: Path, examples_dir: Path) -> None:
    src = make_sources(tmp_path, examples_dir)
    corpus = tmp_path / "c"
    assert run_build([src], corpus, CONFIG, use_prefect=False, progress=False)["status"] == "ok"
    before = {r["node_id"]: r for r in nodes_of(corpus) if r["level"] > 0}
    assert before and all(r["title"] and r["keywords"] for r in before.values())
    # mark the published labels (as if an LLM had titled them): an update must carry them, not recompute them
    path = published(corpus) / "nodes.parquet"
    nodes = read_table("nodes", path)
    is_summary = pc.greater(nodes.column("level"), 0)
    marked = pc.if_else(is_summary, pc.binary_join_element_wise(pa.scalar("published: "), nodes.column("title"), ""), nodes.column("title"))
    write_table("nodes", nodes.set_column(nodes.schema.get_field_index("title"), "title", marked), path)

    (src / "new.txt").write_text("A tinker from Brusselmoor mended the kettle of the palace kitchen with copper wire.\n", encoding="utf-8")
    out = run_update([src], corpus, CONFIG)
    assert out["mode"] == "incremental", out.get("reason")
    after = {r["node_id"]: r for r in nodes_of(corpus) if r["level"] > 0}
    kept = after.keys() & before.keys()
    rewritten = after.keys() - before.keys()
    assert kept and rewritten
    for i in kept:
        assert after[i]["title"] == "published: " + before[i]["title"] and after[i]["keywords"] == before[i]["keywords"]
    for i in rewritten:
        assert after[i]["keywords"] and not after[i]["title"].startswith("published: ") and after[i]["title_source"] == "ctfidf"
