"""Which DELIMITED fields ksqlDB writes quoted: Apache Commons CSV 1.4's ``QuoteMode.MINIMAL``.

ksqlDB writes DELIMITED records with commons-csv 1.4 (``CSVFormat.DEFAULT`` with the chosen
delimiter), whose minimal quoting is not RFC 4180's "quote only what must be quoted". A field is
written between double quotes (its quotes doubled) when:

- it is the record's first field and it is empty, or its first character is not an ASCII letter
  or digit (so ``-10``, ``.5`` and ``!`` are written ``"-10"``, ``".5"``, ``"!"`` in first place);
- its first character is at most ``#`` (U+0023: controls, space, ``!``, ``"``, ``#``), in any place;
- it contains the delimiter, a double quote, CR or LF;
- its last character is at most a space (U+0020: trailing white space or a control character).

A null is an empty unquoted field, so an empty string after the first field cannot be told from
a null (commons-csv writes both as nothing).

The rule is held as one regular expression per position (first field, later field), written in
the syntax Python's ``re`` and Java's ``java.util.regex`` read alike, so that the per-row serde
(``serde``) searches it with ``re`` and the compiled Spark queries (``compile.serde_columns``) with
``rlike``: one rule, two engines. The expression avoids the two places where the engines differ:
it has no ``\\z``/``\\Z`` (``$`` is only used after a character class that itself holds CR and
LF, and both engines' ``$`` also match before a final line terminator, which is then quoted by the
CR/LF alternative anyway), and the delimiter is written as a ``\\uXXXX`` escape (no character
class metacharacter can leak in).
"""

from __future__ import annotations

import functools
import re

# The alternatives shared by both positions: a CR, LF or double quote anywhere (the delimiter is
# added per format), or a last character at most U+0020.
_ANYWHERE = '.*[\\n\\r"{delimiter}]'
_LAST_CHAR = ".*[\\x00-\\x20]$"
# First field: empty, or a first character that is not an ASCII letter or digit.
_FIRST_FIELD = "(?s)^(?:$|[^0-9A-Za-z]|" + _ANYWHERE + "|" + _LAST_CHAR + ")"
# Any later field: a first character at most '#' (U+0023); an empty later field is not quoted.
_LATER_FIELD = "(?s)^(?:[\\x00-\\x23]|" + _ANYWHERE + "|" + _LAST_CHAR + ")"


def quoting_pattern(delimiter: str, *, first: bool) -> str:
    """The regular expression (Python ``re`` and Java regex alike) that a field's text matches,
    searched from its start, exactly when commons-csv 1.4 quotes it; ``first`` for the record's
    first field."""
    if len(delimiter) != 1 or ord(delimiter) > 0xFFFF:
        raise ValueError(f"a DELIMITED delimiter is one BMP character, not {delimiter!r}")
    escaped = f"\\u{ord(delimiter):04x}"
    return (_FIRST_FIELD if first else _LATER_FIELD).format(delimiter=escaped)


@functools.lru_cache(maxsize=64)
def _compiled(delimiter: str, first: bool) -> re.Pattern[str]:
    return re.compile(quoting_pattern(delimiter, first=first))


def needs_quotes(text: str, delimiter: str, *, first: bool) -> bool:
    """Whether commons-csv 1.4 (``QuoteMode.MINIMAL``) writes ``text`` quoted."""
    return _compiled(delimiter, first).search(text) is not None


def quote(text: str) -> str:
    """``text`` between double quotes, its double quotes doubled."""
    return '"' + text.replace('"', '""') + '"'


def write_record(fields: list[str | None], delimiter: str) -> str:
    """One DELIMITED record of ``fields`` (None is a null: an empty unquoted field)."""
    out = []
    for i, text in enumerate(fields):
        if text is None:
            out.append("")
        elif needs_quotes(text, delimiter, first=i == 0):
            out.append(quote(text))
        else:
            out.append(text)
    return delimiter.join(out)
