"""arborag.storage.lucene: the query subset, Lucene's boolean rules, error positions, escaping, and the
string Elasticsearch receives (``normalize_query``) — which must parse back to the same query.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arborag.errors import QueryError
from arborag.storage.lucene import (
    MAX_CLAUSES,
    MAX_DEPTH,
    Bool,
    MatchAll,
    Phrase,
    Term,
    escape_query,
    normalize_query,
    parse_query,
    plain_query,
    quote_phrase,
    to_lucene,
)

# ---- what the ES side receives: explicit +/- on every clause, escaped terms ---------------
NORMALISED = [
    ("apple", "apple"),
    ("apple banana", "apple banana"),
    ("+apple -banana", "+apple -banana"),
    # Lucene: AND makes both neighbours required; NOT/- prohibits. tantivy's own parser returns
    # nothing for `a AND NOT b` — our normalised form is unambiguous for both engines.
    ("apple AND NOT banana", "+apple -banana"),
    ("apple && !banana", "+apple -banana"),
    ("apple AND banana", "+apple +banana"),
    ("apple OR banana", "apple banana"),
    ("apple || banana", "apple banana"),
    ("a OR b AND c", "a +b +c"),  # Lucene's (surprising, but Elasticsearch's) left-to-right rule
    ("a AND b OR c", "+a +b c"),
    ("(a OR b) AND c", "+(a b) +c"),
    ("NOT banana", "-banana"),  # a purely negative query = everything but banana (both engines)
    ("a AND (NOT b)", "+a +(-b)"),
    ('"apple pie"', '"apple pie"'),
    ('"apple pie"~2', '"apple pie"~2'),
    ('"apple pie"^2', '"apple pie"^2'),
    ("apple^2.5 pie", "apple^2.5 pie"),
    ("(apple pie)^3", "(apple pie)^3"),
    ("level:1", "level:1"),
    ('level:"-1"', 'level:"-1"'),
    ("node_id:abc", 'node_id:"abc"'),  # keyword fields are quoted: exact, never a range
    ("doc_ids:(d1 OR d2)", '(doc_ids:"d1" doc_ids:"d2")'),
    ("text:apple", "apple"),  # text is the default field
    ("text:(apple pie)^2", "(apple pie)^2"),
    ("C++ state-of-the-art", r"C\+\+ state\-of\-the\-art"),
    (r"\AND \(x\)", r"\AND \(x\)"),  # escaped operator word stays a word
    ("and or not", "and or not"),  # lowercase operator words are plain terms (as in Lucene)
    ("<b> x>", "b x"),  # '<' '>' are removed: never indexed, and ES reads them as ranges
    ("*:* -apple", "*:* -apple"),
    ("", ""),
    ("   ", ""),
    ("text: apple", "apple"),  # whitespace after ':' is allowed (Lucene)
    ("- apple", "-apple"),
]


@pytest.mark.parametrize(("query", "expected"), NORMALISED)
def test_normalised_string_sent_to_elasticsearch(query: str, expected: str) -> None:
    assert normalize_query(query) == expected
    # and the normalised string means the same query
    assert parse_query(expected) == parse_query(query)


def test_ast_shapes() -> None:
    assert parse_query("a AND NOT b") == Bool((("must", Term("text", "a")), ("must_not", Term("text", "b"))))
    assert parse_query('level:2 "x y"~1^2 *:*') == Bool(
        (("should", Term("level", "2")), ("should", Phrase("text", "x y", 1, 2.0)), ("should", MatchAll()))
    )
    # a prohibited clause before AND stays prohibited (Lucene addClause)
    assert parse_query("-a AND b") == Bool((("must_not", Term("text", "a")), ("must", Term("text", "b"))))
    # +a OR b keeps a required (default operator OR)
    assert parse_query("+a OR b") == Bool((("must", Term("text", "a")), ("should", Term("text", "b"))))


def test_inner_field_overrides_group_field() -> None:
    assert parse_query("level:(1 OR node_id:x)") == Bool(
        (("should", Bool((("should", Term("level", "1")), ("should", Term("node_id", "x"))))),)
    )


# ---- errors: position (0-based) and reason ---------------------------------------------------
ERRORS = [
    ('"unterminated phrase', 0, "unterminated phrase"),
    ('apple "pie', 6, "unterminated phrase"),
    ("(apple pie", 0, "never closed"),
    ("x ((a) b", 2, "never closed"),
    ("apple pie)", 9, "no matching '('"),
    ("AND", 0, "needs a query on its left"),
    ("apple AND", 6, "needs a query on its right"),
    ("apple OR AND pie", 6, "needs a query on its right"),
    ("(AND apple)", 1, "needs a query on its left"),
    ("NOT", 0, "must be followed by a query"),
    ("apple -", 6, "must be followed by a query"),
    ("+-apple", 0, "must be followed by a query"),
    ("hello!", 5, "must be followed by a query"),
    ("color:red", 0, "unknown field 'color'"),
    ("apple text.en:x", 6, "unknown field 'text.en'"),
    (":apple", 0, "must follow a field name"),
    ("level:one", 6, "level takes an integer"),
    ("apple^", 5, "must be followed by a number"),
    ("apple^x", 5, "must be followed by a number"),
    ("apple^2^3", 7, "single boost"),
    ("apple^99999999", 5, "too large"),
    ("app*", 3, "wildcards"),
    ("?pple", 0, "wildcards"),
    ("apple~", 5, "fuzzy"),
    ('"a b"~x', 5, "slop"),
    ("level:[1 TO 2]", 6, "range"),
    ("/ap+le/", 0, "regular expressions"),
    ("apple\\", 5, "dangling"),
    ("()", 0, "empty parentheses"),
    ("(" * (MAX_DEPTH + 1) + "a" + ")" * (MAX_DEPTH + 1), MAX_DEPTH, "nested deeper"),
]


@pytest.mark.parametrize(("query", "position", "reason"), ERRORS)
def test_malformed_query_raises_with_position(query: str, position: int, reason: str) -> None:
    with pytest.raises(QueryError) as info:
        parse_query(query)
    err = info.value
    assert err.position == position, err
    assert reason in err.reason
    assert err.query == query
    assert f"position {position}" in str(err)


def test_too_many_terms() -> None:
    query = " ".join(f"t{i}" for i in range(MAX_CLAUSES + 1))
    with pytest.raises(QueryError) as info:
        parse_query(query)
    assert info.value.position == query.rindex("t")


def test_maximum_nesting_is_accepted() -> None:
    query = "(" * MAX_DEPTH + "a" + ")" * MAX_DEPTH
    assert normalize_query(query) == query


# ---- escaping helpers -------------------------------------------------------------------------
def test_escape_query_makes_everything_literal() -> None:
    raw = 'foo AND (bar) "baz" a:b c^2 d* e~ [f] /g/ \\ NOT OR && ||'
    escaped = escape_query(raw)
    ast = parse_query(escaped)
    assert all(occ == "should" and isinstance(node, Term) for occ, node in ast.clauses)
    assert [node.text for _, node in ast.clauses] == raw.split()


def test_plain_query_keeps_only_words() -> None:
    assert plain_query('foo AND (bar "baz') == "foo bar baz"
    assert plain_query("a:b -c +d NOT e") == "a b c d e"
    assert plain_query("who wrote Hamlet?") == "who wrote Hamlet"
    assert plain_query("") == ""


def test_quote_phrase() -> None:
    quoted = quote_phrase('say "hi" \\ there')
    assert parse_query(quoted + "^2") == Bool((("should", Phrase("text", 'say "hi" \\ there', 0, 2.0)),))


# ---- property-based: never anything but QueryError, and normalisation is faithful -------------
OPERATOR_HEAVY = st.text(
    alphabet=st.sampled_from(list('ab AND OR NOT && || ! + - ( ) " : ^ 2 ~ * ? \\ / [ ] { } < > level: text: node_id: 北京 é')),
    max_size=40,
).map(lambda s: s)
TOKENS = st.lists(
    st.sampled_from(
        ["apple", "pie", "AND", "OR", "NOT", "&&", "||", "!", "+", "-", "(", ")", '"', '"a b"', "^2", "^", "~2",
         "level:", "level:1", "text:", "node_id:", "foo:", ":", "*", "?", "\\", "\\(", "*:*", "北京大学", " "]
    ),
    max_size=25,
).map(" ".join)


def _check_roundtrip(query: str) -> None:
    try:
        ast = parse_query(query)
    except QueryError as err:
        assert err.position is not None and 0 <= err.position <= len(query)
        assert err.reason
        return
    rendered = to_lucene(ast)
    assert parse_query(rendered) == ast
    assert to_lucene(parse_query(rendered)) == rendered


@settings(max_examples=400, deadline=timedelta(milliseconds=500))
@given(st.one_of(st.text(max_size=60), OPERATOR_HEAVY, TOKENS))
def test_fuzz_parse_only_raises_query_error_and_roundtrips(query: str) -> None:
    _check_roundtrip(query)


@settings(max_examples=200, deadline=timedelta(milliseconds=500))
@given(st.text(max_size=80))
def test_fuzz_escaped_and_plain_always_parse(text: str) -> None:
    for safe in (escape_query(text), plain_query(text)):
        ast = parse_query(safe)
        assert all(occ == "should" for occ, _ in ast.clauses)
        assert parse_query(to_lucene(ast)) == ast
