"""Java string rules that ksqlDB's string UDFs inherit, over Python strings: Apache Commons'
``StringEscapeUtils.unescapeJava`` (ksqlDB's ``CHR('\\u004b')``), ``Pattern.quote`` (how a
literal becomes a regex that splits on it) and Java's UTF-16 strings written out as UTF-8
(a lone surrogate becomes ``?``).

The pull-query evaluator uses these; the Spark translations call the same Java methods
(``reflect``) or build the same regex, so both paths agree."""

from __future__ import annotations

import decimal
import math

_CONTROL = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r"}
_HEX = frozenset("0123456789abcdefABCDEF")
_BEGIN_QUOTE, _END_QUOTE = "\\Q", "\\E"
_QUOTED_END = "\\E\\\\E\\Q"   # \E\\E\Q: end the quote, a literal \E, quote again


class JavaEscapeError(ValueError):
    """A ``\\u`` escape without four hex digits (commons-lang3 throws IllegalArgumentException)."""


def unescape_java(text: str) -> str:
    """commons-lang3's ``StringEscapeUtils.unescapeJava``: octal (``\\0``-``\\377``), unicode
    (``\\uXXXX``, with any number of ``u`` and an optional ``+``), control-character and quote
    escapes; a backslash before any other character is dropped. The result is a Java (UTF-16)
    string, surrogate pairs joined into one character."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "\\" or i + 1 == n:
            out.append("" if c == "\\" else c)    # a trailing lone backslash is dropped
            i += 1
            continue
        nxt = text[i + 1]
        if "0" <= nxt <= "7":
            end = i + 2
            if end < n and "0" <= text[end] <= "7":
                end += 1
                if end < n and nxt <= "3" and "0" <= text[end] <= "7":
                    end += 1
            out.append(chr(int(text[i + 1:end], 8)))
            i = end
        elif nxt == "u":
            j = i + 2
            while j < n and text[j] == "u":
                j += 1
            if j < n and text[j] == "+":
                j += 1
            digits = text[j:j + 4]
            if len(digits) < 4 or not set(digits) <= _HEX:
                raise JavaEscapeError(f"Unable to parse unicode value: {digits}")
            out.append(chr(int(digits, 16)))
            i = j + 4
        else:
            # a control-character or quote escape; before anything else the backslash is dropped
            out.append(_CONTROL.get(nxt, nxt))
            i += 2
    return join_surrogates("".join(out))


def join_surrogates(text: str) -> str:
    """A Java string (UTF-16 code units as Python characters) as the text it encodes to UTF-8:
    a surrogate pair is one character, a lone surrogate ``?`` (``String.getBytes(UTF_8)``)."""
    if not any("\ud800" <= c <= "\udfff" for c in text):
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if "\ud800" <= c <= "\udbff" and i + 1 < len(text) and "\udc00" <= text[i + 1] <= "\udfff":
            out.append(chr(0x10000 + ((ord(c) - 0xD800) << 10) + (ord(text[i + 1]) - 0xDC00)))
            i += 2
            continue
        out.append("?" if "\ud800" <= c <= "\udfff" else c)
        i += 1
    return "".join(out)


def pattern_quote(literal: str) -> str:
    """Java's ``Pattern.quote``: the literal between ``\\Q`` and ``\\E``, each ``\\E`` inside it
    closed, written as an escaped ``\\E`` and reopened."""
    return _BEGIN_QUOTE + literal.replace(_END_QUOTE, _QUOTED_END) + _END_QUOTE


def spark_string(text: str) -> str:
    """``text`` as a Spark SQL string literal (backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def pattern_quote_sql(literal_sql: str) -> str:
    """Spark SQL for ``Pattern.quote`` of the string ``literal_sql`` evaluates to: a regex that
    matches that literal (one holding ``\\E`` included)."""
    return (f"concat({spark_string(_BEGIN_QUOTE)}, replace({literal_sql}, {spark_string(_END_QUOTE)}, "
            f"{spark_string(_QUOTED_END)}), {spark_string(_END_QUOTE)})")


def java_to_string(value: object) -> str:
    """A primitive's ``toString`` in Java (ksqlDB's ArrayJoin writes elements so): booleans in
    lower case, a double as ``Double.toString`` (shortest digits, ``1.0E20``, ``NaN``,
    ``Infinity``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        shortest = decimal.Decimal(repr(value))          # the shortest digits that round-trip
        if value == 0 or 1e-3 <= abs(value) < 1e7:
            text = format(shortest, "f")
            return text if "." in text else text + ".0"
        sign, digits, exponent = shortest.as_tuple()
        assert isinstance(exponent, int)
        mantissa = "".join(map(str, digits)).rstrip("0") or "0"
        fraction = mantissa[1:] or "0"
        return f"{'-' if sign else ''}{mantissa[0]}.{fraction}E{exponent + len(digits) - 1}"
    return str(value)
