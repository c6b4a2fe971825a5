"""AutoContext headers (docs/METHODS.md §4): the exact template, titles, summaries (LLM through
``ScriptedFakeLLM``, a fake completion function, and the offline lead-sentence fallback) and the
polars-composed header column."""

from __future__ import annotations

import pyarrow as pa
import pytest

from arborag.errors import LLMError
from arborag.tasks.stages.doc_context import (
    HeaderStats,
    chunk_headers,
    compose_header,
    document_summary,
    document_title,
    lead_summary,
    section_summary,
)
from helpers.llm import ScriptedFakeLLM


def _words(text: str, n: int) -> str:  # a stand-in tokenizer: the first n words
    return " ".join(text.split(" ")[:n])


def test_the_header_template_is_pinned() -> None:
    full = compose_header("Acme 10-K 2023", "This document is about: Acme's annual report.", "Risk Factors",
                          "This section is about: supply risks.")
    assert full == (
        "Document context: the following excerpt is from a document titled 'Acme 10-K 2023'. "
        "This document is about: Acme's annual report.\n"
        "\n"
        "Section context: this excerpt is from the section titled 'Risk Factors'. "
        "This section is about: supply risks."
    )
    # empty summaries leave no trailing space; an empty section title drops the section part
    assert compose_header("T", "", "S", "") == (
        "Document context: the following excerpt is from a document titled 'T'.\n\n"
        "Section context: this excerpt is from the section titled 'S'."
    )
    assert compose_header("T", "This document is about: x.") == (
        "Document context: the following excerpt is from a document titled 'T'. This document is about: x."
    )
    assert compose_header("", "", "S") == "Section context: this excerpt is from the section titled 'S'."
    assert compose_header("") == ""


def test_title_from_metadata_heading_llm_or_fallback() -> None:
    md = "Intro line.\n\n# Real Heading\n\nBody."
    assert document_title(md, metadata_title="Board Minutes", uri="file:///x/report.md", truncate=_words) == ("Board Minutes", "metadata")
    # a metadata title that is only the file stem (ingest's fallback) does not count
    assert document_title(md, metadata_title="report", uri="file:///x/report.md", truncate=_words) == ("Real Heading", "heading")
    # the heading must be within the first max_tokens
    fake = ScriptedFakeLLM('Title: "Quarterly Results of Acme"\nExtra words')
    stats = HeaderStats()
    got = document_title(md, metadata_title="report", uri="file:///x/report.md", complete=fake, max_tokens=2,
                         truncate=_words, stats=stats)
    assert got == ("Quarterly Results of Acme", "llm")
    assert "Intro line." in fake.prompts[0] and "Body" not in fake.prompts[0] and stats.llm_calls == 1
    failing = ScriptedFakeLLM(LLMError("fake", "HTTP 503"))
    got = document_title("plain text", metadata_title="report", uri="file:///x/report.md", complete=failing,
                         truncate=_words, stats=stats)
    assert got == ("report", "fallback") and stats.llm_failures == 1


def test_lead_summary_skips_title_lines_and_stops_at_max_chars() -> None:
    text = "Acme Annual Report\n# Overview\nAcme makes anvils. It sold 3 million in 2023! Growth was 12%. More text follows here."
    assert lead_summary(text, title="Acme Annual Report", max_chars=50) == "Acme makes anvils. It sold 3 million in 2023!"
    assert lead_summary("One sentence without end", max_chars=100) == "One sentence without end"
    assert lead_summary("", max_chars=100) == ""


def test_document_and_section_summaries_llm_then_offline() -> None:
    text = "Acme makes anvils. It sold many."
    fake = ScriptedFakeLLM("this document is about: anvils made by Acme.", "Anvil sales in 2023.")
    stats = HeaderStats()
    assert document_summary(text, title="Acme", complete=fake, truncate=_words, stats=stats) == (
        "This document is about: anvils made by Acme."
    )
    assert section_summary(text, doc_title="Acme", section_title="Sales", complete=fake, truncate=_words, stats=stats) == (
        "This section is about: Anvil sales in 2023."
    )
    assert "Document title: Acme" in fake.prompts[0] and "Section title: Sales" in fake.prompts[1]
    # offline and after a failed call: the lead sentences with the same prefix
    assert document_summary(text, truncate=_words) == "This document is about: Acme makes anvils. It sold many."
    failing = ScriptedFakeLLM(LLMError("fake", "timeout"))
    assert section_summary(text, complete=failing, truncate=_words, stats=stats) == (
        "This section is about: Acme makes anvils. It sold many."
    )
    assert stats.llm_calls == 3 and stats.llm_failures == 1
    assert document_summary("", truncate=_words) == ""


def test_chunk_headers_column_matches_compose_header_row_by_row() -> None:
    chunks = pa.table({
        "doc_id": ["d2", "d1", "d1", "d3"],
        "section_id": ["s3", "s1", None, "s9"],
    })
    documents = pa.table({
        "doc_id": ["d1", "d2", "d3"],
        "title": ["Doc One", "Doc Two", ""],
        "summary": ["This document is about: one.", None, ""],
    })
    sections = pa.table({
        "section_id": ["s1", "s3", "s9"],
        "title": ["Intro", "Results", "Lonely"],
        "summary": ["This section is about: start.", "", None],
    })
    got = chunk_headers(chunks, documents, sections).to_pylist()
    assert got == [
        compose_header("Doc Two", "", "Results", ""),
        compose_header("Doc One", "This document is about: one.", "Intro", "This section is about: start."),
        compose_header("Doc One", "This document is about: one."),
        compose_header("", "", "Lonely", ""),
    ]
    assert got[0] == (
        "Document context: the following excerpt is from a document titled 'Doc Two'.\n\n"
        "Section context: this excerpt is from the section titled 'Results'."
    )
    no_sections = chunk_headers(chunks, documents).to_pylist()
    assert no_sections[1] == compose_header("Doc One", "This document is about: one.")
    assert chunk_headers(chunks, documents).type == pa.string()


@pytest.mark.parametrize("title", ["O'Brien & Co", "{braces} stay"])
def test_titles_are_inserted_verbatim(title: str) -> None:
    h = compose_header(title)
    assert f"titled '{title}'." in h
    table = chunk_headers(pa.table({"doc_id": ["d"], "section_id": [None]}, schema=pa.schema([("doc_id", pa.string()), ("section_id", pa.string())])),
                          pa.table({"doc_id": ["d"], "title": [title], "summary": [""]}))
    assert table.to_pylist() == [h]
