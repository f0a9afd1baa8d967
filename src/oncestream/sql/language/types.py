"""ksqlDB's SQL types, as one immutable value type, and the way ksqlDB writes them.

ksqlDB names types in two ways that clients see: in schema strings (``/query`` headers and
``DESCRIBE``: ```ID` INTEGER, `NAME` STRING``) and in ``/query-stream`` headers
(``columnTypes: ["INTEGER", "STRING"]``). Both come from ``SqlType.ksql_name``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class BaseType(Enum):
    """ksqlDB's base types (``SqlBaseType``)."""

    BOOLEAN = "BOOLEAN"
    INTEGER = "INTEGER"
    BIGINT = "BIGINT"
    DOUBLE = "DOUBLE"
    DECIMAL = "DECIMAL"
    STRING = "STRING"
    BYTES = "BYTES"
    TIMESTAMP = "TIMESTAMP"
    DATE = "DATE"
    TIME = "TIME"
    ARRAY = "ARRAY"
    MAP = "MAP"
    STRUCT = "STRUCT"


@dataclass(frozen=True)
class StructField:
    """One field of a STRUCT (ksqlDB keeps the declared order)."""

    name: str
    type: SqlType


@dataclass(frozen=True)
class SqlType:
    """A ksqlDB type. ``element`` for ARRAY, ``key``/``element`` for MAP (key is always STRING in
    ksqlDB), ``fields`` for STRUCT, ``precision``/``scale`` for DECIMAL."""

    base: BaseType
    element: SqlType | None = None
    key: SqlType | None = None
    fields: tuple[StructField, ...] = ()
    precision: int | None = None
    scale: int | None = None

    @property
    def ksql_name(self) -> str:
        """The type as ksqlDB writes it: ``INTEGER``, ``ARRAY<STRING>``, ``MAP<STRING, BIGINT>``,
        ``STRUCT<`A` INTEGER, `B` STRING>``, ``DECIMAL(4, 2)``."""
        b = self.base
        if b is BaseType.ARRAY and self.element is not None:
            return f"ARRAY<{self.element.ksql_name}>"
        if b is BaseType.MAP and self.key is not None and self.element is not None:
            return f"MAP<{self.key.ksql_name}, {self.element.ksql_name}>"
        if b is BaseType.STRUCT:
            inner = ", ".join(f"`{f.name}` {f.type.ksql_name}" for f in self.fields)
            return f"STRUCT<{inner}>"
        if b is BaseType.DECIMAL:
            return f"DECIMAL({self.precision}, {self.scale})"
        return b.value

    def __str__(self) -> str:
        return self.ksql_name


def primitive(base: BaseType) -> SqlType:
    """The SqlType of a primitive base type."""
    return SqlType(base)


BOOLEAN = primitive(BaseType.BOOLEAN)
INTEGER = primitive(BaseType.INTEGER)
BIGINT = primitive(BaseType.BIGINT)
DOUBLE = primitive(BaseType.DOUBLE)
STRING = primitive(BaseType.STRING)
BYTES = primitive(BaseType.BYTES)
TIMESTAMP = primitive(BaseType.TIMESTAMP)
DATE = primitive(BaseType.DATE)
TIME = primitive(BaseType.TIME)


def array_of(element: SqlType) -> SqlType:
    return SqlType(BaseType.ARRAY, element=element)


def map_of(key: SqlType, value: SqlType) -> SqlType:
    return SqlType(BaseType.MAP, key=key, element=value)


def struct_of(*fields: tuple[str, SqlType]) -> SqlType:
    return SqlType(BaseType.STRUCT, fields=tuple(StructField(n, t) for n, t in fields))


# The type of a HEADERS column (ksqlDB's SystemColumns.HEADERS_TYPE): every header of a record, in order.
HEADERS_TYPE = array_of(struct_of(("KEY", STRING), ("VALUE", BYTES)))


def decimal(precision: int, scale: int) -> SqlType:
    return SqlType(BaseType.DECIMAL, precision=precision, scale=scale)


def holds_map(t: SqlType | None) -> bool:
    """Whether a value of type ``t`` has a MAP anywhere inside it (Spark cannot compare those:
    equality and IN over them are rewritten, ``compile.complex_values``)."""
    if t is None:
        return False
    if t.base is BaseType.MAP:
        return True
    if t.base is BaseType.STRUCT:
        return any(holds_map(f.type) for f in t.fields)
    return holds_map(t.element)
