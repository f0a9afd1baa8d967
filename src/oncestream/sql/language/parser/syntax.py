"""Syntax errors raised inside the parser, and how they become ``errors.ParseError``.

Inside the parser a syntax error is a ``SyntaxIssue``: the offending token (or None at the end of
the statement) plus ksqlDB-style detail text. ``api`` turns it into ``errors.ParseError`` with the
1-based line/column of that token in the whole request, which is what clients see:
``line 2:8: Syntax Error\\nmismatched input 'FORM' expecting {'FROM', ','}``.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlglot.tokens import Token

# ksqlDB's statement keywords; a typo of one of them gets "Unknown statement ... Did you mean".
STATEMENT_KEYWORDS = ("SELECT", "CREATE", "INSERT", "DESCRIBE", "PRINT", "EXPLAIN", "SHOW", "LIST",
                      "TERMINATE", "PAUSE", "RESUME", "DROP", "SET", "DEFINE", "UNDEFINE", "UNSET",
                      "ASSERT", "ALTER")


class SyntaxIssue(Exception):
    """A syntax error at ``token`` (None: the statement ended too early). ``syntax`` False for
    valid ksqlDB that oncestream refuses (the message then has no "Syntax Error" heading).
    ``node_location`` True for the checks ksqlDB makes on its built AST nodes, whose messages
    name the place as ``Line: 1, Col: 21: `` (NodeLocation) rather than ``line 1:21: ``."""

    def __init__(self, token: Token | None, detail: str, *, syntax: bool = True, node_location: bool = False) -> None:
        super().__init__(detail)
        self.token = token
        self.detail = detail
        self.syntax = syntax
        self.node_location = node_location


class PrepareIssue(Exception):
    """A check ksqlDB's AstBuilder makes on a grammatical statement, which it reports without a
    place as ``Failed to prepare statement: <detail>`` (``PARTITION BY ()``)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def describe_token(token: Token | None) -> str:
    """The offending input as ANTLR quotes it: ``'FORM'``, ``'<EOF>'``."""
    if token is None:
        return "'<EOF>'"
    return f"'{token.text}'"


def expecting(expected: Iterable[str]) -> str:
    """``{'FROM', ','}`` for several alternatives, the single alternative as is otherwise."""
    items = list(dict.fromkeys(expected))
    if len(items) == 1:
        return items[0]
    return "{" + ", ".join(items) + "}"


def mismatched(token: Token | None, expected: Iterable[str]) -> SyntaxIssue:
    """ANTLR's "mismatched input 'X' expecting ..." as ksqlDB reports it."""
    return SyntaxIssue(token, f"mismatched input {describe_token(token)} expecting {expecting(expected)}")


def unsupported(token: Token | None, what: str) -> SyntaxIssue:
    """Valid ksqlDB syntax that oncestream does not implement (listed in docs/sql-reference.md)."""
    return SyntaxIssue(token, f"{what} is not supported", syntax=False)
