"""ksqlDB's SQL as a language, sans-io (no Spark, no Kafka, no clock).

- ``types``        ksqlDB's SQL types (``SqlType``) and how ksqlDB writes them.
- ``sql_ast``      the parsed statements (dataclasses; expressions are sqlglot trees).
- ``parser/``      ksqlDB's grammar on sqlglot: ``parse(text)``, ``split_statements(text)``.
- ``catalog``      what a statement is checked against: sources (streams, tables), queries.
- ``analyzer*``    name resolution, typing and the rules of a query (push, pull, persistent).
- ``statement_plan``  the rules of CREATE / DROP / INSERT INTO / TERMINATE against a catalog.
- ``functions``    the function table: each function's type rule, Spark form and Python form.
- ``evaluate``     expressions over Python values (pull queries), with the table's Python forms.
"""
