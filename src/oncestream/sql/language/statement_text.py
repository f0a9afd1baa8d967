"""A ``CREATE ... AS SELECT`` as ksqlDB prints the statement it has rewritten (``SqlFormatter``):
the text after ``Statement:`` in the errors its engine raises on the rewritten statement
(``KsqlStatementException``), e.g. a sink's key format that cannot hold the key columns:

    CREATE TABLE OUTPUT WITH (KEY_FORMAT='KAFKA') AS SELECT
      TEST.F1 K1,
      COUNT(*) TOTAL
    FROM TEST TEST
    GROUP BY TEST.F1
    EMIT CHANGES

Every select item has its output name (generated ``KSQL_COL_n`` included), names are qualified
with their source's alias, expressions print as ``ExpressionFormatter`` does (``ksql_format``),
``EMIT CHANGES`` is added. Only the single-source shapes without a window are printed; for the
others ``create_as_text`` answers None (the error then carries the statement as written).
"""

from __future__ import annotations

import re
from typing import Any

from sqlglot import exp

from oncestream.sql.language import sql_ast
from oncestream.sql.language.analyzer_expr import ksql_format

_PLAIN_NAME = re.compile(r"^[A-Z_][A-Z0-9_@]*$")


def _name(name: str) -> str:
    """An identifier as ksqlDB prints one (backquoted unless it reads as itself unquoted)."""
    return name if _PLAIN_NAME.match(name) else "`" + name.replace("`", "``") + "`"


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def _select_items(stmt: sql_ast.CreateAsSelect, analyzed: Any) -> list[str] | None:
    """``expression NAME`` per select item in the order written (the analyzed columns put the key
    columns first): an aliased item by its alias, any other by its expression."""
    pairs = list(zip(analyzed.columns, analyzed.expressions, strict=True))
    used: set[int] = set()
    items = []
    for item in stmt.query.select.expressions:
        if isinstance(item, exp.Star) or (isinstance(item, exp.Column) and isinstance(item.this, exp.Star)):
            return None
        alias = item.alias if isinstance(item, exp.Alias) else None
        written = ksql_format(item.this if isinstance(item, exp.Alias) else item)
        found = None
        for i, (column, expression) in enumerate(pairs):
            if i in used:
                continue
            if (column.name == alias) if alias else ksql_format(expression) == written:
                found = i
                break
        if found is None:
            return None
        used.add(found)
        column, expression = pairs[found]
        items.append(f"{ksql_format(expression, qualify=True)} {_name(column.name)}")
    return items if len(used) == len(pairs) else None


def create_as_text(stmt: sql_ast.CreateAsSelect, analyzed: Any) -> str | None:
    """``stmt`` as ksqlDB's SqlFormatter prints it after rewriting (module docstring), or None
    for a shape this does not print."""
    query = stmt.query
    if query.joins or query.window is not None or analyzed.joins or query.limit is not None:
        return None
    items = _select_items(stmt, analyzed)
    if items is None:
        return None
    head = "CREATE " + ("OR REPLACE " if stmt.or_replace else "") + stmt.kind.value + " "
    head += ("IF NOT EXISTS " if stmt.if_not_exists else "") + _name(stmt.name)
    if stmt.properties:
        # PropertiesConfig.toString: the config names in order, each with its literal as written
        props = ", ".join(f"{k.upper()}={_literal(v)}" for k, v in sorted(stmt.properties.items(),
                                                                          key=lambda kv: kv[0].upper()))
        head += f" WITH ({props})"
    lines = [head + " AS SELECT" + ("\n  " + ",\n  ".join(items) if len(items) > 1 else " " + items[0])]
    source = analyzed.sources[analyzed.from_alias]
    lines.append(f"FROM {_name(source.name)} {_name(analyzed.from_alias)}")
    if analyzed.where is not None:
        lines.append("WHERE " + ksql_format(analyzed.where, qualify=True))
    if analyzed.group_by:
        lines.append("GROUP BY " + ", ".join(ksql_format(g, qualify=True) for g in analyzed.group_by))
    if analyzed.partition_by:
        lines.append("PARTITION BY " + ", ".join(ksql_format(p, qualify=True) for p in analyzed.partition_by))
    if analyzed.having is not None:
        lines.append("HAVING " + ksql_format(analyzed.having, qualify=True))
    lines.append("EMIT FINAL" if analyzed.emit_final else "EMIT CHANGES")
    return "\n".join(lines)
