"""Running a pull query against a table's store: read the candidate keys, decode each row with
``oncestream.sql.engine.serde``, filter it with the complete WHERE, project it, stop at LIMIT.

Rows are read from a ``read_committed`` reader frozen at one store commit, so one pull query
sees one consistent state of the table, and only data of committed changelog transactions.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from oncestream.sql.engine.interface import ColumnHeader
from oncestream.sql.engine.pull.lookup import plan_key_access, read_candidates
from oncestream.sql.engine.serde import RecordLayout, SerdeError, layout_of
from oncestream.sql.errors import StatementError
from oncestream.sql.language.analyzer import PULL_QUERY_HELP
from oncestream.sql.language.catalog import ROWOFFSET, ROWPARTITION, ROWTIME, WINDOWEND, WINDOWSTART, SourceInfo
from oncestream.sql.language.evaluate import check_supported, column_name, date_text, evaluate, timestamp_text
from oncestream.sql.language.sql_ast import SourceKind
from oncestream.sql.language.types import BIGINT, BaseType, SqlType

log = logging.getLogger(__name__)

_EPOCH = dt.datetime(1970, 1, 1)


@dataclass(frozen=True)
class OutputColumn:
    """One column of a pull query's result: its name, type and the expression computing it."""

    name: str
    type: SqlType
    expression: exp.Expr


@dataclass(frozen=True)
class PullPlan:
    """A pull query reduced to what execution needs (built by ``execute_pull`` from the
    analyzer's result, or directly by callers that resolved the query themselves)."""

    outputs: tuple[OutputColumn, ...]
    where: exp.Expr | None = None
    limit: int | None = None


def pull_error(message: str) -> StatementError:
    """A pull-query refusal worded as ksqlDB words them (with its syntax help)."""
    return StatementError(message + PULL_QUERY_HELP)


def validate_plan(plan: PullPlan, source: SourceInfo) -> None:
    """Refuse what a pull query cannot do here, before reading anything."""
    if source.kind is not SourceKind.TABLE:
        raise pull_error(f"Pull queries on streams are not supported: {source.name} is a stream.")
    if plan.limit is not None and plan.limit < 0:
        raise pull_error("Pull queries don't support negative integers in the LIMIT clause.")
    for where, expressions in (("SELECT", [o.expression for o in plan.outputs]),
                               ("WHERE", [plan.where] if plan.where is not None else [])):
        names = [column_name(c) for e in expressions for c in e.find_all(exp.Column)]
        disallowed = sorted({n for n in names if n in (ROWPARTITION, ROWOFFSET)})
        if disallowed:
            raise pull_error(f"Pull queries don't support the following columns in {where} clauses: "
                             f"{', '.join(disallowed)}\n")
        if ROWTIME in names and source.column(ROWTIME) is None:
            # The store keeps the changelog's keys and values, not the record timestamps.
            raise pull_error("Pull queries here don't support ROWTIME: materialized tables keep keys and values only.")
        headers = sorted({n for n in names if (c := source.column(n)) is not None and c.is_header})
        if headers:
            # The store keeps the changelog's keys and values, not the records' headers.
            raise pull_error(f"Pull queries here don't support header columns ({', '.join(headers)}): "
                             "materialized tables keep keys and values only.")
        if source.window is None:
            windowed = sorted({n for n in names if n in (WINDOWSTART, WINDOWEND) and source.column(n) is None})
            if windowed:
                raise pull_error(f"Column '{windowed[0]}' cannot be resolved: {source.name} is not windowed.")
    for output in plan.outputs:
        check_supported(output.expression)
    if plan.where is not None:
        check_supported(plan.where)


def json_ready(value: Any, sql_type: SqlType) -> Any:
    """A column value as ksqlDB's REST API writes it: BYTES base64, DECIMAL a number, TIMESTAMP
    ``yyyy-MM-ddTHH:mm:ss.SSS`` (UTC), DATE ``yyyy-MM-dd``, TIME ``HH:mm:ss``; containers
    element-wise."""
    if value is None:
        return None
    base = sql_type.base
    if base is BaseType.BYTES and isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    if base is BaseType.DECIMAL or isinstance(value, decimal.Decimal):
        return float(value)
    if base is BaseType.TIMESTAMP and isinstance(value, int):
        return timestamp_text(value)
    if base is BaseType.DATE and isinstance(value, int):
        return date_text(value)
    if base is BaseType.TIME and isinstance(value, int):
        return (_EPOCH + dt.timedelta(milliseconds=value)).strftime("%H:%M:%S")
    if base is BaseType.ARRAY and sql_type.element is not None and isinstance(value, list):
        return [json_ready(v, sql_type.element) for v in value]
    if base is BaseType.MAP and sql_type.element is not None and isinstance(value, dict):
        return {k: json_ready(v, sql_type.element) for k, v in value.items()}
    if base is BaseType.STRUCT and isinstance(value, dict):
        return {f.name: json_ready(value.get(f.name), f.type) for f in sql_type.fields}
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode()
    return value


def _row(layout: RecordLayout, key: bytes, value: bytes) -> dict[str, Any] | None:
    """Column name -> value for one store entry (None for a row that serde cannot read)."""
    try:
        keys, window = layout.decode_key(key)
        values = layout.decode_value(value)
    except SerdeError as exc:
        # As ksqlDB's materialization skips records it cannot deserialize (logged), so does a
        # pull query: one unreadable changelog record must not make the whole table unqueryable.
        log.warning("pull query: skipping an unreadable row (key %r): %s", key[:64], exc.message)
        return None
    row = dict(keys)
    if window is not None:
        row[WINDOWSTART] = window.start_ms
        row[WINDOWEND] = window.end_ms
    if values is not None:
        row.update(values)
    return row


def run_plan(plan: PullPlan, source: SourceInfo, reader: Any) -> tuple[list[ColumnHeader], list[list[Any]]]:
    """Execute ``plan`` over the table ``source`` through ``reader`` (a store reader with
    ``get``, ``range`` and ``prefix``: ``StateStore.reader("read_committed")``)."""
    validate_plan(plan, source)
    layout = layout_of(source)
    access = plan_key_access(source, layout, plan.where)
    headers = [ColumnHeader(o.name, o.type.ksql_name) for o in plan.outputs]
    rows: list[list[Any]] = []
    if plan.limit == 0:
        return headers, rows
    for key, value in read_candidates(access, reader):
        row = _row(layout, key, value)
        if row is None:
            continue
        if plan.where is not None and evaluate(plan.where, row) is not True:
            continue
        rows.append([json_ready(evaluate(o.expression, row), o.type) for o in plan.outputs])
        if plan.limit is not None and len(rows) >= plan.limit:
            break
    return headers, rows


def star_outputs(source: SourceInfo) -> list[OutputColumn]:
    """``SELECT *`` of a table as ksqlDB's pull queries answer it: key columns, then
    ``WINDOWSTART``/``WINDOWEND`` for a windowed table, then the value and header columns."""
    out = [OutputColumn(c.name, c.type, exp.column(c.name, quoted=True)) for c in source.key_columns]
    if source.window is not None:
        out += [OutputColumn(n, BIGINT, exp.column(n, quoted=True)) for n in (WINDOWSTART, WINDOWEND)]
    out += [OutputColumn(c.name, c.type, exp.column(c.name, quoted=True))
            for c in (*source.value_columns, *source.header_columns)]
    return out


def outputs_of(columns: Sequence[Any], expressions: Sequence[exp.Expr]) -> tuple[OutputColumn, ...]:
    """Pair the analyzer's output columns with their resolved expressions."""
    if len(columns) != len(expressions):
        raise StatementError(f"analyzer gave {len(columns)} columns for {len(expressions)} expressions")
    return tuple(OutputColumn(c.name, c.type, e) for c, e in zip(columns, expressions, strict=True))
