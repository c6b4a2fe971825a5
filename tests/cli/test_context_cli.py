"""`arborag build SRC --corpus X --sections structural`, end to end through the CLI (no Prefect):
every chunk gets a header, the sections table has the sources' real titles, and the header text
never appears in `arborag query` output (the hits are the chunk text).

The corpus is the four small structured files of tests/helpers/context.py (Markdown, HTML, DOCX,
PDF with an outline): 11 leaves, so the tree has no summary level and the build stays quick.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.context import write_structured_corpus
from typer.testing import CliRunner

from arborag.cli import app
from arborag.storage.corpus import Corpus

runner = CliRunner()


def _run(*args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli")
    files = write_structured_corpus(root / "src")
    corpus = root / "corpus"
    _run("build", str(files["md"].parent), "--corpus", str(corpus), "--sections", "structural", "--no-prefect")
    return corpus


def test_every_chunk_has_a_header_and_sections_have_titles(built: Path) -> None:
    out = _run("sql", "select count(*) as n from chunks where header = ''", "--corpus", str(built), "--format", "json")
    assert json.loads(out) == [{"n": 0}]
    assert Corpus(built).read("chunks").num_rows == 11
    titles = json.loads(_run("sql", "select title from sections order by title", "--corpus", str(built), "--working", "--format", "json"))
    assert [r["title"] for r in titles] == sorted([
        "After midnight", "Before midnight", "Cleaning the slipper", "Food and wine", "Glass Slipper Handbook",
        "Music and dancing", "Pumpkin Coach Manual", "Royal Ball Accounts", "Stepsisters Report — Background",
        "Storing the slipper", "The ball",
    ])
    # the snapshot's provenance carries the headers too
    info = json.loads((Corpus(built).published_dir() / "info.json").read_text())
    assert info["embed"]["long_text"] == "mean"


@pytest.mark.parametrize("mode", ["collapsed", "sparse", "hybrid"])
def test_header_text_never_appears_in_query_output(built: Path, mode: str) -> None:
    headers = {c["header"] for c in Corpus(built).read("chunks").to_pylist()}
    # "midnight" is in the coach's section titles (so in headers) and in its text
    plain = _run("query", "what happens to the coach after midnight", "--corpus", str(built), "--mode", mode)
    hits = json.loads(_run("query", "what happens to the coach after midnight", "--corpus", str(built), "--mode", mode, "--json"))
    assert hits and any("pumpkin" in h["text"].lower() for h in hits)
    for text in [plain] + [h["text"] for h in hits]:
        assert "Document context:" not in text and "Section context:" not in text
        assert not any(h in text for h in headers)
    # a word in the headers of chunks whose text lacks it: the header is indexed with the chunk
    hits = json.loads(_run("query", "handbook", "--corpus", str(built), "--mode", "sparse", "--levels", "0", "--json"))
    assert sum("handbook" not in h["text"].lower() for h in hits) >= 1
    assert all("Document context:" not in h["text"] for h in hits)
