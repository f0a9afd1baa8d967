"""A Schema Registry speaking Confluent's REST API v1 (``oncestream schema-registry``).

Schemas live in a compacted topic (``_schemas``) written in the reference implementation's record
shape; every instance rebuilds its state by reading it, one instance (elected through a consumer
group) writes, the others forward writes to it over HTTP. See docs/schema-registry.md.

Modules: ``errors`` (Confluent's error codes), ``schema_types`` (parsing Avro / JSON Schema /
Protobuf), ``compat_avro`` / ``compat_json`` / ``compat_protobuf`` (the compatibility rules),
``compatibility`` (levels, transitive checks), ``records`` (the topic's keys and values),
``state`` (the in-memory registry rebuilt from those records), ``registry`` (the operations),
``kafka_log`` (reading and writing the topic), ``election`` (the primary), ``http_app`` (the REST
API), ``server_main`` (the command).
"""
