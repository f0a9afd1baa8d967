"""What producer, consumer and admin share: broker connections (asyncio ``network``, blocking
``connection``), cluster metadata and coordinators (``cluster``), configuration with librdkafka's
property names (``config``, ``sasl``, ``tls``), ``KafkaError``/``KafkaException`` (``errors``),
the value types (``message``), the I/O thread (``io_thread``), ListOffsets (``list_offsets``), single-partition requests to a
leader under the client's retry rule (``leader_requests``: the raw Fetch, a control Produce) and
the consumer group's embedded protocol (``consumer_protocol``, read by group members and by admin).

Nothing here imports ``producer``, ``consumer`` or ``admin`` (import-linter contract
"client roles", pyproject.toml).
"""
