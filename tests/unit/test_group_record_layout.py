"""Our ``__consumer_offsets`` and ``__transaction_state`` records, byte for byte against Kafka's
published schemas, so that Kafka's own tooling (kafka-console-consumer's offsets formatter,
kafka-dump-log) reads what we write.

The expected bytes are written out by hand below, field by field, from the JSON message
definitions in apache/kafka (group-coordinator/src/main/resources/common/message/ and
transaction-coordinator/src/main/resources/common/message/):

* the key is prefixed with an int16 *record type* (OffsetCommitKey's apiKey 1, GroupMetadataKey's
  apiKey 2, TransactionLogKey version 0) and the value with its int16 *version*;
* non-flexible versions: ``string`` = int16 length + UTF-8 (-1 = null), ``bytes`` = int32 length,
  ``[]`` = int32 count, integers big-endian.

Every byte string is typed out literally here, never produced by our encoder: the encoder must
not be the judge of itself.
"""

from __future__ import annotations

from oncestream.coordinator.group.messages import OffsetAndMetadata
from oncestream.coordinator.group.records import (
    GroupSnapshot,
    MemberSnapshot,
    decode_group_value,
    decode_offset_value,
    group_metadata_record,
    offset_commit_record,
)
from oncestream.coordinator.txn.records import decode_key as decode_txn_key
from oncestream.coordinator.txn.records import encode_key as encode_txn_key
from oncestream.topic_partition import TopicPartition

# OffsetCommitKey (apiKey 1): group string, topic string, partition int32.
OFFSET_KEY = (
    b"\x00\x01"                              # record type 1: OffsetCommitKey
    + b"\x00\x05group"                       # group
    + b"\x00\x06orders"                      # topic
    + b"\x00\x00\x00\x07"                    # partition 7
)

# OffsetCommitValue v3: offset int64, leaderEpoch int32, metadata string, commitTimestamp int64.
OFFSET_VALUE_V3 = (
    b"\x00\x03"                              # version 3
    + b"\x00\x00\x00\x00\x00\x00\x01\x00"    # offset 256
    + b"\x00\x00\x00\x05"                    # leaderEpoch 5
    + b"\x00\x02hi"                          # metadata "hi"
    + b"\x00\x00\x01\x8b\xcf\xe5\x68\x00"    # commitTimestamp 1700000000000
)

# OffsetCommitValue v1: offset int64, metadata string, commitTimestamp int64,
# expireTimestamp int64 (v1 only; no leaderEpoch before v3).
OFFSET_VALUE_V1 = (
    b"\x00\x01"                              # version 1
    + b"\x00\x00\x00\x00\x00\x00\x00\x2a"    # offset 42
    + b"\x00\x00"                            # metadata ""
    + b"\x00\x00\x01\x8b\xcf\xe5\x68\x00"    # commitTimestamp 1700000000000
    + b"\x00\x00\x01\x8b\xcf\xe6\x52\x60"    # expireTimestamp 1700000060000
)

# GroupMetadataKey (apiKey 2): group string.
GROUP_KEY = b"\x00\x02" + b"\x00\x05group"

# GroupMetadataValue v3: protocolType string, generation int32, protocol nullable string,
# leader nullable string, currentStateTimestamp int64, members [MemberMetadata]; MemberMetadata v3:
# memberId string, groupInstanceId nullable string, clientId string, clientHost string,
# rebalanceTimeout int32, sessionTimeout int32, subscription bytes, assignment bytes.
GROUP_VALUE_V3 = (
    b"\x00\x03"                              # version 3
    + b"\x00\x08consumer"                    # protocolType
    + b"\x00\x00\x00\x04"                    # generation 4
    + b"\x00\x05range"                       # protocol
    + b"\x00\x03m-1"                         # leader
    + b"\x00\x00\x01\x8b\xcf\xe5\x68\x00"    # currentStateTimestamp 1700000000000
    + b"\x00\x00\x00\x02"                    # 2 members
    # member 1: static
    + b"\x00\x03m-1"                         # memberId
    + b"\x00\x02i1"                          # groupInstanceId "i1"
    + b"\x00\x03cli"                         # clientId
    + b"\x00\x0a/127.0.0.1"                  # clientHost
    + b"\x00\x00\x75\x30"                    # rebalanceTimeout 30000
    + b"\x00\x00\x27\x10"                    # sessionTimeout 10000
    + b"\x00\x00\x00\x03sub"                 # subscription
    + b"\x00\x00\x00\x02as"                  # assignment
    # member 2: dynamic
    + b"\x00\x03m-2"                         # memberId
    + b"\xff\xff"                            # groupInstanceId null
    + b"\x00\x03cli"                         # clientId
    + b"\x00\x0a/127.0.0.2"                  # clientHost
    + b"\x00\x00\xea\x60"                    # rebalanceTimeout 60000
    + b"\x00\x00\x1b\x58"                    # sessionTimeout 7000
    + b"\x00\x00\x00\x00"                    # subscription (empty)
    + b"\x00\x00\x00\x00"                    # assignment (empty)
)

# GroupMetadataValue v3 of an Empty group after its last member left: no protocol, no leader.
EMPTY_GROUP_VALUE_V3 = (
    b"\x00\x03"
    + b"\x00\x08consumer"
    + b"\x00\x00\x00\x05"                    # generation 5
    + b"\xff\xff"                            # protocol null
    + b"\xff\xff"                            # leader null
    + b"\x00\x00\x01\x8b\xcf\xe5\x68\x00"
    + b"\x00\x00\x00\x00"                    # no members
)

# TransactionLogKey v0: TransactionalId string.
TXN_KEY = b"\x00\x00" + b"\x00\x07payment"

T0 = 1_700_000_000_000


def test_offset_commit_record_is_kafkas_offset_commit_key_and_value_v3():
    key, value = offset_commit_record(
        "group", TopicPartition("orders", 7), OffsetAndMetadata(256, 5, "hi", T0, None)
    )
    assert key == OFFSET_KEY
    assert value == OFFSET_VALUE_V3


def test_offset_commit_with_retention_is_kafkas_offset_commit_value_v1():
    _, value = offset_commit_record(
        "group", TopicPartition("orders", 7), OffsetAndMetadata(42, -1, "", T0, T0 + 60_000)
    )
    assert value == OFFSET_VALUE_V1


def test_offset_tombstone_has_kafkas_key_and_no_value():
    assert offset_commit_record("group", TopicPartition("orders", 7), None) == (OFFSET_KEY, None)


def test_group_metadata_record_is_kafkas_group_metadata_key_and_value_v3():
    snapshot = GroupSnapshot(
        protocol_type="consumer",
        generation_id=4,
        protocol_name="range",
        leader_id="m-1",
        state_timestamp_ms=T0,
        members=(
            MemberSnapshot("m-1", "i1", "cli", "/127.0.0.1", 30_000, 10_000, b"sub", b"as"),
            MemberSnapshot("m-2", None, "cli", "/127.0.0.2", 60_000, 7_000, b"", b""),
        ),
    )
    key, value = group_metadata_record("group", snapshot)
    assert key == GROUP_KEY
    assert value == GROUP_VALUE_V3


def test_empty_group_metadata_has_null_protocol_and_leader():
    snapshot = GroupSnapshot("consumer", 5, None, None, T0, ())
    assert group_metadata_record("group", snapshot) == (GROUP_KEY, EMPTY_GROUP_VALUE_V3)


def test_kafka_written_values_decode():
    """The other direction: bytes in Kafka's layout (as Kafka writes them) load back."""
    assert decode_offset_value(OFFSET_VALUE_V3) == OffsetAndMetadata(256, 5, "hi", T0, None)
    assert decode_offset_value(OFFSET_VALUE_V1) == OffsetAndMetadata(42, -1, "", T0, T0 + 60_000)
    group = decode_group_value(GROUP_VALUE_V3)
    assert (group.protocol_type, group.generation_id, group.protocol_name, group.leader_id) == (
        "consumer", 4, "range", "m-1")
    assert [m.group_instance_id for m in group.members] == ["i1", None]
    assert [m.session_timeout_ms for m in group.members] == [10_000, 7_000]


def test_transaction_log_key_is_kafkas_transaction_log_key_v0():
    assert encode_txn_key("payment") == TXN_KEY
    assert decode_txn_key(TXN_KEY) == "payment"
