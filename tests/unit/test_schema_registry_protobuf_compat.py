"""Protobuf compatibility (Confluent's rules) over descriptors parsed from .proto text."""

from __future__ import annotations

import pytest

from oncestream.schema_registry.compat_protobuf import protobuf_incompatibilities
from oncestream.schema_registry.proto_text import ProtoSyntaxError, parse_proto_text, print_proto_text


def kinds(new: str, old: str) -> list[str]:
    return [p.split("'")[1] for p in protobuf_incompatibilities(parse_proto_text(new), parse_proto_text(old))]


BASE = 'syntax = "proto3"; package p; message M { string a = 1; int32 b = 2; }'


def test_adding_and_removing_optional_fields_is_compatible() -> None:
    assert kinds('syntax = "proto3"; package p; message M { string a = 1; int32 b = 2; bool c = 3; }', BASE) == []
    assert kinds('syntax = "proto3"; package p; message M { string a = 1; }', BASE) == []


def test_field_number_reused_with_another_type() -> None:
    assert kinds('syntax = "proto3"; package p; message M { string a = 1; double b = 2; }', BASE) \
        == ["FIELD_SCALAR_KIND_CHANGED"]
    assert kinds('syntax = "proto3"; package p; message N {} message M { string a = 1; N b = 2; }', BASE) \
        == ["FIELD_KIND_CHANGED"]


def test_wire_compatible_scalars() -> None:
    assert kinds('syntax = "proto3"; package p; message M { bytes a = 1; int64 b = 2; }', BASE) == []
    assert kinds('syntax = "proto3"; package p; message M { string a = 1; sint32 b = 2; }', BASE) \
        == ["FIELD_SCALAR_KIND_CHANGED"]


def test_message_removed_and_package_changed() -> None:
    assert kinds('syntax = "proto3"; package p; message Other { string a = 1; }', BASE) == ["MESSAGE_REMOVED"]
    assert kinds('syntax = "proto3"; package q; message M { string a = 1; int32 b = 2; }', BASE) == ["PACKAGE_CHANGED"]


def test_required_fields_proto2() -> None:
    old = 'syntax = "proto2"; message M { required string a = 1; }'
    assert kinds('syntax = "proto2"; message M { optional string b = 2; }', old) == ["REQUIRED_FIELD_REMOVED"]
    assert kinds('syntax = "proto2"; message M { required string a = 1; required int32 c = 3; }', old) \
        == ["REQUIRED_FIELD_ADDED"]


def test_named_type_changed_and_enums() -> None:
    old = 'syntax = "proto3"; message A {} message B {} enum E { X = 0; } message M { A f = 1; E e = 2; }'
    new = 'syntax = "proto3"; message A {} message B {} enum E { X = 0; Y = 1; } message M { B f = 1; E e = 2; }'
    assert kinds(new, old) == ["FIELD_NAMED_TYPE_CHANGED"]


def test_oneof_rules() -> None:
    old = 'syntax = "proto3"; message M { string a = 1; int32 b = 2; }'
    assert kinds('syntax = "proto3"; message M { oneof o { string a = 1; int32 b = 2; } }', old) \
        == ["MULTIPLE_FIELDS_MOVED_TO_ONEOF"]
    one_of = 'syntax = "proto3"; message M { oneof o { string a = 1; } int32 b = 2; }'
    assert kinds(one_of, old) == []
    assert kinds('syntax = "proto3"; message M { int32 b = 2; }', one_of) == ["ONEOF_FIELD_REMOVED"]


def test_repeated_label_change() -> None:
    assert kinds('syntax = "proto3"; package p; message M { repeated string a = 1; int32 b = 2; }', BASE) \
        == ["FIELD_LABEL_CHANGED"]


def test_parser_reads_maps_nested_types_options_and_comments() -> None:
    proto = parse_proto_text('''
        // a comment
        syntax = "proto3";
        package shop.v1;
        import "google/protobuf/timestamp.proto";
        option java_package = "com.shop";
        message Order {
          /* block */ message Line { string sku = 1; uint32 qty = 2 [deprecated = true]; }
          enum Status { NEW = 0; PAID = 1; }
          repeated Line lines = 1;
          map<string, int64> totals = 2;
          Status status = 3;
          reserved 4, 5;
          google.protobuf.Timestamp at = 6;
        }''')
    order = proto.message_type[0]
    assert proto.package == "shop.v1"
    assert list(proto.dependency) == ["google/protobuf/timestamp.proto"]
    assert [f.name for f in order.field] == ["lines", "totals", "status", "at"]
    assert [n.name for n in order.nested_type] == ["Line", "TotalsEntry"]
    assert order.nested_type[1].options.map_entry


@pytest.mark.parametrize("text", ["", "message {", "syntax = ; message M { string a = x; }", "service S { }"])
def test_parser_refuses_garbage(text: str) -> None:
    with pytest.raises(ProtoSyntaxError):
        parse_proto_text(text)


def test_printed_text_parses_back_to_the_same_descriptor() -> None:
    for text in ('syntax = "proto3"; package a.b; import "x.proto"; message M { message In { int32 v = 1; } '
                 'enum E { Z = 0; O = 1; } repeated In ins = 1; map<string, In> by_name = 2; E e = 3; '
                 'oneof choice { string s = 4; bytes b = 5; } }',
                 'syntax = "proto2"; message P { required string id = 1; optional int64 n = 2; repeated bool f = 3; }'):
        proto = parse_proto_text(text)
        assert parse_proto_text(print_proto_text(proto)) == proto
