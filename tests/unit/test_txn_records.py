"""__transaction_state record encoding: round trips, tombstones, replay, and corrupt input."""

from __future__ import annotations

import dataclasses
import struct

import pytest

from oncestream.coordinator.txn.messages import TopicPartition
from oncestream.coordinator.txn.metadata import TxnSnapshot
from oncestream.coordinator.txn.records import (
    VALUE_VERSION,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    replay,
)
from oncestream.coordinator.txn.state import TxnState
from oncestream.errors import CoordinatorInvariantError, CorruptRecordError

S = TxnState


def _rich() -> TxnSnapshot:
    return dataclasses.replace(
        TxnSnapshot.fresh(123_456_789_012, 2**31 - 1, 10),
        producer_epoch=32_767,
        last_producer_id=123_456_789_012,
        last_producer_epoch=32_766,
        next_producer_id=555,
        ongoing_txn_producer_id=99,
        ongoing_txn_producer_epoch=7,
        state=S.PREPARE_COMMIT,
        partitions=frozenset(
            {TopicPartition("b", 2), TopicPartition("a", 1), TopicPartition("b", 0),
             TopicPartition("ünïcode", 3)}
        ),
        start_timestamp_ms=1_700_000_000_000,
        last_update_timestamp_ms=1_700_000_000_123,
        two_phase_commit=True,
        client_transaction_version=2,
    )


def test_value_round_trips_every_field() -> None:
    snap = _rich()
    assert decode_value(encode_value(snap)) == snap
    idle = TxnSnapshot.fresh(1, 60_000, 5)
    idle = dataclasses.replace(idle, producer_epoch=0)
    assert decode_value(encode_value(idle)) == idle


def test_value_encoding_is_deterministic_whatever_the_set_order() -> None:
    snap = _rich()
    again = dataclasses.replace(snap, partitions=frozenset(sorted(snap.partitions, reverse=True)))
    assert encode_value(snap) == encode_value(again)
    assert encode_value(snap)[:2] == struct.pack(">h", VALUE_VERSION)


def test_key_is_kafkas_transaction_log_key_v0() -> None:
    assert encode_key("t1") == b"\x00\x00\x00\x02t1"
    assert decode_key(encode_key("tx-ü")) == "tx-ü"


def test_dead_and_prepare_epoch_fence_are_never_encoded() -> None:
    for state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
        snap = dataclasses.replace(_rich(), state=state, next_producer_id=-1,
                                   ongoing_txn_producer_id=-1, ongoing_txn_producer_epoch=-1,
                                   partitions=frozenset())  # fmt: skip
        with pytest.raises(CoordinatorInvariantError):
            encode_value(snap)


def test_replay_keeps_the_latest_value_per_key_and_tombstones_delete() -> None:
    a1 = dataclasses.replace(TxnSnapshot.fresh(1, 60_000, 0), producer_epoch=0)
    a2 = dataclasses.replace(a1, producer_epoch=1)
    b1 = dataclasses.replace(TxnSnapshot.fresh(2, 60_000, 0), producer_epoch=0)
    log = [
        (encode_key("a"), encode_value(a1)),
        (encode_key("b"), encode_value(b1)),
        (encode_key("a"), encode_value(a2)),
        (encode_key("b"), None),
    ]
    assert replay(log) == {"a": a2}
    # A tombstone followed by a new value brings the id back.
    assert replay([*log, (encode_key("b"), encode_value(b1))]) == {"a": a2, "b": b1}


@pytest.mark.parametrize(
    "mutate",
    [
        lambda v: v[:-1],  # truncated
        lambda v: v + b"\x00",  # trailing byte
        lambda v: struct.pack(">h", 0) + v[2:],  # Kafka's value v0 is not ours
        lambda v: v[:2 + 42] + b"\x07" + v[2 + 43:],  # state id 7 = PrepareEpochFence
        lambda v: v[:2 + 42] + b"\x09" + v[2 + 43:],  # unknown state id
        lambda v: v[:2 + 43] + b"\x02" + v[2 + 44:],  # unknown flag
        lambda v: v[:2 + 8] + b"\xff\xfe" + v[2 + 10:],  # epoch -2
    ],
)
def test_corrupt_values_are_rejected(mutate) -> None:
    value = encode_value(_rich())
    with pytest.raises(CorruptRecordError):
        decode_value(mutate(value))


def test_inconsistent_values_are_rejected() -> None:
    ongoing_without_epoch = dataclasses.replace(
        TxnSnapshot.fresh(1, 60_000, 0), producer_epoch=0, state=S.ONGOING, start_timestamp_ms=1
    )
    raw = bytearray(encode_value(ongoing_without_epoch))
    raw[2 + 8 : 2 + 10] = struct.pack(">h", -1)  # no epoch in Ongoing
    with pytest.raises(CorruptRecordError):
        decode_value(bytes(raw))


def test_corrupt_keys_are_rejected() -> None:
    with pytest.raises(CorruptRecordError):
        decode_key(b"\x00\x01\x00\x01t")  # unknown key version
    with pytest.raises(CorruptRecordError):
        decode_key(b"\x00\x00\x00\x05t")  # string runs past the end
    with pytest.raises(CorruptRecordError):
        decode_key(b"\x00\x00\x00\x00")  # empty transactional id
    with pytest.raises(CorruptRecordError):
        decode_key(b"\x00\x00\x00\x01\xff")  # not UTF-8
