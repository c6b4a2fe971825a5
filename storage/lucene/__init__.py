"""The Lucene query subset arborag accepts, parsed once and rendered for each backend.

Both sparse backends answer the *same* query: the string is parsed here into a small typed AST
with Lucene's own rules (the classic query parser Elasticsearch's ``query_string`` uses), then

* the embedded engine (tantivy) compiles the AST into tantivy query objects
  (:mod:`arborag.storage.sparse.tantivy_backend`), so tantivy's own dialect (``a AND NOT b`` returns nothing, a bare
  ``NOT x`` errors, ...) never comes into play;
* Elasticsearch receives :func:`to_lucene` of the AST: an explicit, fully escaped string in which
  every clause carries its ``+``/``-`` prefix, so ``AND``/``OR``/``NOT`` precedence quirks cannot
  change its meaning on the way.

Accepted (docs/METHODS.md §6)::

    term  "a phrase"  "a phrase"~2  +must  -must_not  field:term  field:"phrase"  field:(a b)
    term^2  "phrase"^1.5  (group)^3  a AND b  a OR b  NOT a  a && b  a || b  !a  *:*  \\escapes

Fields: ``text`` (the default, analysed), ``node_id`` and ``doc_ids`` (exact keywords),
``level`` (an integer). Boolean semantics are Lucene's with the default operator OR:
``a AND b`` makes both required, ``NOT``/``-`` prohibit, unmarked clauses are optional (they
only add score when a required clause exists), and a group made only of prohibited clauses
matches everything except them (Elasticsearch's ``fixNegativeQueryIfNeeded``).

Rejected with :class:`~arborag.errors.QueryError` (0-based ``position`` and a ``reason``):
unbalanced quotes or parentheses, an operator without a query on each side, an unknown field,
``^`` without a number, and the Lucene features outside the subset — wildcards ``* ?``, fuzzy
``term~``, ranges ``[a TO b]``/``{a TO b}``, regular expressions ``/.../`` (escape those
characters with ``\\`` to search them literally). Callers fall back with :func:`plain_query`
or ``search(..., lucene=False)``.

Modules: :mod:`.nodes` (AST, fields, limits), :mod:`.lexer`, :mod:`.parser`, :mod:`.render`
(to_lucene and the escaping helpers).
"""

from __future__ import annotations

from arborag.storage.lucene.nodes import (
    DEFAULT_FIELD,
    FIELDS,
    INTEGER_FIELDS,
    KEYWORD_FIELDS,
    MAX_BOOST,
    MAX_CLAUSES,
    MAX_DEPTH,
    MAX_SLOP,
    Bool,
    MatchAll,
    Node,
    Occur,
    Phrase,
    Term,
)
from arborag.storage.lucene.parser import parse_query
from arborag.storage.lucene.render import escape_query, normalize_query, plain_query, quote_phrase, to_lucene

__all__ = [
    "Bool",
    "FIELDS",
    "DEFAULT_FIELD",
    "INTEGER_FIELDS",
    "KEYWORD_FIELDS",
    "MAX_BOOST",
    "MAX_CLAUSES",
    "MAX_DEPTH",
    "MAX_SLOP",
    "MatchAll",
    "Node",
    "Occur",
    "Phrase",
    "Term",
    "escape_query",
    "normalize_query",
    "parse_query",
    "plain_query",
    "quote_phrase",
    "to_lucene",
]
