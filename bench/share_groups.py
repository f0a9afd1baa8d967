"""Share groups (KIP-932) on our broker with librdkafka's ShareConsumer, against plain consumption.

Per round, on a freshly started broker and topic (one partition, N records of 100 bytes produced
before any consumer starts):

(a) plain: one classic consumer (confluent_kafka.Consumer, earliest) reads the N records;
(b) share x1: one ShareConsumer (implicit acknowledgement) receives the N records; the clock stops
    when the commit_sync() after the last poll returned, so every record is acknowledged;
(c) share x4: four ShareConsumers, one thread each, share the same partition; the clock stops when
    all N records were received and every consumer's final commit_sync() returned;
(d) lock-expiry redelivery: with group.share.record.lock.duration.ms=L, one member acquires a
    record and never acknowledges it; another member polls until it receives it again. Reported:
    the time from the first delivery (the holder's poll returning) to the redelivery; the lock
    started a little before the first delivery, so L plus what the broker adds is an upper bound.

The plain consumer is assigned the partition (no group: a classic join alone takes
group.initial.rebalance.delay.ms, 3 s by default); its clock starts at assign(). The share
consumers' clock starts before they are created, so their (fast) ShareGroupHeartbeat join is
inside.

    .venv/bin/python bench/share_groups.py                 # 3 rounds, 20000 records
    .venv/bin/python bench/share_groups.py --records 50000 --rounds 5

This is a benchmark command, not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka import libversion as librdkafka_version
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from machine import machine_description
from oncestream.broker_process import OnceStreamBroker

TIMEOUT_S = 120.0
LOCK_MS = 1000


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, topic: str) -> None:
    admin = _admin(bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(TIMEOUT_S)


def earliest_share_group(bootstrap: str) -> str:
    group_id = f"share-{uuid.uuid4().hex[:8]}"
    admin = _admin(bootstrap)
    resource = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(TIMEOUT_S)
    return group_id


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for _ in range(count):
        producer.produce(topic, b"x" * 100)
    if producer.flush(TIMEOUT_S):
        raise RuntimeError("records not delivered")


def plain_consume(bootstrap: str, topic: str, count: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"plain-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False})
    start = time.perf_counter()
    consumer.assign([TopicPartition(topic, 0, 0)])  # no group join: the fetch path alone
    deadline = start + TIMEOUT_S
    got = 0
    while got < count and time.perf_counter() < deadline:
        got += sum(1 for m in consumer.consume(1000, 0.2) if m.error() is None)
    elapsed = time.perf_counter() - start
    consumer.close()
    if got < count:
        raise RuntimeError(f"plain consumer got {got} of {count}")
    return count / elapsed


def share_consume(bootstrap: str, topic: str, count: int, members: int) -> float:
    group_id = earliest_share_group(bootstrap)
    start = time.perf_counter()
    consumers = []
    for _ in range(members):
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group_id})
        consumer.subscribe([topic])
        consumers.append(consumer)
    received = [0] * members
    done = threading.Event()

    def run(index: int) -> None:
        consumer = consumers[index]
        deadline = time.perf_counter() + TIMEOUT_S
        while not done.is_set() and time.perf_counter() < deadline:
            received[index] += sum(1 for m in consumer.poll(0.2) if m.error() is None)
            if sum(received) >= count:
                done.set()
        consumer.commit_sync()  # implicit mode: the last poll's records are accepted here

    threads = [threading.Thread(target=run, args=(i,)) for i in range(members)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT_S + 30)
    elapsed = time.perf_counter() - start
    for consumer in consumers:
        consumer.close()
    if sum(received) != count:
        raise RuntimeError(f"share group received {sum(received)} deliveries of {count} records")
    return count / elapsed


def redelivery_ms(bootstrap: str, topic: str) -> float:
    group_id = earliest_share_group(bootstrap)
    holder = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group_id,
                            "share.acknowledgement.mode": "explicit"})
    holder.subscribe([topic])
    first_at = None
    deadline = time.perf_counter() + TIMEOUT_S
    while first_at is None and time.perf_counter() < deadline:
        if any(m.error() is None for m in holder.poll(0.2)):
            first_at = time.perf_counter()
    if first_at is None:
        raise RuntimeError("the holder received nothing")
    other = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group_id,
                           "share.acknowledgement.mode": "explicit"})
    other.subscribe([topic])
    again_at = None
    while again_at is None and time.perf_counter() < deadline:
        for m in other.poll(0.05):
            if m.error() is None and (m.delivery_count() or 0) >= 2:
                again_at = time.perf_counter()
            if m.error() is None:
                other.acknowledge(m, AcknowledgeType.ACCEPT)
    other.close()
    holder.close()
    if again_at is None:
        raise RuntimeError("no redelivery")
    return (again_at - first_at) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="share-bench-") as work:
        for round_ in range(1, args.rounds + 1):
            base = Path(work) / f"round{round_}"
            broker = OnceStreamBroker(data_dir=base / "data", log_dir=base / "logs",
                                      config={"group.share.record.lock.duration.ms": str(LOCK_MS)})
            broker.start()
            try:
                topic = f"bench-{uuid.uuid4().hex[:8]}"
                create_topic(broker.bootstrap, topic)
                produce(broker.bootstrap, topic, args.records)
                plain = plain_consume(broker.bootstrap, topic, args.records)
                one = share_consume(broker.bootstrap, topic, args.records, 1)
                four = share_consume(broker.bootstrap, topic, args.records, 4)
                lock_topic = f"lock-{uuid.uuid4().hex[:8]}"
                create_topic(broker.bootstrap, lock_topic)
                produce(broker.bootstrap, lock_topic, 1)
                overhead = redelivery_ms(broker.bootstrap, lock_topic)
            finally:
                broker.stop()
            rows.append((round_, plain, one, four, overhead))
            print(f"round {round_}: plain {plain:.0f}/s, share x1 {one:.0f}/s, share x4 {four:.0f}/s, "
                  f"redelivered {overhead:.0f} ms after the first delivery ({LOCK_MS} ms lock)", flush=True)
    print()
    print(f"Machine: {machine_description()}")
    print(f"Load average before: {' / '.join(f'{x:.2f}' for x in load_before)}, "
          f"after: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"Clients: librdkafka {librdkafka_version()[0]}, Python {sys.version.split()[0]}, "
          f"{args.records} records of 100 bytes, one partition")
    print()
    print("| round | plain consumer records/s | share x1 records/s acknowledged | share x4 records/s acknowledged "
          f"| first delivery to redelivery ms ({LOCK_MS} ms lock) |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for round_, plain, one, four, overhead in rows:
        print(f"| {round_} | {plain:.0f} | {one:.0f} | {four:.0f} | {overhead:.0f} |")
    print(f"| median | {statistics.median(r[1] for r in rows):.0f} | {statistics.median(r[2] for r in rows):.0f} "
          f"| {statistics.median(r[3] for r in rows):.0f} | {statistics.median(r[4] for r in rows):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
