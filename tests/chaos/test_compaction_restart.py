"""Log compaction in a real broker process, with a real client (confluent-kafka / librdkafka).

The broker runs with a fast cleaner (``log.cleaner.backoff.ms=200``, dirty ratio 0.01) and tiny
segments, so every few produced kilobytes seal a segment and a clean follows. The checks:

* after a clean has visibly shrunk the partition, a restart keeps every key's latest value;
* SIGKILL while the cleaner is working (the moment its ``*.cleaned`` or ``cleaner.swap`` files
  appear), again and again, never loses or duplicates a key's latest acknowledged value, and the
  log stays readable from its first offset (offset gaps left by the cleaner included).

Needs the cleaner task started by the broker (``broker/cleaner.py`` hooked into ``server.py``).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.clients import CLIENT_TIMEOUT_S, confluent_consume, create_topic, unique_topic

pytestmark = pytest.mark.chaos

CLEANER_CONFIG = {
    "log.cleaner.backoff.ms": "200",
    "log.cleaner.min.cleanable.ratio": "0.01",
    "log.segment.bytes": "8192",
}
TOPIC_CONFIG = {"cleanup.policy": "compact"}
COMPACTION_WAIT_S = 60.0
KILL_ROUNDS = 8


def partition_dir(broker, topic: str) -> Path:
    return broker.data_dir / "logs" / f"{topic}-0"


def log_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.glob("*.log"))


def cleaner_files(directory: Path) -> list[str]:
    """Files that exist only while the cleaner builds or swaps segments."""
    try:
        names = [entry.name for entry in directory.iterdir()]
    except FileNotFoundError:
        return []
    return [n for n in names if n.endswith(".cleaned") or n.startswith("cleaner.swap")]


def produce_overwrites(bootstrap: str, topic: str, keys: int, rounds: int, tag: str) -> dict[bytes, bytes]:
    """Write ``rounds`` values for each key with an idempotent acks=all producer; return each
    key's latest acknowledged value (values are unique, so a value names exactly one write)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            # Small batches, so segments roll and many batches (not one huge one) get compacted.
            "batch.num.messages": 20,
        }
    )
    acked: dict[bytes, tuple[int, bytes]] = {}
    errors: list[str] = []

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
            return
        previous = acked.get(msg.key())
        if previous is None or previous[0] < msg.offset():
            acked[msg.key()] = (msg.offset(), msg.value())

    for round_number in range(rounds):
        for k in range(keys):
            key = f"key-{k:03d}".encode()
            value = f"{tag}-{k:03d}-{round_number:04d}".encode() + b"." * 40
            while True:
                try:
                    producer.produce(topic, value, key=key, partition=0, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0, "records left unacknowledged"
    assert not errors, errors[:5]
    return {key: value for key, (_, value) in acked.items()}


def wait_for(condition, what: str, timeout_s: float = COMPACTION_WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def assert_latest_values_exactly_once(consumed, latest: dict[bytes, bytes]) -> None:
    offsets = [record.offset for record in consumed]
    assert offsets == sorted(set(offsets)), "offsets are unique and increasing"
    pairs = Counter((record.key, record.value) for record in consumed)
    for key, value in latest.items():
        assert pairs[(key, value)] == 1, f"latest value of {key!r} present {pairs[(key, value)]} times"
    # Nothing newer than the latest acknowledged value may exist, nor any key never written.
    assert {record.key for record in consumed} == set(latest)


def test_compacted_topic_keeps_latest_values_across_a_restart(broker_factory) -> None:
    broker = broker_factory(CLEANER_CONFIG)
    topic = unique_topic("compacted")
    create_topic(broker.bootstrap, topic, 1, TOPIC_CONFIG)
    latest = produce_overwrites(broker.bootstrap, topic, keys=40, rounds=25, tag="r")
    directory = partition_dir(broker, topic)
    produced_records = 40 * 25
    size_after_produce = log_bytes(directory)

    # The cleaner really ran: the partition's data shrank well below what was written.
    wait_for(lambda: log_bytes(directory) < size_after_produce // 2, "the cleaner to shrink the log")
    before_restart = confluent_consume(broker.bootstrap, topic, 1)
    assert len(before_restart) < produced_records // 2
    assert_latest_values_exactly_once(before_restart, latest)

    broker.restart()
    after_restart = confluent_consume(broker.bootstrap, topic, 1)
    assert_latest_values_exactly_once(after_restart, latest)
    assert len(after_restart) <= len(before_restart)

    # And after a crash restart, with more overwrites in between.
    latest.update(produce_overwrites(broker.bootstrap, topic, keys=40, rounds=5, tag="s"))
    broker.restart(crash=True)
    assert_latest_values_exactly_once(confluent_consume(broker.bootstrap, topic, 1), latest)


def test_sigkill_while_cleaning_never_loses_the_latest_values(broker_factory) -> None:
    broker = broker_factory(CLEANER_CONFIG)
    topic = unique_topic("compacted-kill")
    create_topic(broker.bootstrap, topic, 1, TOPIC_CONFIG)
    directory = partition_dir(broker, topic)
    latest: dict[bytes, bytes] = {}
    kills_mid_clean = 0
    for round_number in range(KILL_ROUNDS):
        latest.update(produce_overwrites(broker.bootstrap, topic, keys=60, rounds=12, tag=f"k{round_number}"))
        # Kill as soon as the cleaner is seen at work (or after a short while regardless).
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline and not cleaner_files(directory):
            time.sleep(0.001)
        if cleaner_files(directory):
            kills_mid_clean += 1
        broker.restart(crash=True)
        consumed = confluent_consume(broker.bootstrap, topic, 1)
        assert_latest_values_exactly_once(consumed, latest)
    # The point of the test is killing mid-clean: make sure it happened.
    assert kills_mid_clean >= 1, "the broker was never killed while the cleaner was working"
    # A last clean shutdown and restart: still readable from the start, still exact.
    broker.restart()
    assert_latest_values_exactly_once(confluent_consume(broker.bootstrap, topic, 1), latest)
