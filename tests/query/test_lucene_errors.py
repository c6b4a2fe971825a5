"""Unbalanced parentheses and quotes of a Lucene query are named with their position, before any
other problem of the query (an unknown field, a wildcard), in the parser and in `arborag query`."""

from __future__ import annotations

import pytest
from helpers.query import publish_snapshot
from typer.testing import CliRunner

from arborag.cli import app
from arborag.config import SparseConfig
from arborag.errors import QueryError
from arborag.storage.corpus import Corpus
from arborag.storage.lucene import parse_query


@pytest.mark.parametrize(("query", "position", "says"), [
    ("title:(unclosed AND", 6, "this '(' is never closed"),  # an unknown field too: the parenthesis is named
    ("level:1 OR (a AND", 11, "this '(' is never closed"),
    ("what? (a b", 6, "this '(' is never closed"),  # a wildcard too
    ("((a) OR (b", 8, "nor 1 more before it"),
    ("a b) c", 3, "this ')' has no matching '('"),
    ("title:x) OR y", 7, "this ')' has no matching '('"),
    ('foo:"glass slipper', 4, "unbalanced quote"),
    ('what? "glass slipper', 6, "unbalanced quote"),
])
def test_unbalanced_parentheses_and_quotes_are_named_with_their_position(query: str, position: int, says: str) -> None:
    with pytest.raises(QueryError) as info:
        parse_query(query)
    assert info.value.position == position, info.value
    assert says in info.value.reason and "unbalanced" in info.value.reason


@pytest.mark.parametrize("query", [r"a \( b", r"a \) b", '"a ( b" c', r'"say \"(\"" x', "(a (b) c)"])
def test_escaped_quoted_and_balanced_parentheses_parse(query: str) -> None:
    parse_query(query)


def test_cli_names_the_unbalanced_parenthesis_and_points_at_it(tmp_path) -> None:
    corpus = Corpus(tmp_path / "c").ensure()
    publish_snapshot(corpus, "s1", sparse=SparseConfig())
    query = "text:(of AND"
    result = CliRunner().invoke(app, ["query", query, "--corpus", str(corpus.root), "--mode", "sparse", "--lucene", "--json"])
    assert result.exit_code == 0, result.output  # reported, then retried as plain words
    out = result.output
    assert "at position 5: unbalanced parenthesis: this '(' is never closed" in " ".join(out.split())
    lines = out.splitlines()
    at = lines.index("  " + query)
    assert lines[at + 1] == "  " + " " * 5 + "^"
    assert "retrying as a plain match of the words" in out
