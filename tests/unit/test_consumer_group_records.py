"""The consumer group records of __consumer_offsets: Kafka's key versions 3-8 and flexible values."""

from __future__ import annotations

import uuid

import pytest

from oncestream.coordinator.group.consumer.records import (
    ClassicMemberMetadata,
    ConsumerGroupRecord,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    MemberAssignmentState,
    MemberMetadataRecord,
    MemberSubscription,
    SubscriptionMetadataRecord,
    TargetAssignmentEpochRecord,
    TargetAssignmentMemberRecord,
    TopicMetadata,
    decode_record,
    encode_record,
)
from oncestream.errors import CorruptRecordError

T = uuid.UUID("12345678-1234-5678-1234-567812345678")
RECORDS: list[ConsumerGroupRecord] = [
    GroupEpochRecord("g", 7),
    SubscriptionMetadataRecord("g", (TopicMetadata(T, "orders", 3),)),
    MemberMetadataRecord("g", "m", MemberSubscription("inst", None, "client", "/1.2.3.4", ("a", "b"), "^t-.*",
                                                      300_000, "uniform")),
    MemberMetadataRecord("g", "c", MemberSubscription(None, None, "client", "/1.2.3.4", ("a",), None, 60_000, None,
                                                      ClassicMemberMetadata(10_000, (("range", b"\x00\x01"),
                                                                                     ("roundrobin", b""))))),
    TargetAssignmentEpochRecord("g", 7),
    TargetAssignmentMemberRecord("g", "m", {T: frozenset({0, 2})}),
    CurrentAssignmentRecord("g", "m", MemberAssignmentState(7, 6, 1, {T: frozenset({0})}, {T: frozenset({1})})),
]


TOMBSTONES: list[ConsumerGroupRecord] = [
    GroupEpochRecord("g", None), SubscriptionMetadataRecord("g", None), MemberMetadataRecord("g", "m", None),
    TargetAssignmentEpochRecord("g", None), TargetAssignmentMemberRecord("g", "m", None),
    CurrentAssignmentRecord("g", "m", None)]


@pytest.mark.parametrize("record", [*RECORDS, *TOMBSTONES], ids=repr)
def test_round_trip(record: ConsumerGroupRecord) -> None:
    key, value = encode_record(record)
    assert decode_record(int.from_bytes(key[:2], "big"), key, value) == record


def test_key_versions_are_kafkas():
    versions = [int.from_bytes(encode_record(r)[0][:2], "big") for r in RECORDS]
    assert versions == [3, 4, 5, 5, 6, 7, 8]


def test_bytes_are_kafkas_layout():
    """ConsumerGroupMetadata: key int16 3 + string; value int16 0, Epoch int32, no tagged fields.
    CurrentMemberAssignment: compact arrays (length + 1) of {uuid, compact int32 array, tags}."""
    key, value = encode_record(GroupEpochRecord("g", 5))
    assert key == b"\x00\x03\x00\x01g"
    assert value == b"\x00\x00" + b"\x00\x00\x00\x05" + b"\x00"
    key, value = encode_record(CurrentAssignmentRecord("g", "m", MemberAssignmentState(
        4, 3, 0, {T: frozenset({1})}, {})))
    assert key == b"\x00\x08\x00\x01g\x00\x01m"
    assert value == (b"\x00\x00" + b"\x00\x00\x00\x04" + b"\x00\x00\x00\x03" + b"\x00"
                     + b"\x02" + T.bytes + b"\x02" + b"\x00\x00\x00\x01" + b"\x00"
                     + b"\x01" + b"\x00")


def test_truncated_value_is_corrupt():
    key, value = encode_record(RECORDS[2])
    assert value is not None
    with pytest.raises(CorruptRecordError):
        decode_record(5, key, value[:-3])


def test_classic_member_metadata_is_kafkas_tagged_field_0():
    """A member speaking the classic protocol inside a consumer group: ConsumerGroupMemberMetadataValue
    ends with one tagged field (tag 0, its size, then SessionTimeoutMs int32 and the compact array
    of SupportedProtocols {compact string Name, compact bytes Metadata, tags}, then the struct's tags)."""
    record = MemberMetadataRecord("g", "m", MemberSubscription(
        None, None, "c", "h", (), None, 5, None, ClassicMemberMetadata(6, (("range", b"\x07"),))))
    _, value = encode_record(record)
    classic = b"\x00\x00\x00\x06" + b"\x02" + b"\x06range" + b"\x02\x07" + b"\x00" + b"\x00"
    assert value == (b"\x00\x00" + b"\x00" + b"\x00" + b"\x02c" + b"\x02h" + b"\x01" + b"\x00"
                     + b"\x00\x00\x00\x05" + b"\x00"
                     + b"\x01" + b"\x00" + bytes([len(classic)]) + classic)


def test_unknown_tagged_fields_of_member_metadata_are_skipped():
    key, value = encode_record(RECORDS[2])
    assert value is not None
    assert value.endswith(b"\x00")
    with_unknown_tag = value[:-1] + b"\x01" + b"\x05" + b"\x02" + b"\xaa\xbb"
    assert decode_record(5, key, with_unknown_tag) == RECORDS[2]
