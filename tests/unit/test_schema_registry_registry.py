"""The registry's operations over its state, with an in-memory log standing in for the topic:
the records written are applied as the topic reader would apply them, and a new state rebuilt
from them (compacted as Kafka would) must answer the same."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from google.protobuf import descriptor_pb2

from oncestream.schema_registry import records
from oncestream.schema_registry.errors import RegistryError
from oncestream.schema_registry.registry import Registry
from oncestream.schema_registry.state import RegistryState


class MemoryLog:
    """The topic: an append-only list of encoded records, applied to ``state`` on append."""

    def __init__(self, state: RegistryState) -> None:
        self.state = state
        self.written: list[tuple[bytes, bytes | None]] = []

    def append(self, batch: list[records.Record]) -> None:
        for record in batch:
            key, value = record.encode()
            self.written.append((key, value))
            self.state.apply(records.decode(key, value))

    def compacted(self) -> list[tuple[bytes, bytes | None]]:
        """What compaction leaves once tombstones expired: the last value per key, none for tombstones."""
        last: dict[bytes, bytes | None] = {}
        for key, value in self.written:
            last.pop(key, None)
            last[key] = value
        return [(k, v) for k, v in last.items() if v is not None]


def avro(*fields: tuple[Any, ...], name: str = "R") -> str:
    return json.dumps({"type": "record", "name": name,
                       "fields": [{"name": n, "type": t, **({"default": d} if d is not None else {})}
                                  for n, t, d in ((f[0], f[1], f[2] if len(f) > 2 else None) for f in fields)]})


@pytest.fixture
def reg() -> Registry:
    state = RegistryState()
    return Registry(state, MemoryLog(state))


def code(exc: pytest.ExceptionInfo[RegistryError]) -> int:
    return exc.value.error_code


def test_register_twice_gives_one_id_and_one_version(reg: Registry) -> None:
    first = reg.register("s", {"schema": avro(("a", "int"))})
    again = reg.register("s", {"schema": json.dumps(json.loads(avro(("a", "int"))), indent=2)})
    assert (first["id"], first["version"]) == (again["id"], again["version"]) == (1, 1)
    assert reg.versions("s") == [1]
    # Key order and {"type": T} for T are spellings of the same schema.
    respelled = json.dumps({"fields": [{"type": {"type": "int"}, "name": "a"}], "name": "R", "type": "record"})
    assert reg.register("s", {"schema": respelled})["id"] == 1
    # The same schema under another subject keeps its id.
    assert reg.register("t", {"schema": avro(("a", "int"))})["id"] == 1


def test_evolution_backward_by_default(reg: Registry) -> None:
    reg.register("s", {"schema": avro(("a", "int"))})
    second = reg.register("s", {"schema": avro(("a", "int"), ("b", "string", "x"))})
    assert (second["id"], second["version"]) == (2, 2)
    with pytest.raises(RegistryError) as exc:
        reg.register("s", {"schema": avro(("a", "int"), ("c", "string"))})
    assert exc.value.http_status == 409
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in exc.value.message
    reg.set_config("s", {"compatibility": "NONE"})
    assert reg.register("s", {"schema": avro(("a", "int"), ("c", "string"))})["version"] == 3


def test_transitive_checks_every_version(reg: Registry) -> None:
    reg.set_config(None, {"compatibility": "BACKWARD_TRANSITIVE"})
    reg.register("s", {"schema": avro(("a", "int"))})
    reg.register("s", {"schema": avro(("a", "int"), ("b", "int", 0))})
    # Dropping b's default is fine against v2 (b is there) but not against v1.
    with pytest.raises(RegistryError) as exc:
        reg.register("s", {"schema": avro(("a", "int"), ("b", "int"))})
    assert exc.value.http_status == 409
    reg.set_config(None, {"compatibility": "BACKWARD"})
    assert reg.register("s", {"schema": avro(("a", "int"), ("b", "int"))})["version"] == 3


def test_lookup_and_errors(reg: Registry) -> None:
    reg.register("s", {"schema": avro(("a", "int"))})
    assert reg.lookup("s", {"schema": avro(("a", "int"))})["version"] == 1
    with pytest.raises(RegistryError) as exc:
        reg.lookup("s", {"schema": avro(("a", "long"))})
    assert code(exc) == 40403
    with pytest.raises(RegistryError) as exc:
        reg.lookup("nope", {"schema": avro(("a", "int"))})
    assert code(exc) == 40401
    with pytest.raises(RegistryError) as exc:
        reg.version("s", "7")
    assert code(exc) == 40402
    with pytest.raises(RegistryError) as exc:
        reg.version("s", "zero")
    assert code(exc) == 42202
    with pytest.raises(RegistryError) as exc:
        reg.register("s", {"schema": '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]}'})
    assert code(exc) == 42201
    with pytest.raises(RegistryError) as exc:
        reg.register("s", {"schema": "{}", "schemaType": "XML"})
    assert code(exc) == 42201


def test_soft_then_hard_delete_and_ids_never_reused(reg: Registry) -> None:
    log = reg.log
    assert isinstance(log, MemoryLog)
    reg.register("s", {"schema": avro(("a", "int"))})
    reg.register("s", {"schema": avro(("a", "int"), ("b", "int", 0))})
    with pytest.raises(RegistryError) as exc:
        reg.delete_subject("s", permanent=True)
    assert code(exc) == 40405
    assert reg.delete_subject("s", permanent=False) == [1, 2]
    assert reg.subjects() == []
    assert reg.subjects(deleted=True) == ["s"]
    with pytest.raises(RegistryError) as exc:
        reg.lookup("s", {"schema": avro(("a", "int"))})
    assert code(exc) == 40401
    assert reg.lookup("s", {"schema": avro(("a", "int"))}, deleted=True)["version"] == 1
    with pytest.raises(RegistryError) as exc:
        reg.delete_subject("s", permanent=False)
    assert code(exc) == 40404
    assert reg.delete_subject("s", permanent=True) == [1, 2]
    assert reg.subjects(deleted=True) == []
    with pytest.raises(RegistryError) as exc:
        reg.schema(2)
    assert code(exc) == 40403
    # A new schema after the hard delete gets a new id, also in a state rebuilt from the compacted topic.
    rebuilt = RegistryState()
    for key, value in log.compacted():
        rebuilt.apply(records.decode(key, value))
    assert rebuilt.next_id() == 3
    assert reg.register("s", {"schema": avro(("z", "int"))})["id"] == 3


def test_delete_version_and_latest(reg: Registry) -> None:
    reg.register("s", {"schema": avro(("a", "int"))})
    reg.register("s", {"schema": avro(("a", "int"), ("b", "int", 0))})
    assert reg.delete_version("s", "latest", permanent=False) == 2
    assert reg.version("s", "latest").version == 1
    assert reg.version("s", "2", deleted=True).deleted
    with pytest.raises(RegistryError) as exc:
        reg.delete_version("s", "1", permanent=True)
    assert code(exc) == 40407
    assert reg.delete_version("s", "2", permanent=True) == 2
    # The next version number continues after the highest ever kept.
    assert reg.register("s", {"schema": avro(("a", "int"), ("c", "int", 0))})["version"] == 2


def test_references(reg: Registry) -> None:
    address = json.dumps({"type": "record", "name": "Address", "namespace": "x", "fields": [{"name": "s", "type": "string"}]})
    reg.register("address", {"schema": address})
    person = json.dumps({"type": "record", "name": "Person", "fields": [{"name": "home", "type": "x.Address"}]})
    refs = [{"name": "x.Address", "subject": "address", "version": 1}]
    answer = reg.register("person", {"schema": person, "references": refs})
    assert answer["references"] == refs
    assert reg.state.referenced_by("address", 1) == [answer["id"]]
    with pytest.raises(RegistryError) as exc:
        reg.delete_subject("address", permanent=False)
    assert code(exc) == 42206
    with pytest.raises(RegistryError) as exc:
        reg.register("other", {"schema": person, "references": [{"name": "x.Address", "subject": "nope", "version": 1}]})
    assert code(exc) == 42201
    with pytest.raises(RegistryError) as exc:
        reg.register("other", {"schema": person})  # x.Address unknown without the reference
    assert code(exc) == 42201


def test_config_and_mode(reg: Registry) -> None:
    assert reg.compatibility_level(None) == "BACKWARD"
    assert reg.set_config("s", {"compatibility": "full_transitive"}) == {"compatibility": "FULL_TRANSITIVE"}
    assert reg.compatibility_level("s") == "FULL_TRANSITIVE"
    assert reg.delete_config("s") == {"compatibilityLevel": "FULL_TRANSITIVE"}
    assert reg.compatibility_level("s") == "BACKWARD"
    with pytest.raises(RegistryError) as exc:
        reg.set_config(None, {"compatibility": "SIDEWAYS"})
    assert code(exc) == 42203
    reg.set_mode(None, {"mode": "READONLY"}, force=False)
    with pytest.raises(RegistryError) as exc:
        reg.register("s", {"schema": avro(("a", "int"))})
    assert code(exc) == 42205
    reg.set_mode(None, {"mode": "READWRITE"}, force=False)
    with pytest.raises(RegistryError) as exc:
        reg.set_mode(None, {"mode": "SOMETIMES"}, force=False)
    assert code(exc) == 42204


def test_compatibility_endpoint_checks(reg: Registry) -> None:
    reg.register("s", {"schema": avro(("a", "int"))})
    assert reg.check_compatibility("s", "latest", {"schema": avro(("a", "long"))}) == []
    assert reg.check_compatibility("s", "1", {"schema": avro(("a", "string"))}) != []
    assert reg.check_compatibility("fresh", None, {"schema": avro(("a", "string"))}) == []


def test_json_and_protobuf_types(reg: Registry) -> None:
    schema = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}})
    answer = reg.register("j", {"schema": schema, "schemaType": "JSON"})
    assert answer["schemaType"] == "JSON"
    with pytest.raises(RegistryError) as exc:
        reg.register("j", {"schema": json.dumps({"type": 12}), "schemaType": "JSON"})
    assert code(exc) == 42201
    proto = 'syntax = "proto3"; package p; message M { string a = 1; }'
    first = reg.register("p", {"schema": proto, "schemaType": "PROTOBUF"})
    with pytest.raises(RegistryError) as exc:
        reg.register("p", {"schema": 'syntax = "proto3"; package p; message M { int64 a = 1; }', "schemaType": "PROTOBUF"})
    assert exc.value.http_status == 409
    serialized = reg.schema_json(reg.schema(first["id"]), "serialized")["schema"]
    # The base64 descriptor form registers as the same schema.
    assert reg.register("p", {"schema": serialized, "schemaType": "PROTOBUF"})["id"] == first["id"]
    # A schema registered as base64 is answered as .proto text unless format=serialized.
    other = reg.register("q", {"schema": _descriptor_b64(), "schemaType": "PROTOBUF"})
    text = reg.schema_json(reg.schema(other["id"]), None)["schema"]
    assert "message Q {" in text
    assert reg.schema_json(reg.schema(other["id"]), "serialized")["schema"] == _descriptor_b64()


def _descriptor_b64() -> str:
    proto = descriptor_pb2.FileDescriptorProto(name="q.proto", package="q", syntax="proto3")
    proto.message_type.add(name="Q").field.add(name="n", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                                                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    return base64.b64encode(proto.SerializeToString(deterministic=True)).decode()


RULE_A = {"name": "a", "kind": "CONDITION", "mode": "WRITE", "type": "CEL", "expr": "true"}
RULE_B = {"name": "b", "kind": "CONDITION", "mode": "WRITE", "type": "CEL", "expr": "false"}


def test_config_metadata_and_rule_set_defaults_merge_into_registered_schemas(reg: Registry) -> None:
    """Confluent's maybeSetMetadataRuleSet: default, then the request's (or the latest
    version's), then the override; the config's other fields stay when a PUT names only some."""
    reg.set_config(None, {"defaultMetadata": {"properties": {"owner": "platform", "tier": "gold"}},
                          "overrideRuleSet": {"domainRules": [RULE_B]}})
    assert reg.config_answer(None, default_to_global=True) == {
        "compatibilityLevel": "BACKWARD", "defaultMetadata": {"properties": {"owner": "platform", "tier": "gold"}},
        "overrideRuleSet": {"domainRules": [RULE_B]}}
    answer = reg.set_config("s", {"compatibility": "NONE", "overrideMetadata": {"properties": {"tier": "silver"}},
                                  "defaultRuleSet": {"domainRules": [RULE_A]}})
    assert answer == {"compatibility": "NONE", "overrideMetadata": {"properties": {"tier": "silver"}},
                      "defaultRuleSet": {"domainRules": [RULE_A]}}
    # The subject's config replaces the global one's contract fields (Confluent's mergeConfigs)
    first = reg.register("s", {"schema": avro(("a", "int")),
                               "metadata": {"properties": {"app": "x"}, "sensitive": ["a"]}})
    assert first["metadata"] == {"properties": {"app": "x", "tier": "silver"}, "sensitive": ["a"]}
    assert first["ruleSet"] == {"domainRules": [RULE_A]}
    # No metadata in the request: the latest version's, merged again; the same schema, the same id
    again = reg.register("s", {"schema": avro(("a", "int"))})
    assert (again["id"], again["version"]) == (first["id"], 1)
    # A global-config subject: the global default and override apply
    other = reg.register("t", {"schema": avro(("b", "int")), "ruleSet": {"domainRules": [{**RULE_B, "expr": "x"}]}})
    assert other["metadata"] == {"properties": {"owner": "platform", "tier": "gold"}}
    assert other["ruleSet"] == {"domainRules": [RULE_B]}   # the override's rule b replaced the request's
    assert reg.schema(other["id"]).contract_json()["ruleSet"] == {"domainRules": [RULE_B]}
    # A PUT naming one field keeps the others; a field given as null is cleared
    reg.set_config("s", {"overrideMetadata": None})
    assert reg.config_answer("s", default_to_global=False) == {
        "compatibilityLevel": "NONE", "defaultRuleSet": {"domainRules": [RULE_A]}}
    assert reg.delete_config("s")["compatibilityLevel"] == "NONE"
    with pytest.raises(RegistryError) as exc:
        reg.config_answer("s", default_to_global=False)
    assert code(exc) == 40408
    assert reg.config_answer("s", default_to_global=True)["defaultMetadata"] == {
        "properties": {"owner": "platform", "tier": "gold"}}
    with pytest.raises(RegistryError) as exc:
        reg.set_config(None, {"defaultMetadata": "owner=me"})
    assert code(exc) == 422
    # The configs survive a rebuild from the (compacted) topic
    assert isinstance(reg.log, MemoryLog)
    rebuilt = RegistryState()
    for key, value in reg.log.compacted():
        rebuilt.apply(records.decode(key, value))
    assert rebuilt.config_doc(None) == reg.state.config_doc(None)
