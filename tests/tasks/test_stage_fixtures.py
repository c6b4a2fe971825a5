"""Saved Parquet fixtures pin what the table-writing stages produce: ``ingest`` (documents),
``sections``, ``context`` (doc_context) and ``segment`` (chunks, two strategies) over a tiny corpus
(``examples/corpus/cinderella.txt`` and a Markdown file written here), run through the real
runners with no Prefect and no model. A change in any of them — ids, offsets, headers, titles —
fails here with the first differing rows.

When a change is intended, regenerate the fixtures and commit them with the change:

    ARBORAG_REGENERATE_FIXTURES=1 python -m pytest tests/tasks/test_stage_fixtures.py -q -p no:cacheprovider
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.tables import first_difference

from arborag.config import ArboragConfig
from arborag.storage.corpus import Corpus
from arborag.tasks.stage_context import StageContext
from arborag.tasks.stages.doc_context import run_doc_context
from arborag.tasks.stages.documents import run_documents
from arborag.tasks.stages.sections import run_sections
from arborag.tasks.stages.chunks import run_chunks

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "stages"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "corpus" / "cinderella.txt"
REGENERATE = os.environ.get("ARBORAG_REGENERATE_FIXTURES") == "1"
HOW = "if the change is intended: ARBORAG_REGENERATE_FIXTURES=1 python -m pytest tests/tasks/test_stage_fixtures.py -q -p no:cacheprovider, and commit tests/fixtures/stages/"

GUIDE = """# Harvest guide

The orchard keeps records of every picking.

## Apples

Apples are picked in September. Each tree gives about forty kilograms. Bruised apples become cider.

## Pears

Pears ripen off the tree. They are picked hard and kept cool for a week. A ripe pear yields to a thumb.
"""


def _run_stages(tmp_path: Path) -> dict[str, pa.Table]:
    """The four table stages over the tiny corpus; the tables with what depends on the machine taken out."""
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(EXAMPLE, src / "cinderella.txt")
    (src / "guide.md").write_text(GUIDE, encoding="utf-8")
    config = ArboragConfig().with_overrides(sections={"strategy": "structural"})  # headers follow sections
    ctx = StageContext(Corpus(tmp_path / "c").ensure(), config, "run-fixture")
    run_documents(ctx, sorted(str(p) for p in src.iterdir()))
    run_sections(ctx)
    run_doc_context(ctx)
    for strategy in ("sentence", "dds"):
        run_chunks(ctx, strategy)
    docs = pl.from_arrow(ctx.corpus.read("documents"))
    # the source path (a temporary folder) and the ingest time differ from run to run
    where = f"{src}/"
    docs = docs.with_columns(pl.col("uri", "metadata").str.replace_all(where, "SRC/", literal=True)).drop("ingested_at")
    return {
        "documents": docs.to_arrow(),
        "sections": ctx.corpus.read("sections"),
        "doc_context": ctx.corpus.read("doc_context"),
        "chunks": ctx.corpus.read("chunks"),
    }


@pytest.mark.parametrize("name", ["documents", "sections", "doc_context", "chunks"])
def test_table_stages_match_their_saved_fixtures(name: str, tmp_path: Path) -> None:
    fresh = _run_stages(tmp_path)[name]
    path = FIXTURES / f"{name}.parquet"
    if REGENERATE:
        FIXTURES.mkdir(parents=True, exist_ok=True)
        pq.write_table(fresh, path, compression="zstd")
        pytest.skip(f"regenerated {path}")
    assert path.exists(), f"no fixture {path}; {HOW}"
    saved = pl.from_arrow(pq.read_table(path))
    assert fresh.num_rows > 0, f"{name}: the stage wrote no rows over the tiny corpus"
    problem = first_difference(name, pl.from_arrow(fresh), saved)
    assert not problem, f"the {name} stage's output changed — {problem}; {HOW}"
