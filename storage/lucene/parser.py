"""The parser of the Lucene subset (classic grammar; QueryParserBase.addClause semantics,
default operator OR): tokens -> :class:`~.nodes.Bool`, or a QueryError with a position.
"""

from __future__ import annotations

import re

from arborag.errors import QueryError
from arborag.storage.lucene.lexer import Tok, lex, syntax_error
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
    with_boost,
)

__all__ = ["parse_query"]


class _Parser:
    def __init__(self, query: str, fields: frozenset[str], default_field: str) -> None:
        self.q = query
        self.toks = lex(query)
        self.i = 0
        self.fields = fields
        self.default_field = default_field
        self.leaves = 0

    def peek(self, ahead: int = 0) -> Tok:
        try:
            return self.toks[self.i + ahead]
        except IndexError:
            return self.toks[-1]

    def take(self) -> Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def error(self, pos: int, reason: str) -> QueryError:
        return syntax_error(self.q, pos, reason)

    def describe(self, tok: Tok) -> str:
        return "the end of the query" if tok.kind == "EOF" else repr(tok.raw)

    # Query := [Conj] [Mod] Clause ([Conj] [Mod] Clause)*
    def query(self, field: str, depth: int) -> Bool:
        clauses: list[list] = []  # [occur, node | None]
        first = True
        while True:
            tok = self.peek()
            if tok.kind in ("EOF", "RPAREN"):
                break
            conj = None
            if tok.kind in ("AND", "OR"):
                if first:
                    raise self.error(tok.pos, f"{tok.raw} needs a query on its left")
                conj = self.take()
                nxt = self.peek()
                if nxt.kind in ("EOF", "RPAREN", "AND", "OR"):
                    raise self.error(conj.pos, f"{conj.raw} needs a query on its right, found {self.describe(nxt)}")
            mod = None
            if self.peek().kind in ("PLUS", "MINUS", "NOT"):
                mod = self.take()
                nxt = self.peek()
                if nxt.kind in ("EOF", "RPAREN", "AND", "OR", "PLUS", "MINUS", "NOT"):
                    raise self.error(mod.pos, f"{mod.raw!r} must be followed by a query, found {self.describe(nxt)}")
            node = self.clause(field, depth)
            self.add_clause(clauses, conj, mod, node)
            first = False
        return Bool(tuple((occ, node) for occ, node in clauses if node is not None))

    @staticmethod
    def add_clause(clauses: list[list], conj: Tok | None, mod: Tok | None, node: Node | None) -> None:
        # Lucene: a clause introduced by AND makes the previous clause required (unless prohibited).
        if clauses and conj is not None and conj.kind == "AND" and clauses[-1][0] != "must_not":
            clauses[-1][0] = "must"
        prohibited = mod is not None and mod.kind in ("MINUS", "NOT")
        required = mod is not None and mod.kind == "PLUS"
        if conj is not None and conj.kind == "AND" and not prohibited:
            required = True
        occur: Occur = "must_not" if prohibited else "must" if required else "should"
        # A clause that cannot match anything searchable is dropped, but its AND still counted.
        clauses.append([occur, node])

    # Clause := [field ':'] (Term | Phrase | '(' Query ')' | '*:*') ['~' N] ['^' N]
    def clause(self, field: str, depth: int) -> Node | None:
        tok = self.peek()
        if tok.kind == "TERM" and self.peek(1).kind == "COLON":
            name = tok.text
            if name not in self.fields:
                known = ", ".join(sorted(self.fields))
                raise self.error(tok.pos, f"unknown field {name!r}; the fields are {known} (escape ':' as \\: to search it)")
            self.take()
            self.take()
            field = name
            tok = self.peek()
        elif tok.kind == "COLON":
            raise self.error(tok.pos, "':' must follow a field name, e.g. level:1 (escape it as \\: to search it)")

        node: Node | None
        if tok.kind == "LPAREN":
            if depth >= MAX_DEPTH:
                raise self.error(tok.pos, f"parentheses nested deeper than {MAX_DEPTH}")
            self.take()
            inner = self.query(field, depth + 1)
            close = self.peek()
            if close.kind != "RPAREN":
                raise self.error(tok.pos, "unbalanced parenthesis: this '(' is never closed")
            self.take()
            if self.toks[self.i - 2] is tok:
                raise self.error(tok.pos, "empty parentheses '()'")
            node = inner if inner.clauses else None
        elif tok.kind == "PHRASE":
            self.take()
            self.count_leaf(tok)
            slop = 0
            if self.peek().kind == "TILDE":
                tilde = self.take()
                if not tilde.text or "." in tilde.text or int(tilde.text) > MAX_SLOP:
                    raise self.error(tilde.pos, f"phrase slop must be a whole number up to {MAX_SLOP}, e.g. \"a b\"~2")
                slop = int(tilde.text)
            node = self.leaf(Phrase, field, tok, slop=slop)
        elif tok.kind == "TERM":
            self.take()
            self.count_leaf(tok)
            if self.peek().kind == "TILDE":
                raise self.error(self.peek().pos, "fuzzy terms (term~) are not supported; escape '~' as \\~")
            node = self.leaf(Term, field, tok)
        elif tok.kind == "MATCHALL":
            if field != self.default_field or self.toks[self.i - 1].kind == "COLON":
                raise self.error(tok.pos, "'*:*' cannot follow a field name")
            self.take()
            node = MatchAll()
        elif tok.kind == "RPAREN":
            raise self.error(tok.pos, "unbalanced parenthesis: this ')' has no matching '('")
        else:
            raise self.error(tok.pos, f"expected a term, a phrase or '(' but found {self.describe(tok)}")

        if self.peek().kind == "TILDE":
            raise self.error(self.peek().pos, "'~' is only supported after a phrase (\"a b\"~2); escape it as \\~")
        if self.peek().kind == "CARET":
            caret = self.take()
            boost = float(caret.text)
            if boost > MAX_BOOST:
                raise self.error(caret.pos, f"boost {caret.text} is too large (max {MAX_BOOST:g})")
            if self.peek().kind == "CARET":
                raise self.error(self.peek().pos, "a clause takes a single boost")
            if node is not None and boost != 1.0:
                node = with_boost(node, boost)
        return node

    def count_leaf(self, tok: Tok) -> None:
        self.leaves += 1
        if self.leaves > MAX_CLAUSES:
            raise self.error(tok.pos, f"too many terms: a query may hold at most {MAX_CLAUSES}")

    def leaf(self, kind: type[Term] | type[Phrase], field: str, tok: Tok, *, slop: int = 0) -> Node | None:
        text = tok.text
        if field in INTEGER_FIELDS:
            if not re.fullmatch(r"-?\d{1,18}", text.strip()):
                raise self.error(tok.pos, f"{field} takes an integer, got {text!r}")
            return Term(field, str(int(text)))
        if field in KEYWORD_FIELDS:
            return Term(field, text)
        if kind is Term:
            # '<' and '>' are never indexed (both analysers drop them) and Elasticsearch reads a
            # leading one as a range, so they are removed here, once, for both backends.
            text = text.replace("<", "").replace(">", "")
            return Term(field, text) if text else None
        return Phrase(field, text, slop) if text.strip() else None


def parse_query(
    query: str, *, fields: frozenset[str] = FIELDS, default_field: str = DEFAULT_FIELD
) -> Bool:
    """Parse ``query`` (the Lucene subset of docs/METHODS.md §6.4) into a :class:`Bool`.

    An empty or blank query is an empty :class:`Bool` (it matches nothing). Raises
    :class:`~arborag.errors.QueryError` with the 0-based ``position`` of the problem.
    """
    parser = _Parser(query, fields, default_field)
    root = parser.query(default_field, 0)
    tok = parser.peek()
    if tok.kind == "RPAREN":
        raise parser.error(tok.pos, "unbalanced parenthesis: this ')' has no matching '('")
    if tok.kind != "EOF":  # pragma: no cover - the loop only stops at EOF or ')'
        raise parser.error(tok.pos, f"unexpected {parser.describe(tok)}")
    return root
