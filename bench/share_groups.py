"""Share groups (KIP-932) on our broker: records acknowledged per second, and lock-expiry redelivery.

One broker (ours), librdkafka clients (confluent-kafka's ShareConsumer and Consumer) in threads of
this process, one run side by side:

* **throughput**: ``--records`` records (100-byte values) written to a fresh topic with
  ``--partitions`` partitions before the clock starts; then, from ``subscribe()`` until every
  record was received and acknowledged:
  - ``plain``: one classic Consumer (``auto.offset.reset=earliest``), committing at the end;
  - ``share-1`` / ``share-4``: 1 or 4 ShareConsumers of one share group (implicit
    acknowledgement: a poll accepts the previous poll's records; ``commit_sync()`` at the end),
    the group's ``share.auto.offset.reset=earliest`` set through IncrementalAlterConfigs on the
    GROUP resource. Every offset must be received once overall (checked).
* **redelivery**: the broker runs with ``group.share.record.lock.duration.ms=--lock-ms``. Consumer A
  (explicit acknowledgement) takes a batch and then neither acknowledges nor polls; consumer B of
  the same group polls all along. Figure: from A's receipt to B's receipt of the same offsets,
  minus the lock duration: what the broker adds to the lock before a record is handed out again.

    .venv/bin/python bench/share_groups.py                  # 3 rounds
    .venv/bin/python bench/share_groups.py --write-docs     # also rewrite its docs section

This is a benchmark command, not a test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shlex
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import confluent_kafka
from confluent_kafka import Consumer, KafkaException, Producer, ShareConsumer
from confluent_kafka import libversion as librdkafka_version
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from groups import create_topic, write_docs_section
from machine import machine_description
from oncestream.broker_process import OnceStreamBroker

DOCS_HEADING = "## Share groups: acknowledged records/s and lock-expiry redelivery (bench/share_groups.py)"
RUN_TIMEOUT_S = 120.0


def produce(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    """``records`` 100-byte records spread over the partitions, flushed."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    value = b"v" * 100
    for i in range(records):
        producer.produce(topic, value, partition=i % partitions)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError("records not delivered")


def earliest_share_group(bootstrap: str, group_id: str) -> None:
    """share.auto.offset.reset=earliest for a share group (IncrementalAlterConfigs, GROUP)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


def plain_rate(bootstrap: str, topic: str, records: int) -> float:
    """Records/s for one classic consumer reading the whole topic and committing at the end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"plain-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        started = time.perf_counter()
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while seen < records:
            if time.monotonic() > deadline:
                raise RuntimeError(f"plain consumer read {seen} of {records}")
            for msg in consumer.consume(1000, 0.1):
                if msg.error() is None:
                    seen += 1
        consumer.commit(asynchronous=False)
        return records / (time.perf_counter() - started)
    finally:
        consumer.close()


def share_rate(bootstrap: str, topic: str, records: int, consumers: int) -> float:
    """Records/s for ``consumers`` ShareConsumers of one fresh share group taking the whole topic
    (implicit acknowledgement); every (partition, offset) must arrive exactly once overall."""
    group_id = f"share-{uuid.uuid4().hex[:8]}"
    earliest_share_group(bootstrap, group_id)
    lock = threading.Lock()
    seen: set[tuple[int | None, int | None]] = set()
    duplicates: list[tuple[int | None, int | None]] = []
    done = threading.Event()
    errors: list[KafkaException] = []
    gate = threading.Barrier(consumers + 1)

    def run() -> None:
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group_id})
        try:
            gate.wait()
            consumer.subscribe([topic])
            while not done.is_set():
                batch = consumer.poll(0.1)
                with lock:
                    for msg in batch:
                        if msg.error() is not None:
                            continue
                        key = (msg.partition(), msg.offset())
                        if key in seen:
                            duplicates.append(key)
                        seen.add(key)
                    if len(seen) >= records:
                        done.set()
            consumer.commit_sync(30)
        except KafkaException as exc:  # reported by the caller
            errors.append(exc)
            done.set()
        finally:
            consumer.close()

    threads = [threading.Thread(target=run, daemon=True) for _ in range(consumers)]
    for thread in threads:
        thread.start()
    gate.wait()
    started = time.perf_counter()
    if not done.wait(RUN_TIMEOUT_S):
        raise RuntimeError(f"share-{consumers}: {len(seen)} of {records} records after {RUN_TIMEOUT_S} s")
    for thread in threads:
        thread.join(60)
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"share-{consumers} failed: {errors[0]!r}")
    if duplicates:
        raise RuntimeError(f"share-{consumers}: {len(duplicates)} records handed out twice, e.g. {duplicates[:3]}")
    return records / elapsed


def redelivery_s(bootstrap: str, topic: str, lock_ms: int) -> float:
    """Seconds beyond the lock duration before records held (unacknowledged) by a stalled consumer
    reach another consumer of the group."""
    group_id = f"redeliver-{uuid.uuid4().hex[:8]}"
    earliest_share_group(bootstrap, group_id)
    holder = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group_id,
                            "share.acknowledgement.mode": "explicit"})
    other = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group_id})
    try:
        holder.subscribe([topic])
        deadline = time.monotonic() + RUN_TIMEOUT_S
        held: set[tuple[int | None, int | None]] = set()
        while not held:
            if time.monotonic() > deadline:
                raise RuntimeError("the holder never received a record")
            held = {(m.partition(), m.offset()) for m in holder.poll(0.1) if m.error() is None}
        held_at = time.perf_counter()
        other.subscribe([topic])
        while True:
            if time.monotonic() > deadline:
                raise RuntimeError("held records never redelivered")
            got = {(m.partition(), m.offset()) for m in other.poll(0.05) if m.error() is None}
            if got & held:
                return time.perf_counter() - held_at - lock_ms / 1000
    finally:
        other.close()
        holder.close()


@dataclass
class RoundResult:
    """One round's figures."""

    round_no: int
    plain: float
    share_1: float
    share_4: float
    redelivery_s: float


def markdown_section(results: list[RoundResult], args: argparse.Namespace, command: str,
                     load_before: tuple[float, float, float]) -> str:
    """The docs/benchmarks.md section."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    version = confluent_kafka.version()
    lines = [
        DOCS_HEADING, "",
        "```sh", ".venv/bin/python bench/share_groups.py --write-docs", "```", "",
        "**Method** (module docstring of `bench/share_groups.py`): one broker of ours; a backlog of",
        f"{args.records} 100-byte records on {args.partitions} partition(s) read from `subscribe()`",
        "until every record was received and acknowledged, by one classic Consumer (*plain*) and by 1",
        "and 4 librdkafka ShareConsumers of a fresh share group (implicit acknowledgement, each offset",
        "checked to arrive once). *Redelivery*: a consumer takes a batch and stalls without",
        f"acknowledging; the lock is {args.lock_ms} ms; the figure is the time until another member",
        "receives those offsets, minus the lock duration.",
        "",
        f"Command: `{command}`  ",
        f"Date: {now}  ",
        f"Machine: {machine_description()}  ",
        f"Load average (1/5/15 min) before: {' / '.join(f'{x:.2f}' for x in load_before)},"
        f" after: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}  ",
        f"Clients: confluent-kafka {version[0] if isinstance(version, tuple) else version}"
        f" (librdkafka {librdkafka_version()[0]}), Python {platform.python_version()}",
        "",
        "| round | plain records/s | share-1 records/s | share-4 records/s | redelivery after lock expiry ms |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        lines.append(f"| {r.round_no} | {r.plain:.0f} | {r.share_1:.0f} | {r.share_4:.0f} | {r.redelivery_s * 1000:.0f} |")
    med = {name: statistics.median(getattr(r, name) for r in results)
           for name in ("plain", "share_1", "share_4", "redelivery_s")}
    lines += ["", f"Medians: plain {med['plain']:.0f} records/s; share-1 {med['share_1']:.0f}"
              f" (**{med['share_1'] / med['plain']:.2f}x** plain); share-4 {med['share_4']:.0f}"
              f" (**{med['share_4'] / med['plain']:.2f}x** plain); redelivery"
              f" {med['redelivery_s'] * 1000:.0f} ms after the lock expired."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Run the rounds on one broker; print or write the section."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--lock-ms", type=int, default=2000)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    command = shlex.join([".venv/bin/python", "bench/share_groups.py", *(sys.argv[1:] if argv is None else argv)])
    load_before = os.getloadavg()
    results: list[RoundResult] = []
    config = {"group.share.record.lock.duration.ms": str(args.lock_ms),
              "group.share.min.record.lock.duration.ms": str(min(args.lock_ms, 15_000))}
    with tempfile.TemporaryDirectory(prefix="oncestream-bench-share-") as work:
        broker = OnceStreamBroker(data_dir=Path(work) / "data", config=config, log_dir=Path(work) / "logs").start()
        try:
            for round_no in range(1, args.rounds + 1):
                topic = f"bench-share-{uuid.uuid4().hex[:8]}"
                create_topic(broker.bootstrap, topic, args.partitions)
                produce(broker.bootstrap, topic, args.records, args.partitions)
                r = RoundResult(round_no, plain_rate(broker.bootstrap, topic, args.records),
                                share_rate(broker.bootstrap, topic, args.records, 1),
                                share_rate(broker.bootstrap, topic, args.records, 4),
                                redelivery_s(broker.bootstrap, topic, args.lock_ms))
                results.append(r)
                print(f"round {round_no}: plain {r.plain:.0f}/s, share-1 {r.share_1:.0f}/s,"
                      f" share-4 {r.share_4:.0f}/s, redelivery +{r.redelivery_s * 1000:.0f} ms", flush=True)
        finally:
            broker.stop()
    section = markdown_section(results, args, command, load_before)
    if args.write_docs:
        write_docs_section(section, DOCS_HEADING)
        print("wrote the section to docs/benchmarks.md")
    else:
        print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
