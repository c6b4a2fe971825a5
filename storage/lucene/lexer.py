"""The lexer of the Lucene subset: the query string -> tokens with their 0-based positions."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from arborag.errors import QueryError

__all__ = ["OPERATORS", "Tok", "check_balance", "lex", "syntax_error"]

OPERATORS: Final = {"AND": "AND", "&&": "AND", "OR": "OR", "||": "OR", "NOT": "NOT"}
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
# A bare term: anything but whitespace and syntax characters, or a backslash escape of anything.
_TERM_RUN = re.compile(r'(?:[^\s()\[\]{}:^"~*?!/\\]|\\.)+', re.DOTALL)
_UNESCAPE = re.compile(r"\\(.)", re.DOTALL)
_SPACE = re.compile(r"\s+")
# One-character tokens.
_SINGLE: Final = {"(": "LPAREN", ")": "RPAREN", ":": "COLON", "+": "PLUS", "-": "MINUS", "!": "NOT"}


@dataclass(frozen=True, slots=True)
class Tok:
    kind: str  # TERM PHRASE LPAREN RPAREN PLUS MINUS NOT AND OR COLON CARET TILDE MATCHALL EOF
    pos: int
    text: str = ""  # unescaped text of TERM / PHRASE; number text of CARET / TILDE
    raw: str = ""  # source slice (for messages)


def syntax_error(query: str, pos: int, reason: str) -> QueryError:
    return QueryError(query, reason, pos)


def check_balance(q: str) -> None:
    """Raise a QueryError naming the first unbalanced quote or parenthesis of ``q``, with its
    position, before anything else is looked at (an unknown field or a wildcard elsewhere in the
    query would otherwise be reported first). Backslash escapes are honoured, and parentheses
    inside a phrase are text."""
    opened: list[int] = []
    quote: int | None = None
    i, n = 0, len(q)
    while i < n:
        c = q[i]
        if c == "\\":
            i += 2
            continue
        if quote is not None:
            if c == '"':
                quote = None
        elif c == '"':
            quote = i
        elif c == "(":
            opened.append(i)
        elif c == ")":
            if not opened:
                raise syntax_error(q, i, "unbalanced parenthesis: this ')' has no matching '(' (remove it, add a '(' "
                                   "before it, or escape it as \\))")
            opened.pop()
        i += 1
    if quote is not None:
        raise syntax_error(q, quote, "unterminated phrase, an unbalanced quote: this '\"' is never closed (add a closing '\"' or escape it as \\\")")
    if opened:
        more = f" (nor {len(opened) - 1} more before it)" if len(opened) > 1 else ""
        raise syntax_error(q, opened[-1], f"unbalanced parenthesis: this '(' is never closed{more}; add a ')' or escape it "
                           "as \\(")


def lex(q: str) -> list[Tok]:
    toks: list[Tok] = []
    i, n = 0, len(q)
    while i < n:
        c = q[i]
        if c.isspace():
            i = _SPACE.match(q, i).end()  # type: ignore[union-attr]
            continue
        if c in _SINGLE:
            toks.append(Tok(_SINGLE[c], i, raw=c))
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
                raise syntax_error(q, i, "unterminated phrase: this '\"' is never closed (add a closing '\"' or escape it as \\\")")
            toks.append(Tok("PHRASE", i, "".join(buf), q[i : j + 1]))
            i = j + 1
        elif c == "^":
            m = _NUMBER.match(q, i + 1)
            if m is None:
                raise syntax_error(q, i, "'^' must be followed by a number, e.g. term^2 (escape it as \\^ to search it)")
            toks.append(Tok("CARET", i, m.group(), q[i : m.end()]))
            i = m.end()
        elif c == "~":
            m = _NUMBER.match(q, i + 1)
            end = m.end() if m else i + 1
            toks.append(Tok("TILDE", i, m.group() if m else "", q[i:end]))
            i = end
        elif c == "*" and q.startswith("*:*", i) and (i + 3 >= n or q[i + 3].isspace() or q[i + 3] in ")^"):
            toks.append(Tok("MATCHALL", i, raw="*:*"))
            i += 3
        elif c in "*?":
            raise syntax_error(q, i, f"wildcards ('{c}') are not supported; escape it as \\{c} or search with lucene=False")
        elif c in "[]{}":
            raise syntax_error(q, i, f"range queries ('{c}') are not supported; use the levels=/doc_ids= filters or escape it as \\{c}")
        elif c == "/":
            raise syntax_error(q, i, "regular expressions (/.../) are not supported; escape '/' as \\/")
        else:
            m = _TERM_RUN.match(q, i)
            j = m.end() if m else i
            if j < n and q[j] == "\\":  # only a trailing backslash is left unmatched
                raise syntax_error(q, j, "dangling '\\' at the end of the query; escape it as \\\\")
            if j == i:  # pragma: no cover - every other character starts a term or was handled above
                raise syntax_error(q, i, f"unexpected character {q[i]!r}")
            if j < n and q[j] in "*?":
                raise syntax_error(q, j, f"wildcards ('{q[j]}') are not supported; escape it as \\{q[j]} or search with lucene=False")
            raw = q[i:j]
            op = OPERATORS.get(raw)
            if op:
                toks.append(Tok(op, i, raw, raw))
            else:
                text = _UNESCAPE.sub(r"\1", raw) if "\\" in raw else raw
                toks.append(Tok("TERM", i, text, raw))
            i = j
    toks.append(Tok("EOF", n))
    return toks
