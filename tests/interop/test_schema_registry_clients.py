"""confluent-kafka's Schema Registry client and its Avro, JSON Schema and Protobuf serializers,
unchanged, against ``oncestream schema-registry`` on a real oncestream broker: register, evolve
compatibly, refuse an incompatible change, and records serialized through the broker come back
deserialized; bad input gets Confluent's errors and the server keeps serving."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import (
    Metadata,
    MetadataProperties,
    Rule,
    RuleKind,
    RuleMode,
    RuleSet,
    Schema,
    SchemaReference,
    SchemaRegistryClient,
    ServerConfig,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from oncestream.broker_process import ManagedBroker
from tests.support.brokers import NO_INITIAL_REBALANCE_DELAY
from tests.support.schema_registries import SchemaRegistryProcess

pytestmark = pytest.mark.interop
MODULE_BROKER_CONFIG = NO_INITIAL_REBALANCE_DELAY

USER_V1 = json.dumps({"type": "record", "name": "User", "namespace": "test",
                      "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]})
USER_V2 = json.dumps({"type": "record", "name": "User", "namespace": "test",
                      "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "long"},
                                 {"name": "email", "type": ["null", "string"], "default": None}]})
USER_BAD = json.dumps({"type": "record", "name": "User", "namespace": "test",
                       "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"},
                                  {"name": "country", "type": "string"}]})


@pytest.fixture(scope="module")
def registry(broker: ManagedBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaRegistryProcess]:
    process = SchemaRegistryProcess(bootstrap=broker.bootstrap, work_dir=tmp_path_factory.mktemp("registry"))
    process.start()
    try:
        process.wait_writable()
        yield process
    finally:
        process.stop()


@pytest.fixture
def client(registry: SchemaRegistryProcess) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry.url})


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def round_trip(broker: ManagedBroker, topic: str, values: list[bytes]) -> list[bytes]:
    """Produce ``values`` with librdkafka and read them back from the broker."""
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("g"),
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    out: list[bytes] = []
    try:
        for _ in range(300):
            if len(out) == len(values):
                break
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            data = message.value()
            assert data is not None
            out.append(data)
    finally:
        consumer.close()
    assert len(out) == len(values), f"read {len(out)} of {len(values)} records back"
    return out


def test_register_evolve_refuse_with_the_client(registry: SchemaRegistryProcess, client: SchemaRegistryClient) -> None:
    subject = unique("users") + "-value"
    first = client.register_schema(subject, Schema(USER_V1, "AVRO"))
    assert client.register_schema(subject, Schema(USER_V1, "AVRO")) == first
    assert json.loads(client.get_schema(first).schema_str or "") == json.loads(USER_V1)
    assert client.test_compatibility(subject, Schema(USER_V2, "AVRO")) is True
    second = client.register_schema(subject, Schema(USER_V2, "AVRO"))
    assert second != first
    latest = client.get_latest_version(subject)
    assert (latest.version, latest.schema_id) == (2, second)
    assert client.get_versions(subject) == [1, 2]
    assert subject in client.get_subjects()
    assert client.lookup_schema(subject, Schema(USER_V1, "AVRO")).version == 1
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(USER_BAD, "AVRO"))
    assert refused.value.http_status_code == 409
    assert client.test_compatibility(subject, Schema(USER_BAD, "AVRO")) is False
    client.set_compatibility(subject, "NONE")
    assert client.get_compatibility(subject) == "NONE"
    assert client.register_schema(subject, Schema(USER_BAD, "AVRO")) not in (first, second)
    assert client.delete_subject(subject) == [1, 2, 3]
    assert subject not in client.get_subjects()
    assert client.delete_subject(subject, permanent=True) == [1, 2, 3]
    with pytest.raises(SchemaRegistryError) as gone:  # a new client: the first caches the latest version
        SchemaRegistryClient({"url": registry.url}).get_latest_version(subject)
    assert (gone.value.http_status_code, gone.value.error_code) == (404, 40401)


def test_avro_through_the_broker(broker: ManagedBroker, client: SchemaRegistryClient) -> None:
    topic = unique("avro")
    v1 = AvroSerializer(client, USER_V1)
    v2 = AvroSerializer(client, USER_V2)
    ctx = SerializationContext(topic, MessageField.VALUE)
    values = [v1({"name": "ada", "age": 36}, ctx), v2({"name": "bob", "age": 2**40, "email": "b@x"}, ctx)]
    assert values[0][0] == 0
    assert values[0][1:5] != values[1][1:5]
    back = round_trip(broker, topic, values)
    # A reader on the newest schema reads both (Avro resolution: int promoted to long, email defaulted).
    reader = AvroDeserializer(client, USER_V2)
    assert [reader(v, ctx) for v in back] == [{"name": "ada", "age": 36, "email": None},
                                              {"name": "bob", "age": 2**40, "email": "b@x"}]
    # A reader without a schema uses each record's writer schema, fetched by id.
    writer_schema = AvroDeserializer(client)
    assert writer_schema(back[0], ctx) == {"name": "ada", "age": 36}


def test_json_schema_through_the_broker(broker: ManagedBroker, client: SchemaRegistryClient) -> None:
    topic = unique("json")
    schema = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
                         "properties": {"id": {"type": "integer"}, "item": {"type": "string"}},
                         "required": ["id"]})
    ctx = SerializationContext(topic, MessageField.VALUE)
    serializer = JSONSerializer(schema, client)
    back = round_trip(broker, topic, [serializer({"id": 7, "item": "tea"}, ctx)])
    assert JSONDeserializer(schema, schema_registry_client=client)(back[0], ctx) == {"id": 7, "item": "tea"}
    registered = client.get_latest_version(f"{topic}-value")
    assert registered.schema.schema_type == "JSON"
    # Adding a property to the open content model is refused (409).
    wider = json.dumps({"type": "object", "properties": {"id": {"type": "integer"}, "item": {"type": "string"},
                                                          "qty": {"type": "integer"}}, "required": ["id"]})
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(f"{topic}-value", Schema(wider, "JSON"))
    assert refused.value.http_status_code == 409


def _protobuf_class(package: str, fields: list[tuple[str, int, int]]) -> Any:
    """A message class ``<package>.Reading`` with ``fields`` (name, number, FieldDescriptorProto type)."""
    file_proto = descriptor_pb2.FileDescriptorProto(name=f"{package}/reading.proto", package=package, syntax="proto3")
    message = file_proto.message_type.add(name="Reading")
    for name, number, kind in fields:
        message.field.add(name=name, number=number, type=kind, label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.Reading"))


def test_protobuf_through_the_broker(broker: ManagedBroker, client: SchemaRegistryClient) -> None:
    topic = unique("proto")
    package = "p" + uuid.uuid4().hex[:8]
    f = descriptor_pb2.FieldDescriptorProto
    reading = _protobuf_class(package, [("sensor", 1, f.TYPE_STRING), ("celsius", 2, f.TYPE_DOUBLE)])
    ctx = SerializationContext(topic, MessageField.VALUE)
    serializer = ProtobufSerializer(reading, client, {"use.deprecated.format": False})
    back = round_trip(broker, topic, [serializer(reading(sensor="s1", celsius=21.5), ctx)])
    decoded = ProtobufDeserializer(reading, {"use.deprecated.format": False}, client)(back[0], ctx)
    assert (decoded.sensor, decoded.celsius) == ("s1", 21.5)
    # Field 2 reused with another type: refused.
    changed = _protobuf_class(package, [("sensor", 1, f.TYPE_STRING), ("celsius", 2, f.TYPE_STRING)])
    with pytest.raises(SchemaRegistryError) as refused:
        ProtobufSerializer(changed, client, {"use.deprecated.format": False})(changed(sensor="s", celsius="x"), ctx)
    assert refused.value.http_status_code == 409
    assert "FIELD_SCALAR_KIND_CHANGED" in refused.value.error_message


def test_references_between_avro_schemas(broker: ManagedBroker, registry: SchemaRegistryProcess,
                                        client: SchemaRegistryClient) -> None:
    address_subject = unique("address")
    address = json.dumps({"type": "record", "name": "Address", "namespace": "ref",
                          "fields": [{"name": "street", "type": "string"}]})
    client.register_schema(address_subject, Schema(address, "AVRO"))
    person = json.dumps({"type": "record", "name": "Person", "namespace": "ref",
                         "fields": [{"name": "home", "type": "ref.Address"}]})
    refs = [SchemaReference("ref.Address", address_subject, 1)]
    person_id = client.register_schema(unique("person"), Schema(person, "AVRO", refs))
    fetched = client.get_schema(person_id)
    assert [(r.name, r.subject, r.version) for r in fetched.references or []] == [("ref.Address", address_subject, 1)]
    # The serializers resolve the reference through the registry (GET of the referenced version).
    topic = unique("people")
    ctx = SerializationContext(topic, MessageField.VALUE)
    serializer = AvroSerializer(client, Schema(person, "AVRO", refs), conf={"auto.register.schemas": True})
    back = round_trip(broker, topic, [serializer({"home": {"street": "Main 1"}}, ctx)])
    fresh = SchemaRegistryClient({"url": registry.url})  # nothing cached: everything is fetched by id
    assert AvroDeserializer(fresh)(back[0], ctx) == {"home": {"street": "Main 1"}}


def test_bad_input_answers_cleanly(registry: SchemaRegistryProcess, client: SchemaRegistryClient,
                                   broker: ManagedBroker) -> None:
    subject = unique("bad")
    with pytest.raises(SchemaRegistryError) as malformed:
        client.register_schema(subject, Schema('{"type": "record", "name": "X", "fields": [', "AVRO"))
    assert (malformed.value.http_status_code, malformed.value.error_code) == (422, 42201)
    with pytest.raises(SchemaRegistryError) as unknown_type:
        client.register_schema(subject, Schema('{"type": "recordd", "name": "X"}', "AVRO"))
    assert unknown_type.value.error_code == 42201
    person = json.dumps({"type": "record", "name": "P", "fields": [{"name": "a", "type": "nowhere.Address"}]})
    with pytest.raises(SchemaRegistryError) as unknown_reference:
        client.register_schema(subject, Schema(person, "AVRO", [SchemaReference("nowhere.Address", unique("none"), 1)]))
    assert unknown_reference.value.error_code == 42201
    with pytest.raises(SchemaRegistryError) as no_id:
        client.get_schema(987654)
    assert (no_id.value.http_status_code, no_id.value.error_code) == (404, 40403)
    # A framed record naming an id the registry never handed out: the deserializer fails cleanly.
    ctx = SerializationContext(unique("t"), MessageField.VALUE)
    with pytest.raises(SchemaRegistryError) as unknown_id:
        AvroDeserializer(client)(b"\x00" + (876543).to_bytes(4, "big") + b"\x02", ctx)
    assert unknown_id.value.error_code == 40403
    # Raw bodies no client would send: still Confluent's errors.
    raw = httpx.post(f"{registry.url}/subjects/{subject}/versions", content=b"{{{",
                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"}, timeout=10)
    assert raw.status_code == 400
    assert raw.json()["error_code"] == 400
    # And the server still serves.
    assert registry.is_alive()
    assert client.register_schema(subject, Schema(USER_V1, "AVRO")) > 0


def test_restart_rebuilds_from_the_topic(broker: ManagedBroker, tmp_path: Path) -> None:
    topic_name = unique("_schemas")
    config = {"kafkastore.topic": topic_name, "schema.registry.group.id": unique("sr")}
    instance = SchemaRegistryProcess(bootstrap=broker.bootstrap, work_dir=tmp_path, config=config)
    instance.start()
    try:
        instance.wait_writable()
        client = SchemaRegistryClient({"url": instance.url})
        first = client.register_schema("r-value", Schema(USER_V1, "AVRO"))
        client.register_schema("r-value", Schema(USER_V2, "AVRO"))
        client.delete_subject("r-value")
        client.delete_subject("r-value", permanent=True)
        instance.kill()
        instance.start()
        instance.wait_writable()
        client = SchemaRegistryClient({"url": instance.url})
        assert client.get_subjects() == []
        # Hard-deleted ids stay used: the next registration gets a new one.
        assert client.register_schema("r-value", Schema(USER_BAD, "AVRO")) > first + 1
        assert instance.stop() == 0  # SIGTERM: a clean stop
    finally:
        instance.stop()


def test_metadata_and_rule_sets_are_stored_and_found(broker: ManagedBroker, tmp_path: Path) -> None:
    """Data contracts as newer confluent-kafka clients send them: a schema's ``metadata`` and
    ``ruleSet`` are stored, answered by every read, part of its identity (the same text with
    other metadata is a new version with a new id), found by ``get_latest_with_metadata``
    (``GET /subjects/{s}/metadata``), and still there after a restart rebuilt the state from the topic."""
    instance = SchemaRegistryProcess(bootstrap=broker.bootstrap, work_dir=tmp_path,
                                     config={"kafkastore.topic": unique("_schemas"),
                                             "schema.registry.group.id": unique("sr")})
    instance.start()
    try:
        instance.wait_writable()
        client = SchemaRegistryClient({"url": instance.url})
        subject = unique("contract") + "-value"
        rule = Rule(name="adult", doc=None, kind=RuleKind.CONDITION, mode=RuleMode.WRITE, type="CEL", tags=None,
                    params=None, expr="message.age >= 18", on_success=None, on_failure="ERROR", disabled=False)

        def schema(major: str) -> Schema:
            return Schema(USER_V1, "AVRO", metadata=Metadata(tags=None, sensitive=None, properties=MetadataProperties(
                {"owner": "team-a", "app.major.version": major})), rule_set=RuleSet(migration_rules=None,
                                                                                    domain_rules=[rule]))

        first = client.register_schema(subject, schema("1"))
        assert client.register_schema(subject, schema("1")) == first          # the same schema: the same id
        second = client.register_schema(subject, schema("2"))
        assert second != first
        assert client.get_versions(subject) == [1, 2]

        def check(client: SchemaRegistryClient) -> None:
            found = client.get_latest_with_metadata(subject, {"app.major.version": "1"})
            assert (found.version, found.schema_id) == (1, first)
            assert found.schema.metadata is not None
            assert found.schema.metadata.properties is not None
            assert found.schema.metadata.properties.properties == {"owner": "team-a", "app.major.version": "1"}
            assert found.schema.rule_set is not None
            assert found.schema.rule_set.domain_rules is not None
            assert [(r.name, r.expr, r.on_failure) for r in found.schema.rule_set.domain_rules] == [
                ("adult", "message.age >= 18", "ERROR")]
            latest = client.get_latest_with_metadata(subject, {"owner": "team-a"})
            assert (latest.version, latest.schema_id) == (2, second)
            by_id = SchemaRegistryClient({"url": instance.url}).get_schema(second)
            assert by_id.metadata is not None
            assert by_id.metadata.properties is not None
            assert by_id.metadata.properties.properties["app.major.version"] == "2"
            with pytest.raises(SchemaRegistryError) as info:
                client.get_latest_with_metadata(subject, {"app.major.version": "3"})
            assert info.value.error_code == 40403

        check(client)
        # A lookup without metadata finds the newest version of that text.
        assert client.lookup_schema(subject, Schema(USER_V1, "AVRO")).version == 2
        instance.kill()
        instance.start()
        instance.wait_writable()
        check(SchemaRegistryClient({"url": instance.url}))
    finally:
        instance.stop()


def test_subjects_in_a_context(broker: ManagedBroker, client: SchemaRegistryClient) -> None:
    """A context-qualified subject (``:.staging:orders-value``) as confluent-kafka's client uses it:
    registered, read back by subject and by id (the client names the subject), listed by
    ``get_contexts``; Avro records written through it read back."""
    name = unique("ctx")
    subject = f":.staging:{name}-value"
    schema_id = client.register_schema(subject, Schema(USER_V1, "AVRO"))
    assert client.get_latest_version(subject).schema_id == schema_id
    assert client.get_schema(schema_id, subject_name=subject).schema_str == USER_V1
    assert subject in client.get_subjects()
    contexts = client.get_contexts()
    assert "." in contexts
    assert ".staging" in contexts
    assert client.get_contexts(offset=contexts.index(".staging"), limit=1) == [".staging"]
    serialize = AvroSerializer(client, USER_V1, conf={"auto.register.schemas": False, "use.latest.version": True,
                                                      "subject.name.strategy": lambda _ctx, _record: subject})
    ctx = SerializationContext(name, MessageField.VALUE)
    data = serialize({"name": "a", "age": 3}, ctx)
    assert data is not None
    assert int.from_bytes(data[1:5], "big") == schema_id
    assert AvroDeserializer(client)(data, ctx) == {"name": "a", "age": 3}


def test_context_wildcard_and_delete_context(registry: SchemaRegistryProcess, client: SchemaRegistryClient) -> None:
    """``subjectPrefix=:*:`` through confluent-kafka's ``get_subjects`` (every context's subjects,
    ``:*:rest`` those whose unqualified name starts with ``rest``), and ``DELETE
    /contexts/{context}`` over HTTP (the client has no call for it): refused (422, 42211) while a
    subject is left in the context, soft-deleted ones included, then 204 and gone from
    ``get_contexts``."""
    name = unique("wild")
    context = "." + unique("gone").replace("-", "")
    qualified = f":{context}:{name}-value"
    # a schema of this test's own: the other tests count on which ids the default context gave
    own = Schema(json.dumps({"type": "record", "name": "Wild", "fields": [{"name": "w", "type": "int"}]}), "AVRO")
    for subject in (qualified, f"{name}-value", f"other{name}-value"):
        client.register_schema(subject, own)
    everything = client.get_subjects(subject_prefix=":*:")
    assert {qualified, f"{name}-value", f"other{name}-value"} <= set(everything)
    assert client.get_subjects(subject_prefix=f":*:{name}") == sorted([qualified, f"{name}-value"])
    assert client.get_subjects(subject_prefix=f":{context}:") == [qualified]

    url = f"{registry.url}/contexts/:{context}:"
    refused = httpx.delete(url, timeout=20)
    assert refused.status_code == 422
    assert refused.json() == {"error_code": 42211, "message": f"The specified context ':{context}:' is not empty."}
    client.delete_subject(qualified)
    assert httpx.delete(url, timeout=20).status_code == 422   # soft-deleted: still there
    client.delete_subject(qualified, permanent=True)
    assert context in client.get_contexts()   # a context outlives its subjects until deleted
    deleted = httpx.delete(url, timeout=20)
    assert (deleted.status_code, deleted.content) == (204, b"")
    assert context not in client.get_contexts()


def test_an_alias_subject_stands_for_its_target(registry: SchemaRegistryProcess, client: SchemaRegistryClient) -> None:
    """A subject whose own config has ``alias`` (set over HTTP: the client's ``ServerConfig`` has no
    field for it) stands for its target in confluent-kafka's calls, as Confluent's AliasFilter
    makes it: reads, lookups and registrations through the alias reach the target, and so does a
    serializer using the latest version of the alias subject. An unqualified alias is in the
    aliasing subject's context; deleting the config ends the aliasing."""
    context = "." + unique("alias").replace("-", "")   # a context of its own: the ids stay this test's
    target_name = f"{unique('orders')}-value"
    target, alias = f":{context}:{target_name}", f":{context}:{unique('renamed')}-value"
    first = client.register_schema(target, Schema(USER_V1, "AVRO"))
    config_url = f"{registry.url}/config/{alias}"
    assert httpx.put(config_url, json={"alias": target_name}, timeout=20).status_code == 200

    latest = client.get_latest_version(alias)
    assert (latest.subject, latest.schema_id, latest.version) == (target, first, 1)
    assert client.lookup_schema(alias, Schema(USER_V1, "AVRO")).subject == target
    second = client.register_schema(alias, Schema(USER_V2, "AVRO"))
    assert client.get_versions(target) == [1, 2]
    assert client.get_versions(alias) == [1, 2]
    assert alias not in client.get_subjects()   # the alias holds no version of its own
    # a client of its own: ``client`` cached the alias's latest version (1) above
    fresh = SchemaRegistryClient({"url": registry.url})
    serialize = AvroSerializer(fresh, USER_V2, conf={"auto.register.schemas": False, "use.latest.version": True,
                                                     "subject.name.strategy": lambda _ctx, _record: alias})
    ctx = SerializationContext("renamed", MessageField.VALUE)
    data = serialize({"name": "a", "age": 3}, ctx)
    assert data is not None
    assert int.from_bytes(data[1:5], "big") == second

    assert httpx.get(config_url, timeout=20).json()["alias"] == target_name   # /config is not aliased
    assert httpx.delete(config_url, timeout=20).status_code == 200
    with pytest.raises(SchemaRegistryError) as gone:   # a new client: the others cached the alias's versions
        SchemaRegistryClient({"url": registry.url}).get_latest_version(alias)
    assert gone.value.error_code == 40401


def _rule(name: str, expr: str) -> Rule:
    return Rule(name=name, doc=None, kind=RuleKind.CONDITION, mode=RuleMode.WRITE, type="CEL", tags=None,
                params=None, expr=expr, on_success=None, on_failure="ERROR", disabled=False)


def test_config_metadata_and_rule_set_defaults(client: SchemaRegistryClient) -> None:
    """``defaultMetadata``/``overrideMetadata``/``defaultRuleSet``/``overrideRuleSet`` of a subject's
    config, set with the client's ``set_config``, merged into the schemas registered after it as
    Confluent's registry merges them: the default, then the request's metadata, then the override;
    a registration without metadata inherits the latest version's; ``get_config`` answers them."""
    subject = unique("defaults") + "-value"
    config = ServerConfig(
        default_metadata=Metadata(tags=None, sensitive=None, properties=MetadataProperties({"owner": "platform",
                                                                                           "tier": "gold"})),
        override_metadata=Metadata(tags=None, sensitive=None, properties=MetadataProperties({"tier": "silver"})),
        default_rule_set=RuleSet(migration_rules=None, domain_rules=[_rule("adult", "message.age >= 18")]),
        override_rule_set=RuleSet(migration_rules=None, domain_rules=[_rule("named", "message.name != ''")]))
    client.set_config(subject, config)
    got = client.get_config(subject)
    assert got.default_metadata is not None
    assert got.default_metadata.properties is not None
    assert got.default_metadata.properties.properties == {"owner": "platform", "tier": "gold"}
    assert got.override_rule_set is not None
    assert got.override_rule_set.domain_rules is not None
    assert [r.name for r in got.override_rule_set.domain_rules] == ["named"]

    first = client.register_schema(subject, Schema(USER_V1, "AVRO", metadata=Metadata(
        tags=None, sensitive=None, properties=MetadataProperties({"app": "billing"}))))
    latest = client.get_latest_version(subject)
    assert latest.schema_id == first
    metadata = latest.schema.metadata
    assert metadata is not None
    assert metadata.properties is not None
    assert metadata.properties.properties == {"app": "billing", "owner": "platform", "tier": "silver"}
    rule_set = latest.schema.rule_set
    assert rule_set is not None
    assert rule_set.domain_rules is not None
    assert [r.name for r in rule_set.domain_rules] == ["adult", "named"]

    # The next version without metadata keeps the latest version's, merged again
    second = client.register_schema(subject, Schema(USER_V2, "AVRO"))
    newest = client.get_version(subject, 2)   # (the client caches get_latest_version)
    assert (newest.schema_id, newest.version) == (second, 2)
    assert newest.schema.metadata is not None
    assert newest.schema.metadata.properties is not None
    assert newest.schema.metadata.properties.properties == {"app": "billing", "owner": "platform", "tier": "silver"}
    # Another subject (global config: none of these) gets nothing added
    plain = unique("plain") + "-value"
    client.register_schema(plain, Schema(USER_V1, "AVRO"))
    assert client.get_latest_version(plain).schema.metadata is None


def test_each_context_has_its_own_ids_with_the_client(registry: SchemaRegistryProcess,
                                                      client: SchemaRegistryClient) -> None:
    """A fresh context starts its ids at 1 whatever the default context holds; records framed
    with a context's id read back through confluent-kafka's deserializer, which asks
    ``/schemas/ids/{id}?subject=<topic>-value`` (unqualified): the registry finds the id under
    that subject in the context, as Confluent's does. The ``/contexts/{context}/...`` URL forms,
    which the client has no call for, answer the same over HTTP."""
    context = "." + unique("ctx").replace("-", "")
    topic = unique("orders")
    subject = f":{context}:{topic}-value"
    client.register_schema(unique("filler") + "-value", Schema(USER_V2, "AVRO"))   # the default context has ids
    schema_id = client.register_schema(subject, Schema(USER_V1, "AVRO"))
    assert schema_id == 1
    default_id = client.register_schema(unique("plain") + "-value", Schema(USER_V1, "AVRO"))
    assert default_id != schema_id
    assert context in client.get_contexts()
    assert client.get_schema(schema_id, subject_name=subject).schema_str == USER_V1
    serialize = AvroSerializer(client, USER_V1, conf={"auto.register.schemas": False, "use.latest.version": True,
                                                      "subject.name.strategy": lambda _ctx, _record: subject})
    ctx = SerializationContext(topic, MessageField.VALUE)
    data = serialize({"name": "a", "age": 3}, ctx)
    assert data is not None
    assert int.from_bytes(data[1:5], "big") == 1
    assert AvroDeserializer(SchemaRegistryClient({"url": registry.url}))(data, ctx) == {"name": "a", "age": 3}
    qualified = AvroDeserializer(SchemaRegistryClient({"url": registry.url}),
                                 conf={"subject.name.strategy": lambda _ctx, _record: subject})
    assert qualified(data, ctx) == {"name": "a", "age": 3}

    base = f"{registry.url}/contexts/{context}"
    assert httpx.get(f"{base}/subjects", timeout=10).json() == [subject]
    assert httpx.get(f"{base}/subjects/{topic}-value/versions/1", timeout=10).json()["id"] == 1
    assert httpx.get(f"{base}/schemas/ids/1", timeout=10).json()["schema"] == USER_V1
    put = httpx.put(f"{base}/config", json={"compatibility": "NONE"}, timeout=20)
    assert put.json() == {"compatibility": "NONE"}
    assert client.get_compatibility(f":{context}:") == "NONE"
    # NONE in the context: an incompatible change registers there, under the bare subject name
    answer = httpx.post(f"{base}/subjects/{topic}-value/versions", json={"schema": USER_BAD}, timeout=20)
    assert answer.status_code == 200, answer.text
    assert answer.json()["id"] == 2
    client.register_schema(f"{topic}-value", Schema(USER_V1, "AVRO"))
    with pytest.raises(SchemaRegistryError) as info:   # the default context keeps BACKWARD
        client.register_schema(f"{topic}-value", Schema(USER_BAD, "AVRO"))
    assert info.value.http_status_code == 409
