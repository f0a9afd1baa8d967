"""The ksqlDB dialect as a sqlglot ``Dialect``: its tokenizer and its parser (the grammar layers)."""

from __future__ import annotations

from sqlglot.dialects.dialect import Dialect, NormalizationStrategy

from oncestream.sql.language.parser.base import KsqlTokenizer
from oncestream.sql.language.parser.statements import StatementParser


class Ksql(Dialect):
    """ksqlDB: unquoted names are upper-cased, ``\\`quoted\\``` names keep their case."""

    NORMALIZATION_STRATEGY = NormalizationStrategy.UPPERCASE
    # ksqlDB writes array indexes 1-based; the trees keep the index as written (see ast docstring),
    # so sqlglot must not shift it.
    INDEX_OFFSET = 0
    # ksqlDB's grammar has DIGIT_IDENTIFIER (a digit, then letters, digits, '_' or '@'): `AS 1R`
    # names a column; a run of digits alone, or with a decimal point or exponent, stays a number.
    IDENTIFIERS_CAN_START_WITH_DIGIT = True

    Tokenizer = KsqlTokenizer
    Parser = StatementParser
