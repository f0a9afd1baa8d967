"""Helpers for the transaction suites (KIP-98, KIP-447, KIP-890 part 1).

- ``start_txn_broker``: our broker configured for transaction tests (timed-out transactions are
  looked for every 500 ms instead of every 10 s; groups rebalance without the 3 s initial delay).
- ``transactional_producer``: a librdkafka transactional producer with test-friendly timeouts.
- ``read_to_end``: read every partition of a topic with a chosen isolation level until the
  consumer reports end-of-partition at or past the high watermark taken when the read started.
  For ``read_committed`` that end is the last stable offset (LSO), so the read only finishes once
  no transaction holds the LSO back; a hanging transaction fails the read instead of hiding.
- ``list_offset`` / ``describe_transaction``: wire-level views (ListOffsets with an isolation
  level, DescribeTransactions) through our blocking client.
- Two programs the chaos suites run as subprocesses and SIGKILL::

      python -m tests.support.txn hang-producer ...   # opens a transaction and never ends it
      python -m tests.support.txn copier ...          # exactly-once copier: in -> out

Records carry their identity in the value (``"<tag>-p<partition>-<n>"``) so a reader can say
which transaction a record came from.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

# The subprocess programs run with ``python -m tests.support.txn`` from the project root; make the
# ``tests`` package importable however the interpreter was started.
_PROJECT_ROOT = str(Path(__file__).resolve().parent.parent.parent)
if _PROJECT_ROOT not in sys.path:
    sys.path.insert(0, _PROJECT_ROOT)

from confluent_kafka import (  # noqa: E402
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from tests.support.brokers import BrokerProcess  # noqa: E402
from tests.support.clients import (  # noqa: E402
    CLIENT_TIMEOUT_S,
    CONSUME_WAIT_S,
    COORDINATOR_MOVING,
    assign_from_beginning,
    unique_topic,
)
from tests.support.narrow import consumed_record, message_position  # noqa: E402
from tests.support.records import ConsumedRecord  # noqa: E402

if TYPE_CHECKING:
    from kio.schema.errors import ErrorCode

LIST_OFFSETS_KEY = 2
DESCRIBE_TRANSACTIONS_KEY = 65
LATEST_TIMESTAMP = -1
READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"

# Broker properties for the transaction suites. The cleanup interval is how often the coordinator
# looks for transactions past their timeout (Kafka's default is 10 s); 500 ms lets a test with a
# 3 s transaction timeout see the abort within a few seconds.
TXN_BROKER_CONFIG = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
}


def start_txn_broker(
    data_dir: Path, extra_config: dict[str, str] | None = None, port: int | None = None
) -> BrokerProcess:
    """Start our broker with TXN_BROKER_CONFIG (plus ``extra_config``) and wait until it listens."""
    config = dict(TXN_BROKER_CONFIG)
    config.update(extra_config or {})
    broker = BrokerProcess(data_dir=data_dir, port=port, config=config)
    broker.start()
    return broker


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.1) -> None:
    """Poll ``predicate`` until it holds; fail with ``what`` after ``timeout_s`` (a hang guard,
    not a timing assertion: the deadlines are far above the expected time)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(interval_s)


def record_value(tag: str, partition: int, n: int) -> bytes:
    """The value of the ``n``-th record of transaction ``tag`` on ``partition``."""
    return f"{tag}-p{partition}-{n:04d}".encode()


def transaction_values(tag: str, partitions: Iterable[int], per_partition: int) -> dict[int, list[bytes]]:
    """Values ``record_value(tag, p, n)`` for n < per_partition, per partition."""
    return {p: [record_value(tag, p, n) for n in range(per_partition)] for p in partitions}


# -- librdkafka ----------------------------------------------------------------------------------
def transactional_producer(bootstrap: str, transactional_id: str, **overrides: object) -> Producer:
    """A librdkafka transactional producer (idempotence and acks=all are implied by
    ``transactional.id``); reconnect backoffs are short so broker restarts are noticed quickly."""
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "transactional.id": transactional_id,
        "linger.ms": 5,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "retry.backoff.ms": 50,
        "retry.backoff.max.ms": 500,
    }
    conf.update(overrides)
    return Producer(conf)


class DeliveryLog:
    """Delivery reports of one producer: where each value landed, and every error."""

    def __init__(self) -> None:
        self.delivered: dict[bytes, tuple[int, int]] = {}
        self.errors: list[tuple[bytes, KafkaError]] = []

    def __call__(self, err: KafkaError | None, msg) -> None:
        if err is not None:
            self.errors.append((msg.value(), err))
        else:
            self.delivered[msg.value()] = (msg.partition(), msg.offset())


def produce_values(
    producer: Producer, topic: str, values_by_partition: dict[int, list[bytes]], log: DeliveryLog | None = None
) -> None:
    """Produce every value to its partition (key = ``p<partition>``), serving the local queue."""
    for partition, values in values_by_partition.items():
        for value in values:
            while True:
                try:
                    producer.produce(topic, value, key=f"p{partition}".encode(), partition=partition, on_delivery=log)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)


def run_transaction(
    producer: Producer, topic: str, values_by_partition: dict[int, list[bytes]], *, commit: bool
) -> DeliveryLog:
    """begin, produce every value, flush (so the data is in the log), then commit or abort."""
    log = DeliveryLog()
    producer.begin_transaction()
    produce_values(producer, topic, values_by_partition, log)
    remaining = producer.flush(CLIENT_TIMEOUT_S)
    assert remaining == 0, f"{remaining} transactional records not acknowledged"
    assert not log.errors, f"delivery errors inside the transaction: {log.errors[:3]}"
    if commit:
        producer.commit_transaction(CLIENT_TIMEOUT_S)
    else:
        producer.abort_transaction(CLIENT_TIMEOUT_S)
    return log


def plain_produce(bootstrap: str, topic: str, values_by_partition: dict[int, list[bytes]]) -> None:
    """Produce with a non-transactional idempotent producer and wait for every acknowledgement."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5})
    log = DeliveryLog()
    produce_values(producer, topic, values_by_partition, log)
    remaining = producer.flush(CLIENT_TIMEOUT_S)
    assert remaining == 0, f"plain produce failed: {remaining} left, {log.errors[:3]}"
    assert not log.errors, f"plain produce failed: {remaining} left, {log.errors[:3]}"


def isolated_consumer(bootstrap: str, isolation: str, **overrides: object) -> Consumer:
    """A librdkafka consumer for ``assign`` use with the given isolation level; it reports
    end-of-partition events so a reader knows when it has caught up."""
    assert isolation in (READ_COMMITTED, READ_UNCOMMITTED)
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": unique_topic("txn-reader"),
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": isolation,
        "enable.partition.eof": True,
        "fetch.wait.max.ms": 100,
    }
    conf.update(overrides)
    return Consumer(conf)


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """The high watermark of every partition (ListOffsets latest, read_uncommitted)."""
    return {p: list_offset(bootstrap, topic, p, read_committed=False) for p in range(partitions)}


def read_to_end(
    bootstrap: str, topic: str, partitions: int, *, isolation: str, timeout_s: float = CLIENT_TIMEOUT_S
) -> dict[int, list[ConsumedRecord]]:
    """Every record a consumer of ``isolation`` returns, per partition, reading from offset 0
    until end-of-partition at or past the high watermark seen at the start.

    For read_committed, librdkafka reports end-of-partition at the LSO, so this only returns
    once every transaction that began before the call has ended (its marker written).
    """
    targets = high_watermarks(bootstrap, topic, partitions)
    consumer = isolated_consumer(bootstrap, isolation)
    got: dict[int, list[ConsumedRecord]] = {p: [] for p in range(partitions)}
    eof_at: dict[int, int] = {}
    try:
        assign_from_beginning(consumer, topic, partitions)
        deadline = time.monotonic() + timeout_s
        while any(eof_at.get(p, -1) < targets[p] for p in range(partitions)):
            assert time.monotonic() < deadline, (
                f"{isolation} read of {topic} stuck: end-of-partition at {eof_at}, high watermarks "
                f"{targets}, LSOs {[list_offset(bootstrap, topic, p, read_committed=True) for p in range(partitions)]}"
            )
            for msg in consumer.consume(num_messages=1000, timeout=CONSUME_WAIT_S):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        partition, offset = message_position(msg)
                        eof_at[partition] = offset
                        continue
                    raise KafkaException(err)
                record = consumed_record(msg)
                got[record.partition].append(record)
    finally:
        consumer.close()
    for p, records in got.items():
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets)), f"partition {p}: offsets repeated or out of order: {offsets[:20]}"
    return got


def values_of(records_by_partition: dict[int, list[ConsumedRecord]]) -> dict[int, list[bytes]]:
    """Per partition, the values in log order."""
    return {p: [r.value for r in records] for p, records in records_by_partition.items()}


def poll_records_for(consumer: Consumer, duration_s: float) -> list[ConsumedRecord]:
    """Everything ``consumer`` returns within ``duration_s`` (end-of-partition events dropped).

    Used to show that a read_committed consumer gets *nothing* while a transaction is open: a
    bounded observation, not a timing assertion."""
    got: list[ConsumedRecord] = []
    deadline = time.monotonic() + duration_s
    while time.monotonic() < deadline:
        for msg in consumer.consume(num_messages=1000, timeout=0.1):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(err)
            got.append(consumed_record(msg))
    return got


def poll_until_count(consumer: Consumer, count: int, timeout_s: float = CLIENT_TIMEOUT_S) -> list[ConsumedRecord]:
    """Poll until ``count`` records arrived (fails on a deadline far above the expected time)."""
    got: list[ConsumedRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {len(got)} of {count} records arrived: {got[:5]}"
        got.extend(poll_records_for(consumer, 0.2))
    return got


def fatal_code(exc: KafkaException) -> tuple[bool, int]:
    """(is fatal, error code) of a librdkafka exception."""
    err = exc.args[0]
    return err.fatal(), err.code()


# -- wire-level views --------------------------------------------------------------------------
def _connection(bootstrap: str):
    from oncestream.client.common.connection import BrokerConnection, parse_bootstrap

    host, port = parse_bootstrap(bootstrap)
    return BrokerConnection(host, port, client_id="txn-tests", timeout_s=CLIENT_TIMEOUT_S)


def list_offset(bootstrap: str, topic: str, partition: int, *, read_committed: bool) -> int:
    """ListOffsets(latest): the LSO with read_committed, the high watermark without."""
    from kio.schema.errors import ErrorCode

    [(error, offset)] = list_offsets(bootstrap, topic, partition, [LATEST_TIMESTAMP], read_committed=read_committed)
    assert error == ErrorCode.none, f"ListOffsets {topic}[{partition}]: {error.name}"
    return offset


def list_offsets(
    bootstrap: str, topic: str, partition: int, timestamps: Iterable[int], *, read_committed: bool = False
) -> list[tuple[ErrorCode, int]]:
    """(error code, offset) for each ListOffsets ``timestamps`` entry (-1 latest, -2 earliest,
    -4 earliest local, -5 latest tiered, or a timestamp), at the version our client negotiates."""

    def make(m, version):
        # v10 (KIP-1075) bounds the broker's remote-storage lookups with a timeout.
        extra = {"timeout": datetime.timedelta(seconds=CLIENT_TIMEOUT_S)} if version >= 10 else {}
        return m.ListOffsetsRequest(
            replica_id=-1,
            isolation_level=1 if read_committed else 0,
            topics=(
                m.ListOffsetsTopic(
                    name=topic,
                    partitions=tuple(m.ListOffsetsPartition(partition_index=partition, timestamp=timestamp)
                                     for timestamp in timestamps),
                ),
            ),
            **extra,
        )

    with _connection(bootstrap) as conn:
        (t,) = conn.call_with_version(LIST_OFFSETS_KEY, make).topics
    return [(p.error_code, p.offset) for p in t.partitions]


@dataclass(frozen=True)
class TxnDescription:
    """DescribeTransactions for one transactional id."""

    state: str
    producer_id: int
    producer_epoch: int
    partitions: frozenset[tuple[str, int]]


def describe_transaction(bootstrap: str, transactional_id: str) -> TxnDescription:
    """DescribeTransactions v0 (KIP-664) for ``transactional_id``.

    Encoded and decoded by hand: kio refuses to decode the -1 start time (Kafka's "no
    transaction") that an Empty or fresh transactional id legitimately carries.
    """
    import socket
    import struct

    from tests.support.coordinators import TRANSACTION_KEY, find_coordinator

    def uvarint(value: int) -> bytes:
        out = bytearray()
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
        return bytes(out)

    client_id = b"txn-tests"
    tid = transactional_id.encode()
    body = (
        struct.pack(">hhih", DESCRIBE_TRANSACTIONS_KEY, 0, 1, len(client_id)) + client_id + b"\x00"
        + uvarint(2) + uvarint(len(tid) + 1) + tid + b"\x00"
    )
    # The transaction's coordinator: the broker itself, or on a cluster the owner of the id's lease.
    host, port = find_coordinator(bootstrap, transactional_id, TRANSACTION_KEY)
    with socket.create_connection((host, port), timeout=CLIENT_TIMEOUT_S) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        reader = _FrameReader(sock)
        data = reader.frame()
    pos = 4  # correlation id
    pos = _skip_tagged(data, pos)
    pos += 4  # throttle time
    count, pos = _uvarint(data, pos)
    assert count - 1 == 1, f"DescribeTransactions: {count - 1} states for one id"
    (error_code,) = struct.unpack_from(">h", data, pos)
    pos += 2
    _tid, pos = _compact_string(data, pos)
    state, pos = _compact_string(data, pos)
    _timeout_ms, _start_ms, producer_id, producer_epoch = struct.unpack_from(">iqqh", data, pos)
    pos += 4 + 8 + 8 + 2
    assert error_code == 0, f"DescribeTransactions {transactional_id}: error {error_code}"
    topics, pos = _uvarint(data, pos)
    partitions = set()
    for _ in range(topics - 1):
        topic, pos = _compact_string(data, pos)
        n, pos = _uvarint(data, pos)
        for _ in range(n - 1):
            (p,) = struct.unpack_from(">i", data, pos)
            pos += 4
            partitions.add((topic, p))
        pos = _skip_tagged(data, pos)
    return TxnDescription(state, producer_id, producer_epoch, frozenset(partitions))


class _FrameReader:
    def __init__(self, sock) -> None:
        self.sock = sock

    def exact(self, size: int) -> bytes:
        out = bytearray()
        while len(out) < size:
            chunk = self.sock.recv(size - len(out))
            assert chunk, "broker closed the connection"
            out += chunk
        return bytes(out)

    def frame(self) -> bytes:
        import struct

        (size,) = struct.unpack(">i", self.exact(4))
        return self.exact(size)


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _compact_string(data: bytes, pos: int) -> tuple[str, int]:
    length, pos = _uvarint(data, pos)
    return data[pos : pos + length - 1].decode(), pos + length - 1


def _skip_tagged(data: bytes, pos: int) -> int:
    count, pos = _uvarint(data, pos)
    for _ in range(count):
        _tag, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        pos += size
    return pos


def committed_offsets(bootstrap: str, group_id: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offset per partition (-1001 when none), via OffsetFetch; asked
    again (within ``CLIENT_TIMEOUT_S``) while the coordinator moves (``COORDINATOR_MOVING``)."""
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while True:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id, "enable.auto.commit": False})
        try:
            tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=CLIENT_TIMEOUT_S)
            return {tp.partition: tp.offset for tp in tps}
        except KafkaException as e:
            if e.args[0].code() not in COORDINATOR_MOVING or time.monotonic() > deadline:
                raise
        finally:
            consumer.close()
        time.sleep(0.2)


# -- a hand-driven transactional producer ------------------------------------------------------
INIT_PRODUCER_ID_KEY = 22
ADD_PARTITIONS_TO_TXN_KEY = 24
END_TXN_KEY = 26
PRODUCE_KEY = 0
# Clients send AddPartitionsToTxn v3 and below; v4 is the broker-to-broker batched form.
# Speak transaction version 1 (KIP-890 part 1), as librdkafka does: AddPartitionsToTxn capped at
# v3 (v4+ is broker-to-broker), Produce below v12 and EndTxn below v5 (those mean version 2).
OFFSET_FETCH_KEY = 9
ADD_OFFSETS_TO_TXN_KEY, TXN_OFFSET_COMMIT_KEY = 25, 28
# OffsetFetch stops at v9: v10 names topics by id only, and these helpers name them.
CLIENT_MAX_VERSIONS = {ADD_PARTITIONS_TO_TXN_KEY: 3, PRODUCE_KEY: 11, END_TXN_KEY: 4, TXN_OFFSET_COMMIT_KEY: 3,
                       OFFSET_FETCH_KEY: 9}
# not_coordinator: a cluster broker answers it until its lease round took the id's partition.
RETRIABLE_INIT_ERRORS = ("concurrent_transactions", "coordinator_load_in_progress", "coordinator_not_available",
                         "not_coordinator")


def wire_connection(bootstrap: str, client_id: str = "wire-txn"):
    """A BrokerConnection that speaks like a client (AddPartitionsToTxn capped at v3)."""
    from oncestream.client.common.connection import BrokerConnection, parse_bootstrap

    host, port = parse_bootstrap(bootstrap)
    return BrokerConnection(host, port, client_id=client_id, timeout_s=CLIENT_TIMEOUT_S, max_versions=CLIENT_MAX_VERSIONS)


def fetch_committed_offset(conn, group: str, topic: str, *, require_stable: bool):
    """OffsetFetch (v7+ multi-group form) of partition 0: (error code, committed offset). With
    ``require_stable`` a pending transactional commit answers UNSTABLE_OFFSET_COMMIT (KIP-447)."""
    from oncestream.protocol.codec import build

    resp = conn.call(
        OFFSET_FETCH_KEY,
        lambda m: build(
            m.OffsetFetchRequest,
            groups=(
                build(
                    m.OffsetFetchRequestGroup,
                    group_id=group,
                    topics=(build(m.OffsetFetchRequestTopics, name=topic, partition_indexes=(0,)),),
                ),
            ),
            require_stable=require_stable,
        ),
    )
    (part,) = resp.groups[0].topics[0].partitions
    return part.error_code, part.committed_offset


class WireTxnProducer:
    """A transactional producer driven request by request (KIP-98 transaction version 1), so a
    test decides exactly which request goes on which connection and when.

    It keeps the producer id, epoch and per-partition sequence numbers; every method takes the
    connection to send on, because the delayed-request tests hold back one connection's request
    while the same producer goes on over another.
    """

    def __init__(self, transactional_id: str, transaction_timeout_ms: int = 60000) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.producer_id = -1
        self.producer_epoch = -1
        self.sequences: dict[tuple[str, int], int] = {}

    def init(self, conn, *, bump_current: bool = False, timeout_s: float = CLIENT_TIMEOUT_S):
        """InitProducerId; with ``bump_current`` it carries the current id/epoch (KIP-360 epoch
        bump after a timed-out request). Retries the retriable answers (a fence in progress)."""
        import datetime

        from kio.schema.errors import ErrorCode

        from oncestream.protocol.codec import build

        expected = (self.producer_id, self.producer_epoch) if bump_current else (-1, -1)
        deadline = time.monotonic() + timeout_s
        while True:
            resp = conn.call(
                INIT_PRODUCER_ID_KEY,
                lambda m: build(
                    m.InitProducerIdRequest,
                    transactional_id=self.transactional_id,
                    transaction_timeout=datetime.timedelta(milliseconds=self.transaction_timeout_ms),
                    producer_id=expected[0],
                    producer_epoch=expected[1],
                    enable2_pc=False,
                    keep_prepared_txn=False,
                ),
            )
            if resp.error_code.name in RETRIABLE_INIT_ERRORS and time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            assert resp.error_code == ErrorCode.none, f"InitProducerId: {resp.error_code.name}"
            self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
            self.sequences.clear()  # a new epoch starts every partition's sequence at 0
            return self.producer_id, self.producer_epoch

    def add_offsets(self, conn, group: str):
        """AddOffsetsToTxn: the group's __consumer_offsets partition joins the transaction;
        returns the error code."""
        from oncestream.protocol.codec import build

        return conn.call(
            ADD_OFFSETS_TO_TXN_KEY,
            lambda m: build(
                m.AddOffsetsToTxnRequest,
                transactional_id=self.transactional_id,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                group_id=group,
            ),
        ).error_code

    def txn_offset_commit(self, conn, group: str, topic: str, offset: int, *, member_id: str = "",
                          generation_id: int = -1):
        """TxnOffsetCommit (v3 on a client-capped connection, as librdkafka sends it) of
        ``offset`` for partition 0 of ``topic``, with the consumer's member id and generation
        (KIP-447; the defaults carry none); returns the partition's error code."""
        from oncestream.protocol.codec import build

        resp = conn.call(
            TXN_OFFSET_COMMIT_KEY,
            lambda m: build(
                m.TxnOffsetCommitRequest,
                transactional_id=self.transactional_id,
                group_id=group,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                generation_id=generation_id,
                member_id=member_id,
                group_instance_id=None,
                topics=(
                    build(
                        m.TxnOffsetCommitRequestTopic,
                        name=topic,
                        partitions=(
                            build(
                                m.TxnOffsetCommitRequestPartition,
                                partition_index=0,
                                committed_offset=offset,
                                committed_leader_epoch=-1,
                                committed_metadata="",
                            ),
                        ),
                    ),
                ),
            ),
        )
        (part,) = resp.topics[0].partitions
        return part.error_code

    def add_partitions(self, conn, topic: str, partitions: Iterable[int]):
        """AddPartitionsToTxn (v3 and below); returns the error codes per partition."""
        resp = conn.call(
            ADD_PARTITIONS_TO_TXN_KEY,
            lambda m: m.AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=self.transactional_id,
                v3_and_below_producer_id=self.producer_id,
                v3_and_below_producer_epoch=self.producer_epoch,
                v3_and_below_topics=(m.AddPartitionsToTxnTopic(name=topic, partitions=tuple(partitions)),),
            ),
        )
        return {
            (t.name, r.partition_index): r.partition_error_code
            for t in resp.results_by_topic_v3_and_below
            for r in t.results_by_partition
        }

    def produce(self, conn, topic: str, partition: int, values: list[bytes]):
        """Produce one transactional batch (acks=all) at the current epoch and next sequence;
        returns (error code, base offset). The sequence only advances on success."""
        import datetime

        from kio.schema.errors import ErrorCode

        from oncestream.protocol.records import NewRecord, encode_batch

        sequence = self.sequences.get((topic, partition), 0)
        batch = encode_batch(
            [NewRecord(value=v, key=f"p{partition}".encode()) for v in values],
            now_ms=int(time.time() * 1000),
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            base_sequence=sequence,
            transactional=True,
        )
        resp = conn.call(
            PRODUCE_KEY,
            lambda m: m.ProduceRequest(
                transactional_id=self.transactional_id,
                acks=-1,
                timeout=datetime.timedelta(seconds=30),
                topic_data=(
                    m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(index=partition, records=batch),)),
                ),
            ),
        )
        (t,) = resp.responses
        (p,) = t.partition_responses
        if p.error_code == ErrorCode.none:
            self.sequences[(topic, partition)] = sequence + len(values)
        return p.error_code, p.base_offset

    def end(self, conn, *, commit: bool):
        """EndTxn(commit or abort); returns the error code."""
        resp = conn.call(
            END_TXN_KEY,
            lambda m: m.EndTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                committed=commit,
            ),
        )
        return resp.error_code


# -- subprocess programs -------------------------------------------------------------------------
def hang_producer_main(args: argparse.Namespace) -> int:
    """Open a transaction, write ``--count`` records to each partition, report, then wait to be
    SIGKILLed: the transaction is never committed nor aborted by the client."""
    producer = transactional_producer(
        args.bootstrap,
        args.transactional_id,
        **{"transaction.timeout.ms": args.transaction_timeout_ms, "message.timeout.ms": args.transaction_timeout_ms},
    )
    producer.init_transactions(CLIENT_TIMEOUT_S)
    values = transaction_values(args.tag, range(args.partitions), args.count)
    log = DeliveryLog()
    producer.begin_transaction()
    produce_values(producer, args.topic, values, log)
    remaining = producer.flush(CLIENT_TIMEOUT_S)
    if remaining or log.errors:
        print(json.dumps({"error": f"{remaining} left, errors {[str(e) for _, e in log.errors[:3]]}"}), flush=True)
        return 2
    print(json.dumps({"open": {v.decode(): pos for v, pos in log.delivered.items()}}), flush=True)
    while True:  # the transaction stays open until the test kills us
        time.sleep(1)


# The copier's exit status when a transactional call failed with neither a fatal nor an
# abortable error: librdkafka gave up waiting for an answer (CLIENT_TIMEOUT_S), so the copier
# stalled; the chaos tests fail on it rather than restart the copier.
COPIER_STALLED_EXIT = 4
# What the copier writes to ``<--progress>.phase`` while it waits in send_offsets_to_transaction
# (the file is emptied when the call returns): where librdkafka 2.16 can hang for good when the
# group coordinator's broker left Metadata (tests/chaos/test_cluster_txn_copier.py, STALL_S).
SENDING_OFFSETS_PHASE = "send_offsets_to_transaction"


def copier_phase_path(progress: str | Path) -> Path:
    """The file in which a copier whose progress goes to ``progress`` names the call it waits in."""
    return Path(f"{progress}.phase")


def copier_main(args: argparse.Namespace) -> int:
    """Exactly-once copier (the KIP-447 consume-transform-produce loop): each batch read from
    ``--input`` with read_committed is written to the same partition of ``--output`` in one
    transaction together with the consumer's positions (send_offsets_to_transaction).

    Abortable errors abort the transaction and rewind the consumer to the group's committed
    offsets; fatal errors (fenced, ...) exit with status 3 so the supervisor restarts us (a
    fatal producer can only be replaced, KIP-98); any other error (no answer within the call's
    timeout) exits with ``COPIER_STALLED_EXIT``, which the supervisor reports as a stall. Each
    commit appends its record count as one line to ``--progress``; ``--pause-ms`` pauses inside
    each transaction (after its records are written) so that kills land in open transactions.
    """
    if args.client == "oncestream":
        return _copy(args, *_oncestream_copier(args))
    consumer_conf: dict[str, object] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "group.protocol": args.group_protocol,
        "isolation.level": READ_COMMITTED,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "metadata.recovery.strategy": "none",
    }
    if args.group_protocol == "classic":
        # Static membership (KIP-345): a restarted copier takes its predecessor's place at
        # once instead of waiting for the dead member's session to expire. On KIP-848 the
        # session and heartbeat are the broker's settings, and the copier is a dynamic member
        # (see _oncestream_copier).
        consumer_conf.update({"group.instance.id": "copier-0", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    consumer = Consumer(consumer_conf)
    # librdkafka >= 2.10 "re-bootstraps" (KIP-899) when every known broker is down, which a
    # single-broker restart always causes; in librdkafka 2.16 that leaves the decommissioned
    # broker handle cached as the group coordinator and send_offsets_to_transaction() waits for
    # it forever (seen: AddOffsetsToTxn answered, TxnOffsetCommit never sent). Reconnecting to
    # the same address is what a restart needs anyway.
    producer_conf: dict[str, object] = {"transaction.timeout.ms": 30000, "metadata.recovery.strategy": "none"}
    if os.environ.get("TXN_COPIER_DEBUG"):  # librdkafka debug contexts, for diagnosing a stall
        producer_conf["debug"] = os.environ["TXN_COPIER_DEBUG"]
    producer = transactional_producer(args.bootstrap, args.transactional_id, **producer_conf)
    return _copy(args, consumer, producer, KafkaException, KafkaError._PARTITION_EOF, TopicPartition)


def _oncestream_copier(args: argparse.Namespace) -> tuple[Any, Any, type[Exception], int, Any]:
    """The copier's clients from oncestream: our Consumer on ``--group-protocol`` and our
    transactional Producer (its send_offsets_to_transaction carries the consumer's group
    metadata: on the consumer protocol, the member id and member epoch)."""
    from oncestream.client import Consumer as OurConsumer
    from oncestream.client import KafkaError as OurKafkaError
    from oncestream.client import KafkaException as OurKafkaException
    from oncestream.client import Producer as OurProducer
    from oncestream.client import TopicPartition as OurTopicPartition

    conf: dict[str, object] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "group.protocol": args.group_protocol,
        "isolation.level": READ_COMMITTED,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
    }
    if args.group_protocol == "classic":
        conf.update({"group.instance.id": "copier-0", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    # A KIP-848 copier is a dynamic member: a SIGKILLed static one would hold its instance id
    # (UNRELEASED_INSTANCE_ID to its successor) until its session expires; a dynamic successor
    # joins at once and gets the partitions when the dead member's session ends.
    consumer = OurConsumer(conf)
    producer = OurProducer({
        "bootstrap.servers": args.bootstrap, "transactional.id": args.transactional_id, "linger.ms": 5,
        "transaction.timeout.ms": 30000, "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
        "retry.backoff.ms": 50,
    })
    return consumer, producer, OurKafkaException, OurKafkaError._PARTITION_EOF, OurTopicPartition


def _copy(args: argparse.Namespace, consumer: Any, producer: Any, kafka_exception: type[Exception],
          partition_eof: int, topic_partition: Any) -> int:
    """The copy loop of :func:`copier_main` over either client's consumer and producer (both
    have confluent-kafka's interface)."""
    producer.init_transactions(CLIENT_TIMEOUT_S)
    consumer.subscribe([args.input])
    phase = copier_phase_path(args.progress)
    phase.write_text("")
    progress = open(args.progress, "a", buffering=1)  # noqa: SIM115 - line-buffered for the whole run of this copier process, closed by its exit

    def rewind() -> None:
        """Back to the last committed positions: the aborted batch must be copied again."""
        assignment = consumer.assignment()
        if not assignment:
            return
        for tp in consumer.committed(assignment, timeout=CLIENT_TIMEOUT_S):
            consumer.seek(topic_partition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))

    while True:
        msgs = consumer.consume(num_messages=args.max_batch, timeout=0.5)
        batch = []
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() == partition_eof:
                    continue
                raise kafka_exception(err)
            batch.append(msg)
        if not batch:
            continue
        try:
            producer.begin_transaction()
            for msg in batch:
                while True:
                    try:
                        producer.produce(args.output, msg.value(), key=msg.key(), partition=message_position(msg)[0])
                        break
                    except BufferError:
                        producer.poll(0.05)
            # Pacing inside the open transaction, its records already in the log: a kill then
            # most likely leaves written-but-uncommitted data behind, which must never be read.
            producer.flush(CLIENT_TIMEOUT_S)
            time.sleep(args.pause_ms / 1000)
            positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
            phase.write_text(SENDING_OFFSETS_PHASE)
            try:
                producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), CLIENT_TIMEOUT_S)
            finally:
                phase.write_text("")
            while True:
                try:
                    producer.commit_transaction(CLIENT_TIMEOUT_S)
                    break
                except kafka_exception as exc:
                    err = exc.args[0]
                    if err.retriable() and not err.txn_requires_abort() and not err.fatal():
                        continue  # e.g. timed out while the broker restarts: resume the commit
                    raise
            progress.write(f"{len(batch)}\n")
        except kafka_exception as exc:
            err = exc.args[0]
            if err.fatal():
                print(f"copier: fatal {err}", file=sys.stderr, flush=True)
                return 3
            if not err.txn_requires_abort():
                print(f"copier: stalled {err}", file=sys.stderr, flush=True)
                return COPIER_STALLED_EXIT
            print(f"copier: aborting after {err}", file=sys.stderr, flush=True)
            producer.abort_transaction(CLIENT_TIMEOUT_S)
            rewind()


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m tests.support.txn``."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.txn")
    sub = parser.add_subparsers(dest="program", required=True)
    hang = sub.add_parser("hang-producer")
    hang.add_argument("--bootstrap", required=True)
    hang.add_argument("--transactional-id", required=True)
    hang.add_argument("--topic", required=True)
    hang.add_argument("--partitions", type=int, required=True)
    hang.add_argument("--count", type=int, default=5)
    hang.add_argument("--tag", default="hung")
    hang.add_argument("--transaction-timeout-ms", type=int, default=3000)
    copier = sub.add_parser("copier")
    copier.add_argument("--bootstrap", required=True)
    copier.add_argument("--transactional-id", required=True)
    copier.add_argument("--group", required=True)
    copier.add_argument("--input", required=True)
    copier.add_argument("--output", required=True)
    copier.add_argument("--progress", required=True)
    copier.add_argument("--max-batch", type=int, default=30)
    copier.add_argument("--pause-ms", type=int, default=0)
    copier.add_argument("--client", choices=("confluent", "oncestream"), default="confluent")
    copier.add_argument("--group-protocol", choices=("classic", "consumer"), default="classic")
    args = parser.parse_args(argv)
    # A SIGTERM from the supervisor ends us at once (no clean-up that could commit anything).
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    if args.program == "hang-producer":
        return hang_producer_main(args)
    return copier_main(args)


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "TXN_BROKER_CONFIG",
    "DeliveryLog",
    "TxnDescription",
    "WireTxnProducer",
    "committed_offsets",
    "describe_transaction",
    "fatal_code",
    "high_watermarks",
    "isolated_consumer",
    "list_offset",
    "plain_produce",
    "poll_records_for",
    "poll_until_count",
    "produce_values",
    "read_to_end",
    "record_value",
    "run_transaction",
    "start_txn_broker",
    "transaction_values",
    "transactional_producer",
    "values_of",
    "wait_until",
    "wire_connection",
]

