"""Cost of transactions on oncestream: a librdkafka transactional producer committing every
100 ms against the same producer without transactions (idempotent only).

One broker process serves the whole run; both modes use the same client (confluent-kafka), the
same producer settings and the same 1 KiB records, in alternating rounds (transactional first in
odd rounds, idempotent first in even rounds) so drift of the shared machine lands on both.

Two measurements per mode and round, each on a fresh one-partition topic (deleted afterwards):

- throughput: produce as fast as the client goes for ``--seconds``; the transactional producer
  commits whenever 100 ms have passed since its transaction began (commit_transaction() flushes,
  so commit time is paid in the loop, as an application pays it). MB/s = record bytes / time from
  the first produce() to the final flush/commit. The log is then checked: every record exactly
  once (high watermark = records + one marker per commit).
- end-to-end latency: records paced at ``--rate`` per second carry their send time; a
  read_committed consumer in the same process (default fetch settings) reports receive time
  minus send time. With transactions a record becomes readable only when its transaction
  commits, so the 100 ms commit interval is part of the latency by design.

    .venv/bin/python bench/transactions.py                 # 5 rounds, writes docs/benchmarks.md
    .venv/bin/python bench/transactions.py --rounds 1 --no-write --seconds 2

This is a benchmark command, not a test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import platform
import re
import shutil
import statistics
import struct
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka import libversion as librdkafka_version
from confluent_kafka.admin import AdminClient, NewTopic

from machine import machine_description
from oncestream.broker_process import BrokerStartError, OnceStreamBroker

REPO_ROOT = Path(__file__).resolve().parent.parent
DOC_PATH = REPO_ROOT / "docs" / "benchmarks.md"
SECTION_HEADING = "## Transactions: commit every 100 ms vs idempotent (librdkafka)"
MB = 1_000_000
RECORD_BYTES = 1024
COMMIT_INTERVAL_S = 0.100
READY_TIMEOUT_S = 30.0
CLIENT_TIMEOUT_S = 60.0
MODES = ("transactional", "idempotent")
PRODUCER_CONF = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "batch.size": 1_048_576,
    "delivery.report.only.error": True,
}


# -- broker ------------------------------------------------------------------------------------
def start_broker(work_dir: Path) -> OnceStreamBroker:
    """``oncestream broker`` on a free port, default configuration, data dir under work_dir."""
    broker = OnceStreamBroker(work_dir / "data", log_file=work_dir / "broker.log", ready_timeout_s=READY_TIMEOUT_S)
    try:
        broker.start()
    except BrokerStartError as exc:
        raise SystemExit(str(exc)) from None
    return broker


def create_topic(admin: AdminClient, topic: str) -> None:
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(CLIENT_TIMEOUT_S)


def delete_topic(admin: AdminClient, topic: str) -> None:
    admin.delete_topics([topic], operation_timeout=30)[topic].result(CLIENT_TIMEOUT_S)


def high_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=CLIENT_TIMEOUT_S, cached=False)[1]
    finally:
        consumer.close()


# -- producers -----------------------------------------------------------------------------------
class Errors:
    """Delivery errors (only errors are reported: delivery.report.only.error)."""

    def __init__(self) -> None:
        self.items: list[KafkaError] = []

    def __call__(self, err, _msg) -> None:
        if err is not None:
            self.items.append(err)


def make_producer(bootstrap: str, mode: str, errors: Errors) -> Producer:
    conf = {"bootstrap.servers": bootstrap, "on_delivery": errors, **PRODUCER_CONF}
    if mode == "transactional":
        conf["transactional.id"] = f"bench-{uuid.uuid4().hex[:10]}"
    producer = Producer(conf)
    if mode == "transactional":
        producer.init_transactions(CLIENT_TIMEOUT_S)
    return producer


class Committer:
    """Begin a transaction, and commit + begin the next whenever COMMIT_INTERVAL_S has passed."""

    def __init__(self, producer: Producer, enabled: bool) -> None:
        self.producer = producer
        self.enabled = enabled
        self.commits = 0
        self.began_at = 0.0

    def begin(self) -> None:
        if self.enabled:
            self.producer.begin_transaction()
            self.began_at = time.perf_counter()

    def maybe_commit(self, now: float) -> None:
        if self.enabled and now - self.began_at >= COMMIT_INTERVAL_S:
            self.producer.commit_transaction(CLIENT_TIMEOUT_S)
            self.commits += 1
            self.begin()

    def finish(self, empty: bool = False) -> None:
        if self.enabled:
            self.producer.commit_transaction(CLIENT_TIMEOUT_S)
            # An empty transaction adds no partition, so committing it writes no marker.
            if not empty:
                self.commits += 1
        else:
            remaining = self.producer.flush(CLIENT_TIMEOUT_S)
            assert remaining == 0, f"{remaining} records unacknowledged"


def produce_one(producer: Producer, topic: str, value: bytes) -> None:
    while True:
        try:
            producer.produce(topic, value, partition=0)
            return
        except BufferError:
            producer.poll(0.001)


@dataclass
class ThroughputResult:
    mode: str
    records: int
    seconds: float
    commits: int

    @property
    def mb_per_s(self) -> float:
        return self.records * RECORD_BYTES / MB / self.seconds


def throughput_round(bootstrap: str, admin: AdminClient, mode: str, seconds: float) -> ThroughputResult:
    topic = f"bench-txn-tput-{uuid.uuid4().hex[:8]}"
    create_topic(admin, topic)
    errors = Errors()
    producer = make_producer(bootstrap, mode, errors)
    committer = Committer(producer, mode == "transactional")
    payload = os.urandom(RECORD_BYTES)
    records = 0
    start = time.perf_counter()
    committer.begin()
    in_txn = 0
    while True:
        now = time.perf_counter()
        if now - start >= seconds:
            break
        produce_one(producer, topic, payload)
        producer.poll(0)
        records += 1
        in_txn += 1
        if records % 64 == 0:
            before = committer.commits
            committer.maybe_commit(now)
            if committer.commits != before:
                in_txn = 0
    committer.finish(empty=in_txn == 0)
    elapsed = time.perf_counter() - start
    assert not errors.items, f"delivery errors: {errors.items[:3]}"
    hw = high_watermark(bootstrap, topic)
    assert hw == records + committer.commits, f"log holds {hw} offsets for {records} records + {committer.commits} markers"
    delete_topic(admin, topic)
    return ThroughputResult(mode, records, elapsed, committer.commits)


@dataclass
class LatencyResult:
    mode: str
    latencies_ms: list[float] = field(default_factory=list)

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


WARMUP_SENT_NS = -1  # the send time a warm-up record carries (never a real clock reading)


def latency_round(bootstrap: str, admin: AdminClient, mode: str, rate_per_s: int, seconds: float) -> LatencyResult:
    topic = f"bench-txn-lat-{uuid.uuid4().hex[:8]}"
    create_topic(admin, topic)
    total = int(rate_per_s * seconds)
    result = LatencyResult(mode)
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-lat-{uuid.uuid4().hex[:8]}",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    failure: list[BaseException] = []
    warmed_up = threading.Event()

    def consume() -> None:
        try:
            deadline = time.monotonic() + seconds + CLIENT_TIMEOUT_S
            while len(result.latencies_ms) < total and time.monotonic() < deadline:
                # poll() hands over each record as soon as librdkafka has it; consume(n, timeout)
                # would hold records until n arrived or the timeout ran out, adding up to that
                # timeout to every latency.
                msg = consumer.poll(0.1)
                if msg is None:
                    continue
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                received_ns = time.time_ns()
                (sent_ns,) = struct.unpack_from(">q", msg.value() or b"", 0)
                if sent_ns == WARMUP_SENT_NS:
                    warmed_up.set()
                    continue
                result.latencies_ms.append((received_ns - sent_ns) / 1e6)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
            failure.append(exc)

    reader = threading.Thread(target=consume, name="latency-consumer")
    reader.start()
    errors = Errors()
    producer = make_producer(bootstrap, mode, errors)
    committer = Committer(producer, mode == "transactional")
    padding = os.urandom(RECORD_BYTES - 8)
    # Warm-up, outside the measurement: one record through the same producer and consumer.
    # librdkafka's idempotent producer asks for its producer id only on the first produce(),
    # and when its connection is not up yet its PID timer retries after 500 ms: the first
    # ~0.5 s of records would otherwise measure client start-up (p99 ~460 ms on every round).
    committer.begin()
    produce_one(producer, topic, struct.pack(">q", WARMUP_SENT_NS) + padding)
    committer.finish()
    if not warmed_up.wait(CLIENT_TIMEOUT_S):
        raise RuntimeError("the warm-up record never reached the consumer")
    interval = 1.0 / rate_per_s
    start = time.perf_counter()
    committer.begin()
    for i in range(total):
        target = start + i * interval
        now = time.perf_counter()
        if target > now:
            time.sleep(target - now)
        produce_one(producer, topic, struct.pack(">q", time.time_ns()) + padding)
        producer.poll(0)
        committer.maybe_commit(time.perf_counter())
    committer.finish()
    reader.join()
    consumer.close()
    if failure:
        raise failure[0]
    assert not errors.items, f"delivery errors: {errors.items[:3]}"
    assert len(result.latencies_ms) == total, f"consumed {len(result.latencies_ms)} of {total}"
    delete_topic(admin, topic)
    return result


@dataclass
class TxnCostResult:
    """Per transaction of one 1 KiB record: begin+produce+flush and commit_transaction(), ms."""

    produce_ms: list[float]
    commit_ms: list[float]
    idempotent_produce_ms: list[float]  # the same produce + flush without a transaction

    def protocol_ms(self) -> float:
        """Median cost the transaction adds: its produce+flush over the idempotent one's, plus
        the commit."""
        return (statistics.median(self.produce_ms) - statistics.median(self.idempotent_produce_ms)
                + statistics.median(self.commit_ms))


def txn_cost_round(bootstrap: str, admin: AdminClient, transactions: int, warmup: int = 20) -> TxnCostResult:
    """The protocol's fixed cost per transaction (AddPartitionsToTxn, EndTxn, markers), apart
    from any throughput effect: one-record transactions back to back, each phase timed."""
    topic = f"bench-txn-cost-{uuid.uuid4().hex[:8]}"
    create_topic(admin, topic)
    errors = Errors()
    producer = make_producer(bootstrap, "transactional", errors)
    value = os.urandom(RECORD_BYTES)
    result = TxnCostResult([], [], [])
    idempotent = make_producer(bootstrap, "idempotent", errors)
    for i in range(warmup + transactions):
        t0 = time.perf_counter()
        produce_one(idempotent, topic, value)
        assert idempotent.flush(CLIENT_TIMEOUT_S) == 0
        if i >= warmup:
            result.idempotent_produce_ms.append((time.perf_counter() - t0) * 1e3)
    for i in range(warmup + transactions):
        t0 = time.perf_counter()
        producer.begin_transaction()
        produce_one(producer, topic, value)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        t1 = time.perf_counter()
        producer.commit_transaction(CLIENT_TIMEOUT_S)
        t2 = time.perf_counter()
        if i >= warmup:
            result.produce_ms.append((t1 - t0) * 1e3)
            result.commit_ms.append((t2 - t1) * 1e3)
    assert not errors.items, f"delivery errors: {errors.items[:3]}"
    # the idempotent records, then a record and a marker per transaction
    assert high_watermark(bootstrap, topic) == 3 * (warmup + transactions)
    delete_topic(admin, topic)
    return result


def broker_rtts_ms(bootstrap: str, admin: AdminClient, transactions: int = 100) -> dict[str, float]:
    """Median round trip per request type of one-record transactions, as librdkafka's protocol
    debug log reports it: the broker's share of the fixed cost (a separate run, since debug
    logging slows the client)."""
    topic = f"bench-txn-rtt-{uuid.uuid4().hex[:8]}"
    create_topic(admin, topic)
    rtts: dict[str, list[float]] = {}
    pattern = re.compile(r"Received (\w+)Response .*rtt ([\d.]+)ms")

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            match = pattern.search(record.getMessage())
            if match:
                rtts.setdefault(match.group(1), []).append(float(match.group(2)))

    logger = logging.getLogger(f"bench-rtt-{topic}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Capture())
    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONF, "transactional.id": f"rtt-{topic}",
                         "debug": "protocol", "logger": logger})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    for _ in range(transactions):
        producer.begin_transaction()
        produce_one(producer, topic, os.urandom(RECORD_BYTES))
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        producer.commit_transaction(CLIENT_TIMEOUT_S)
    producer.poll(0.2)
    delete_topic(admin, topic)
    return {name: statistics.median(values) for name, values in rtts.items()
            if name in ("AddPartitionsToTxn", "Produce", "EndTxn")}


# -- report --------------------------------------------------------------------------------------


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def render(args, started: dt.datetime, load_before: str, load_after: str, tput, lat, cost: TxnCostResult,
           rtts: dict[str, float]) -> str:
    median_tput = {m: statistics.median(r.mb_per_s for r in tput if r.mode == m) for m in MODES}
    overhead = 1 - median_tput["transactional"] / median_tput["idempotent"]
    ratios = [
        t.mb_per_s / i.mb_per_s
        for t, i in zip([r for r in tput if r.mode == "transactional"], [r for r in tput if r.mode == "idempotent"])
    ]
    lines = [
        SECTION_HEADING,
        "",
        "```sh",
        ".venv/bin/python bench/transactions.py              # 5 rounds; rewrites this section",
        ".venv/bin/python bench/transactions.py --help       # options",
        "```",
        "",
        "**Method.** `bench/transactions.py` starts one oncestream broker (default configuration, data",
        "dir in /tmp) and runs both modes against it with the same librdkafka producer settings",
        "(`acks=all`, idempotence, `linger.ms=5`, `batch.size=1048576`, 1 KiB random records, one",
        "partition, a fresh topic per measurement), alternating which mode goes first each round.",
        "*Transactional* adds `transactional.id` and commits whenever 100 ms have passed since the",
        "transaction began (`commit_transaction()` flushes, so its time is inside the measurement).",
        f"Throughput: produce for {args.seconds:g} s as fast as the client goes, MB/s = record bytes /",
        "(first produce to final flush/commit), decimal MB; the log is checked to hold every record",
        "exactly once. Latency: records paced at",
        f"{args.rate}/s for {args.latency_seconds:g} s carry their send time; a `read_committed`",
        "consumer (same process, default fetch settings, each record taken by `poll()` as soon as",
        "librdkafka has it) measures receive minus send, after one warm-up record has gone through",
        "both clients (a fresh librdkafka idempotent producer can spend its first 500 ms waiting on",
        "its producer-id timer, which is client start-up, not broker latency). With",
        "transactions a record becomes readable only at its commit, so about half the commit",
        "interval is latency by design. Client and broker share the machine's 2 cores; the machine",
        "is shared with other work, so compare within one run. Throughput moves ±15% between rounds,",
        "more than the effect measured, so the section also gives the paired figure (the median of",
        "each round's txn/idempotent ratio) and the fixed cost per transaction, timed directly: one-",
        "record transactions back to back, where begin + produce + flush holds AddPartitionsToTxn",
        "and one produce round trip, and commit_transaction() holds EndTxn and the markers. Their sum",
        "over the 100 ms commit interval bounds what the protocol itself costs.",
        "",
        f"Command: `{' '.join(['.venv/bin/python', 'bench/transactions.py', *sys.argv[1:]])}`  ",
        f"Date: {started:%Y-%m-%d %H:%M} UTC  ",
        f"Machine: {machine_description()}  ",
        f"Load average (1/5/15 min) before: {load_before}, after: {load_after}  ",
        f"Clients: confluent-kafka {__import__('confluent_kafka').__version__} (librdkafka {librdkafka_version()[0]}), "
        f"Python {platform.python_version()}",
        "",
        "| round | mode | produce MB/s | commits | latency p50 ms | latency p99 ms |",
        "| ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for round_number in range(args.rounds):
        for mode in MODES:
            t = [r for r in tput if r.mode == mode][round_number]
            lt = [r for r in lat if r.mode == mode][round_number]
            lines.append(
                f"| {round_number + 1} | {mode} | {t.mb_per_s:.1f} | {t.commits} | "
                f"{lt.percentile(0.50):.1f} | {lt.percentile(0.99):.1f} |"
            )
    lines += [
        "",
        "| mode | median produce MB/s | median p50 ms | median p99 ms |",
        "| --- | ---: | ---: | ---: |",
    ]
    for mode in MODES:
        rs = [r for r in lat if r.mode == mode]
        lines.append(
            f"| {mode} | {median_tput[mode]:.1f} | {statistics.median(r.percentile(0.5) for r in rs):.1f} | "
            f"{statistics.median(r.percentile(0.99) for r in rs):.1f} |"
        )
    lines += [
        "",
        f"Throughput overhead of transactions (1 - median txn / median idempotent): **{overhead * 100:.1f}%** "
        f"(target <= 3%); median of the per-round ratios txn/idempotent: {statistics.median(ratios):.3f}.",
        "",
        f"Fixed cost per transaction ({len(cost.commit_ms)} one-record transactions back to back, same "
        f"client): begin + produce + flush p50 {statistics.median(cost.produce_ms):.2f} ms, "
        f"commit_transaction() p50 {statistics.median(cost.commit_ms):.2f} ms "
        f"(p90 {sorted(cost.commit_ms)[int(len(cost.commit_ms) * 0.9)]:.2f} ms); the same one-record "
        f"produce + flush without a transaction p50 {statistics.median(cost.idempotent_produce_ms):.2f} ms. "
        f"What a transaction adds: **{cost.protocol_ms():.2f} ms**, "
        f"**{cost.protocol_ms() / (COMMIT_INTERVAL_S * 1000) * 100:.1f}%** of a "
        f"{COMMIT_INTERVAL_S * 1000:.0f} ms transaction (target <= 3%). The broker's part of it, as "
        "librdkafka's protocol log times the round trips (median): "
        + ", ".join(f"{name} {ms:.2f} ms" for name, ms in sorted(rtts.items()))
        + "; the rest is the client's own scheduling between them.",
        "",
    ]
    return "\n".join(lines)


def write_section(text: str) -> None:
    """Replace this benchmark's own section of docs/benchmarks.md (or append it); the sections
    other benchmarks write are left exactly as they are."""
    existing = DOC_PATH.read_text() if DOC_PATH.exists() else "# Benchmarks\n"
    start = existing.find(SECTION_HEADING)
    if start < 0:
        updated = existing.rstrip("\n") + "\n\n" + text
    else:
        end = existing.find("\n## ", start + len(SECTION_HEADING))
        tail = "" if end < 0 else existing[end:]
        updated = existing[:start] + text.rstrip("\n") + "\n" + tail
    DOC_PATH.write_text(updated.rstrip("\n") + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0, help="throughput measurement length per mode and round")
    parser.add_argument("--rate", type=int, default=2000, help="records/s in the latency measurement")
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--cost-transactions", type=int, default=300,
                        help="one-record transactions timed for the fixed cost per transaction")
    parser.add_argument("--no-write", action="store_true", help="print only, leave docs/benchmarks.md alone")
    args = parser.parse_args()

    started = dt.datetime.now(dt.UTC)
    load_before = load_average()
    work_dir = Path(tempfile.mkdtemp(prefix="oncestream-bench-txn-"))
    broker = start_broker(work_dir)
    tput: list[ThroughputResult] = []
    lat: list[LatencyResult] = []
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        cost = txn_cost_round(broker.bootstrap, admin, args.cost_transactions)
        print(f"fixed cost per transaction: commit p50 {statistics.median(cost.commit_ms):.2f} ms", flush=True)
        rtts = broker_rtts_ms(broker.bootstrap, admin)
        for round_number in range(args.rounds):
            order = MODES if round_number % 2 == 0 else tuple(reversed(MODES))
            for mode in order:
                result = throughput_round(broker.bootstrap, admin, mode, args.seconds)
                tput.append(result)
                print(f"round {round_number + 1} {mode:13s} throughput {result.mb_per_s:7.1f} MB/s "
                      f"({result.records} records, {result.commits} commits)", flush=True)
            for mode in order:
                latency = latency_round(broker.bootstrap, admin, mode, args.rate, args.latency_seconds)
                lat.append(latency)
                print(f"round {round_number + 1} {mode:13s} latency p50 {latency.percentile(0.5):6.1f} ms "
                      f"p99 {latency.percentile(0.99):6.1f} ms", flush=True)
    finally:
        broker.stop()
        shutil.rmtree(work_dir, ignore_errors=True)
    text = render(args, started, load_before, load_average(), tput, lat, cost, rtts)
    print()
    print(text)
    if not args.no_write:
        write_section(text)
        print(f"wrote the section to {DOC_PATH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
