"""``parse`` and ``parse_expression``: a request's text in, statements (or a ``ParseError``) out;
``split_statement_texts`` and ``words_of`` for clients that only cut text into statements (the
shell), with the same tokenizer, so client and server agree on where a statement ends.

The request is tokenized once (so offsets, and so error positions, are relative to the whole
request), split on ``;`` tokens (a ``;`` inside a string literal, a quoted identifier or a comment
is part of that token, never a separator), and each statement is parsed on its own tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlglot import exp
from sqlglot.errors import TokenError
from sqlglot.tokens import Token, TokenType

from oncestream.sql.errors import ParseError, StatementError
from oncestream.sql.language import sql_ast
from oncestream.sql.language.parser.base import KsqlTokenizer, position_of
from oncestream.sql.language.parser.dialect import Ksql
from oncestream.sql.language.parser.statements import StatementParser
from oncestream.sql.language.parser.syntax import PrepareIssue, SyntaxIssue
from oncestream.sql.language.parser.variables import references_variables, substitute
from oncestream.sql.language.types import SqlType

# The longest request text parsed (ksqlDB's REST layer bounds the body; this bounds the parser's
# work whatever the caller does).
MAX_TEXT_CHARS = 1_000_000


def _new_parser(custom_types: Mapping[str, SqlType] | None) -> StatementParser:
    """A parser resolving type names with ``custom_types`` (None: deferred, see ``TypeParser``)."""
    parser = StatementParser(dialect=Ksql)
    parser.custom_types = custom_types
    return parser


def _unterminated_at(text: str) -> tuple[int, str]:
    """Where the literal, quoted identifier or comment that never ends starts (for the error the
    tokenizer could not place), and what it is. Mirrors the tokenizer's quoting rules."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "'`\"":
            j = i + 1
            while True:
                j = text.find(c, j)
                if j < 0:
                    kind = {"'": "string literal", "`": "quoted identifier", '"': "quoted identifier"}[c]
                    return i, f"unterminated {kind}"
                if j + 1 < n and text[j + 1] == c:   # doubled quote: an escaped quote character
                    j += 2
                    continue
                break
            i = j + 1
        elif text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                return i, "unterminated comment"
            i = j + 2
        else:
            i += 1
    return 0, "unreadable input"


def _tokenize(text: str) -> list[Token]:
    if len(text) > MAX_TEXT_CHARS:
        raise ParseError(f"Syntax Error\nstatement text longer than {MAX_TEXT_CHARS} characters", line=1, column=1,
                         statement_text=text[:200])
    try:
        return KsqlTokenizer(dialect=Ksql).tokenize(text)
    except TokenError as e:
        offset, what = _unterminated_at(text)
        where = position_of(text, offset)
        raise ParseError(f"Syntax Error\n{what}", line=where.line, column=where.column, statement_text=text) from e


def _error(issue: SyntaxIssue, text: str, statement_text: str, end_offset: int) -> ParseError:
    offset = issue.token.start if issue.token is not None else end_offset
    where = position_of(text, offset)
    message = issue.detail if not issue.syntax else f"Syntax Error\n{issue.detail}"
    return ParseError(message, line=where.line, column=where.column, statement_text=statement_text,
                      node_location=issue.node_location)


def _too_deep(text: str, statement_text: str, offset: int) -> ParseError:
    where = position_of(text, offset)
    return ParseError("Error processing statement: Statement is too large to parse. This may be caused by having too "
                      "many nested expressions in the statement.", line=where.line, column=where.column,
                      statement_text=statement_text)


def split_statements(tokens: list[Token]) -> list[tuple[list[Token], Token | None]]:
    """The tokens of each statement and its terminating ``;`` (None for a last statement written
    without one). Empty statements (``;;``) are dropped."""
    out: list[tuple[list[Token], Token | None]] = []
    current: list[Token] = []
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            if current:
                out.append((current, token))
            current = []
        else:
            current.append(token)
    if current:
        out.append((current, None))
    return out


def _parse_one(parser: StatementParser, tokens: list[Token], text: str, semicolon: Token | None,
               end: int) -> sql_ast.Statement:
    start = tokens[0].start
    statement_text = text[start:end] if semicolon is not None else text[start:end] + ";"
    parser.start(tokens, text, semicolon, end)
    parser.deferred_types = False
    try:
        return parser.parse_statement(statement_text, position_of(text, start))
    except SyntaxIssue as issue:
        raise _error(issue, text, statement_text, end) from None
    except PrepareIssue as issue:
        raise StatementError(f"Failed to prepare statement: {issue.detail}", statement_text=statement_text) from None
    except RecursionError:
        raise _too_deep(text, statement_text, start) from None


def _statement_end(tokens: list[Token], semicolon: Token | None) -> int:
    return semicolon.end + 1 if semicolon is not None else tokens[-1].end + 1


def parse(text: str, custom_types: Mapping[str, SqlType] | None = None) -> list[sql_ast.Statement]:
    """Every statement of a request, in order; ``custom_types`` the types CREATE TYPE registered
    (upper-cased name -> type; a column of another type name is a syntax error).

    ``Statement.text`` is the statement's own text as written, from its first token to its ``;``
    (a last statement written without ``;`` gets one appended, as ksqlDB's clients do);
    ``Statement.position`` is where its first token is in ``text``. Raises ``errors.ParseError``
    (line/column of the offending token in ``text``, 1-based) on the first syntax error."""
    tokens = _tokenize(text)
    parser = _new_parser(custom_types or {})
    return [_parse_one(parser, statement_tokens, text, semicolon, _statement_end(statement_tokens, semicolon))
            for statement_tokens, semicolon in split_statements(tokens)]


@dataclass(frozen=True)
class PendingStatement:
    """One statement of a request as ``parse_request`` leaves it: parsed (``parsed``), or, when it
    references variables (``${name}``), kept as tokens until ``resolve`` knows their values (a
    ``DEFINE`` earlier in the same request may define them, as in ksqlDB), or names a type that
    is not built in (a ``CREATE TYPE`` earlier in the request may register it)."""

    parsed: sql_ast.Statement | None
    tokens: list[Token]
    text: str            # the whole request
    semicolon: Token | None
    end: int
    names_types: bool = False

    def resolve(self, variables: Mapping[str, str] | None,
                custom_types: Mapping[str, SqlType] | None = None) -> sql_ast.Statement:
        """The statement, with ``variables`` substituted (None: substitution is disabled, the text
        is parsed as written) and type names resolved with ``custom_types``. Raises
        ``errors.StatementError`` / ``ParseError``."""
        if self.parsed is not None and not self.names_types:
            return self.parsed
        if variables is None or self.parsed is not None:
            return _parse_one(_new_parser(custom_types or {}), self.tokens, self.text, self.semicolon, self.end)
        statement_text = substitute(self.tokens, self.text, self.end, variables)
        if self.semicolon is None:
            statement_text += ";"
        tokens = _tokenize(statement_text)
        split = split_statements(tokens)
        if len(split) != 1:
            raise ParseError("Syntax Error\na variable's value ends the statement", line=1, column=1,
                             statement_text=statement_text)
        only, semicolon = split[0]
        return _parse_one(_new_parser(custom_types or {}), only, statement_text, semicolon,
                          _statement_end(only, semicolon))


def parse_request(text: str) -> list[PendingStatement]:
    """The statements of a request, each parsed unless it references variables (those are parsed
    by ``PendingStatement.resolve`` once the variables are known; so are those naming types that
    are not built in, once the metastore's types are known). A syntax error in a statement
    without variables fails the whole request before anything runs, as ``parse`` does."""
    tokens = _tokenize(text)
    parser = _new_parser(None)
    out: list[PendingStatement] = []
    for statement_tokens, semicolon in split_statements(tokens):
        end = _statement_end(statement_tokens, semicolon)
        parsed = None if references_variables(statement_tokens, text) else \
            _parse_one(parser, statement_tokens, text, semicolon, end)
        out.append(PendingStatement(parsed, statement_tokens, text, semicolon, end,
                                    names_types=parsed is not None and parser.deferred_types))
    return out


def substitute_variables(statement: str, variables: Mapping[str, str]) -> str:
    """``statement`` (one statement's text) with its ``${name}`` references replaced, without
    parsing it (what a client does before sending, as ksqlDB's CLI does). Raises
    ``errors.StatementError`` / ``ParseError`` as ``PendingStatement.resolve`` would."""
    tokens = _tokenize(statement)
    if not tokens or not references_variables(tokens, statement):
        return statement
    return substitute(tokens, statement, len(statement), variables)


def parse_expression(text: str) -> exp.Expression:
    """One ksqlDB expression (e.g. a value of ``/inserts-stream`` or a test's expected tree), with
    the same normalisation as in statements. Raises ``errors.ParseError``."""
    tokens = _tokenize(text)
    parser = _new_parser({})
    parser.start(tokens, text, None, len(text))
    try:
        tree = parser.parse_value_expression()
        if not parser.at_end():
            parser.fail("<EOF>")
    except SyntaxIssue as issue:
        raise _error(issue, text, text, len(text)) from None
    except RecursionError:
        raise _too_deep(text, text, 0) from None
    return tree


def split_statement_texts(text: str) -> tuple[list[str], str]:
    """The complete statements of ``text`` as typed, and the incomplete rest.

    Each statement runs from the end of the one before through its ``;`` (comments kept,
    surrounding whitespace stripped); statements holding nothing but comments are dropped. A
    ``;`` inside a string, a quoted identifier or a comment does not end a statement. The rest
    is what follows the last ``;`` ("" when it holds only whitespace and comments); a string,
    quoted identifier or comment still open makes the statement it is in part of the rest."""
    limit = len(text)
    try:
        tokens = _tokenize(text)
    except ParseError:
        limit, what = _unterminated_at(text)
        if what == "unreadable input":   # not a matter of waiting for more: the server will say what is wrong
            stripped = text.strip()
            return ([stripped], "") if stripped.endswith(";") else ([], text)
        tokens = _tokenize(text[:limit])
    statements: list[str] = []
    start = 0
    pending = False   # a token since the last ';'
    for token in tokens:
        if token.token_type == TokenType.SEMICOLON:
            if pending:
                statements.append(text[start:token.end + 1].strip())
            start, pending = token.end + 1, False
        else:
            pending = True
    return statements, text[start:] if pending or limit < len(text) else ""


@dataclass(frozen=True)
class Word:
    """One token of a statement as written: a keyword or name, or a 'string literal' (``text``
    then holds its value, ``''`` unescaped)."""

    text: str
    is_string: bool


def words_of(statement: str) -> list[Word]:
    """The tokens of ``statement`` without its comments (raises ``ParseError`` on an unterminated
    string, identifier or comment)."""
    return [Word(t.text, t.token_type == TokenType.STRING) for t in _tokenize(statement)]
