"""ksqlDB's BYTES and encoding functions, ``SPLIT_TO_MAP`` and ``CONVERT_TZ``, registered into
``functions``' catalog, all in Spark SQL:

- ``TO_BYTES(s, enc)`` / ``FROM_BYTES(b, enc)`` with ksqlDB's encodings ``hex`` (FROM_BYTES writes
  upper case), ``utf8``, ``ascii`` (a non-ASCII character is ``?`` one way, U+FFFD the other, as
  Java's charsets), ``base64``; another encoding is ksqlDB's runtime error, NULL here;
- ``ENCODE(s, from, to)``: the string read in one encoding and written in another (hex written
  lower case, as ksqlDB's commons-codec);
- ``INT_FROM_BYTES`` / ``BIGINT_FROM_BYTES`` / ``DOUBLE_FROM_BYTES(b[, 'LITTLE_ENDIAN'])``: the
  bytes read as Java's ``ByteBuffer`` does, through Java's own ``Integer.parseUnsignedInt`` /
  ``Long.parseUnsignedLong`` / ``Double.longBitsToDouble`` (Spark's ``reflect``); a wrong length
  is ksqlDB's error, NULL here;
- ``LEN``, ``LPAD``, ``RPAD``, ``SUBSTRING``, ``CONCAT`` over BYTES as over strings (CONCAT skips NULLs);
- ``SPLIT_TO_MAP(s, entryDelim, kvDelim)``: literal delimiters (Guava's ``Splitter``), empty
  entries and entries without ``kvDelim`` skipped, the value being the text up to a second
  ``kvDelim``, the last entry of a key winning; NULL for an empty or equal delimiter;
- ``CONVERT_TZ(ts, from, to)``: the timestamp's wall clock read in one zone and written in another;
- ``INSTR(s, sub[, position[, occurrence]])`` as ksqlDB counts (commons-lang's ordinalIndexOf);
- ``GEO_DISTANCE(lat1, lon1, lat2, lon2[, unit])``: ksqlDB's haversine in the same double
  operations (Spark's functions are Java's ``Math``), km or miles; an invalid coordinate or unit
  is ksqlDB's runtime error, NULL here;
- ``TRUNC(x[, places])`` toward zero as ksqlDB's BigDecimal setScale(DOWN): Spark's
  ``floor(x, d)`` / ``ceil(x, d)`` by sign (the places must be a literal, as Spark's scale is);
  a DOUBLE goes through its decimal text (Java's ``BigDecimal.valueOf``);
- ``MAP_UNION(m1, m2)``: the entries of both, the second's value winning (Spark's ``map_concat``
  would fail on a duplicate key); NULL only if both are;
- ``MASK`` and ``MASK_LEFT`` / ``MASK_RIGHT`` / ``MASK_KEEP_LEFT`` / ``MASK_KEEP_RIGHT``: Spark's
  ``mask`` (a NULL mask character keeps that class of characters, as ksqlDB's Masker) over the
  part ksqlDB masks; a negative count is ksqlDB's error, NULL here;
- the URL functions: ``try_parse_url`` (java.net.URI, as ksqlDB's UrlParser; an invalid URL is
  NULL), ``url_encode`` / ``try_url_decode`` (URLEncoder / URLDecoder: the same escapes as
  Guava's form-parameter escaper). Spark's parts are the raw (still %-encoded) ones where
  ksqlDB's ``URI`` getters decode; ``URL_EXTRACT_PARAMETER`` splits the query as ksqlDB does (a
  parameter without ``=`` is ``''``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from oncestream.sql.language import types as t
from oncestream.sql.language.function_catalog import (
    _CATALOG,
    CallSite,
    FunctionTypeError,
    SparkRule,
    TypeRule,
    _add,
    _refused,
    _section,
    is_integral,
    is_numeric,
    is_string,
)
from oncestream.sql.language.types import BaseType, SqlType

_CHARSETS = {"utf8": "UTF-8", "ascii": "US-ASCII"}



def _is_bytes(ty: SqlType | None) -> bool:
    return ty is None or ty.base is BaseType.BYTES


def _lower(sql: str) -> str:
    return f"lower({sql})"


def _to_bytes_sql(s: str, encoding: str) -> str:
    """A string read as bytes in a ksqlDB encoding (NULL for an unknown one)."""
    e = _lower(encoding)
    # Java's String.getBytes(US_ASCII) writes '?' for a non-ASCII character (Spark 4's encode fails)
    ascii_text = f"regexp_replace({s}, '[^\\\\x{{00}}-\\\\x{{7F}}]', '?')"
    return (f"CASE {e} WHEN 'hex' THEN unhex({s}) WHEN 'utf8' THEN encode({s}, 'UTF-8') "
            f"WHEN 'ascii' THEN encode({ascii_text}, 'US-ASCII') WHEN 'base64' THEN unbase64({s}) END")


def _from_bytes_sql(b: str, encoding: str, hex_case: str = "upper") -> str:
    """Bytes written as a string in a ksqlDB encoding (NULL for an unknown one)."""
    e = _lower(encoding)
    # Java's new String(bytes, charset) writes U+FFFD for a byte it cannot read (Spark 4's decode
    # fails): UTF-8 through make_valid_utf8, ASCII through ISO-8859-1 with the upper half replaced
    utf8 = f"make_valid_utf8(CAST({b} AS STRING))"
    ascii_text = f"regexp_replace(decode({b}, 'ISO-8859-1'), '[\\\\x{{80}}-\\\\x{{FF}}]', '\\uFFFD')"
    return (f"CASE {e} WHEN 'hex' THEN {hex_case}(hex({b})) WHEN 'utf8' THEN {utf8} "
            f"WHEN 'ascii' THEN {ascii_text} WHEN 'base64' THEN base64({b}) END")


def _sig2(name: str, first: Callable[[SqlType | None], bool], result: SqlType) -> TypeRule:
    def rule(arg_types: Sequence[SqlType | None]) -> SqlType:
        if len(arg_types) != 2 or not first(arg_types[0]) or not is_string(arg_types[1]):
            raise FunctionTypeError(_refused(name, arg_types))
        return result
    return rule


def _from_bytes_number(width: int, result: SqlType, name: str) -> tuple[TypeRule, SparkRule]:
    def rule(arg_types: Sequence[SqlType | None]) -> SqlType:
        if not (1 <= len(arg_types) <= 2) or not _is_bytes(arg_types[0]) or not all(is_string(a) for a in arg_types[1:]):
            raise FunctionTypeError(_refused(name, arg_types))
        return result

    def spark(c: CallSite) -> str:
        b = c.args[0]
        big = f"hex({b})"
        little = f"array_join(reverse(regexp_extract_all(hex({b}), '([0-9A-F]{{2}})', 1)), '')"
        digits = big if len(c.args) == 1 else \
            f"CASE upper({c.args[1]}) WHEN 'BIG_ENDIAN' THEN {big} WHEN 'LITTLE_ENDIAN' THEN {little} END"
        if width == 4:
            value = f"CAST(reflect('java.lang.Integer', 'parseUnsignedInt', {digits}, 16) AS INT)"
        else:
            bits = f"reflect('java.lang.Long', 'parseUnsignedLong', {digits}, 16)"
            value = f"CAST({bits} AS BIGINT)" if result.base is BaseType.BIGINT else \
                f"CAST(reflect('java.lang.Double', 'longBitsToDouble', CAST({bits} AS BIGINT)) AS DOUBLE)"
        return f"CASE WHEN length({b}) = {width} THEN {value} END"
    return rule, spark


def _encode_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if len(arg_types) != 3 or not all(is_string(a) for a in arg_types):
        raise FunctionTypeError(_refused("ENCODE", arg_types))
    return t.STRING


def _hex_strip(s: str) -> str:
    """ksqlDB's Encode.hexStrip: '0x...' loses its prefix (a '0' put before an odd number of
    digits), X'...' (or x'...') its wrapper; anything else is left as it is."""
    return (f"CASE WHEN {s} RLIKE '\\\\A0x.*\\\\z' THEN concat(CASE WHEN char_length({s}) % 2 <> 0 THEN '0' ELSE '' END, "
            f"substr({s}, 3)) WHEN {s} RLIKE '\\\\A[xX]\\'.*\\'\\\\z' THEN substr({s}, 3, char_length({s}) - 3) ELSE {s} END")


def _encode(c: CallSite) -> str:
    s, source, target = c.args
    # commons-codec's Hex.decodeHex fails on an odd number of digits (Spark's unhex pads a '0')
    # and reads '' as no bytes
    stripped = f"(CASE WHEN char_length({_hex_strip(s)}) % 2 = 0 THEN {_hex_strip(s)} END)"
    read = _to_bytes_sql(f"CASE WHEN {_lower(source)} = 'hex' THEN {stripped} ELSE {s} END", source)
    return f"CASE WHEN {_lower(source)} = {_lower(target)} THEN NULL ELSE {_from_bytes_sql(read, target, 'lower')} END"


def _len_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if len(arg_types) != 1 or not (is_string(arg_types[0]) or _is_bytes(arg_types[0])):
        raise FunctionTypeError(_refused("LEN", arg_types))
    return t.INTEGER


def _pad_type(name: str) -> TypeRule:
    def rule(arg_types: Sequence[SqlType | None]) -> SqlType:
        if len(arg_types) == 3 and is_integral(arg_types[1]):
            if is_string(arg_types[0]) and is_string(arg_types[2]):
                return t.STRING
            if _is_bytes(arg_types[0]) and _is_bytes(arg_types[2]):
                return t.BYTES
        raise FunctionTypeError(_refused(name, arg_types))
    return rule


def _substring_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if len(arg_types) in (2, 3) and all(is_integral(a) for a in arg_types[1:]):
        if is_string(arg_types[0]):
            return t.STRING
        if _is_bytes(arg_types[0]):
            return t.BYTES
    raise FunctionTypeError(_refused("SUBSTRING", arg_types))


def _concat_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if arg_types and all(is_string(a) for a in arg_types):
        return t.STRING
    if arg_types and all(_is_bytes(a) for a in arg_types):
        return t.BYTES
    raise FunctionTypeError(_refused("CONCAT", arg_types))


def _concat(c: CallSite) -> str:
    if any(ty is not None and ty.base is BaseType.BYTES for ty in c.types):
        return "concat(" + ", ".join(f"coalesce({a}, X'')" for a in c.args) + ")"
    return f"concat_ws('', {', '.join(c.args)})"


def _concat_ws_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if len(arg_types) < 2:
        raise FunctionTypeError(_refused("CONCAT_WS", arg_types))
    if all(is_string(a) for a in arg_types):
        return t.STRING
    if all(_is_bytes(a) for a in arg_types):
        return t.BYTES
    raise FunctionTypeError(_refused("CONCAT_WS", arg_types))


def _concat_ws(c: CallSite) -> str:
    if any(ty is not None and ty.base is BaseType.BYTES for ty in c.types):
        # bytes joined through their hex text (array_join skips NULLs, as ksqlDB does)
        parts = ", ".join(f"hex({a})" for a in c.args[1:])
        return f"unhex(array_join(array({parts}), hex({c.args[0]})))"
    return f"concat_ws({', '.join(c.args)})"


def _quoted(delimiter: str) -> str:
    return f"concat('\\\\Q', {delimiter}, '\\\\E')"


def _split_to_map(c: CallSite) -> str:
    s, entry, kv = c.args
    entries = f"filter(split({s}, {_quoted(entry)}, -1), __os_s -> __os_s <> '' AND instr(__os_s, {kv}) > 0)"
    pairs = f"transform({entries}, __os_s -> split(__os_s, {_quoted(kv)}, -1))"
    keys = f"transform({pairs}, __os_p -> __os_p[0])"
    values = f"transform({pairs}, __os_p -> __os_p[1])"
    # the last value of a key wins (ksqlDB's toMap merge); Spark's maps refuse duplicate keys
    last = f"element_at({values}, CAST(size({keys}) - array_position(reverse({keys}), __os_k) + 1 AS INT))"
    built = f"map_from_arrays(array_distinct({keys}), transform(array_distinct({keys}), __os_k -> {last}))"
    nulls = f"{s} IS NULL OR {entry} IS NULL OR {kv} IS NULL"
    return f"CASE WHEN {nulls} OR {entry} = '' OR {kv} = '' OR {entry} = {kv} THEN NULL ELSE {built} END"


def _split_to_map_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if len(arg_types) != 3 or not all(is_string(a) for a in arg_types):
        raise FunctionTypeError(_refused("SPLIT_TO_MAP", arg_types))
    return t.map_of(t.STRING, t.STRING)


def _convert_tz_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if len(arg_types) != 3 or not (arg_types[0] is None or arg_types[0].base is BaseType.TIMESTAMP) or \
            not all(is_string(a) for a in arg_types[1:]):
        raise FunctionTypeError(_refused("CONVERT_TZ", arg_types))
    return t.TIMESTAMP


def _widen(name: str, rule: TypeRule, spark: SparkRule, description: str, spark_doc: str,
           arity: tuple[int, int | None] | None = None) -> None:
    """A function of ``functions`` that ksqlDB also applies to more argument types or counts
    (BYTES, MASK's characters, INSTR's position): its rules replaced, its category and Python
    form (pull queries) kept."""
    fd = replace(_CATALOG[name], return_type=rule, spark=spark, description=description, spark_doc=spark_doc)
    if arity is not None:
        fd = replace(fd, min_args=arity[0], max_args=arity[1])
    for n in (fd.name, *fd.aliases):
        _CATALOG[n] = fd


def _instr_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if not (2 <= len(arg_types) <= 4) or not all(is_string(a) for a in arg_types[:2]) or \
            not all(is_integral(a) for a in arg_types[2:]):
        raise FunctionTypeError(_refused("INSTR", arg_types))
    return t.INTEGER


def _nth_match(text: str, sub: str, occurrence: str) -> str:
    """1-based index in ``text`` of the ``occurrence``-th (overlapping) match of ``sub``, NULL if none
    (commons-lang's ordinalIndexOf + 1)."""
    matches = f"filter(sequence(1, length({text})), __os_i -> substr({text}, __os_i, length({sub})) = {sub})"
    return f"element_at({matches}, {occurrence})"


def _instr(c: CallSite) -> str:
    """ksqlDB's INSTR(str, sub[, position[, occurrence]]): 1-based, 0 when absent or NULL; a
    negative position searches backwards from that far from the end."""
    s, sub = c.args[0], c.args[1]
    position = c.args[2] if len(c.args) > 2 else "1"
    occurrence = c.args[3] if len(c.args) > 3 else "1"
    forward = f"{_nth_match(f'substr({s}, {position})', sub, occurrence)} + {position} - 1"
    back = f"-({position})"
    found = _nth_match(f"substr(reverse({s}), {back})", f"reverse({sub})", occurrence)
    backward = f"length({s}) - {back} - ({found} - 1) - length({sub}) + 2"
    return (f"coalesce(CASE WHEN abs({position}) > length({s}) THEN 0 WHEN {position} < 0 THEN {backward} "
            f"ELSE {forward} END, 0)")


_section("STRING")
_widen("INSTR", _instr_type, _instr, "1-based position of a substring (from a position, its n-th occurrence), 0 if absent.",
       "element_at(filter(sequence(...), i -> substr(s, i, n) = sub), occurrence)", arity=(2, 4))
_add("TO_BYTES", 2, 2, _sig2("TO_BYTES", is_string, t.BYTES), lambda c: _to_bytes_sql(c.args[0], c.args[1]),
     "A string read as BYTES in an encoding (hex, utf8, ascii, base64).", "unhex / encode / unbase64")
_add("FROM_BYTES", 2, 2, _sig2("FROM_BYTES", _is_bytes, t.STRING), lambda c: _from_bytes_sql(c.args[0], c.args[1]),
     "BYTES written as a string in an encoding (hex, utf8, ascii, base64).", "hex / decode / base64")
for _name, _width, _result in (("INT_FROM_BYTES", 4, t.INTEGER), ("BIGINT_FROM_BYTES", 8, t.BIGINT),
                               ("DOUBLE_FROM_BYTES", 8, t.DOUBLE)):
    _type_rule, _spark_rule = _from_bytes_number(_width, _result, _name)
    _add(_name, 1, 2, _type_rule, _spark_rule,
         f"{_width} BYTES read as a {_result.ksql_name} (BIG_ENDIAN or LITTLE_ENDIAN), NULL for another length.",
         "reflect(java.lang parse / longBitsToDouble) of hex(b)")
_add("ENCODE", 3, 3, _encode_type, _encode,
     "A string re-encoded from one encoding to another (hex, utf8, ascii, base64).", "decode then encode")
_widen("LEN", _len_type, lambda c: f"length({c.args[0]})", "Length in characters (BYTES: in bytes).", "length(s)")
def _pad(spark_name: str) -> SparkRule:
    def rule(c: CallSite) -> str:
        subject, length, padding = c.args
        # ksqlDB's LPAD/RPAD answer NULL for a negative length or an empty padding (its Lpad/Rpad
        # UDFs), where Spark answers '' for the one and the input, cut to the length, for the other.
        return (f"CASE WHEN {length} < 0 OR length({padding}) = 0 THEN NULL"
                f" ELSE {spark_name}({subject}, {length}, {padding}) END")
    return rule


_widen("LPAD", _pad_type("LPAD"), _pad("lpad"),
       "Left-pad to a length (STRING or BYTES); NULL for a negative length or an empty padding.", "lpad(s, n, pad)")
_widen("RPAD", _pad_type("RPAD"), _pad("rpad"),
       "Right-pad to a length (STRING or BYTES); NULL for a negative length or an empty padding.", "rpad(s, n, pad)")
_widen("SUBSTRING", _substring_type, lambda c: f"substring({', '.join(c.args)})",
       "Substring (STRING) or bytes (BYTES) from a 1-based position (negative: from the end), optional length.",
       "substring(s, pos[, len])")
_widen("CONCAT", _concat_type, _concat,
       "Concatenate strings (or BYTES); NULL arguments count as empty.", "concat_ws('', a, b, ...) / concat of BYTES")
_widen("CONCAT_WS", _concat_ws_type, _concat_ws,
       "Concatenate with a separator, skipping NULLs (STRING or BYTES).", "concat_ws(sep, a, ...)")
_add("SPLIT_TO_MAP", 3, 3, _split_to_map_type, _split_to_map,
     "A map from 'k1<kv>v1<entry>k2<kv>v2...' (literal delimiters, the last value of a key wins).",
     "map_from_arrays over split(s, quoted delimiter)")
def _geo_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    if len(arg_types) not in (4, 5) or not all(is_numeric(a) for a in arg_types[:4]) or \
            (len(arg_types) == 5 and not is_string(arg_types[4])):
        raise FunctionTypeError(_refused("GEO_DISTANCE", arg_types))
    return t.DOUBLE


_MILES = ("mi", "mile", "miles")
_KMS = ("km", "kilometer", "kilometers", "kilometre", "kilometres")


def _geo_distance(c: CallSite) -> str:
    lat1, lon1, lat2, lon2 = (f"CAST({a} AS DOUBLE)" for a in c.args[:4])
    def radians(x: str) -> str:
        # Java 8's Math.toRadians (angdeg / 180.0 * PI): ksqlDB's expected values are its
        return f"(({x}) / 180.0D * pi())"

    a = (f"power(sin({radians(f'{lat2} - {lat1}')} / 2), 2) + power(sin({radians(f'{lon2} - {lon1}')} / 2), 2) "
         f"* cos({radians(lat1)}) * cos({radians(lat2)})")
    radius = "6371.0D"
    if len(c.args) == 5:
        unit = f"lower(trim({c.args[4]}))"
        names = ", ".join(f"'{n}'" for n in _MILES)
        kms = ", ".join(f"'{n}'" for n in _KMS)
        radius = (f"CASE WHEN {c.args[4]} IS NULL OR {unit} = '' THEN 6371.0D WHEN {unit} IN ({names}) THEN 3959.0D "
                  f"WHEN {unit} IN ({kms}) THEN 6371.0D END")
    valid = (f"abs({lat1}) <= 90 AND abs({lat2}) <= 90 AND abs({lon1}) <= 180 AND abs({lon2}) <= 180")
    return f"CASE WHEN {valid} THEN 2 * asin(sqrt({a})) * {radius} END"


_section("OTHER")
_add("GEO_DISTANCE", 4, 5, _geo_type, _geo_distance,
     "Great-circle distance between two (lat, lon) points in km (or 'MI').", "2 * asin(sqrt(haversine)) * radius")
def _url_type(name: str, n: int, result: SqlType) -> TypeRule:
    def rule(arg_types: Sequence[SqlType | None]) -> SqlType:
        if len(arg_types) != n or not all(is_string(a) for a in arg_types):
            raise FunctionTypeError(_refused(name, arg_types))
        return result
    return rule


def _url_parameter(c: CallSite) -> str:
    query = f"try_parse_url({c.args[0]}, 'QUERY')"
    named = f"filter(split({query}, '&', -1), __os_p -> split(__os_p, '=', 2)[0] = {c.args[1]})"
    after = "substr(__os_p, instr(__os_p, '=') + 1)"
    value = f"transform({named}, __os_p -> CASE WHEN instr(__os_p, '=') > 0 THEN {after} ELSE '' END)"
    return f"try_element_at({value}, 1)"


def _url_part(part: str) -> SparkRule:
    return lambda c: f"try_parse_url({c.args[0]}, '{part}')"


def _trunc_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    x = arg_types[0] if arg_types else None
    if not (1 <= len(arg_types) <= 2) or not is_numeric(x) or (len(arg_types) == 2 and not is_integral(arg_types[1])):
        raise FunctionTypeError(_refused("TRUNC", arg_types))
    if x is None or x.base in (BaseType.INTEGER, BaseType.BIGINT):
        return x or t.BIGINT
    if x.base is BaseType.DOUBLE:
        return t.BIGINT if len(arg_types) == 1 else t.DOUBLE
    if len(arg_types) == 1:
        return t.decimal(max(1, (x.precision or 0) - (x.scale or 0)), 0)
    return x


def _trunc(c: CallSite) -> str:
    x = c.args[0]
    ty = c.types[0] if c.types else None
    if ty is None or ty.base in (BaseType.INTEGER, BaseType.BIGINT):
        return x
    if ty.base is BaseType.DOUBLE and len(c.args) == 1:
        return f"CAST({x} AS BIGINT)"      # Java's longValue: toward zero
    places = c.args[1] if len(c.args) > 1 else "0"
    value = f"CAST(CAST({x} AS STRING) AS DECIMAL(38, 17))" if ty.base is BaseType.DOUBLE else x
    down = f"CASE WHEN {value} >= 0 THEN floor({value}, {places}) ELSE ceil({value}, {places}) END"
    result = "DOUBLE" if ty.base is BaseType.DOUBLE else \
        (f"DECIMAL({ty.precision}, {ty.scale})" if len(c.args) > 1 else
         f"DECIMAL({max(1, (ty.precision or 0) - (ty.scale or 0))}, 0)")
    return f"CAST({down} AS {result})"


def _map_union_type(arg_types: Sequence[SqlType | None]) -> SqlType:
    maps = [a for a in arg_types if a is not None]
    if len(arg_types) != 2 or any(a.base is not BaseType.MAP or a.key is None or a.key.base is not BaseType.STRING
                                  for a in maps) or (len(maps) == 2 and maps[0] != maps[1]):
        raise FunctionTypeError(_refused("MAP_UNION", arg_types))
    return maps[0] if maps else t.map_of(t.STRING, t.STRING)


def _map_union(c: CallSite) -> str:
    m1, m2 = c.args
    keys = (f"CASE WHEN {m1} IS NULL THEN map_keys({m2}) WHEN {m2} IS NULL THEN map_keys({m1}) "
            f"ELSE array_distinct(concat(map_keys({m1}), map_keys({m2}))) END")
    value = f"CASE WHEN array_contains(map_keys({m2}), __os_k) THEN element_at({m2}, __os_k) ELSE element_at({m1}, __os_k) END"
    union = f"map_from_arrays({keys}, transform({keys}, __os_k -> {value}))"
    return f"CASE WHEN {m1} IS NULL AND {m2} IS NULL THEN NULL ELSE {union} END"


def _mask_type(name: str, with_count: bool) -> TypeRule:
    first = 2 if with_count else 1

    def rule(arg_types: Sequence[SqlType | None]) -> SqlType:
        ok = len(arg_types) in (first, first + 4) and is_string(arg_types[0]) and \
            (not with_count or is_integral(arg_types[1])) and all(is_string(a) for a in arg_types[first:])
        if not ok:
            raise FunctionTypeError(_refused(name, arg_types))
        return t.STRING
    return rule


def _masked(c: CallSite, part: str, first: int) -> str:
    chars = c.args[first:] if len(c.args) > first else ["'X'", "'x'", "'n'", "'-'"]
    return f"mask({part}, {', '.join(chars)})"


def _mask_part(side: str) -> SparkRule:
    """MASK_LEFT / MASK_RIGHT (the n characters of that side masked) and MASK_KEEP_LEFT /
    MASK_KEEP_RIGHT (all but those)."""
    def rule(c: CallSite) -> str:
        s, n = c.args[0], c.args[1]
        rest = f"greatest(length({s}) - {n}, 0)"
        left, right = {  # (the left part's length, whether the left part is masked)
            "LEFT": (n, True), "KEEP_LEFT": (n, False), "RIGHT": (rest, False), "KEEP_RIGHT": (rest, True)}[side]
        head, tail = f"substr({s}, 1, {left})", f"substr({s}, least({left}, length({s})) + 1)"
        joined = f"concat({_masked(c, head, 2)}, {tail})" if right else f"concat({head}, {_masked(c, tail, 2)})"
        return f"CASE WHEN {n} < 0 THEN NULL ELSE {joined} END"
    return rule


_section("STRING")
_widen("MASK", _mask_type("MASK", False), lambda c: _masked(c, c.args[0], 1),
       "Mask letters (X/x), digits (n) and other characters (-), or with the given characters (NULL: keep).",
       "mask(s, 'X', 'x', 'n', '-')", arity=(1, 5))
for _side in ("LEFT", "RIGHT", "KEEP_LEFT", "KEEP_RIGHT"):
    _add(f"MASK_{_side}", 2, 6, _mask_type(f"MASK_{_side}", True), _mask_part(_side),
         f"MASK of {'all but ' if _side.startswith('KEEP') else ''}the n {_side.split('_')[-1].lower()}most characters.",
         "concat of mask(substr(...)) and substr(...)")
_section("MATHEMATICAL")
_add("TRUNC", 1, 2, _trunc_type, _trunc, "Truncate toward zero (to n decimal places; negative: left of the point).",
     "floor(x, n) / ceil(x, n) by sign")
_section("MAP")
_add("MAP_UNION", 2, 2, _map_union_type, _map_union, "The entries of both maps, the second's value winning.",
     "map_from_arrays over the distinct keys of both")
_section("URL")
for _name, _part in (("HOST", "HOST"), ("PATH", "PATH"), ("QUERY", "QUERY"), ("FRAGMENT", "REF"), ("PROTOCOL", "PROTOCOL")):
    _add(f"URL_EXTRACT_{_name}", 1, 1, _url_type(f"URL_EXTRACT_{_name}", 1, t.STRING),
         _url_part(_part),
         f"The {_name.lower()} of a URL (NULL if absent or not a URL).", f"try_parse_url(url, '{_part}')")
_add("URL_EXTRACT_PORT", 1, 1, _url_type("URL_EXTRACT_PORT", 1, t.INTEGER),
     lambda c: f"CAST(regexp_extract(try_parse_url({c.args[0]}, 'AUTHORITY'), ':([0-9]+)$', 1) AS INT)",
     "The port of a URL (NULL if absent).", "the port of try_parse_url(url, 'AUTHORITY')")
_add("URL_EXTRACT_PARAMETER", 2, 2, _url_type("URL_EXTRACT_PARAMETER", 2, t.STRING), _url_parameter,
     "The value of a query parameter ('' if it has none, NULL if absent).", "split of try_parse_url(url, 'QUERY')")
_add("URL_ENCODE_PARAM", 1, 1, _url_type("URL_ENCODE_PARAM", 1, t.STRING), lambda c: f"url_encode({c.args[0]})",
     "Form-encode a string (space as '+').", "url_encode(s)")
_add("URL_DECODE_PARAM", 1, 1, _url_type("URL_DECODE_PARAM", 1, t.STRING), lambda c: f"try_url_decode({c.args[0]})",
     "Decode a form-encoded string.", "try_url_decode(s)")
_section("DATE / TIME")
_add("CONVERT_TZ", 3, 3, _convert_tz_type,
     lambda c: f"from_utc_timestamp(to_utc_timestamp({c.args[0]}, {c.args[1]}), {c.args[2]})",
     "A TIMESTAMP's wall clock moved from one time zone to another.", "from_utc_timestamp(to_utc_timestamp(ts, from), to)")
