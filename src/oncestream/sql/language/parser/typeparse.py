"""ksqlDB's type grammar (column definitions, CAST, STRUCT fields), producing ``types.SqlType``,
and the two-way bridge between ``SqlType`` and sqlglot's ``exp.DataType`` (CAST targets are kept
as ``exp.DataType`` in expression trees so that sqlglot can render them).

    type := ARRAY '<' type '>' | MAP '<' type ',' type '>'
          | STRUCT '<' [name type (',' name type)*] '>'
          | DECIMAL '(' precision ',' scale ')'
          | BOOLEAN | INT | INTEGER | BIGINT | DOUBLE | VARCHAR | STRING | BYTES
          | TIMESTAMP | DATE | TIME | <name of a CREATE TYPE>
          a base type may take parameters: '(' (INTEGER | STRING) (',' ...)* ')', ignored
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from sqlglot import exp
from sqlglot.tokens import TokenType

from oncestream.sql.language import types as t
from oncestream.sql.language.parser.base import BaseParser, normalise_name, position_of
from oncestream.sql.language.parser.syntax import describe_token

_PRIMITIVES: dict[str, t.SqlType] = {
    "BOOLEAN": t.BOOLEAN, "INT": t.INTEGER, "INTEGER": t.INTEGER, "BIGINT": t.BIGINT,
    "DOUBLE": t.DOUBLE, "VARCHAR": t.STRING, "STRING": t.STRING, "BYTES": t.BYTES,
    "TIMESTAMP": t.TIMESTAMP, "DATE": t.DATE, "TIME": t.TIME,
}

_TO_DTYPE: dict[t.BaseType, exp.DType] = {
    t.BaseType.BOOLEAN: exp.DataType.Type.BOOLEAN, t.BaseType.INTEGER: exp.DataType.Type.INT,
    t.BaseType.BIGINT: exp.DataType.Type.BIGINT, t.BaseType.DOUBLE: exp.DataType.Type.DOUBLE,
    t.BaseType.STRING: exp.DataType.Type.VARCHAR, t.BaseType.BYTES: exp.DataType.Type.VARBINARY,
    t.BaseType.TIMESTAMP: exp.DataType.Type.TIMESTAMP, t.BaseType.DATE: exp.DataType.Type.DATE,
    t.BaseType.TIME: exp.DataType.Type.TIME,
}

_FROM_DTYPE: dict[exp.DType, t.SqlType] = {
    exp.DataType.Type.BOOLEAN: t.BOOLEAN, exp.DataType.Type.INT: t.INTEGER,
    exp.DataType.Type.BIGINT: t.BIGINT, exp.DataType.Type.DOUBLE: t.DOUBLE,
    exp.DataType.Type.VARCHAR: t.STRING, exp.DataType.Type.TEXT: t.STRING,
    exp.DataType.Type.VARBINARY: t.BYTES, exp.DataType.Type.BINARY: t.BYTES,
    exp.DataType.Type.TIMESTAMP: t.TIMESTAMP, exp.DataType.Type.DATE: t.DATE,
    exp.DataType.Type.TIME: t.TIME,
}


class UnknownDataTypeError(ValueError):
    """An ``exp.DataType`` that has no ksqlDB equivalent."""


def to_data_type(sql_type: t.SqlType) -> exp.DataType:
    """The sqlglot ``DataType`` for a ksqlDB type (what CAST targets hold in expression trees)."""
    b = sql_type.base
    if b is t.BaseType.ARRAY and sql_type.element is not None:
        return exp.DataType(this=exp.DataType.Type.ARRAY, expressions=[to_data_type(sql_type.element)], nested=True)
    if b is t.BaseType.MAP and sql_type.key is not None and sql_type.element is not None:
        return exp.DataType(this=exp.DataType.Type.MAP,
                            expressions=[to_data_type(sql_type.key), to_data_type(sql_type.element)], nested=True)
    if b is t.BaseType.STRUCT:
        fields = [exp.ColumnDef(this=exp.to_identifier(f.name, quoted=True), kind=to_data_type(f.type))
                  for f in sql_type.fields]
        return exp.DataType(this=exp.DataType.Type.STRUCT, expressions=fields, nested=True)
    if b is t.BaseType.DECIMAL:
        params = [exp.DataTypeParam(this=exp.Literal.number(sql_type.precision)),
                  exp.DataTypeParam(this=exp.Literal.number(sql_type.scale))]
        return exp.DataType(this=exp.DataType.Type.DECIMAL, expressions=params, nested=False)
    return exp.DataType(this=_TO_DTYPE[b], nested=False)


def sql_type_of(data_type: exp.DataType) -> t.SqlType:
    """The ksqlDB type of a sqlglot ``DataType`` (the inverse of ``to_data_type``); raises
    ``UnknownDataTypeError`` for a type ksqlDB does not have."""
    kind = data_type.this
    args = data_type.expressions
    if kind == exp.DataType.Type.ARRAY and len(args) == 1 and isinstance(args[0], exp.DataType):
        return t.array_of(sql_type_of(args[0]))
    if kind == exp.DataType.Type.MAP and len(args) == 2 and all(isinstance(a, exp.DataType) for a in args):
        return t.map_of(sql_type_of(args[0]), sql_type_of(args[1]))
    if kind == exp.DataType.Type.STRUCT:
        fields = []
        for col in args:
            if not isinstance(col, exp.ColumnDef) or not isinstance(col.args.get("kind"), exp.DataType):
                raise UnknownDataTypeError(f"Unsupported STRUCT field: {col.sql()}")
            fields.append((col.name, sql_type_of(col.args["kind"])))
        return t.struct_of(*fields)
    if kind == exp.DataType.Type.DECIMAL:
        if len(args) == 2:
            return t.decimal(int(args[0].name), int(args[1].name))
        raise UnknownDataTypeError("DECIMAL requires a precision and a scale")
    if kind in _FROM_DTYPE and not args:
        return _FROM_DTYPE[kind]
    raise UnknownDataTypeError(f"Unsupported type: {data_type.sql()}")


class TypeParser(BaseParser):
    """Adds ``sql_type()``: ksqlDB's ``type`` rule.

    ``custom_types`` are the types CREATE TYPE registered, by upper-cased name (ksqlDB resolves
    them when it prepares a statement, from the metastore). None defers them: a name that is not a
    built-in type then parses (as a placeholder) and sets ``deferred_types``, so that the
    statement is parsed again once the types are known (a CREATE TYPE earlier in the request)."""

    custom_types: Mapping[str, t.SqlType] | None = MappingProxyType({})
    deferred_types: bool = False

    def sql_type(self) -> t.SqlType:
        token = self.token()
        if not self.is_name() or self.is_type(TokenType.IDENTIFIER):
            # ANTLR finds no alternative of ksqlDB's ``type`` rule: a NoViableAltException, which
            # ksqlDB's SyntaxErrorValidator words with the position (cast.json "to null")
            offset = token.start if token is not None else len(self.sql)
            where = position_of(self.sql, offset)
            self.issue(f"Syntax error at or near {describe_token(token)} at line {where.line}:{where.column}")
        word = self._curr.text.upper()
        self._advance()
        if word == "ARRAY":
            self.expect_type(TokenType.LT, "'<'")
            element = self.sql_type()
            self.expect_type(TokenType.GT, "'>'")
            return t.array_of(element)
        if word == "MAP":
            self.expect_type(TokenType.LT, "'<'")
            key = self.sql_type()
            self.expect_type(TokenType.COMMA, "','")
            value = self.sql_type()
            self.expect_type(TokenType.GT, "'>'")
            return t.map_of(key, value)
        if word == "STRUCT":
            if self.accept_type(TokenType.NEQ) and self._prev.text == "<>":   # STRUCT<>: '<>' is one token
                return t.struct_of()
            self.expect_type(TokenType.LT, "'<'")
            fields: list[tuple[str, t.SqlType]] = []
            if not self.accept_type(TokenType.GT):
                while True:
                    field_name = normalise_name(self.name_token())
                    fields.append((field_name, self.sql_type()))
                    if self.accept_type(TokenType.GT):
                        break
                    self.expect_type(TokenType.COMMA, "{',', '>'}")
            names = [n for n, _ in fields]
            if len(set(names)) != len(names):
                self.issue("Duplicate field names found in STRUCT", token)
            return t.struct_of(*fields)
        if word == "DECIMAL":
            self.expect_type(TokenType.L_PAREN, "'('")
            precision = self.integer()
            self.expect_type(TokenType.COMMA, "','")
            scale = self.integer()
            self.expect_type(TokenType.R_PAREN, "')'")
            if precision < 1 or scale < 0 or scale > precision:
                self.issue(f"DECIMAL precision must be >= 1 and scale between 0 and precision: DECIMAL({precision}, {scale})",
                           token)
            return t.decimal(precision, scale)
        primitive = _PRIMITIVES.get(word)
        if primitive is None and self.custom_types is None:
            self.deferred_types = True
            return t.STRING
        if primitive is None and self.custom_types is not None and token is not None:
            primitive = self.custom_types.get(normalise_name(token))
        if primitive is None:
            self.issue(f"Unknown type: {word}", token)
        if self.accept_type(TokenType.L_PAREN):
            self._type_parameters()
        return primitive

    def _type_parameters(self) -> None:
        """``typeParameter (',' typeParameter)* ')'`` after a base type's ``(``, a
        ``typeParameter`` being a number or the word STRING (ksqlDB's grammar; its
        ``SqlTypeParser`` ignores them: ``VARCHAR(STRING)`` and ``INT(3)`` are a STRING and an
        INT). ksqlDB's syntax errors here
        name the short expectation lists (``SyntaxErrorValidator.getExpectations``)."""
        while True:
            if self.is_type(TokenType.NUMBER) and self._curr.text.isascii() and self._curr.text.isdigit():
                self._advance()
            elif not self.accept("STRING"):
                self.issue("Expecting {'STRING', INTEGER_VALUE}")
            if self.accept_type(TokenType.R_PAREN):
                return
            if not self.accept_type(TokenType.COMMA):
                self.issue("Expecting {',', ')'}")
