"""Produce/consume round trips with real clients, within one client and across clients.

Every test checks the same things: every record arrives exactly once, each key's records keep
their send order and live in one partition, offsets are dense from 0, and the offsets producers
were acknowledged with are where the records really are.
"""

from __future__ import annotations

import itertools

import pytest

from tests.support.clients import (
    CONSUMERS,
    PRODUCERS,
    aiokafka_consume,
    aiokafka_produce,
    create_topic,
    unique_topic,
)
from tests.support.records import (
    ConsumedRecord,
    SentRecord,
    assert_exactly_once_in_key_order,
    assert_offsets_dense,
    keyed_records,
)

pytestmark = pytest.mark.interop

CLIENTS = ["confluent", "kafka-python", "aiokafka", "kcat"]
PARTITIONS = 4


def _check_round_trip(
    sent: list[SentRecord], acked: list[tuple[int, int]], consumed: list[ConsumedRecord]
) -> None:
    assert_exactly_once_in_key_order(sent, consumed)
    assert_offsets_dense(consumed)
    assert len({r.partition for r in consumed}) > 1, "keys should spread over several partitions"
    if acked:  # kcat does not report offsets
        where = {r.value: (r.partition, r.offset) for r in consumed}
        wrong = [(s.value, a, where[s.value]) for s, a in zip(sent, acked) if where[s.value] != a]
        assert not wrong, f"acknowledged offsets differ from the log: {wrong[:5]}"


@pytest.mark.parametrize("client", CLIENTS)
def test_round_trip_same_client_keyed_multi_partition(broker, client):
    """A client reads back exactly what it wrote, once each, in per-key order."""
    topic = unique_topic(f"rt-{client}")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    sent = keyed_records(1500, key_count=16, tag=client.replace("-", ""), seed=1)
    acked = PRODUCERS[client](broker.bootstrap, topic, sent)
    consumed = CONSUMERS[client](broker.bootstrap, topic, PARTITIONS)
    _check_round_trip(sent, acked, consumed)


@pytest.mark.parametrize(
    ("writer", "reader"), [p for p in itertools.permutations(CLIENTS, 2)]
)
def test_cross_client_records_written_by_one_read_by_another(broker, writer, reader):
    """Records written by one client library are read unchanged by every other one."""
    topic = unique_topic(f"x-{writer}-{reader}")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    sent = keyed_records(200, key_count=8, tag=writer.replace("-", ""), seed=2)
    acked = PRODUCERS[writer](broker.bootstrap, topic, sent)
    consumed = CONSUMERS[reader](broker.bootstrap, topic, PARTITIONS)
    _check_round_trip(sent, acked, consumed)


def test_aiokafka_plain_acks_all_producer(broker):
    """aiokafka without idempotence (acks=all) round-trips as well as the idempotent one."""
    topic = unique_topic("rt-aiokafka-plain")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    sent = keyed_records(500, key_count=8, tag="aioplain", seed=3)
    acked = aiokafka_produce(broker.bootstrap, topic, sent, idempotent=False)
    consumed = aiokafka_consume(broker.bootstrap, topic, PARTITIONS)
    _check_round_trip(sent, acked, consumed)
