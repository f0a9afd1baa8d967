"""Crash and restart our broker (SIGKILL / SIGTERM) under real producers.

The contract: SIGKILL loses no acknowledged write, and an idempotent producer that keeps
retrying across crashes ends up with every acknowledged record in the log exactly once, in send
order. Each broker here is function-scoped with its data dir under ``tmp_path`` and is restarted
on the same port and data dir, the way an operator would.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Producer

from tests.support.clients import CLIENT_TIMEOUT_S, confluent_consume, create_topic, unique_topic
from tests.support.records import (
    SentRecord,
    assert_exactly_once_in_key_order,
    assert_offsets_dense,
    keyed_records,
)

pytestmark = pytest.mark.chaos

PARTITIONS = 3


class AckLedger:
    """Delivery reports of one librdkafka producer: what was acknowledged, where, and failures."""

    def __init__(self) -> None:
        self.acked: dict[int, tuple[int, int]] = {}  # seq -> (partition, offset)
        self.failed: dict[int, KafkaError] = {}

    def callback_for(self, seq: int):
        """A delivery callback recording the outcome of record ``seq``."""

        def on_delivery(err: KafkaError | None, msg) -> None:
            if err is not None:
                self.failed[seq] = err
            else:
                self.acked[seq] = (msg.partition(), msg.offset())

        return on_delivery


def _chaos_producer(bootstrap: str, **overrides: object) -> Producer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        # long enough to ride out several restarts: a record only fails if it cannot be
        # delivered for two minutes
        "message.timeout.ms": 120_000,
        "linger.ms": 2,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "retry.backoff.ms": 50,
        "retry.backoff.max.ms": 500,
    }
    conf.update(overrides)
    return Producer(conf)


def _produce_seq(producer: Producer, ledger: AckLedger, topic: str, seq: int) -> None:
    partition = seq % PARTITIONS
    while True:
        try:
            producer.produce(
                topic,
                f"{seq:08d}".encode(),
                key=f"p{partition}".encode(),
                partition=partition,
                on_delivery=ledger.callback_for(seq),
            )
            return
        except BufferError:
            producer.poll(0.05)


def _wait_for_acks(producer: Producer, ledger: AckLedger, count: int) -> None:
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(ledger.acked) < count:
        assert time.monotonic() < deadline, f"only {len(ledger.acked)} of {count} acks arrived"
        assert not ledger.failed, f"delivery failures: {list(ledger.failed.items())[:3]}"
        producer.poll(0.05)


def test_sigkill_during_idempotent_produce_keeps_acked_records_exactly_once_in_order(
    broker_factory,
):
    """KIP-98 idempotence across crashes: kill -9 the broker three times while a librdkafka
    idempotent producer (acks=all) streams sequence-numbered values, restart it on the same port
    and data dir each time, and let librdkafka retry. Every acknowledged record is then in the log
    exactly once, at the acknowledged offset, and each partition holds values in send order."""
    broker = broker_factory()
    topic = unique_topic("chaos-idem")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    producer = _chaos_producer(broker.bootstrap)
    ledger = AckLedger()

    total = 6000
    kills = 3
    in_flight_at_kill = 400  # records sent but not yet confirmed when the broker dies
    seq = 0
    for kill_number in range(1, kills + 1):
        target = total * kill_number // (kills + 1)
        while seq < target:
            _produce_seq(producer, ledger, topic, seq)
            producer.poll(0)
            seq += 1
        # let most of it through so the kill lands mid-stream, with batches still in flight
        _wait_for_acks(producer, ledger, target - in_flight_at_kill)
        for _ in range(in_flight_at_kill // 2):  # and more queued right at the kill
            _produce_seq(producer, ledger, topic, seq)
            seq += 1
        # a few ms for librdkafka (linger 2 ms) to put these on the wire, so the kill finds some
        # batches written but not yet acknowledged: their retries must be deduplicated
        time.sleep(0.01)
        broker.kill()
        for _ in range(200):  # records produced while the broker is down wait in librdkafka
            _produce_seq(producer, ledger, topic, seq)
            seq += 1
        broker.start()
    final = seq + total // (kills + 1)
    while seq < final:
        _produce_seq(producer, ledger, topic, seq)
        producer.poll(0)
        seq += 1
    remaining = producer.flush(150)
    assert remaining == 0, f"{remaining} records never acknowledged nor failed"
    assert not ledger.failed, f"delivery failures across restarts: {list(ledger.failed.items())[:5]}"
    assert len(ledger.acked) == seq

    consumed = confluent_consume(broker.bootstrap, topic, PARTITIONS)
    positions: dict[int, tuple[int, int]] = {}
    for record in consumed:
        record_seq = int(record.value)
        assert record_seq not in positions, (
            f"seq {record_seq} stored twice: at {positions[record_seq]} and "
            f"{(record.partition, record.offset)}"
        )
        positions[record_seq] = (record.partition, record.offset)
    missing = sorted(set(ledger.acked) - set(positions))
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:10]}"
    moved = [(s, a, positions[s]) for s, a in ledger.acked.items() if positions[s] != a]
    assert not moved, f"records not at their acknowledged offsets: {moved[:5]}"
    for partition in range(PARTITIONS):
        seqs = [int(r.value) for r in sorted(consumed, key=lambda r: r.offset)
                if r.partition == partition]
        assert seqs == sorted(seqs), f"partition {partition} out of send order"
    assert_offsets_dense(consumed)


@pytest.mark.parametrize(
    "producer_conf",
    [
        {"acks": "1", "enable.idempotence": False},
        {"acks": "all", "enable.idempotence": False},
        {"acks": "all", "enable.idempotence": True},
    ],
    ids=["acks=1", "acks=all", "acks=all-idempotent"],
)
def test_sigkill_right_after_acks_loses_nothing(broker_factory, producer_conf):
    """Acknowledged means durable against a process crash: flush (every record acked), SIGKILL
    at once, restart on the same data dir: every record is there exactly once, in key order.
    The default flush policy leaves data in the page cache, which survives a process crash."""
    broker = broker_factory()
    topic = unique_topic("chaos-acks")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    sent = keyed_records(3000, key_count=12, tag="ack", seed=11)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **producer_conf})
    acked: list[tuple[int, int] | None] = [None] * len(sent)
    errors: list[KafkaError] = []
    for index, record in enumerate(sent):
        def on_delivery(err, msg, index=index):
            if err is not None:
                errors.append(err)
            else:
                acked[index] = (msg.partition(), msg.offset())

        producer.produce(topic, record.value, key=record.key, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert not errors, errors[:3]

    broker.kill()
    broker.start()

    consumed = confluent_consume(broker.bootstrap, topic, PARTITIONS)
    assert_exactly_once_in_key_order(sent, consumed)
    assert_offsets_dense(consumed)
    where = {r.value: (r.partition, r.offset) for r in consumed}
    assert [where[r.value] for r in sent] == acked


def test_sigterm_shuts_down_cleanly_and_restarts_with_everything(broker_factory):
    """SIGTERM exits 0; after each restart the log is intact and appends continue at the high
    watermark (no offset reuse, no gap)."""
    broker = broker_factory()
    topic = unique_topic("chaos-term")
    create_topic(broker.bootstrap, topic, partitions=PARTITIONS)
    all_sent: list[SentRecord] = []
    for round_number in range(3):
        sent = keyed_records(500, key_count=6, tag=f"r{round_number}", seed=round_number)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                             "enable.idempotence": True, "linger.ms": 5})
        for record in sent:
            producer.produce(topic, record.value, key=record.key)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        all_sent += sent
        exit_code = broker.stop()
        assert exit_code == 0, f"SIGTERM exit code {exit_code}; stderr:\n{broker.stderr_tail()}"
        broker.start()
        consumed = confluent_consume(broker.bootstrap, topic, PARTITIONS)
        assert_exactly_once_in_key_order(all_sent, consumed)
        assert_offsets_dense(consumed)


def test_sigkill_while_idle_after_restarts_keeps_topics_and_configs(broker_factory):
    """Topic metadata (partition count, config overrides) survives SIGKILL, not only records."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    from tests.support.clients import admin_client

    broker = broker_factory()
    topic = unique_topic("chaos-meta")
    create_topic(broker.bootstrap, topic, partitions=5, config={"retention.ms": "123456789"})
    broker.kill()
    broker.start()
    admin = admin_client(broker.bootstrap)
    metadata = admin.list_topics(topic, timeout=CLIENT_TIMEOUT_S)
    assert len(metadata.topics[topic].partitions) == 5
    resource = ConfigResource(ResourceType.TOPIC, topic)
    described = admin.describe_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)
    assert described["retention.ms"].value == "123456789"
