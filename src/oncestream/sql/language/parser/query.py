"""ksqlDB's ``query`` rule: the SELECT with its ksqlDB-only clauses lifted out into ``sql_ast.Query``.

    query := SELECT item (',' item)* FROM source [[AS] alias] join*
             [WINDOW window] [WHERE expr] [GROUP BY exprs] [PARTITION BY exprs]
             [HAVING expr] [EMIT CHANGES | EMIT FINAL] [LIMIT n]
    join  := [INNER | LEFT [OUTER] | RIGHT [OUTER] | FULL [OUTER]] JOIN source [[AS] alias]
             [WITHIN (n unit, m unit) [GRACE PERIOD n unit] | WITHIN n unit [GRACE PERIOD n unit]]
             ON expr
    window := [name] TUMBLING (SIZE n unit [, RETENTION n unit] [, GRACE PERIOD n unit])
            | [name] HOPPING (SIZE n unit, ADVANCE BY n unit [, RETENTION ...] [, GRACE PERIOD ...])
            | [name] SESSION (n unit [, RETENTION ...] [, GRACE PERIOD ...])
    unit  := MILLISECOND(S) | SECOND(S) | MINUTE(S) | HOUR(S) | DAY(S)

The order of the clauses is ksqlDB's (WINDOW before WHERE, PARTITION BY before HAVING).
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.tokens import TokenType

from oncestream.sql.language import sql_ast
from oncestream.sql.language.parser.base import normalise_name
from oncestream.sql.language.parser.expressions import ExpressionParser
from oncestream.sql.language.parser.syntax import PrepareIssue, unsupported

# ksqlDB's window units (its ``windowUnit`` rule, java.util.concurrent.TimeUnit), in milliseconds.
UNIT_MS: dict[str, int] = {
    "MILLISECOND": 1, "MILLISECONDS": 1,
    "SECOND": 1_000, "SECONDS": 1_000,
    "MINUTE": 60_000, "MINUTES": 60_000,
    "HOUR": 3_600_000, "HOURS": 3_600_000,
    "DAY": 86_400_000, "DAYS": 86_400_000,
}

# Words that end a select item or a relation, so an alias written without AS cannot be one of them.
CLAUSE_WORDS = frozenset({"FROM", "WINDOW", "WHERE", "GROUP", "PARTITION", "HAVING", "EMIT", "LIMIT", "JOIN",
                          "INNER", "LEFT", "RIGHT", "FULL", "OUTER", "CROSS", "ON", "WITHIN", "AS", "ORDER",
                          "UNION", "SELECT", "VALUES", "WITH"})
_CLAUSE_TOKENS = frozenset({TokenType.GROUP_BY, TokenType.PARTITION_BY, TokenType.ORDER_BY, TokenType.SORT_BY,
                            TokenType.CLUSTER_BY, TokenType.DISTRIBUTE_BY})

_UNITS_SHOWN = "{'MILLISECOND', 'SECOND', 'MINUTE', 'HOUR', 'DAY' (or plural)}"


class QueryParser(ExpressionParser):
    """Adds ``parse_query()`` (cursor on SELECT) and ``duration_ms()``."""

    # -- pieces -----------------------------------------------------------------------------------
    def duration_ms(self) -> int:
        """``n unit`` in milliseconds."""
        amount = self.integer()
        if not self._curr or self._curr.text.upper() not in UNIT_MS or self.is_type(TokenType.IDENTIFIER):
            self.fail(_UNITS_SHOWN)
        unit = self._curr.text.upper()
        self._advance()
        return amount * UNIT_MS[unit]

    def optional_alias(self) -> exp.Identifier | None:
        """``AS name`` or a bare name that is not a clause keyword."""
        if self.accept("AS"):
            token = self.name_token()
        elif (self.is_name() and not self.is_type(*_CLAUSE_TOKENS)
              and (self.is_type(TokenType.IDENTIFIER) or self._curr.text.upper() not in CLAUSE_WORDS)):
            token = self.name_token()
        else:
            return None
        return exp.to_identifier(normalise_name(token), quoted=token.token_type == TokenType.IDENTIFIER)

    def _source(self) -> tuple[exp.Table, str, str | None]:
        token = self.name_token()
        name = normalise_name(token)
        alias = self.optional_alias()
        table = exp.Table(this=exp.to_identifier(name, quoted=token.token_type == TokenType.IDENTIFIER))
        if alias is not None:
            table.set("alias", exp.TableAlias(this=alias))
        return table, name, alias.name if alias is not None else None

    def _select_item(self) -> exp.Expression:
        if self.accept_type(TokenType.STAR):
            return exp.Star()
        if self.is_name() and self._next and self._next.token_type == TokenType.DOT:
            index = self._index
            token = self.name_token()
            self._advance()  # the dot
            if self.accept_type(TokenType.STAR):
                table = exp.to_identifier(normalise_name(token), quoted=token.token_type == TokenType.IDENTIFIER)
                return exp.Column(this=exp.Star(), table=table)
            self._retreat(index)
        value = self.parse_value_expression()
        alias = self.optional_alias()
        return exp.Alias(this=value, alias=alias) if alias is not None else value

    def _expression_list(self, clause: str) -> tuple[exp.Expression, ...]:
        """ksqlDB's groupBy/partitionBy: ``e (, e)*`` or ``( [e (, e)*] )``; the empty ``()`` is
        grammatical, refused as ksqlDB's GroupBy/PartitionBy nodes refuse it."""
        if self.is_type(TokenType.L_PAREN) and self._next is not None and self._next.token_type == TokenType.R_PAREN:
            raise PrepareIssue(f"{clause} requires at least one expression")
        first = self.parse_value_expression(allow_tuple=True, operand_only=True)
        items = [first]
        while self.accept_type(TokenType.COMMA):
            items.append(self.parse_value_expression(operand_only=True))
        if isinstance(first, exp.Tuple) and len(items) > 1:
            self.issue("a parenthesised list cannot be followed by ','", self.token())
        if len(items) == 1 and isinstance(first, exp.Tuple):
            items = list(first.expressions)
        elif len(items) == 1 and isinstance(first, exp.Paren):
            items = [first.this]
        if not items:
            self.fail("an expression")
        return tuple(items)

    def _window(self) -> sql_ast.WindowSpec:
        kinds = ("TUMBLING", "HOPPING", "SESSION")
        if not self.is_word(*kinds) and self.is_name() and self._next and self._next.text.upper() in kinds:
            self._advance()  # ksqlDB's optional window name, which it ignores too
        if self.accept("TUMBLING"):
            kind = sql_ast.WindowKind.TUMBLING
        elif self.accept("HOPPING"):
            kind = sql_ast.WindowKind.HOPPING
        elif self.accept("SESSION"):
            kind = sql_ast.WindowKind.SESSION
        else:
            self.fail("{'TUMBLING', 'HOPPING', 'SESSION'}")
        self.expect_type(TokenType.L_PAREN, "'('")
        advance_ms = None
        if kind is sql_ast.WindowKind.SESSION:
            size_ms = self.duration_ms()
        else:
            self.expect("SIZE")
            size_ms = self.duration_ms()
            if kind is sql_ast.WindowKind.HOPPING:
                self.expect_type(TokenType.COMMA, "','")
                self.expect("ADVANCE", "BY")
                advance_ms = self.duration_ms()
        retention_ms = grace_ms = None
        while self.is_type(TokenType.COMMA):
            allowed = ["'RETENTION'"] if retention_ms is None and grace_ms is None else []
            if grace_ms is None:
                allowed.append("'GRACE'")
            if not allowed:
                self.fail("')'")   # GRACE PERIOD is the last option
            self._advance()
            if retention_ms is None and grace_ms is None and self.accept("RETENTION"):
                retention_ms = self.duration_ms()
            elif grace_ms is None and self.accept("GRACE", "PERIOD"):
                grace_ms = self.duration_ms()
            else:
                self.fail(*allowed)
        self.expect_type(TokenType.R_PAREN, "')'" if grace_ms is not None else "{',', ')'}")
        return sql_ast.WindowSpec(kind=kind, size_ms=size_ms, advance_ms=advance_ms, retention_ms=retention_ms,
                              grace_ms=grace_ms)

    def _join(self) -> sql_ast.JoinSpec | None:
        if self.accept("INNER"):
            kind = "INNER"
        elif self.is_word("LEFT", "RIGHT", "FULL"):
            kind = self._curr.text.upper()
            self._advance()
            self.accept("OUTER")
        elif self.is_word("JOIN"):
            kind = "INNER"
        elif self.is_word("CROSS", "NATURAL"):
            raise unsupported(self.token(), f"{self._curr.text.upper()} JOIN")
        else:
            return None
        self.expect("JOIN")
        _, source, alias = self._source()
        before = after = grace = None
        if self.accept("WITHIN"):
            if self.accept_type(TokenType.L_PAREN):
                before = self.duration_ms()
                self.expect_type(TokenType.COMMA, "','")
                after = self.duration_ms()
                self.expect_type(TokenType.R_PAREN, "')'")
            else:
                before = after = self.duration_ms()
            if self.accept("GRACE", "PERIOD"):
                grace = self.duration_ms()
        if not self.is_word("ON"):
            self.fail("'ON'" if before is not None else "{'WITHIN', 'ON'}")
        self._advance()
        on = self.parse_value_expression()
        return sql_ast.JoinSpec(kind=kind, source=source, alias=alias, on=on, within_before_ms=before,
                            within_after_ms=after, within_grace_ms=grace)

    # -- the query ----------------------------------------------------------------------------------
    def parse_query(self) -> sql_ast.Query:
        self.expect("SELECT")
        if self.is_word("DISTINCT"):
            raise unsupported(self.token(), "SELECT DISTINCT")
        self.accept("ALL")
        items = [self._select_item()]
        while self.accept_type(TokenType.COMMA):
            items.append(self._select_item())
        if not self.is_word("FROM"):
            last = items[-1]
            can_alias = not isinstance(last, exp.Alias) and not last.is_star
            self.fail("{',', 'AS', 'FROM'}" if can_alias else "{',', 'FROM'}")
        self._advance()
        table, source, source_alias = self._source()
        joins = []
        while (join := self._join()) is not None:
            joins.append(join)
        if self.is_type(TokenType.COMMA):
            raise unsupported(self.token(), "A comma-separated FROM list (use JOIN ... ON)")
        select = exp.Select(expressions=items, from_=exp.From(this=table))
        window = None
        if self.accept("WINDOW"):
            window = self._window()
        if self.accept("WHERE"):
            select.set("where", exp.Where(this=self.parse_value_expression()))
        if self.accept_type(TokenType.GROUP_BY):
            select.set("group", exp.Group(expressions=list(self._expression_list("GROUP BY"))))
        partition_by: tuple[exp.Expression, ...] = ()
        if self.accept_type(TokenType.PARTITION_BY):
            partition_by = self._expression_list("PARTITION BY")
        if self.accept("HAVING"):
            select.set("having", exp.Having(this=self.parse_value_expression()))
        emit = sql_ast.Emit.NONE
        if self.accept("EMIT"):
            if self.accept("CHANGES"):
                emit = sql_ast.Emit.CHANGES
            elif self.accept("FINAL"):
                emit = sql_ast.Emit.FINAL
            else:
                self.fail("{'CHANGES', 'FINAL'}")
        limit = None
        if self.accept("LIMIT"):
            limit_token = self.token()
            limit = self.integer()
            if limit < 0:
                self.issue("LIMIT must not be negative", limit_token)
        return sql_ast.Query(select=select, source=source, source_alias=source_alias, joins=tuple(joins),
                         window=window, partition_by=partition_by, emit=emit, limit=limit)
