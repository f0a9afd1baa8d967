"""ksqlDB's statement grammar on sqlglot: ``parse(text) -> list[ast.Statement]`` and
``parse_expression(text) -> sqlglot.exp.Expression``.

How it is built: a sqlglot ``Dialect`` subclass (``dialect.Ksql``) with its own ``Tokenizer``
(ksqlDB's quoting and comments) and its own ``Parser``. The parser is sqlglot's ``Parser`` extended
by a stack of layers, one module each, all walking sqlglot's token cursor:

- ``base``        tokenizer settings, cursor helpers (keywords, names, numbers, literals);
- ``typeparse``   ksqlDB's type grammar -> ``types.SqlType`` (and the bridge to ``exp.DataType``);
- ``expressions`` sqlglot's expression parser with ksqlDB's differences (``a->b`` struct access
                  as ``exp.Dot``, ``x => e`` lambdas, CAST to ksqlDB types, name normalisation);
- ``query``       the SELECT rule, recursive descent, handing every expression to the layer below
                  and lifting WINDOW / WITHIN / PARTITION BY / EMIT / LIMIT into ``ast.Query``;
- ``statements``  every statement family, recursive descent;
- ``variables``   ksqlDB's ``${name}`` substitution on a statement's tokens;
- ``api``         tokenize once, split on ``;`` tokens, parse each statement, map errors; the same
                  split as text for the shell (``split_statement_texts``, ``words_of``).

Why not sqlglot's own statement parser: ksqlDB's statements (CREATE STREAM, EMIT CHANGES, WINDOW
TUMBLING, WITHIN, TERMINATE...) are not SQL that any sqlglot dialect knows, and ksqlDB's clause
order differs from standard SQL's; a small recursive descent over sqlglot's tokens gives exact
error positions and ksqlDB-like messages, while expressions (the large part of the grammar) stay
sqlglot's. No regular expressions are used in the grammar (``variables`` matches ``${name}``
references with one, on the tokens the tokenizer found).

Syntax errors are ``errors.ParseError`` with the 1-based line/column of the offending token in the
whole request, worded as ksqlDB words them (``line 1:10: Syntax Error\\nmismatched input 'FORM'
expecting {',', 'FROM'}``). docs/sql-reference.md lists the grammar and what is not supported.
"""

from oncestream.sql.language.parser.api import (
           PendingStatement,
           Word,
           parse,
           parse_expression,
           parse_request,
           split_statement_texts,
           split_statements,
           substitute_variables,
           words_of,
)
from oncestream.sql.language.parser.typeparse import UnknownDataTypeError, sql_type_of, to_data_type

__all__ = [
           "PendingStatement",
           "UnknownDataTypeError",
           "Word",
           "parse",
           "parse_expression",
           "parse_request",
           "split_statement_texts",
           "split_statements",
           "sql_type_of",
           "substitute_variables",
           "to_data_type",
           "words_of",
]
