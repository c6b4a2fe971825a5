"""Incremental segmentation: the segment stage re-segments only documents that are new
or whose key changed, and the chunks table it writes is byte for byte the one a segmentation of
every document from scratch writes — after adds, changes and deletes, with sections and headers
on, and after a change of the strategy's parameters (which re-segments everything)."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest

from helpers.texts import WRAPPED

from arborag.config import ArboragConfig
from arborag.storage.corpus import Corpus
from arborag.tasks.segment import reuse
from arborag.tasks.stage_context import StageContext
from arborag.tasks.stages.doc_context import run_doc_context
from arborag.tasks.stages.plan import run_update_documents
from arborag.tasks.stages.sections import run_sections
from arborag.tasks.stages.chunks import run_chunks

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "corpus" / "cinderella.txt"

GUIDE = """# Harvest guide

The orchard keeps records of every picking.

## Apples

Apples are picked in September. Each tree gives about forty kilograms. Bruised apples become cider.

## Pears

Pears ripen off the tree. They are picked hard and kept cool for a week. A ripe pear yields to a thumb.
"""


SECTIONS_ON = {"sections": {"strategy": "structural"}}  # headers follow sections


def _sources(root: Path) -> Path:
    src = root / "src"
    src.mkdir()
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    for i in range(4):
        (src / f"part{i}.txt").write_text("\n".join(lines[i * 20 : (i + 1) * 20]) + "\n", encoding="utf-8")
    (src / "guide.md").write_text(GUIDE, encoding="utf-8")
    (src / "wrapped.txt").write_text(WRAPPED, encoding="utf-8")
    (src / "empty.txt").write_text("   \n", encoding="utf-8")
    return src


def _files(src: Path) -> list[str]:
    return sorted(str(p) for p in src.iterdir())


def _update(ctx: StageContext, src: Path) -> dict:
    """What ``arborag update`` runs before the tree: plan (prune), sections, context, segment."""
    run_update_documents(ctx, _files(src), prune=True)
    if ctx.config.sections.strategy != "none":
        run_sections(ctx)
    run_doc_context(ctx)
    return run_chunks(ctx, ctx.config.segment.strategy)


def _from_scratch(ctx: StageContext, where: Path, *strategies: str) -> bytes:
    """The chunks file that segmenting every document of ``ctx``'s tables from scratch writes."""
    fresh = StageContext(Corpus(where).ensure(), ctx.config, "run-fresh")
    for name in ("documents", "sections", "doc_context"):
        fresh.corpus.write(name, ctx.corpus.read(name))
    for strategy in strategies or (ctx.config.segment.strategy,):
        out = run_chunks(fresh, strategy)
        assert out["reused"] == 0  # nothing to reuse in a new corpus
    return fresh.corpus.table_path("chunks").read_bytes()


def _chunks_bytes(ctx: StageContext) -> bytes:
    return ctx.corpus.table_path("chunks").read_bytes()


@pytest.mark.parametrize(
    "overrides", [{}, SECTIONS_ON, {**SECTIONS_ON, "segment": {"within_sections": False}}],
    ids=["plain", "sections+headers", "sections-not-within"],
)
def test_incremental_chunks_equal_a_full_segmentation(overrides: dict, tmp_path: Path) -> None:
    src = _sources(tmp_path)
    config = ArboragConfig().with_overrides(**overrides)
    ctx = StageContext(Corpus(tmp_path / "c").ensure(), config, "run-1")
    first = _update(ctx, src)
    n_docs = first["documents"]
    assert first["reused"] == 0 and first["segmented"] == n_docs == 6  # the blank file is no ok document
    assert _chunks_bytes(ctx) == _from_scratch(ctx, tmp_path / "fresh-1")

    # nothing changed: every document reused, the file untouched
    again = _update(ctx, src)
    assert again["reused"] == n_docs and again["segmented"] == 0 and not again["written"]

    # one added, one changed, one deleted
    (src / "zebra.txt").write_text("The zebra queen arrived at midnight. Her owls sang of a lighthouse.\n", encoding="utf-8")
    (src / "part1.txt").write_text((src / "part1.txt").read_text(encoding="utf-8") + "A new sentence ends the part.\n", encoding="utf-8")
    (src / "part2.txt").unlink()
    out = _update(ctx, src)
    assert out["segmented"] == 2 and out["reused"] == n_docs - 2 and out["documents"] == n_docs
    chunks = pl.from_arrow(ctx.corpus.read("chunks"))
    assert isinstance(chunks, pl.DataFrame)
    assert chunks.filter(pl.col("text").str.contains("zebra queen")).height == 1
    assert _chunks_bytes(ctx) == _from_scratch(ctx, tmp_path / "fresh-2")
    if overrides:  # headers were composed for the kept rows too
        assert (chunks["header"] != "").all()

    # a parameter of the strategy changes every chunk: nothing may be reused
    ctx2 = StageContext(ctx.corpus, config.with_overrides(segment={"sentence_max_tokens": 40}), "run-3")
    out = _update(ctx2, src)
    assert out["reused"] == 0 and out["segmented"] == n_docs
    assert _chunks_bytes(ctx2) == _from_scratch(ctx2, tmp_path / "fresh-3")
    assert _chunks_bytes(ctx2) != _chunks_bytes(StageContext(Corpus(tmp_path / "fresh-2"), config, "x"))


def test_turning_headers_off_clears_the_headers_of_kept_rows(tmp_path: Path) -> None:
    src = _sources(tmp_path)
    on = ArboragConfig().with_overrides(context={"headers": True})
    ctx = StageContext(Corpus(tmp_path / "c").ensure(), on, "run-1")
    _update(ctx, src)
    assert any(ctx.corpus.read("chunks").column("header").to_pylist())
    off = StageContext(ctx.corpus, ArboragConfig().with_overrides(context={"headers": False}), "run-2")
    out = _update(off, src)
    assert out["reused"] == out["documents"]  # headers are not part of the key: re-composed over all rows
    assert set(off.corpus.read("chunks").column("header").to_pylist()) == {""}
    assert _chunks_bytes(off) == _from_scratch(off, tmp_path / "fresh")


def test_other_strategies_rows_stay_and_each_strategy_keeps_its_own_keys(tmp_path: Path) -> None:
    src = _sources(tmp_path)
    ctx = StageContext(Corpus(tmp_path / "c").ensure(), ArboragConfig(), "run-1")
    run_update_documents(ctx, _files(src), prune=True)
    run_chunks(ctx, "sentence")
    run_chunks(ctx, "dds")
    assert reuse.keys_path(ctx.corpus.cache_dir, "dds").exists()
    (src / "part3.txt").write_text("Only one sentence is left here.\n", encoding="utf-8")
    run_update_documents(ctx, _files(src), prune=True)
    # dds rewrote the chunks file after sentence's keys were written: sentence's keys are stale
    assert run_chunks(ctx, "sentence")["reused"] == 0
    out = run_chunks(ctx, "dds")
    assert out["reused"] == 0  # sentence's run just rewrote the file dds's keys describe
    again = run_chunks(ctx, "dds")
    assert again["reused"] == again["documents"] and not again["written"]
    assert _chunks_bytes(ctx) == _from_scratch(ctx, tmp_path / "fresh", "sentence", "dds")


def test_a_chunks_table_written_by_something_else_is_never_reused(tmp_path: Path) -> None:
    src = _sources(tmp_path)
    ctx = StageContext(Corpus(tmp_path / "c").ensure(), ArboragConfig(), "run-1")
    _update(ctx, src)
    chunks = ctx.corpus.read("chunks")
    # a hand edit of one chunk's text: the keys no longer describe this file
    texts = chunks.column("text").to_pylist()
    texts[0] = "edited by hand"
    ctx.corpus.write("chunks", chunks.set_column(chunks.schema.get_field_index("text"), chunks.schema.field("text"), pa.array(texts, pa.large_string())))
    out = run_chunks(ctx, "sentence")
    assert out["reused"] == 0 and out["written"]
    assert _chunks_bytes(ctx) == _from_scratch(ctx, tmp_path / "fresh")
    # a torn keys file: segment everything, then write it anew
    reuse.keys_path(ctx.corpus.cache_dir, "sentence").write_bytes(b"not parquet")
    assert run_chunks(ctx, "sentence")["reused"] == 0
    assert run_chunks(ctx, "sentence")["reused"] == out["documents"]


def test_a_document_key_covers_its_mime_and_its_sections() -> None:
    docs = pl.DataFrame({"doc_id": ["a", "b", "c"], "mime": ["text/plain", "text/plain", "text/markdown"]})
    sections = pa.table({
        "doc_id": ["c", "c", "b"], "section_id": ["s2", "s1", "t1"], "start_char": [10, 0, 0], "end_char": [20, 10, 5],
        "strategy": ["structural"] * 3,
    })
    keys = reuse.doc_keys(docs, sections)
    assert keys["sections"].to_list() == [None, "t1:0:5", "s1:0:10;s2:10:20"]
    assert sorted(reuse.reusable(keys, keys).to_list()) == ["a", "b", "c"]
    assert reuse.reusable(keys, None).to_list() == []
    moved = reuse.doc_keys(docs, sections.set_column(3, "end_char", pa.array([21, 10, 5])))
    assert sorted(reuse.reusable(moved, keys).to_list()) == ["a", "b"]
    csv = reuse.doc_keys(docs.with_columns(pl.when(pl.col("doc_id") == "a").then(pl.lit("text/csv")).otherwise("mime").alias("mime")), sections)
    assert sorted(reuse.reusable(csv, keys).to_list()) == ["b", "c"]
    no_sections = reuse.doc_keys(docs, None)
    assert reuse.reusable(no_sections, keys).to_list() == ["a"]


def test_the_keys_file_round_trips_only_for_its_setup_and_chunks(tmp_path: Path) -> None:
    docs = pl.DataFrame({"doc_id": ["a", "b"], "mime": ["text/plain", None]})
    keys = reuse.doc_keys(docs, None)
    path = reuse.keys_path(tmp_path, "sentence")
    reuse.write_keys(path, keys, setup="s1", chunks="c1")
    back = reuse.read_keys(path, setup="s1", chunks="c1")
    assert back is not None and back.equals(keys)
    assert sorted(reuse.reusable(keys, back).to_list()) == ["a", "b"]  # a null mime matches a null mime
    assert reuse.read_keys(path, setup="s2", chunks="c1") is None
    assert reuse.read_keys(path, setup="s1", chunks="c2") is None
    shutil.rmtree(path.parent)
    assert reuse.read_keys(path, setup="s1", chunks="c1") is None
