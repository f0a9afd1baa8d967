"""ksqlDB's JSON functions, registered into ``functions``' catalog.

Spark SQL's own functions where their answers are ksqlDB's (Jackson's ``readTree``):

- ``IS_JSON_STRING(s)``: ``try_parse_json(s) IS NOT NULL`` (FALSE for NULL, '' and invalid text;
  ``'null'`` is valid JSON);
- ``JSON_ARRAY_LENGTH(s)``: ``json_array_length`` (NULL unless a JSON array);
- ``JSON_KEYS(s)``: ``json_object_keys`` (NULL unless a JSON object);
- ``JSON_RECORDS(s)``: ``from_json(s, 'MAP<STRING, STRING>')``: a string value unquoted, any
  other value as its compact JSON text (NULL unless a JSON object);
- ``JSON_ITEMS(s)``: each element of a JSON array as compact JSON (``from_json`` to strings,
  string elements re-quoted from the VARIANT form);
- ``TO_JSON_STRING(x)``: Spark's ``to_json`` of a one-field struct, the field's text cut out (a
  NULL is ``'null'``, timestamps as ksqlDB formats them).

Two are Python UDFs, because no Spark SQL function gives ksqlDB's answer:

- ``JSON_CONCAT(s, ...)``: PostgreSQL's ``||`` over JSON values (objects merged key by key, the
  last value winning; otherwise arrays concatenated, a non-array taken as a one-element array;
  NULL if any argument is NULL or not JSON). Spark can merge maps only under a session-wide
  duplicate-key policy and has no way to write back the exact numbers of the input (Jackson keeps
  ``1.50`` as ``1.50``).
- ``JSON_ARRAY_CONTAINS(json, value)``: whether the top-level JSON array holds the value with
  ksqlDB's type matching (a JSON integer matches only an INT/BIGINT, a JSON float only a DOUBLE,
  a string only a STRING, ``true``/``false`` only that BOOLEAN, ``null`` only NULL); Spark would
  need the array's element type up front.

The UDFs are registered on the session by ``register_udfs`` (the compiler calls it) under the
names ``SPARK_UDFS`` lists.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from oncestream.sql.language import types as t
from oncestream.sql.language.function_catalog import (
    CallSite,
    FunctionTypeError,
    _add,
    _refused,
    _section,
    is_string,
)
from oncestream.sql.language.types import BaseType, SqlType

JSON_CONCAT_UDF = "oncestream_json_concat"
JSON_ARRAY_CONTAINS_UDF = "oncestream_json_array_contains"



def _string_to(name: str, result: SqlType, n: int = 1) -> Any:
    def rule(arg_types: Sequence[SqlType | None]) -> SqlType:
        if len(arg_types) != n or not all(is_string(a) for a in arg_types[:1]):
            raise FunctionTypeError(_refused(name, arg_types))
        return result
    return rule


def _concat_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if not arg_types or not all(is_string(a) for a in arg_types):
        raise FunctionTypeError(_refused("JSON_CONCAT", arg_types))
    return t.STRING


_CONTAINABLE = (BaseType.INTEGER, BaseType.BIGINT, BaseType.DOUBLE, BaseType.STRING, BaseType.BOOLEAN)


def _contains_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if len(arg_types) != 2 or not is_string(arg_types[0]) or \
            (arg_types[1] is not None and arg_types[1].base not in (*_CONTAINABLE, BaseType.DECIMAL)):
        raise FunctionTypeError(_refused("JSON_ARRAY_CONTAINS", arg_types))
    return t.BOOLEAN


def _to_json_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if len(arg_types) != 1:
        raise FunctionTypeError(_refused("TO_JSON_STRING", arg_types))
    return t.STRING


# ksqlDB's SqlTimeTypes.formatTimestamp pattern
_TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSS"


def _needs_canonical(ty: SqlType) -> bool:
    if ty.base in (BaseType.STRUCT, BaseType.MAP, BaseType.BYTES, BaseType.TIME):
        return True
    return ty.base is BaseType.ARRAY and ty.element is not None and _needs_canonical(ty.element)


def _canonical(sql: str, ty: SqlType, depth: int = 0) -> str:
    """A value rebuilt the way ksqlDB's ToJsonString writes it: struct fields and map keys in
    sorted order (its TreeMaps), BYTES as base64, TIME as HH:mm:ss."""
    var = f"__os_j{depth}"
    if not _needs_canonical(ty):
        return sql
    if ty.base is BaseType.STRUCT:
        fields = ", ".join(f"'{f.name}', {_canonical(f'{sql}.`{f.name}`', f.type, depth + 1)}"
                           for f in sorted(ty.fields, key=lambda f: f.name))
        return f"CASE WHEN {sql} IS NULL THEN NULL ELSE named_struct({fields}) END"
    if ty.base is BaseType.MAP and ty.element is not None:
        # sorted on the keys alone (the values may be maps, which Spark cannot order)
        order = f"({var}l, {var}r) -> CASE WHEN {var}l.key < {var}r.key THEN -1 WHEN {var}l.key > {var}r.key THEN 1 ELSE 0 END"
        entries = f"array_sort(map_entries({sql}), {order})"
        value = _canonical(f"{var}.value", ty.element, depth + 1)
        return f"map_from_entries(transform({entries}, {var} -> struct(CAST({var}.key AS STRING) AS key, {value} AS value)))"
    if ty.base is BaseType.ARRAY and ty.element is not None:
        return f"transform({sql}, {var} -> {_canonical(var, ty.element, depth + 1)})"
    if ty.base is BaseType.BYTES:
        return f"base64({sql})"
    if ty.base is BaseType.TIME:
        # a TIME is its milliseconds of the day in the compiled frame
        return f"date_format(timestamp_millis(CAST({sql} AS BIGINT)), 'HH:mm:ss')"
    return sql


def _to_json_string(c: CallSite) -> str:
    ty = c.types[0] if c.types else None
    if ty is None:
        return "'null'"
    options = f"map('ignoreNullFields', 'false', 'timestampFormat', \"{_TIMESTAMP_FORMAT}\")"
    wrapped = f"to_json(named_struct('v', {_canonical(c.args[0], ty)}), {options})"
    # {"v":<json>} -> <json>
    return f"substring({wrapped}, 6, length({wrapped}) - 6)"


def _json_items(c: CallSite) -> str:
    # Spark's from_json keeps an object's or array's element as its compact JSON text in the order
    # written (VARIANT's to_json would sort object keys); a string element loses its quotes there,
    # so those (and nulls) come from the VARIANT form
    texts = f"from_json({c.args[0]}, 'ARRAY<STRING>')"
    variants = f"try_variant_get(try_parse_json({c.args[0]}), '$', 'ARRAY<VARIANT>')"
    pick = ("(__os_t, __os_v) -> CASE WHEN __os_v IS NULL OR is_variant_null(__os_v) THEN 'null' "
            "WHEN schema_of_variant(__os_v) = 'STRING' THEN to_json(__os_v) ELSE __os_t END")
    return f"zip_with({texts}, {variants}, {pick})"


_section("JSON")
_add("IS_JSON_STRING", 1, 1, _string_to("IS_JSON_STRING", t.BOOLEAN), lambda c: f"(try_parse_json({c.args[0]}) IS NOT NULL)",
     "Whether the string parses as a JSON value (FALSE for NULL).", "try_parse_json(s) IS NOT NULL")
_add("JSON_ARRAY_LENGTH", 1, 1, _string_to("JSON_ARRAY_LENGTH", t.INTEGER), lambda c: f"json_array_length({c.args[0]})",
     "Length of a JSON array, NULL if not one.", "json_array_length(s)")
_add("JSON_KEYS", 1, 1, _string_to("JSON_KEYS", t.array_of(t.STRING)), lambda c: f"json_object_keys({c.args[0]})",
     "The top-level keys of a JSON object, NULL if not one.", "json_object_keys(s)")
_add("JSON_RECORDS", 1, 1, _string_to("JSON_RECORDS", t.map_of(t.STRING, t.STRING)),
     lambda c: f"CASE WHEN json_object_keys({c.args[0]}) IS NULL THEN NULL "
               f"ELSE from_json({c.args[0]}, 'MAP<STRING, STRING>') END",
     "A JSON object's top-level entries, values as JSON text (strings unquoted); NULL if not one.",
     "from_json(s, 'MAP<STRING, STRING>')")
_add("JSON_ITEMS", 1, 1, _string_to("JSON_ITEMS", t.array_of(t.STRING)), _json_items,
     "The elements of a JSON array as JSON strings, NULL if not one.", "from_json(s, 'ARRAY<STRING>') (strings re-quoted)")
_add("TO_JSON_STRING", 1, 1, _to_json_type, _to_json_string,
     "Any value as JSON text (NULL: 'null').", "to_json(named_struct('v', x)) without the wrapper")
_add("JSON_CONCAT", 1, None, _concat_type, lambda c: f"{JSON_CONCAT_UDF}(array({', '.join(c.args)}))",
     "PostgreSQL's JSON concatenation: objects merged, else arrays concatenated; NULL if any is NULL or invalid.",
     "Python UDF (json)")
_add("JSON_ARRAY_CONTAINS", 2, 2, _contains_type, lambda c: f"{JSON_ARRAY_CONTAINS_UDF}({c.args[0]}, {c.args[1]})",
     "Whether a JSON array holds the value (same JSON type); FALSE if not an array.", "Python UDF (json)")


# ----------------------------------------------------------------------------------------------
# the Python forms (also the UDFs' bodies)


class _Invalid(Exception):
    pass


def _parse(text: str) -> Any:
    if text.strip() == "":
        raise _Invalid(text)   # Jackson: a missing node
    try:
        return json.loads(text, parse_float=Decimal)
    except ValueError as e:
        raise _Invalid(text) from e


def _dump(value: Any) -> str:
    """Compact JSON as Jackson writes it (numbers as written, non-ASCII kept)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_dump(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump(v) for v in value) + "]"
    if isinstance(value, Decimal):
        return format(value, "f")
    return json.dumps(value, ensure_ascii=False)


def json_concat(texts: Sequence[str | None] | None) -> str | None:
    """JSON_CONCAT over Python values (None is NULL)."""
    if texts is None or any(x is None for x in texts):
        return None
    try:
        nodes = [_parse(str(x)) for x in texts]
    except _Invalid:
        return None
    if all(isinstance(n, dict) for n in nodes):
        merged: dict[str, Any] = {}
        for n in nodes:
            merged.update(n)
        return _dump(merged)
    out: list[Any] = []
    for n in nodes:
        out.extend(n if isinstance(n, list) else [n])
    return _dump(out)


def json_array_contains(text: str | None, value: Any) -> bool | None:
    """JSON_ARRAY_CONTAINS over Python values (None is NULL)."""
    if text is None:
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        return False
    if not isinstance(parsed, list):
        return False
    for item in parsed:
        if item is None:
            if value is None:
                return True
        elif isinstance(item, bool):
            if isinstance(value, bool) and item is value:
                return True
        elif isinstance(item, int):
            if isinstance(value, int) and not isinstance(value, bool) and item == value:
                return True
        elif isinstance(item, float):
            if isinstance(value, float) and item == value:
                return True
        elif isinstance(item, str) and isinstance(value, str) and item == value:
            return True
    return False


SPARK_UDFS = (JSON_CONCAT_UDF, JSON_ARRAY_CONTAINS_UDF)


def register_udfs(spark: Any) -> None:
    """Register the Python UDFs of this module on a SparkSession (idempotent)."""
    from pyspark.sql import types as T

    spark.udf.register(JSON_CONCAT_UDF, json_concat, T.StringType())
    spark.udf.register(JSON_ARRAY_CONTAINS_UDF, json_array_contains, T.BooleanType())
