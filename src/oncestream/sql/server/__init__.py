"""One SQL-server node.

- ``commands``, ``metastore``  the command-topic record and the sans-io metastore it builds.
- ``command_topic``, ``command_runner``  the transactional single-writer protocol and replay.
- ``assignment``, ``local_queries``  query placement over the group protocol, and the queries
                 placed on this node.
- ``node``       the node (``engine.interface.SqlEngine``); ``node_identity`` its static member id.
- ``entities``   ksqlDB's JSON entities (SHOW, DESCRIBE, EXPLAIN).
- ``rest/``      the ASGI app (ksqlDB's REST API) served by hypercorn (HTTP/1.1 and h2c).
- ``server_main``  ``oncestream sql-server``; ``shell``  ``oncestream sql --server URL``.
"""
