"""oncestream's SQL server: ksqlDB's SQL and REST API, with persistent queries run as Spark
Structured Streaming queries through the exactly-once connector.

Module map (one direction of dependencies, top to bottom):

- ``types``       ksqlDB's SQL types (``SqlType``) and how ksqlDB writes them.
- ``ast``         the parsed statements (dataclasses; expressions are sqlglot trees).
- ``parser/``     ksqlDB's grammar on sqlglot: ``parse(text) -> list[Statement]``.
- ``catalog``     what the metastore holds: sources (streams, tables) and persistent queries.
- ``errors``      ``KsqlError`` and its subclasses: ksqlDB's error codes and HTTP statuses.
- ``metastore``   the sans-io metastore: validates a statement against a snapshot, applies a
                  command in command-topic order (deterministic on every node).
- ``commands``    the command-topic record format.
- ``compile/``, ``serde``, ``runtime``  persistent and push queries on Spark.
- ``command_topic``, ``command_runner``, ``assignment``, ``node``  the transactional
                  single-writer protocol, replay, query placement over the group protocol, one node.
- ``rest/``       the ASGI app (ksqlDB's REST API) served by hypercorn (HTTP/1.1 and h2c).
- ``shell``       ``oncestream sql --server URL``.
- ``engine``      the interface the REST layer calls (implemented by ``node``).
"""
