"""The typed AST of a parsed query, the fields and the limits (:mod:`arborag.storage.lucene`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

__all__ = ["Bool", "DEFAULT_FIELD", "FIELDS", "INTEGER_FIELDS", "KEYWORD_FIELDS", "MAX_BOOST", "MAX_CLAUSES",
           "MAX_DEPTH", "MAX_SLOP", "MatchAll", "Node", "Occur", "Phrase", "Term", "with_boost"]

Occur: TypeAlias = Literal["must", "should", "must_not"]

DEFAULT_FIELD: Final = "text"
KEYWORD_FIELDS: Final = frozenset({"node_id", "doc_ids"})
INTEGER_FIELDS: Final = frozenset({"level"})
FIELDS: Final = frozenset({DEFAULT_FIELD}) | KEYWORD_FIELDS | INTEGER_FIELDS

MAX_DEPTH: Final = 32  # nested parentheses
MAX_CLAUSES: Final = 1024  # terms + phrases in one query (Elasticsearch's max_clause_count floor)
MAX_BOOST: Final = 1_000_000.0
MAX_SLOP: Final = 10_000


@dataclass(frozen=True, slots=True)
class Term:
    """One bare term. ``text`` is unescaped; analysed fields may split it into several tokens."""

    field: str
    text: str
    boost: float = 1.0


@dataclass(frozen=True, slots=True)
class Phrase:
    """A quoted phrase: the analysed tokens in order, at most ``slop`` position moves apart."""

    field: str
    text: str
    slop: int = 0
    boost: float = 1.0


@dataclass(frozen=True, slots=True)
class MatchAll:
    """``*:*`` — every document, score 1 (times the boost)."""

    boost: float = 1.0


@dataclass(frozen=True, slots=True)
class Bool:
    """A boolean group. Empty = matches nothing. Only ``must_not`` clauses = all but those."""

    clauses: tuple[tuple[Occur, "Node"], ...]
    boost: float = 1.0


Node: TypeAlias = Term | Phrase | MatchAll | Bool


def with_boost(node: Node, boost: float) -> Node:
    """``node`` with its boost multiplied by ``boost``."""
    if isinstance(node, Term):
        return Term(node.field, node.text, node.boost * boost)
    if isinstance(node, Phrase):
        return Phrase(node.field, node.text, node.slop, node.boost * boost)
    if isinstance(node, MatchAll):
        return MatchAll(node.boost * boost)
    return Bool(node.clauses, node.boost * boost)
