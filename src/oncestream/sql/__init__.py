"""oncestream's SQL server: ksqlDB's SQL and REST API, with persistent queries run as Spark
Structured Streaming queries through the exactly-once connector.

Three layers, each importing only the ones below it (docs/architecture.md draws them):

- ``server/``    one node: statements through the command topic into the metastore, query
                 placement over the group protocol, ksqlDB's REST API, the shell.
- ``engine/``    running queries: compiled to Spark (``compile/``, ``runtime``), pull queries on
                 materialized state stores (``pull/``), the record formats (``serde``).
- ``language/``  ksqlDB's SQL, sans-io: types, the syntax tree, the parser, the catalog of
                 sources, the analyzer and the function table (one expression semantics).
- ``errors``     ``KsqlError`` and its subclasses (ksqlDB's error codes), raised by every layer.
"""
