"""The bottom layer of the ksqlDB parser: the tokenizer settings and the cursor helpers every
grammar layer uses (keyword matching, names, numbers, literals, typed syntax errors).

The parser is a stack of ``sqlglot.parser.Parser`` subclasses, one module per layer
(``base`` -> ``typeparse`` -> ``expressions`` -> ``query`` -> ``statements``), so every layer walks
the same token cursor (``_curr``, ``_match``, ``_retreat``) that sqlglot's own expression parser
uses and can hand a position to it and take it back.
"""

from __future__ import annotations

from typing import Any, ClassVar, NoReturn

from sqlglot import tokens
from sqlglot.errors import ErrorLevel
from sqlglot.parser import Parser
from sqlglot.tokens import Token, TokenType

from oncestream.sql.language import sql_ast
from oncestream.sql.language.parser.syntax import SyntaxIssue, mismatched


class KsqlTokenizer(tokens.Tokenizer):
    """ksqlDB's lexical rules: ``'strings'`` with ``''`` escapes, ``\\`back-quoted\\``` and
    ``"double-quoted"`` identifiers (both keep their case), ``--`` and ``/* */`` comments."""

    QUOTES: ClassVar[list[tuple[str, str] | str]] = ["'"]
    IDENTIFIERS: ClassVar[list[str | tuple[str, str]]] = ['"', "`"]
    STRING_ESCAPES: ClassVar[list[str]] = ["'"]
    COMMENTS: ClassVar[list[str | tuple[str, str]]] = ["--", ("/*", "*/")]
    NESTED_COMMENTS = False
    # sqlglot swallows the rest of a statement after SHOW/EXECUTE... as one string ("commands");
    # ksqlDB's SHOW is an ordinary statement with a grammar, so no token is a command here.
    COMMANDS: ClassVar[set[TokenType]] = set()
    KEYWORDS: ClassVar[dict[str, TokenType]] = {k: v for k, v in tokens.Tokenizer.KEYWORDS.items() if k != "/*+"}


# Token types whose text is data (strings, quoted identifiers), never a keyword.
_NOT_KEYWORD = frozenset({TokenType.STRING, TokenType.IDENTIFIER, TokenType.NATIONAL_STRING,
                          TokenType.RAW_STRING, TokenType.BIT_STRING, TokenType.HEX_STRING,
                          TokenType.BYTE_STRING, TokenType.HEREDOC_STRING, TokenType.UNICODE_STRING})

# Punctuation and operators can never be a name.
_NOT_A_NAME = frozenset({TokenType.L_PAREN, TokenType.R_PAREN, TokenType.L_BRACKET, TokenType.R_BRACKET,
                         TokenType.L_BRACE, TokenType.R_BRACE, TokenType.COMMA, TokenType.DOT,
                         TokenType.SEMICOLON, TokenType.STAR, TokenType.EQ, TokenType.NEQ, TokenType.LT,
                         TokenType.LTE, TokenType.GT, TokenType.GTE, TokenType.PLUS, TokenType.DASH,
                         TokenType.SLASH, TokenType.MOD, TokenType.ARROW, TokenType.FARROW,
                         TokenType.NUMBER, TokenType.STRING, TokenType.DPIPE, TokenType.COLON,
                         TokenType.DCOLON, TokenType.PARAMETER, TokenType.PLACEHOLDER, TokenType.NULL,
                         TokenType.TRUE, TokenType.FALSE})


def number_value(text: str) -> int | float | None:
    """The value of a NUMBER token as ksqlDB reads it (``42``, ``2.5``, ``1e5``), None for what
    sqlglot's tokenizer lets through as a number but is not one (``2E``, ``1_000``)."""
    if not text or not text.isascii() or any(c not in "0123456789.eE+-" for c in text):
        return None
    if text.isdigit():
        return int(text)
    try:
        return float(text)
    except ValueError:
        return None


def normalise_name(token: Token) -> str:
    """ksqlDB's identifier rule: quoted names keep their case, the others are upper-cased."""
    if token.token_type == TokenType.IDENTIFIER:
        return token.text
    return token.text.upper()


def position_of(sql: str, offset: int) -> sql_ast.Position:
    """1-based line and column of character ``offset`` in ``sql``."""
    line = sql.count("\n", 0, offset) + 1
    column = offset - (sql.rfind("\n", 0, offset) + 1) + 1
    return sql_ast.Position(line=line, column=column)


class BaseParser(Parser):
    """Cursor helpers shared by the grammar layers. Syntax errors are ``SyntaxIssue``."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("error_level", ErrorLevel.IMMEDIATE)
        super().__init__(**kwargs)
        self.end_token: Token | None = None
        self.text_end = 0

    def start(self, statement_tokens: list[Token], sql: str, end_token: Token | None, text_end: int) -> None:
        """Point the cursor at the first of ``statement_tokens`` (offsets relative to ``sql``, the
        whole request); ``end_token`` (the ``;``) is what a premature end reports; ``text_end`` is
        the offset just past the statement's text (past its ``;``)."""
        self.reset()
        self.sql = sql
        self._tokens = statement_tokens
        self._tokens_size = len(statement_tokens)
        self._index = -1
        self._advance()
        self.end_token = end_token
        self.text_end = text_end

    # -- the current token ------------------------------------------------------------------------
    def token(self) -> Token | None:
        """The current token; at the end of the statement the terminating ``;`` (None if absent)."""
        return self._curr if self._curr else self.end_token

    def at_end(self) -> bool:
        return not self._curr

    def is_word(self, *words: str) -> bool:
        """Whether the current token is one of ``words`` (a keyword, not a string or quoted name)."""
        curr = self._curr
        return bool(curr) and curr.token_type not in _NOT_KEYWORD and curr.text.upper() in words

    def is_type(self, *types: TokenType) -> bool:
        return bool(self._curr) and self._curr.token_type in types

    def accept(self, *words: str) -> bool:
        """Consume the keyword sequence ``words`` if it is next (all of it or nothing)."""
        index = self._index
        for word in words:
            if not self.is_word(word):
                self._retreat(index)
                return False
            self._advance()
        return True

    def expect(self, *words: str) -> None:
        for word in words:
            if not self.is_word(word):
                self.fail(f"'{word}'")
            self._advance()

    def accept_type(self, token_type: TokenType) -> bool:
        return self._match(token_type)

    def expect_type(self, token_type: TokenType, shown: str) -> Token:
        if not self._match(token_type):
            self.fail(shown)
        return self._prev

    def fail(self, *expected: str) -> NoReturn:
        raise mismatched(self.token(), expected)

    def issue(self, detail: str, token: Token | None = None, *, syntax: bool = True,
              node_location: bool = False) -> NoReturn:
        """A failure at ``token`` (default: the current one); ``syntax`` False for the checks
        ksqlDB makes while building its AST, whose messages have no "Syntax Error" heading;
        ``node_location`` for those it makes on a built node (``SyntaxIssue``)."""
        raise SyntaxIssue(token if token is not None else self.token(), detail, syntax=syntax,
                          node_location=node_location)

    # -- names and numbers ------------------------------------------------------------------------
    def is_name(self) -> bool:
        """Whether the current token can be a name: a quoted identifier, or a word (sqlglot's
        multi-word keyword tokens such as ``GROUP BY`` are not names)."""
        curr = self._curr
        if not curr or curr.token_type in _NOT_A_NAME:
            return False
        return curr.token_type == TokenType.IDENTIFIER or not any(c.isspace() for c in curr.text)

    def name(self) -> str:
        """An identifier (source, column, query id...), normalised as ksqlDB does."""
        if not self.is_name():
            self.fail("an identifier")
        self._advance()
        return normalise_name(self._prev)

    def name_token(self) -> Token:
        if not self.is_name():
            self.fail("an identifier")
        self._advance()
        return self._prev

    def integer(self) -> int:
        """``[-] digits``; anything else is a syntax error."""
        negative = self._match(TokenType.DASH)
        if not self.is_type(TokenType.NUMBER) or not (self._curr.text.isascii() and self._curr.text.isdigit()):
            self.fail("an integer")
        self._advance()
        value = int(self._prev.text)
        return -value if negative else value

    def string(self) -> str:
        if not self._match(TokenType.STRING):
            self.fail("a string")
        return self._prev.text

    def literal_value(self) -> Any:
        """A WITH-clause value: string, number (int or float), TRUE/FALSE or NULL."""
        if self._match(TokenType.STRING):
            return self._prev.text
        if self._match(TokenType.NULL):
            return None
        if self._match(TokenType.TRUE):
            return True
        if self._match(TokenType.FALSE):
            return False
        negative = self._match(TokenType.DASH)
        number = number_value(self._curr.text) if self.is_type(TokenType.NUMBER) else None
        if number is None:
            self.fail("a literal")
        self._advance()
        return -number if negative else number
