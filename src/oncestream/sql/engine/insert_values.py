"""Rows of ``INSERT INTO ... VALUES`` and ``/inserts-stream``, as the column values
``oncestream.sql.engine.serde`` encodes (ksqlDB writes such rows directly, not through the command
topic).

``INSERT INTO s [(col, ...)] VALUES (literal, ...)``: without a column list the values are for
every column of ``s`` in order (key columns first, as DESCRIBE lists them); ``ROWTIME`` may be
named to set the record timestamp. Values are literals (numbers, strings, booleans, NULL, a sign,
CAST of a literal, ARRAY[...]); ksqlDB's type coercions from JSON-like values apply (a string for a
TIMESTAMP, a number for a DOUBLE).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlglot import exp

from oncestream.sql.engine.serde import SerdeError, from_json_wire, layout_of
from oncestream.sql.errors import KsqlError, StatementError
from oncestream.sql.language import sql_ast
from oncestream.sql.language.catalog import ROWTIME, SourceInfo
from oncestream.sql.language.types import BIGINT, SqlType


def _literal(node: exp.Expression) -> Any:
    if isinstance(node, exp.Paren):
        return _literal(node.this)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Neg):
        value = _literal(node.this)
        if not isinstance(value, int | float | Decimal):
            raise StatementError(f"Cannot negate {node.this.sql()}")
        return -value
    if isinstance(node, exp.Cast):
        return _literal(node.this)
    if isinstance(node, exp.Array):
        return [_literal(e) for e in node.expressions]
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = str(node.this)
        try:
            if any(ch in text for ch in ".eE"):
                return Decimal(text)
            return int(text)
        except (ValueError, InvalidOperation) as exc:
            raise StatementError(f"Invalid number: {text}") from exc
    raise StatementError(f"Only literals are supported in INSERT INTO ... VALUES, got: {node.sql()}")


def _coerce(value: Any, sql_type: SqlType, column: str) -> Any:
    if isinstance(value, Decimal) and sql_type.base.value != "DECIMAL":
        value = float(value)
    try:
        return from_json_wire(value, sql_type)
    except (SerdeError, ValueError, TypeError, ArithmeticError) as exc:
        raise StatementError(f"Could not coerce value for column {column} to {sql_type.ksql_name}: {value!r}") from exc


def name_alternatives(name: str, sources: Iterable[SourceInfo]) -> str:
    """The hint ksqlDB adds when ``name`` names no source but differs from some only in case
    (``MetaStoreImpl.checkAlternatives``): ``\nDid you mean "input"? Hint: ...``, or ``""``."""
    matched = sorted((s for s in sources if s.name.lower() == name.lower()), key=lambda s: s.name)
    if not matched:
        return ""
    if len(matched) > 1:
        parts = []
        for i, source in enumerate(matched):
            last = len(matched) - 1
            punctuation = "? " if i == last else (", " if i < last - 1 else (" or " if i == 0 else ", or "))
            parts.append(f'"{source.name}" ({source.kind.value}){punctuation}')
        return "\nDid you mean " + "".join(parts) + "Hint: wrap the source name in double quotes to make it case-sensitive."
    other = matched[0].name
    if any(c.islower() for c in other):
        return f'\nDid you mean "{other}"? Hint: wrap the source name in double quotes to make it case-sensitive.'
    return f"\nDid you mean {other}? Hint: try removing double quotes from the source name."


def insert_target(statement: sql_ast.InsertValues, source: SourceInfo | None, sources: Iterable[SourceInfo]) -> SourceInfo:
    """The stream or table ``INSERT INTO ... VALUES`` writes to (``source``: the one named, if
    any), refused as ksqlDB's ``InsertValuesExecutor`` refuses it: unknown (with ``sources``'
    names that differ only in case), a read-only source (``CREATE SOURCE STREAM/TABLE``), or
    values for its header columns (all of them when no columns are named)."""
    if source is None:
        raise StatementError(f"Cannot insert values into an unknown stream/table: `{statement.target}`"
                             + name_alternatives(statement.target, sources), statement_text=statement.text)
    if source.read_only:
        raise StatementError(f"Cannot insert values into read-only {source.kind.value.lower()}: {source.name}",
                             statement_text=statement.text)
    # header columns are read from records' headers, never written (InsertValuesExecutor.validateInsert)
    named = source.header_columns if statement.columns is None else \
        [c for c in source.header_columns if c.name in statement.columns]
    if named:
        raise StatementError("Cannot insert into HEADER columns: " + ", ".join(c.name for c in named),
                             statement_text=statement.text)
    return source


def values_row(statement: sql_ast.InsertValues, sink: SourceInfo) -> dict[str, Any]:
    """The row ``statement`` inserts into ``sink`` (column name -> value); ``ROWTIME`` when given."""
    names = list(statement.columns) if statement.columns is not None else [c.name for c in sink.columns]
    if len(names) != len(statement.values):
        raise StatementError(f"Expected a value for each column. Expected Columns: [{', '.join(names)}]. "
                             f"Got {len(statement.values)} values.", statement_text=statement.text)
    row: dict[str, Any] = {}
    for name, node in zip(names, statement.values, strict=True):
        value = _literal(node)
        if name == ROWTIME:
            row[ROWTIME] = _coerce(value, BIGINT, name)
            continue
        column = sink.column(name)
        if column is None:
            raise StatementError(f"Column name {name} does not exist.", statement_text=statement.text)
        row[name] = _coerce(value, column.type, name)
    _check_keys(sink, row, statement.text)
    return row


def json_row(sink: SourceInfo, row: Mapping[str, Any]) -> dict[str, Any]:
    """A ``/inserts-stream`` row (JSON object, column names matched case-insensitively)."""
    by_upper = {str(k).upper(): v for k, v in row.items()}
    out: dict[str, Any] = {}
    known = {c.name.upper() for c in sink.columns} | {ROWTIME}
    unknown = sorted(set(by_upper) - known)
    if unknown:
        raise StatementError(f"Column name {unknown[0]} does not exist.")
    for column in sink.columns:
        if column.name.upper() in by_upper:
            out[column.name] = _coerce(by_upper[column.name.upper()], column.type, column.name)
    if ROWTIME in by_upper and by_upper[ROWTIME] is not None:
        out[ROWTIME] = _coerce(by_upper[ROWTIME], BIGINT, ROWTIME)
    _check_keys(sink, out, None)
    return out


def _check_keys(sink: SourceInfo, row: Mapping[str, Any], text: str | None) -> None:
    if sink.kind is sql_ast.SourceKind.TABLE:
        for key in sink.key_columns:
            if row.get(key.name) is None:
                raise StatementError(f"Failed to insert values into '{sink.name}'. Value for primary key column(s) "
                                     f"{key.name} is required for tables", statement_text=text)


class RowWriter:
    """Writes the rows of INSERT INTO ... VALUES and ``/inserts-stream`` to a source's topic in
    its formats: an idempotent producer (acks=all) made on first use, no Spark. The node's
    inserts use it directly, so they are answered while its Spark session is still starting."""

    def __init__(self, bootstrap_servers: str, client_properties: Mapping[str, str] | None = None) -> None:
        self._conf: dict[str, Any] = dict(client_properties or {})
        self._conf.update({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True, "acks": "all",
                           "linger.ms": 0})
        self._producer: Any = None
        self._lock = threading.Lock()

    def insert_values(self, sink: SourceInfo, row: Mapping[str, Any]) -> None:
        """Write one row to ``sink``'s topic, flushed before returning. ``ROWTIME`` in ``row``
        sets the record timestamp."""
        from oncestream.client import Producer

        if sink.window is not None:
            raise StatementError(f"Cannot insert into windowed source {sink.name}")
        layout = layout_of(sink)
        key = layout.encode_key(row)
        value = layout.encode_value(row)
        timestamp = int(row.get("ROWTIME") or 0)
        with self._lock:
            if self._producer is None:
                self._producer = Producer(self._conf)
            errors: list[Any] = []
            self._producer.produce(sink.topic, value, key, timestamp=timestamp,
                                   on_delivery=lambda err, _msg: errors.append(err) if err is not None else None)
            remaining = self._producer.flush(30)
        if remaining or errors:
            raise KsqlError(f"Failed to insert values into '{sink.name}': {errors[0] if errors else 'timed out'}")

    def close(self) -> None:
        """Close the producer (if one was made)."""
        with self._lock:
            if self._producer is not None:
                self._producer.close(10)
                self._producer = None
