"""ksqlDB's ``statement`` rule: one statement from its first token to its end (the ``;`` is
handled by ``api``), producing the ``ast`` dataclasses.

Statement families (see docs/sql-reference.md for the full grammar and examples):
SELECT, CREATE [OR REPLACE] [SOURCE] STREAM|TABLE, CREATE ... AS SELECT, INSERT INTO ... SELECT,
INSERT INTO ... VALUES, DROP, TERMINATE, PAUSE, RESUME, SHOW|LIST, DESCRIBE, EXPLAIN, SET, UNSET,
DEFINE, UNDEFINE, CREATE / DROP TYPE, ALTER STREAM|TABLE ... ADD COLUMN, PRINT. ksqlDB statements that
oncestream does not implement (ASSERT TOPIC, connectors...) are refused with a syntax error that says so.
"""

from __future__ import annotations

import difflib
from typing import Any

from sqlglot import exp
from sqlglot.tokens import TokenType

from oncestream.sql.language import sql_ast
from oncestream.sql.language.parser.base import position_of
from oncestream.sql.language.parser.query import QueryParser
from oncestream.sql.language.parser.syntax import (
    STATEMENT_KEYWORDS,
    PrepareIssue,
    SyntaxIssue,
    mismatched,
    unsupported,
)
from oncestream.sql.language.types import BYTES, HEADERS_TYPE, SqlType

_SHOW_WHAT = {w.value: w for w in sql_ast.ShowWhat}
_SHOW_EXTENDED = frozenset({sql_ast.ShowWhat.STREAMS, sql_ast.ShowWhat.TABLES, sql_ast.ShowWhat.QUERIES, sql_ast.ShowWhat.TOPICS})

# ksqlDB statements outside oncestream's scope: first keyword(s) -> what the error calls them.
_UNSUPPORTED_STATEMENTS = {"ASSERT": "ASSERT"}
# The statements on one persistent query (or ALL of them), by their first word.
_QUERY_LIFECYCLE: dict[str, type[sql_ast.Terminate | sql_ast.PauseQuery | sql_ast.ResumeQuery]] = {
    "TERMINATE": sql_ast.Terminate, "PAUSE": sql_ast.PauseQuery, "RESUME": sql_ast.ResumeQuery,
}
# ksqlDB's statement grammar has ASSERT [NOT EXISTS] TOPIC | SCHEMA only: its ASSERT VALUES /
# STREAM / TABLE / NULL VALUES and RUN SCRIPT are statements of its test tool, syntax errors here
_ASSERT_FOLLOWERS = frozenset({"NOT", "TOPIC", "SCHEMA"})


_KEYS_EXPLAINED = ("Tables have PRIMARY KEYs, which are unique and NON NULL.\n"
                   "Streams have KEYs, which have no uniqueness or NON NULL constraints.")


class StatementParser(QueryParser):
    """Adds ``parse_statement(text, position)``: the whole statement or a SyntaxIssue."""

    def parse_statement(self, text: str, position: sql_ast.Position) -> sql_ast.Statement:
        statement = self._statement(text, position)
        if not self.at_end():
            raise mismatched(self.token(), ["';'"])
        return statement

    def _statement(self, text: str, position: sql_ast.Position) -> sql_ast.Statement:
        head = self.token()
        if not self._curr:
            self.fail("a statement")
        word = self._curr.text.upper() if self._curr.token_type not in (TokenType.STRING, TokenType.IDENTIFIER) else ""
        if word == "SELECT":
            return sql_ast.QueryStatement(text=text, position=position, query=self.parse_query())
        if word == "CREATE":
            return self._create(text, position)
        if word == "INSERT":
            return self._insert(text, position)
        if word == "DROP":
            return self._drop(text, position)
        if word in _QUERY_LIFECYCLE:
            # ksqlDB's terminateQuery / pauseQuery / resumeQuery: the word, then ALL or a query id.
            self._advance()
            query_id = None if self.accept("ALL") else self.name()
            return _QUERY_LIFECYCLE[word](text=text, position=position, query_id=query_id)
        if word in ("SHOW", "LIST"):
            return self._show(text, position)
        if word == "DESCRIBE":
            return self._describe(text, position)
        if word == "EXPLAIN":
            self._advance()
            if self.is_word(*STATEMENT_KEYWORDS):
                inner_start = self._curr.start
                inner_text = self.sql[inner_start:self.text_end] + ("" if self.end_token is not None else ";")
                inner = self._statement(inner_text, position_of(self.sql, inner_start))
                return sql_ast.Explain(text=text, position=position, statement=inner)
            return sql_ast.Explain(text=text, position=position, query_id=self.name())
        if word == "SET":
            self._advance()
            name = self.string()
            self.expect_type(TokenType.EQ, "'='")
            return sql_ast.SetProperty(text=text, position=position, name=name, value=self.string())
        if word == "UNSET":
            self._advance()
            return sql_ast.UnsetProperty(text=text, position=position, name=self.string())
        if word == "ALTER":
            return self._alter(text, position)
        if word == "PRINT":
            return self._print(text, position)
        if word == "DEFINE":
            self._advance()
            name = self._variable_name()
            self.expect_type(TokenType.EQ, "'='")
            return sql_ast.DefineVariable(text=text, position=position, name=name, value=self.string())
        if word == "UNDEFINE":
            self._advance()
            return sql_ast.UndefineVariable(text=text, position=position, name=self._variable_name())
        if word == "ASSERT":
            after = self._next or self.end_token
            if after is not None and after.text.upper() not in _ASSERT_FOLLOWERS:
                where = position_of(self.sql, after.start)
                raise SyntaxIssue(after, f"Syntax error at or near {_quoted(after)} at line {where.line}:{where.column}")
        if word in _UNSUPPORTED_STATEMENTS:
            raise unsupported(head, f"The {_UNSUPPORTED_STATEMENTS[word]} statement")
        detail = f"Unknown statement {_quoted(head)}"
        close = difflib.get_close_matches(word, STATEMENT_KEYWORDS, n=1, cutoff=0.5)
        if close:
            detail += f"\nDid you mean '{close[0]}'?"
        raise SyntaxIssue(head, detail)

    def _print(self, text: str, position: sql_ast.Position) -> sql_ast.PrintTopic:
        """``PRINT (identifier | STRING) (FROM BEGINNING)? ((INTERVAL | SAMPLE) n)? (LIMIT n)?``
        (ksqlDB's printTopic). The topic name keeps its case even unquoted: ksqlDB's AstBuilder
        reads it case-sensitively, as Kafka topic names are."""
        self.expect("PRINT")
        if self.is_type(TokenType.STRING):
            topic = self.string()
        else:
            topic = self.name_token().text
        from_beginning = self.accept("FROM")
        if from_beginning:
            self.expect("BEGINNING")
        interval = self._print_number("INTERVAL") if self.accept("INTERVAL") or self.accept("SAMPLE") else None
        limit = self._print_number("LIMIT") if self.accept("LIMIT") else None
        return sql_ast.PrintTopic(text=text, position=position, topic=topic, from_beginning=from_beginning,
                                  interval=1 if interval is None else interval, limit=limit)

    def _print_number(self, clause: str) -> int:
        """ksqlDB's ``number`` rule then its processIntegerNumber: a decimal parses but is refused."""
        token = self.token()
        negative = self._match(TokenType.DASH)
        if not self.is_type(TokenType.NUMBER):
            self.fail("a number")
        self._advance()
        digits = self._prev.text
        if not (digits.isascii() and digits.isdigit()):
            self.issue(f"Value must be integer for command: {clause}", token, syntax=False)
        return -int(digits) if negative else int(digits)

    def _alter(self, text: str, position: sql_ast.Position) -> sql_ast.Statement:
        """``ALTER STREAM|TABLE name ADD [COLUMN] col type (, ADD [COLUMN] col type)*``."""
        self.expect("ALTER")
        if self.accept("STREAM"):
            kind = sql_ast.SourceKind.STREAM
        elif self.accept("TABLE"):
            kind = sql_ast.SourceKind.TABLE
        elif self.is_word("SYSTEM"):
            raise unsupported(self.token(), "ALTER SYSTEM")
        else:
            self.fail("{'STREAM', 'TABLE', 'SYSTEM'}")
        name = self.name()
        columns: list[sql_ast.ColumnDef] = []
        while True:
            self.expect("ADD")
            self.accept("COLUMN")
            name_token = self.token()
            column = self.name()
            if any(c.name == column for c in columns):
                self.issue(f"Duplicate column names: `{column}`", name_token, syntax=False)
            columns.append(sql_ast.ColumnDef(column, self.sql_type()))
            if not self.accept_type(TokenType.COMMA):
                return sql_ast.AlterSource(text=text, position=position, kind=kind, name=name, columns=tuple(columns))

    def _variable_name(self) -> str:
        """ksqlDB's ``variableName``: an unquoted identifier, kept as written (variables are
        looked up case-insensitively)."""
        curr = self._curr
        if curr is None or not self.is_name() or curr.token_type == TokenType.IDENTIFIER \
                or not _is_plain_identifier(curr.text):
            self.fail("IDENTIFIER")
        self._advance()
        return str(curr.text)

    # -- CREATE ---------------------------------------------------------------------------------------
    def _properties(self) -> dict[str, Any]:
        """``( key = literal, ... )``; keys upper-cased (quoted keys too: ksqlDB property names are
        case-insensitive)."""
        self.expect_type(TokenType.L_PAREN, "'('")
        props: dict[str, Any] = {}
        while True:
            key_token = self.token()
            if self.is_type(TokenType.STRING):
                key = self.string().upper()
            else:
                key = self.name().upper()
            if key in props:
                self.issue(f"Duplicate property: {key}", key_token)
            self.expect_type(TokenType.EQ, "'='")
            props[key] = self.literal_value()
            if self.accept_type(TokenType.R_PAREN):
                return props
            self.expect_type(TokenType.COMMA, "{',', ')'}")

    def _column_defs(self, kind: sql_ast.SourceKind) -> tuple[sql_ast.ColumnDef, ...]:
        """The ``(name type [KEY | PRIMARY KEY], ...)`` list, with ksqlDB's parse-time checks:
        no duplicate names, KEY only on streams, PRIMARY KEY only on tables."""
        columns: list[sql_ast.ColumnDef] = []
        while True:
            name_token = self.token()
            name = self.name()
            if any(c.name == name for c in columns):
                self.issue(f"Duplicate column names: `{name}`", name_token, syntax=False)
            column_type = self.sql_type()
            key = primary = False
            if self.accept_type(TokenType.PRIMARY_KEY) or self.accept("PRIMARY", "KEY"):
                key = primary = True
            elif self.accept("KEY"):
                key = True
            headers, header_key = self._header_constraint(column_type) if not key else (False, None)
            if primary and kind is sql_ast.SourceKind.STREAM:
                self.issue(f"Column `{name}` is a 'PRIMARY KEY' column: please use 'KEY' for streams.\n{_KEYS_EXPLAINED}",
                           name_token, syntax=False, node_location=True)
            if key and not primary and kind is sql_ast.SourceKind.TABLE:
                self.issue(f"Column `{name}` is a 'KEY' column: please use 'PRIMARY KEY' for tables.\n{_KEYS_EXPLAINED}",
                           name_token, syntax=False, node_location=True)
            columns.append(sql_ast.ColumnDef(name=name, type=column_type, key=key, primary_key=primary,
                                             headers=headers, header_key=header_key))
            if self.accept_type(TokenType.R_PAREN):
                return tuple(columns)
            self.expect_type(TokenType.COMMA, "{',', ')'}" if key or headers
                             else "{',', ')', 'HEADER', 'HEADERS', 'KEY', 'PRIMARY'}")

    def _header_constraint(self, column_type: SqlType) -> tuple[bool, str | None]:
        """``HEADERS`` or ``HEADER('k')`` after a column's type (ksqlDB's columnConstraints), with
        the type checks ksqlDB's AstBuilder makes: HEADERS is exactly
        ``ARRAY<STRUCT<KEY STRING, VALUE BYTES>>``, HEADER('k') is BYTES."""
        if self.accept("HEADERS"):
            if column_type.ksql_name != HEADERS_TYPE.ksql_name:
                raise PrepareIssue(f"Invalid type for HEADERS column: expected {HEADERS_TYPE.ksql_name}, "
                                   f"got {column_type.ksql_name}")
            return True, None
        if not self.accept("HEADER"):
            return False, None
        self.expect_type(TokenType.L_PAREN, "'('")
        header_key = self.string()
        self.expect_type(TokenType.R_PAREN, "')'")
        if not header_key:
            raise PrepareIssue("Header column must have a non-empty header key name defined")
        if column_type != BYTES:
            raise PrepareIssue(f"Invalid type for HEADER('{header_key}') column: expected BYTES, got {column_type.ksql_name}")
        return True, header_key

    def _create(self, text: str, position: sql_ast.Position) -> sql_ast.Statement:
        self.expect("CREATE")
        or_replace = self.accept("OR", "REPLACE")
        read_only = self.accept("SOURCE")
        if self.accept("STREAM"):
            kind = sql_ast.SourceKind.STREAM
        elif self.accept("TABLE"):
            kind = sql_ast.SourceKind.TABLE
        elif self.accept("TYPE"):
            if or_replace or read_only:
                self.fail("{'STREAM', 'TABLE'}")
            type_if_not_exists = self.accept("IF", "NOT", "EXISTS")
            type_name = self.name()
            self.expect("AS")
            return sql_ast.CreateType(text=text, position=position, name=type_name, type=self.sql_type(),
                                      if_not_exists=type_if_not_exists)
        elif self.is_word("CONNECTOR", "SINK"):
            raise unsupported(self.token(), f"CREATE {self._curr.text.upper()}")
        else:
            self.fail("{'STREAM', 'TABLE'}")
        if_not_exists = self.accept("IF", "NOT", "EXISTS")
        name = self.name()
        columns: tuple[sql_ast.ColumnDef, ...] = ()
        if self.accept_type(TokenType.L_PAREN):
            columns = self._column_defs(kind)
        properties: dict[str, Any] = {}
        if self.accept("WITH"):
            properties = self._properties()
        if self.is_word("AS"):
            as_token = self.token()
            self._advance()
            if columns:
                self.issue("CREATE ... AS SELECT cannot declare columns", as_token)
            if read_only:
                self.issue("CREATE SOURCE ... AS SELECT is not valid: a source stream or table is read-only",
                           as_token)
            return sql_ast.CreateAsSelect(text=text, position=position, kind=kind, name=name, query=self.parse_query(),
                                      properties=properties, if_not_exists=if_not_exists, or_replace=or_replace)
        if not self.at_end():
            self.fail("{'WITH', 'AS', ';'}" if not properties else "{'AS', ';'}")
        return sql_ast.CreateSource(text=text, position=position, kind=kind, name=name, columns=columns,
                                properties=properties, if_not_exists=if_not_exists, or_replace=or_replace,
                                read_only=read_only)

    # -- INSERT ---------------------------------------------------------------------------------------
    def _insert(self, text: str, position: sql_ast.Position) -> sql_ast.Statement:
        self.expect("INSERT", "INTO")
        target = self.name()
        if self.accept("WITH"):
            properties = self._properties()
            return sql_ast.InsertInto(text=text, position=position, target=target, query=self.parse_query(),
                                  properties=properties)
        if self.is_word("SELECT"):
            return sql_ast.InsertInto(text=text, position=position, target=target, query=self.parse_query())
        columns: tuple[str, ...] | None = None
        if self.accept_type(TokenType.L_PAREN):
            names = [self.name()]
            while self.accept_type(TokenType.COMMA):
                names.append(self.name())
            self.expect_type(TokenType.R_PAREN, "{',', ')'}")
            columns = tuple(names)
        if not self.is_word("VALUES"):
            self.fail("'VALUES'" if columns is not None else "{'(', 'VALUES', 'WITH', 'SELECT'}")
        self._advance()
        self.expect_type(TokenType.L_PAREN, "'('")
        values: list[exp.Expression] = []
        if not self.accept_type(TokenType.R_PAREN):
            values.append(self.parse_value_expression())
            while self.accept_type(TokenType.COMMA):
                values.append(self.parse_value_expression())
            self.expect_type(TokenType.R_PAREN, "{',', ')'}")
        return sql_ast.InsertValues(text=text, position=position, target=target, columns=columns, values=tuple(values))

    # -- DROP, SHOW, DESCRIBE ---------------------------------------------------------------------------
    def _drop(self, text: str, position: sql_ast.Position) -> sql_ast.Statement:
        self.expect("DROP")
        if self.accept("STREAM"):
            kind = sql_ast.SourceKind.STREAM
        elif self.accept("TABLE"):
            kind = sql_ast.SourceKind.TABLE
        elif self.accept("TYPE"):
            type_if_exists = self.accept("IF", "EXISTS")
            return sql_ast.DropType(text=text, position=position, name=self.name(), if_exists=type_if_exists)
        elif self.is_word("CONNECTOR"):
            raise unsupported(self.token(), f"DROP {self._curr.text.upper()}")
        else:
            self.fail("{'STREAM', 'TABLE'}")
        if_exists = self.accept("IF", "EXISTS")
        name = self.name()
        delete_topic = False
        if self.is_word("DELETE"):
            self._advance()
            self.expect("TOPIC")
            delete_topic = True
        return sql_ast.DropSource(text=text, position=position, kind=kind, name=name, if_exists=if_exists,
                              delete_topic=delete_topic)

    def _show(self, text: str, position: sql_ast.Position) -> sql_ast.Statement:
        self._advance()  # SHOW | LIST
        token = self.token()
        if self.is_word("ALL"):
            raise unsupported(token, "SHOW ALL TOPICS")
        if self.is_word("CONNECTORS", "SOURCE", "SINK", "CONNECTOR"):
            raise unsupported(token, f"SHOW {self._curr.text.upper()}")
        word = self._curr.text.upper() if self._curr and self._curr.token_type != TokenType.STRING else ""
        what = _SHOW_WHAT.get(word)
        if what is None or self.is_type(TokenType.IDENTIFIER):
            self.fail("{'STREAMS', 'TABLES', 'QUERIES', 'TOPICS', 'PROPERTIES', 'FUNCTIONS', 'VARIABLES', 'TYPES'}")
        self._advance()
        extended = what in _SHOW_EXTENDED and self.accept("EXTENDED")
        return sql_ast.Show(text=text, position=position, what=what, extended=extended)

    def _describe(self, text: str, position: sql_ast.Position) -> sql_ast.Statement:
        self.expect("DESCRIBE")
        if self.accept("FUNCTION"):
            return sql_ast.Describe(text=text, position=position, name=self.name(), function=True)
        if self.is_word("CONNECTOR"):
            raise unsupported(self.token(), "DESCRIBE CONNECTOR")
        if self.is_word("STREAMS", "TABLES"):
            what = _SHOW_WHAT[self._curr.text.upper()]
            self._advance()
            return sql_ast.Describe(text=text, position=position, name=None, what=what, extended=self.accept("EXTENDED"))
        name = self.name()
        return sql_ast.Describe(text=text, position=position, name=name, extended=self.accept("EXTENDED"))


def _is_plain_identifier(text: str) -> bool:
    """``[A-Za-z_][A-Za-z0-9_@]*`` (ksqlDB's IDENTIFIER token), without a regular expression."""
    return bool(text) and (text[0].isascii() and (text[0].isalpha() or text[0] == "_")) and all(
        c.isascii() and (c.isalnum() or c in "_@") for c in text)


def _quoted(token: Any) -> str:
    return f"'{token.text}'" if token is not None else "'<EOF>'"


