"""Rendering a parsed query as the explicit string Elasticsearch's ``query_string`` receives,
and the escaping helpers for callers (literal words, the plain fallback, a quoted phrase).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Final

from arborag.storage.lucene.lexer import OPERATORS
from arborag.storage.lucene.nodes import DEFAULT_FIELD, INTEGER_FIELDS, KEYWORD_FIELDS, MatchAll, Node, Phrase, Term
from arborag.storage.lucene.parser import parse_query

__all__ = ["escape_query", "normalize_query", "plain_query", "quote_phrase", "to_lucene"]

_SPECIAL: Final = frozenset('\\+-!():^[]"{}~*?|&/=<>')


def _escape_term(text: str) -> str:
    out = "".join("\\" + c if c in _SPECIAL or c.isspace() else c for c in text)
    return "\\" + out if out in ("AND", "OR", "NOT") else out


def _escape_phrase(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _num(value: float) -> str:
    """A number in Lucene's NUMBER syntax (digits, optional fraction; no exponent)."""
    text = format(Decimal(repr(float(value))), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _boost(node: Node) -> str:
    return "" if node.boost == 1.0 else f"^{_num(node.boost)}"


def to_lucene(node: Node, *, default_field: str = DEFAULT_FIELD) -> str:
    """Render ``node`` as an explicit Lucene ``query_string`` (default field ``default_field``,
    default operator OR). Parsing the result gives ``node`` back.
    """
    return _render(node, default_field, top=True)


def _render(node: Node, default_field: str, *, top: bool = False) -> str:
    if isinstance(node, Term):
        if node.field in INTEGER_FIELDS:
            value = node.text if not node.text.startswith("-") else f'"{node.text}"'
            body = f"{node.field}:{value}"
        elif node.field in KEYWORD_FIELDS:
            body = f'{node.field}:"{_escape_phrase(node.text)}"'  # quoted: exact, never a range
        else:
            prefix = "" if node.field == default_field else f"{node.field}:"
            body = prefix + _escape_term(node.text)
        return body + _boost(node)
    if isinstance(node, Phrase):
        prefix = "" if node.field == default_field else f"{node.field}:"
        slop = f"~{node.slop}" if node.slop else ""
        return f'{prefix}"{_escape_phrase(node.text)}"{slop}{_boost(node)}'
    if isinstance(node, MatchAll):
        return "*:*" + _boost(node)
    marks = {"must": "+", "must_not": "-", "should": ""}
    inner = " ".join(marks[occ] + _render(child, default_field) for occ, child in node.clauses)
    if top and node.boost == 1.0:
        return inner
    return f"({inner}){_boost(node)}"


def normalize_query(query: str) -> str:
    """``to_lucene(parse_query(query))``: the exact string sent to Elasticsearch."""
    return to_lucene(parse_query(query))


# --------------------------------------------------------------------------------------------
# Escaping helpers for callers
# --------------------------------------------------------------------------------------------
def escape_query(text: str) -> str:
    """``text`` as literal words: every Lucene/Elasticsearch reserved character is backslash-
    escaped and ``AND``/``OR``/``NOT`` become plain words. ``<`` and ``>`` are removed
    (Elasticsearch cannot escape them). Parses to optional terms; never raises.
    """
    text = text.replace("<", "").replace(">", "")
    return " ".join(_escape_term(word) for word in text.split())


_PLAIN_SPLIT = re.compile(r'[\s\\+\-!():^\[\]"{}~*?|&/=<>]+')


def plain_query(text: str) -> str:
    """The plain-match fallback for a query that failed to parse: its words, with every Lucene
    operator and syntax character dropped (``"foo AND (bar"`` → ``foo bar``). Never raises.
    """
    words = [w for w in _PLAIN_SPLIT.split(text) if w and w not in OPERATORS]
    return " ".join(_escape_term(w) for w in words)


def quote_phrase(text: str) -> str:
    """``text`` as one quoted Lucene phrase, e.g. to emphasise an entity: ``quote_phrase(e) + "^2"``."""
    return f'"{_escape_phrase(text)}"'
