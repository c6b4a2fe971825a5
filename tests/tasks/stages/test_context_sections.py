"""The sections stage between ingest and segment, chunks inside sections, and the chunk headers.

Real files of each format (tests/helpers/context.py: Markdown headings, HTML <h1>-<h6>, a DOCX
with Title/Heading styles made with python-docx, a PDF with an outline made with pypdf) go
through ingest -> sections -> context -> segment without Prefect; the tests read the tables.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.context import PDF_PAGES, write_structured_corpus

from arborag.config import ArboragConfig
from arborag.flows.ingest import run_ingest_and_segment
from arborag.storage.corpus import Corpus
from arborag.tasks.stages.chunks import build_chunks
from arborag.tasks.stages.doc_context import compose_header
from arborag.tasks.segment.sections import block_sections, metadata_of

STRUCTURAL = {"sections": {"strategy": "structural"}}


def _ingest(tmp_path: Path, config: ArboragConfig, name: str = "c") -> tuple[Corpus, dict[str, Path], dict]:
    files = write_structured_corpus(tmp_path / "src")
    out = run_ingest_and_segment(list(files.values()), tmp_path / name, config, use_prefect=False)
    return Corpus(tmp_path / name), files, out


def _by_file(corpus: Corpus) -> dict[str, dict]:
    return {Path(r["uri"]).name: r for r in corpus.read("documents").to_pylist()}


@pytest.fixture(scope="module")
def structural(tmp_path_factory: pytest.TempPathFactory) -> tuple[Corpus, dict[str, Path], dict]:
    return _ingest(tmp_path_factory.mktemp("structural"), ArboragConfig().with_overrides(**STRUCTURAL))


def test_structural_sections_of_each_format(structural) -> None:
    corpus, _, out = structural
    assert out["sections"]["sections"] == 11 and out["sections"]["documents"] == 4
    docs = _by_file(corpus)
    secs = corpus.read("sections").to_pylist()
    titles = {name: [s["title"] for s in sorted((s for s in secs if s["doc_id"] == d["doc_id"]), key=lambda s: s["ordinal"])]
              for name, d in docs.items()}
    assert titles == {
        "handbook.md": ["Glass Slipper Handbook", "Cleaning the slipper", "Storing the slipper"],
        "coach.html": ["Pumpkin Coach Manual", "Before midnight", "After midnight"],
        # the Title paragraph has no body of its own: it merges into the first Heading 1 section
        "sisters.docx": ["Stepsisters Report — Background", "The ball"],
        "ball.pdf": [page[0] for page in PDF_PAGES],  # one outline entry per page
    }
    # ingest recorded the headings the sectioner used (no source bytes needed later)
    assert [h[0] for h in metadata_of(docs["ball.pdf"]["metadata"])["headings"]] == [p[0] for p in PDF_PAGES]
    assert [h[1] for h in metadata_of(docs["sisters.docx"]["metadata"])["headings"]] == [0, 1, 1]
    # the sections of a document tile its text exactly
    for d in docs.values():
        mine = sorted((s for s in secs if s["doc_id"] == d["doc_id"]), key=lambda s: s["ordinal"])
        assert mine[0]["start_char"] == 0 and mine[-1]["end_char"] == len(d["text"])
        assert all(a["end_char"] == b["start_char"] for a, b in zip(mine, mine[1:]))
        assert all(s["strategy"] == "structural" for s in mine)


def test_chunks_stay_inside_their_section_and_carry_its_id(tmp_path: Path) -> None:
    # small windows so that several chunks fall in every section
    config = ArboragConfig().with_overrides(segment={"strategy": "ffs", "ffs_window": 12, "ffs_step": 6}, **STRUCTURAL)
    corpus, _, _ = _ingest(tmp_path, config)
    sections = {s["section_id"]: s for s in corpus.read("sections").to_pylist()}
    chunks = corpus.read("chunks").to_pylist()
    assert len(chunks) > len(sections)
    for c in chunks:
        s = sections[c["section_id"]]
        assert s["doc_id"] == c["doc_id"]
        assert s["start_char"] <= c["start_char"] < c["end_char"] <= s["end_char"]
    assert {c["section_id"] for c in chunks} == set(sections)  # every section holds a chunk here
    # without within_sections the windows run across borders (the first section is 5 tokens or so)
    across = ArboragConfig().with_overrides(segment={"strategy": "ffs", "ffs_window": 12, "ffs_step": 6,
                                                     "within_sections": False}, **STRUCTURAL)
    out = run_ingest_and_segment([], corpus.root, across, use_prefect=False)
    rows = corpus.read("chunks").to_pylist()
    assert out["segment"]["written"] and any(
        not (sections[c["section_id"]]["start_char"] <= c["start_char"] and c["end_char"] <= sections[c["section_id"]]["end_char"])
        for c in rows
    )


def test_chunk_ids_unchanged_when_sections_are_off(tmp_path: Path, structural) -> None:
    corpus, _, _ = structural
    docs = corpus.read("documents")
    cfg = ArboragConfig().segment
    plain = build_chunks(docs, cfg)
    # the corpus built with sections off gets exactly build_chunks' ids, no section ids, no headers
    off, _, out = _ingest(tmp_path, ArboragConfig())
    chunks = off.read("chunks")
    assert sorted(chunks.column("chunk_id").to_pylist()) == sorted(plain.column("chunk_id").to_pylist())
    assert chunks.column("section_id").null_count == chunks.num_rows
    assert set(chunks.column("header").to_pylist()) == {""}
    assert "sections" not in out and not off.table_path("sections").exists()  # the stage did not run
    # sections on: ids change (the sections enter the params hash); within_sections off: same ids as plain
    inside = build_chunks(docs, cfg, sections=corpus.read("sections"))
    assert set(inside.column("chunk_id").to_pylist()).isdisjoint(plain.column("chunk_id").to_pylist())
    flat = build_chunks(docs, cfg.model_copy(update={"within_sections": False}), sections=corpus.read("sections"))
    assert flat.column("chunk_id").to_pylist() == plain.column("chunk_id").to_pylist()
    assert flat.column("section_id").null_count == 0


def test_headers_follow_the_exact_template(structural) -> None:
    corpus, _, _ = structural
    context = {r["doc_id"]: r for r in corpus.read("doc_context").to_pylist()}
    sections = {s["section_id"]: s for s in corpus.read("sections").to_pylist()}
    chunks = corpus.read("chunks").to_pylist()
    assert chunks and all(c["header"] for c in chunks)
    for c in chunks:
        d, s = context[c["doc_id"]], sections[c["section_id"]]
        assert c["header"] == compose_header(d["title"], d["summary"], s["title"], s["summary"])
        assert c["header"] not in c["text"]  # the chunk text is the document's text, nothing added
    titles = {Path(r["uri"]).name: context[r["doc_id"]]["title"] for r in corpus.read("documents").to_pylist()}
    # metadata title (HTML <title>, Markdown via its heading), else the source's top heading
    assert titles == {"handbook.md": "Glass Slipper Handbook", "coach.html": "Pumpkin Coach Manual",
                      "sisters.docx": "Stepsisters Report", "ball.pdf": "Royal Ball Accounts"}
    one = next(c for c in chunks if titles["coach.html"] in c["header"] and "After midnight" in c["header"])
    assert one["header"].startswith("Document context: the following excerpt is from a document titled 'Pumpkin Coach Manual'. "
                                    "This document is about: This manual covers the care of enchanted pumpkin coaches.")
    assert one["header"].endswith("\n\nSection context: this excerpt is from the section titled 'After midnight'.")


def test_section_summaries_and_switching_sections_off(tmp_path: Path) -> None:
    config = ArboragConfig().with_overrides(sections={"strategy": "structural", "summaries": True})
    corpus, _, _ = _ingest(tmp_path, config)
    secs = corpus.read("sections").to_pylist()
    assert all(s["summary"].startswith("This section is about: ") for s in secs)
    cleaning = next(s for s in secs if s["title"] == "Cleaning the slipper")
    assert cleaning["summary"] == ("This section is about: Rinse the slipper in warm water. Dry it with a soft cloth so "
                                   "that no spots remain. Never use a brush: glass scratches easily.")
    assert any(cleaning["summary"] in c["header"] for c in corpus.read("chunks").to_pylist())
    # back to none: the stages empty their tables, chunks lose sections and headers
    out = run_ingest_and_segment([], corpus.root, ArboragConfig(), use_prefect=False)
    assert out["sections"]["sections"] == 0 and corpus.read("sections").num_rows == 0
    assert corpus.read("doc_context").num_rows == 0
    chunks = corpus.read("chunks")
    assert chunks.column("section_id").null_count == chunks.num_rows and set(chunks.column("header").to_pylist()) == {""}


def test_a_second_run_is_a_no_op_and_headers_off_keep_the_ids(tmp_path: Path) -> None:
    config = ArboragConfig().with_overrides(**STRUCTURAL)
    corpus, _, _ = _ingest(tmp_path, config)
    before = {p: p.stat().st_mtime_ns for p in corpus.tables_dir.glob("*.parquet") if p.stem != "runs"}
    out = run_ingest_and_segment([], corpus.root, config, use_prefect=False)
    assert not out["sections"]["written"] and not out["context"]["written"] and not out["segment"]["written"]
    assert {p: p.stat().st_mtime_ns for p in before} == before
    # headers switched off explicitly: same chunk ids (inside the same sections), empty headers
    ids = sorted(corpus.read("chunks").column("chunk_id").to_pylist())
    out = run_ingest_and_segment([], corpus.root, config.with_overrides(context={"headers": False}), use_prefect=False)
    chunks = corpus.read("chunks")
    assert out["segment"]["written"] and sorted(chunks.column("chunk_id").to_pylist()) == ids
    assert set(chunks.column("header").to_pylist()) == {""} and chunks.column("section_id").null_count == 0


def test_block_titles_skip_running_headers_and_page_numbers() -> None:
    page = "Table of Contents\n{n}\n{head}\nThe figures of page {n} are below.\n\n"
    text = "".join(page.format(n=n, head=h) for n, h in ((1, "Revenue by segment"), (2, "Liquidity and Capital Resources"),
                                                       (3, "SIGNATURES")))
    secs = block_sections(text, target_chars=60)  # one page per section
    # "Table of Contents" repeats on every page: never a title; "2"/"3" are page numbers
    assert [s.title for s in secs] == ["Revenue by segment", "Liquidity and Capital Resources", "SIGNATURES"]
    assert "".join(text[s.start_char : s.end_char] for s in secs) == text


def test_headers_without_sections_have_only_the_document_part(tmp_path: Path, structural) -> None:
    plain = build_chunks(structural[0].read("documents"), ArboragConfig().segment)
    corpus, _, out = _ingest(tmp_path, ArboragConfig().with_overrides(context={"headers": True}))
    assert "sections" not in out and out["context"]["documents"] == 4
    chunks = corpus.read("chunks").to_pylist()
    assert sorted(c["chunk_id"] for c in chunks) == sorted(plain.column("chunk_id").to_pylist())  # ids as without headers
    context = {r["doc_id"]: r for r in corpus.read("doc_context").to_pylist()}
    for c in chunks:
        d = context[c["doc_id"]]
        assert c["section_id"] is None and c["header"] == compose_header(d["title"], d["summary"])
        assert "Section context" not in c["header"] and c["header"].startswith("Document context: ")
