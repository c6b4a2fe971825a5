"""The Lucene query subset arborag accepts, parsed once and rendered for each backend.

Both sparse backends answer the *same* query: the string is parsed here into a small typed AST
with Lucene's own rules (the classic query parser Elasticsearch's ``query_string`` uses), then

* the embedded engine (tantivy) compiles the AST into tantivy query objects
  (:mod:`arborag.storage.sparse`), so tantivy's own dialect (``a AND NOT b`` returns nothing, a bare
  ``NOT x`` errors, ...) never comes into play;
* Elasticsearch receives :func:`to_lucene` of the AST: an explicit, fully escaped string in which
  every clause carries its ``+``/``-`` prefix, so ``AND``/``OR``/``NOT`` precedence quirks cannot
  change its meaning on the way.

Accepted (SPEC §6)::

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
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, Literal, TypeAlias

from arborag.errors import QueryError

__all__ = [
    "Bool",
    "FIELDS",
    "DEFAULT_FIELD",
    "KEYWORD_FIELDS",
    "MAX_BOOST",
    "MAX_CLAUSES",
    "MAX_DEPTH",
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

Occur: TypeAlias = Literal["must", "should", "must_not"]

DEFAULT_FIELD: Final = "text"
KEYWORD_FIELDS: Final = frozenset({"node_id", "doc_ids"})
INTEGER_FIELDS: Final = frozenset({"level"})
FIELDS: Final = frozenset({DEFAULT_FIELD}) | KEYWORD_FIELDS | INTEGER_FIELDS

MAX_DEPTH: Final = 32  # nested parentheses
MAX_CLAUSES: Final = 1024  # terms + phrases in one query (Elasticsearch's max_clause_count floor)
MAX_BOOST: Final = 1_000_000.0
MAX_SLOP: Final = 10_000


# --------------------------------------------------------------------------------------------
# AST
# --------------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------------
# Lexer
# --------------------------------------------------------------------------------------------
_OPERATORS: Final = {"AND": "AND", "&&": "AND", "OR": "OR", "||": "OR", "NOT": "NOT"}
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
# A bare term: anything but whitespace and syntax characters, or a backslash escape of anything.
_TERM_RUN = re.compile(r'(?:[^\s()\[\]{}:^"~*?!/\\]|\\.)+', re.DOTALL)
_UNESCAPE = re.compile(r"\\(.)", re.DOTALL)
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # TERM PHRASE LPAREN RPAREN PLUS MINUS NOT AND OR COLON CARET TILDE MATCHALL EOF
    pos: int
    text: str = ""  # unescaped text of TERM / PHRASE; number text of CARET / TILDE
    raw: str = ""  # source slice (for messages)


def _err(query: str, pos: int, reason: str) -> QueryError:
    return QueryError(query, reason, pos)


def _lex(q: str) -> list[_Tok]:
    toks: list[_Tok] = []
    i, n = 0, len(q)
    while i < n:
        c = q[i]
        if c.isspace():
            i = _SPACE.match(q, i).end()  # type: ignore[union-attr]
            continue
        if c == "(":
            toks.append(_Tok("LPAREN", i, raw=c))
            i += 1
        elif c == ")":
            toks.append(_Tok("RPAREN", i, raw=c))
            i += 1
        elif c == ":":
            toks.append(_Tok("COLON", i, raw=c))
            i += 1
        elif c == "+":
            toks.append(_Tok("PLUS", i, raw=c))
            i += 1
        elif c == "-":
            toks.append(_Tok("MINUS", i, raw=c))
            i += 1
        elif c == "!":
            toks.append(_Tok("NOT", i, raw=c))
            i += 1
        elif c == '"':
            j, buf = i + 1, []
            while j < n and q[j] != '"':
                if q[j] == "\\":
                    if j + 1 >= n:
                        break
                    buf.append(q[j + 1])
                    j += 2
                else:
                    buf.append(q[j])
                    j += 1
            if j >= n:
                raise _err(q, i, "unterminated phrase: this '\"' is never closed (add a closing '\"' or escape it as \\\")")
            toks.append(_Tok("PHRASE", i, "".join(buf), q[i : j + 1]))
            i = j + 1
        elif c == "^":
            m = _NUMBER.match(q, i + 1)
            if m is None:
                raise _err(q, i, "'^' must be followed by a number, e.g. term^2 (escape it as \\^ to search it)")
            toks.append(_Tok("CARET", i, m.group(), q[i : m.end()]))
            i = m.end()
        elif c == "~":
            m = _NUMBER.match(q, i + 1)
            end = m.end() if m else i + 1
            toks.append(_Tok("TILDE", i, m.group() if m else "", q[i:end]))
            i = end
        elif c == "*" and q.startswith("*:*", i) and (i + 3 >= n or q[i + 3].isspace() or q[i + 3] in ")^"):
            toks.append(_Tok("MATCHALL", i, raw="*:*"))
            i += 3
        elif c in "*?":
            raise _err(q, i, f"wildcards ('{c}') are not supported; escape it as \\{c} or search with lucene=False")
        elif c in "[]{}":
            raise _err(q, i, f"range queries ('{c}') are not supported; use the levels=/doc_ids= filters or escape it as \\{c}")
        elif c == "/":
            raise _err(q, i, "regular expressions (/.../) are not supported; escape '/' as \\/")
        else:
            m = _TERM_RUN.match(q, i)
            j = m.end() if m else i
            if j < n and q[j] == "\\":  # only a trailing backslash is left unmatched
                raise _err(q, j, "dangling '\\' at the end of the query; escape it as \\\\")
            if j == i:  # pragma: no cover - every other character starts a term or was handled above
                raise _err(q, i, f"unexpected character {q[i]!r}")
            if j < n and q[j] in "*?":
                raise _err(q, j, f"wildcards ('{q[j]}') are not supported; escape it as \\{q[j]} or search with lucene=False")
            raw = q[i:j]
            op = _OPERATORS.get(raw)
            if op:
                toks.append(_Tok(op, i, raw, raw))
            else:
                text = _UNESCAPE.sub(r"\1", raw) if "\\" in raw else raw
                toks.append(_Tok("TERM", i, text, raw))
            i = j
    toks.append(_Tok("EOF", n))
    return toks


# --------------------------------------------------------------------------------------------
# Parser (Lucene classic grammar; QueryParserBase.addClause semantics, default operator OR)
# --------------------------------------------------------------------------------------------
class _Parser:
    def __init__(self, query: str, fields: frozenset[str], default_field: str) -> None:
        self.q = query
        self.toks = _lex(query)
        self.i = 0
        self.fields = fields
        self.default_field = default_field
        self.leaves = 0

    def peek(self, ahead: int = 0) -> _Tok:
        try:
            return self.toks[self.i + ahead]
        except IndexError:
            return self.toks[-1]

    def take(self) -> _Tok:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def error(self, pos: int, reason: str) -> QueryError:
        return _err(self.q, pos, reason)

    def describe(self, tok: _Tok) -> str:
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
    def add_clause(clauses: list[list], conj: _Tok | None, mod: _Tok | None, node: Node | None) -> None:
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
                node = _with_boost(node, boost)
        return node

    def count_leaf(self, tok: _Tok) -> None:
        self.leaves += 1
        if self.leaves > MAX_CLAUSES:
            raise self.error(tok.pos, f"too many terms: a query may hold at most {MAX_CLAUSES}")

    def leaf(self, kind: type[Term] | type[Phrase], field: str, tok: _Tok, *, slop: int = 0) -> Node | None:
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


def _with_boost(node: Node, boost: float) -> Node:
    if isinstance(node, Term):
        return Term(node.field, node.text, node.boost * boost)
    if isinstance(node, Phrase):
        return Phrase(node.field, node.text, node.slop, node.boost * boost)
    if isinstance(node, MatchAll):
        return MatchAll(node.boost * boost)
    return Bool(node.clauses, node.boost * boost)


def parse_query(
    query: str, *, fields: frozenset[str] = FIELDS, default_field: str = DEFAULT_FIELD
) -> Bool:
    """Parse ``query`` (the SPEC §6 Lucene subset) into a :class:`Bool`.

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


# --------------------------------------------------------------------------------------------
# Rendering (the string Elasticsearch's query_string receives)
# --------------------------------------------------------------------------------------------
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
    words = [w for w in _PLAIN_SPLIT.split(text) if w and w not in _OPERATORS]
    return " ".join(_escape_term(w) for w in words)


def quote_phrase(text: str) -> str:
    """``text`` as one quoted Lucene phrase, e.g. to emphasise an entity: ``quote_phrase(e) + "^2"``."""
    return f'"{_escape_phrase(text)}"'
