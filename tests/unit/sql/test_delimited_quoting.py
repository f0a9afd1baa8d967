"""DELIMITED quoting as ksqlDB's Apache Commons CSV 1.4 writes it (``QuoteMode.MINIMAL``): the
rule of ``delimited_quoting``, checked on the values ksqlDB's query-validation tests expect and on
the edges of each clause."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncestream.sql.engine.delimited_quoting import needs_quotes, quote, quoting_pattern, write_record


@pytest.mark.parametrize(("fields", "written"), [
    # QTT expectations (bytes-and-strings.json, date.json, datesub.json, from-days.json,
    # string.json, delimited.json, group-by.json)
    (["!", "IQ==", "!"], '"!",IQ==,"!"'),
    (["-10"], '"-10"'),
    (["-5"], '"-5"'),
    (["-12345.1200000000000000"], '"-12345.1200000000000000"'),
    (["0.1200000000000000"], "0.1200000000000000"),
    ([" \t with white space \t", " \t WITH WHITE SPACE \t", "with white space", "\t wit"],
     '" \t with white space \t"," \t WITH WHITE SPACE \t",with white space,"\t wit"'),
    (["-1", "a", "1"], '"-1",a,1'),
    # a later field is quoted only by its first character up to '#', or what any field is quoted for
    (["a", "-1", ".5", "#x", "$x", "é"], 'a,-1,.5,"#x",$x,é'),
    (["a", " x", "x ", "x\t", "x,y", 'x"y', "x\ny", "x\ry"],
     'a," x","x ","x\t","x,y","x""y","x\ny","x\ry"'),
    # the first field: anything but an ASCII letter or digit first is quoted
    (["é"], '"é"'),
    (["{}"], '"{}"'),
    (["~"], '"~"'),
    (["Z9"], "Z9"),
    (["9Z"], "9Z"),
    # nulls and empty strings: only a first empty string is quoted
    ([""], '""'),
    (["", ""], '"",'),
    ([None, ""], ","),
    ([None], ""),
    (["a", None, "b"], "a,,b"),
])
def test_fields_are_quoted_as_commons_csv_1_4_minimal(fields, written):
    assert write_record(fields, ",") == written


def test_the_delimiter_is_what_the_format_declares():
    """VALUE_DELIMITER: a field holding the declared delimiter is quoted, a comma no longer is."""
    assert write_record(["a|b", "c,d"], "|") == '"a|b"|c,d'
    assert write_record(["a b", "c"], " ") == '"a b" c'
    assert write_record(["a\tb", "c"], "\t") == '"a\tb"\tc'


@pytest.mark.parametrize("delimiter", ["]", "\\", "^", "-", "[", "&", "$", "."])
def test_a_regex_metacharacter_as_delimiter_is_only_itself(delimiter):
    assert needs_quotes(f"a{delimiter}b", delimiter, first=False)
    assert not needs_quotes("ab", delimiter, first=False)
    assert not needs_quotes("a0b", delimiter, first=False)


def test_a_delimiter_is_one_bmp_character():
    with pytest.raises(ValueError, match="one BMP character"):
        quoting_pattern("ab", first=True)


def test_quote_doubles_quotes():
    assert quote('say "hi"') == '"say ""hi"""'


def _commons_csv_1_4(text: str, *, first: bool, delimiter: str) -> bool:
    """The MINIMAL rule spelled out clause by clause, for the property test below."""
    if text == "":
        return first
    c = text[0]
    if first and not ("0" <= c <= "9" or "A" <= c <= "Z" or "a" <= c <= "z"):
        return True
    if c <= "#":
        return True
    if any(ch in text for ch in ("\n", "\r", '"', delimiter)):
        return True
    return text[-1] <= " "


@given(st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=6), st.booleans(),
       st.sampled_from([",", "|", "\t", " ", "$"]))
def test_the_regex_is_the_clauses(text, first, delimiter):
    assert needs_quotes(text, delimiter, first=first) == _commons_csv_1_4(text, first=first, delimiter=delimiter)


def test_the_pattern_has_no_python_only_syntax():
    """The pattern is also Java's (Spark's rlike): no \\z, \\Z, (?P<...>) or \\x{...}."""
    for first in (True, False):
        pattern = quoting_pattern(",", first=first)
        assert not re.search(r"\\[zZ]|\(\?P|\\x\{", pattern)
