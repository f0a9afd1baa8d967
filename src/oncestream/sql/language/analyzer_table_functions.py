"""The analyzer's rules for table functions (``EXPLODE``, ``CUBE_EXPLODE``), with ksqlDB's
messages: they may appear only in the SELECT list of a query over a stream without GROUP BY, not
nested in one another nor inside CASE (ksqlDB's Analyzer and QueryAnalyzer rules)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from sqlglot import exp

from oncestream.sql.errors import StatementError
from oncestream.sql.language import functions
from oncestream.sql.language.analyzer_expr import call_parts, ksql_format


def is_table_function_call(node: exp.Expr) -> bool:
    """Whether a parsed (not yet resolved) node calls a table function."""
    parts = call_parts(node)
    return parts is not None and functions.is_table_function(parts[0])


def _table_calls(node: exp.Expr) -> Iterator[exp.Anonymous]:
    for n in node.walk():
        if isinstance(n, exp.Anonymous) and functions.is_table_function(str(n.this)):
            yield n


def check_table_functions(select: Sequence[exp.Expr], *, grouped: bool, table_source: bool,
                          other_clauses: Sequence[exp.Expr]) -> bool:
    """ksqlDB's rules for table functions in a query; True when the SELECT list has any."""
    found = False
    for item in select:
        for call in _table_calls(item):
            found = True
            nested = next((n for n in call.walk() if n is not call and isinstance(n, exp.Anonymous)
                           and functions.is_table_function(str(n.this))), None)
            if nested is not None:
                raise StatementError(f"Table functions cannot be nested: {call.this}({nested.this}())")
            if grouped:
                raise StatementError("Table functions cannot be used with aggregations.")
            case = call.find_ancestor(exp.Case)
            if case is not None:
                raise StatementError(f"Table functions cannot be used in CASE: {ksql_format(case)}")
    for clause in other_clauses:
        misplaced = next(_table_calls(clause), None)
        if misplaced is not None:
            raise StatementError(f"Table function {misplaced.this} can only be used in the SELECT clause.")
    if found and table_source:
        raise StatementError("Table source is not supported with table functions")
    return found
