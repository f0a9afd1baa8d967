"""oncestream.client's Producer against a broker that cannot answer: what blocks, for how long
it may block, and what never waits.

- ``max.block.ms`` from the config dict bounds ``produce()`` (Kafka's producer contract): with a
  tiny ``buffer.memory`` and a frozen broker (SIGSTOP: connections stay open, nothing is ever
  answered, so no buffer memory is released), produce() raises QueueFullError (a BufferError,
  KafkaError._QUEUE_FULL) instead of blocking for the default 60 s; with no broker reachable
  at all, the first produce() to a topic gives up waiting for its metadata after max.block.ms.
  The producer stays usable: once the broker runs again everything accepted is delivered.
- ``acks=0``: the broker sends no Produce response, so delivery reports must not wait for one.
  They arrive while the broker is frozen, carrying no offset (OFFSET_INVALID), whereas acks=1
  reports cannot arrive until the broker answers.

Liveness bounds below are generous hang guards (tens of times the configured max.block.ms, and
well under the 60 s default it must not fall back to), not timing assertions.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from oncestream.client import OFFSET_INVALID, KafkaError, KafkaException, Producer, QueueFullError
from tests.support.brokers import HOST, BrokerProcess
from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.txn import read_to_end, values_of

pytestmark = pytest.mark.interop

MAX_BLOCK_MS = 300
# Well below the 60 s max.block.ms default: a producer ignoring the configured value fails here.
HANG_GUARD_S = 20.0


@contextmanager
def frozen(broker: BrokerProcess) -> Iterator[None]:
    """SIGSTOP the broker process for the block (its sockets stay open but nothing is read or
    answered), SIGCONT it afterwards whatever happens."""
    os.kill(broker.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(broker.pid, signal.SIGCONT)


def call_with_hang_guard(fn, what: str):
    """Run ``fn`` on a worker thread; return what it returned or raised (as ("ok"|"raised", x)).
    Fails if it has not finished within HANG_GUARD_S."""
    outcome: list[tuple[str, object]] = []

    def run() -> None:
        try:
            outcome.append(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(("raised", exc))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(HANG_GUARD_S)
    assert not worker.is_alive(), f"{what} still blocked after {HANG_GUARD_S:.0f}s (max.block.ms={MAX_BLOCK_MS})"
    return outcome[0]


def test_max_block_ms_bounds_produce_when_buffer_memory_is_full_and_the_broker_is_frozen(broker_factory) -> None:
    broker = broker_factory()
    topic = unique_topic("max-block")
    create_topic(broker.bootstrap, topic, partitions=1)
    delivered: list[int] = []
    errors: list[KafkaError] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append(msg.offset())

    producer = Producer({
        "bootstrap.servers": broker.bootstrap,
        "buffer.memory": 16 * 1024,
        "batch.size": 1024,
        "linger.ms": 0,
        "max.block.ms": MAX_BLOCK_MS,
        "on_delivery": on_delivery,
    })
    try:
        # Metadata and a connection first: from here on only buffer space can block produce().
        producer.produce(topic, b"warm-up")
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        assert delivered == [0]
        accepted = 1
        with frozen(broker):
            def fill() -> int:
                nonlocal accepted
                for _ in range(10_000):  # 16 KiB of buffer holds far fewer 200-byte records
                    producer.produce(topic, b"x" * 200)
                    accepted += 1
                raise AssertionError("buffer.memory never filled up")

            kind, raised = call_with_hang_guard(fill, "produce() into a full buffer")
            assert kind == "raised", raised
            assert isinstance(raised, QueueFullError), raised
            assert isinstance(raised, BufferError)  # confluent-kafka's type for a full queue
            assert raised.args[0].code() == KafkaError._QUEUE_FULL
            assert accepted > 1, "the first record after warm-up already found the buffer full"
        # The broker runs again: everything accepted is delivered (flushed before producing
        # more, so the next produce() does not race the buffer being freed), and it goes on.
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        producer.produce(topic, b"after")
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    finally:
        producer.close()
    assert not errors, errors[:3]
    assert sorted(delivered) == list(range(accepted + 1))


def test_max_block_ms_bounds_the_first_produce_when_no_broker_is_reachable() -> None:
    # A port bound but never listening: every connection attempt is refused, and holding the
    # socket keeps anyone else from taking the port during the test.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as placeholder:
        placeholder.bind((HOST, 0))
        port = placeholder.getsockname()[1]
        producer = Producer({"bootstrap.servers": f"{HOST}:{port}", "max.block.ms": MAX_BLOCK_MS,
                             "buffer.memory": 16 * 1024})
        try:
            kind, raised = call_with_hang_guard(lambda: producer.produce("nowhere", b"v"),
                                                "produce() without a reachable broker")
        finally:
            producer.close()
    assert kind == "raised", raised
    assert isinstance(raised, KafkaException), raised
    assert raised.args[0].code() == KafkaError._UNKNOWN_TOPIC
    assert "max.block.ms" in str(raised)


def test_acks_zero_delivery_reports_do_not_wait_for_a_response_and_carry_no_offset(broker_factory) -> None:
    broker = broker_factory()
    topic = unique_topic("acks0-frozen")
    create_topic(broker.bootstrap, topic, partitions=1)
    reports: dict[str, list[tuple[object, int]]] = {"0": [], "1": []}
    producers = {
        acks: Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": False, "acks": acks,
                        "linger.ms": 0,
                        "on_delivery": lambda err, msg, acks=acks: reports[acks].append((err, msg.offset()))})
        for acks in ("0", "1")
    }
    try:
        for acks, producer in producers.items():  # metadata and connections before the freeze
            producer.produce(topic, f"warm-up-{acks}".encode())
            assert producer.flush(CLIENT_TIMEOUT_S) == 0
        for log in reports.values():
            log.clear()
        with frozen(broker):
            for i in range(20):
                producers["0"].produce(topic, b"acks0-%d" % i)
            # Nothing can come back from a stopped process, yet every acks=0 report arrives.
            assert producers["0"].flush(HANG_GUARD_S) == 0
            assert reports["0"] == [(None, OFFSET_INVALID)] * 20
            # acks=1 needs the broker's answer: a bounded flush leaves the record outstanding.
            producers["1"].produce(topic, b"acks1")
            assert producers["1"].flush(1.0) == 1
            assert reports["1"] == []
        assert producers["1"].flush(CLIENT_TIMEOUT_S) == 0
    finally:
        for producer in producers.values():
            producer.close()
    # acks=1 reports the offset the broker assigned (its connection may be read before or after
    # the acks=0 one once the broker runs again); the acks=0 records are all stored, in order.
    ((error, offset),) = reports["1"]
    stored = values_of(read_to_end(broker.bootstrap, topic, 1, isolation="read_uncommitted"))[0]
    assert error is None
    assert stored[offset] == b"acks1"
    assert [v for v in stored[2:] if v != b"acks1"] == [b"acks0-%d" % i for i in range(20)]
    assert len(stored) == 23
