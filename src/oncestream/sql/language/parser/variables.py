"""ksqlDB's variable substitution (``DEFINE name = 'value'`` then ``${name}``), as its
``VariableSubstitutor`` does it: on the statement's text, before the statement is parsed.

- ``${name}`` where a name or a literal is written takes the variable's value as written. In a
  name position (after STREAM, TABLE, FROM, JOIN, INTO, EXISTS, TYPE, DESCRIBE) the value must be
  an identifier (``[A-Za-z_][A-Za-z0-9_@]*``, optionally "quoted" or `quoted`); elsewhere a
  'quoted string', a number, TRUE/FALSE, or an identifier. An undefined variable fails the same way
  (ksqlDB leaves ``${name}`` in place, which is neither): ``Illegal argument at Line: l, Col: c.``
- Inside a string literal, ``${name}`` is replaced only when the variable is defined, with its
  value's quotes doubled so the literal stays one literal.
- Variable names are case-insensitive (ksqlDB keeps them in a case-insensitive map).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from decimal import Decimal, InvalidOperation

from sqlglot.tokens import Token, TokenType

from oncestream.sql.errors import StatementError
from oncestream.sql.language.parser.base import position_of

VARIABLE_SUBSTITUTION_ENABLE = "ksql.variable.substitution.enable"

_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_@]*)\}")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_@]*")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
# The keywords after which ksqlDB's grammar has an identifier (a source or type name).
_NAME_AFTER = frozenset({"STREAM", "TABLE", "FROM", "JOIN", "INTO", "EXISTS", "TYPE", "DESCRIBE"})


class SessionVariables(Mapping[str, str]):
    """The variables of a session: names case-insensitive, kept as first defined (ksqlDB's
    ``TreeMap(CASE_INSENSITIVE_ORDER)``), listed in that order."""

    def __init__(self, initial: Mapping[str, object] | None = None) -> None:
        self._by_folded: dict[str, tuple[str, str]] = {}
        for name, value in (initial or {}).items():
            self.define(name, str(value))

    def define(self, name: str, value: str) -> None:
        folded = name.lower()
        known = self._by_folded.get(folded)
        self._by_folded[folded] = (known[0] if known else name, value)

    def undefine(self, name: str) -> bool:
        """Forget ``name``; False when it was not defined."""
        return self._by_folded.pop(name.lower(), None) is not None

    def __getitem__(self, name: str) -> str:
        return self._by_folded[name.lower()][1]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._by_folded

    def __iter__(self) -> Iterator[str]:
        return (self._by_folded[k][0] for k in sorted(self._by_folded))

    def __len__(self) -> int:
        return len(self._by_folded)


def references_variables(tokens: list[Token], text: str) -> bool:
    """Whether the statement made of ``tokens`` (offsets into ``text``) holds a ``${name}``."""
    for token in tokens:
        if token.token_type == TokenType.STRING:
            if "${" in token.text:
                return True
        elif token.text == "$" and _REFERENCE.match(text, token.start):
            return True
    return False


def substitute(tokens: list[Token], text: str, end: int, variables: Mapping[str, str]) -> str:
    """The statement ``text[tokens[0].start:end]`` with its variable references replaced (see the
    module docstring). Raises ``StatementError`` for a reference whose value does not fit its place."""
    start = tokens[0].start
    out: list[str] = []
    written = start
    previous_word = ""
    skip_until = -1
    for token in tokens:
        if token.start < skip_until:
            continue
        if token.token_type == TokenType.STRING:
            raw = text[token.start:token.end + 1]
            out.append(text[written:token.start])
            out.append(_REFERENCE.sub(lambda m: _in_string(m, variables), raw))
            written = token.end + 1
        elif token.text == "$" and (match := _REFERENCE.match(text, token.start)):
            value = variables.get(match.group(1), match.group(0))
            _check(value, previous_word in _NAME_AFTER, text, token.start)
            out.append(text[written:token.start])
            out.append(value)
            written = skip_until = match.end()
            previous_word = ""
            continue
        previous_word = token.text.upper()
    out.append(text[written:end])
    return "".join(out)


def _in_string(match: re.Match[str], variables: Mapping[str, str]) -> str:
    name = match.group(1)
    if name not in variables:
        return match.group(0)
    value = variables[name]
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return "'" + value[1:-1].replace("'", "''") + "'"
    return value.replace("'", "''")


def _check(value: str, name_position: bool, text: str, offset: int) -> None:
    where = position_of(text, offset)
    location = f"Line: {where.line}, Col: {where.column}"
    if _is_identifier(value):
        return
    if name_position:
        raise StatementError(f"Illegal argument at {location}. Identifier names cannot start with '@' and may only "
                             "contain alphanumeric values and '_'.")
    if not _is_literal(value):
        raise StatementError(f"Illegal argument at {location}.")


def _is_identifier(value: str) -> bool:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"`":
        value = value[1:-1]
    return _IDENTIFIER.fullmatch(value) is not None


def _is_literal(value: str) -> bool:
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return True
    if value.lower() in ("true", "false"):
        return True
    if _NUMBER.fullmatch(value):
        try:
            return Decimal(value).is_finite()
        except InvalidOperation:
            return False
    return False
