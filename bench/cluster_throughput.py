"""Cluster mode (issue 22) against the single broker, one run side by side, with librdkafka.

Everything runs on this machine: one PostgreSQL (oncestream/postgres_process.py, fsync on), one
SeaweedFS (``weed mini``, oncestream/seaweedfs_process.py) and, in turn, the single broker
(``--data-dir``) and clusters of 1, 2 and 3 brokers (``--metadata-store``/``--object-store``,
production session timeouts, default ``diskless.append.commit.interval.ms`` 250), each cluster
on a fresh database and key prefix. Per configuration:

1. **Throughput**: ``--clients`` producer processes (acks=all, idempotent, linger.ms=5, 1 KiB
   records) write ``--mb`` MB to a topic of 2 partitions per client, then as many consumer
   processes read it back (each partition's offsets checked 0, 1, 2, ... exactly once). Client i
   bootstraps from broker i mod n; librdkafka then sends to each partition's leader, which the
   cluster spreads over its brokers by rendezvous hashing. MB/s = payload / (last client done -
   first client started). During the produce phase: object PUTs per broker per second (rows the
   broker recorded in ``objects``: one row per upload, recorded before its PUT) and PostgreSQL
   transactions per second (``pg_stat_database.xact_commit`` delta of the cluster's database,
   every transaction of every broker: commits, heartbeats, leases, fetch reads) per broker.
2. **Latency**: one producer at a fixed ``--rate`` (records/s) to a 3-partition topic with a
   delivery callback per record (p50/p99 from produce() to the callback) and one consumer
   (p99 from the producer's wall-clock stamp in the value to receipt: end to end).
3. **Partitions** (the 3-broker cluster only): the same total load (``--rate`` records/s from
   ``--clients`` producers, round robin over every partition) to topics of 1, 100 and 1000
   partitions, and an idle window first: object PUTs and transactions per broker per second,
   records acknowledged per second (what is not acknowledged ``--window-s`` after the last send is
   purged, so a deployment that cannot keep up ends the phase anyway) and produce latency.
   The design's claim is one object and one commit transaction per broker per interval whatever
   the partition count (4/s at 250 ms, plus the idle baseline of heartbeats and lease rounds).

    PYTHONPATH=src .venv/bin/python bench/cluster_throughput.py               # full run, ~5 min
    PYTHONPATH=src .venv/bin/python bench/cluster_throughput.py --quick       # smoke run (6 min when loaded)
    PYTHONPATH=src .venv/bin/python bench/cluster_throughput.py --write-docs  # and docs/benchmarks.md

A benchmark command, not a test: it checks only that every record arrived exactly once, in order.
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing as mp
import os
import shlex
import shutil
import struct
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka import libversion as librdkafka_version
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.groups import write_docs_section  # noqa: E402
from bench.machine import machine_description  # noqa: E402
from bench.produce_consume import CONSUMER_CONF, PRODUCER_CONF  # noqa: E402

from oncestream.broker_process import ManagedBroker, OnceStreamBroker  # noqa: E402
from oncestream.postgres_process import PostgresServer  # noqa: E402
from oncestream.seaweedfs_process import SeaweedServer, clean_environ  # noqa: E402
from tests.support.cluster import ClusterBroker  # noqa: E402
from tests.support.postgres import create_database  # noqa: E402

MB = 1_000_000  # decimal megabytes, as in the other bench scripts
RECORD_BYTES = 1024
PARTITIONS_PER_CLIENT = 2
LATENCY_PARTITIONS = 3
CLIENT_TIMEOUT_S = 300.0
DOCS_HEADING = "## Cluster mode (issue 22): 1, 2, 3 brokers vs the single broker (bench/cluster_throughput.py)"
# The production lease timings (tests/support/cluster.py shortens them for tests): heartbeats are
# PostgreSQL transactions, so the transaction rates below would otherwise be inflated.
PRODUCTION_SESSION = {"broker.session.timeout.ms": "9000", "broker.heartbeat.interval.ms": "2000"}
STAMP = struct.Struct(">q")  # the producer's time.time_ns() at the head of each latency record


# ----------------------------------------------------------------------------------------------
# Client processes (spawned: each has its own interpreter, as separate client machines would)


@dataclass
class ClientResult:
    """What one client process reports back."""

    role: str = ""  # "producer" or "consumer"
    records: int = 0
    started: float = 0.0  # time.time() when the measured loop began
    ended: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    error: str = ""


def _value_with_stamp(filler: bytes) -> bytes:
    return STAMP.pack(time.time_ns()) + filler


def produce_client(bootstrap: str, topic: str, partitions: list[int], count: int, rate: float,
                   drain_s: float, ready: Any, go: Any, out: Any) -> None:
    """Produce ``count`` records to ``partitions`` round robin: as fast as possible (rate 0, only
    errors reported) or paced at ``rate`` records/s with a delivery callback per record (its
    latency recorded) and the send time stamped into each value. With ``drain_s`` > 0, what is not
    acknowledged ``drain_s`` after the last send is purged and left out of ``records`` (a bound on
    the phase when the brokers cannot keep up); else every record must be acknowledged."""
    result = ClientResult("producer")
    failures: list[str] = []
    try:
        conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "log_level": 4, **PRODUCER_CONF}
        if rate == 0:
            conf.update({"delivery.report.only.error": True,
                         "on_delivery": lambda err, _m: failures.append(str(err))})
        producer = Producer(conf)
        producer.list_topics(topic, timeout=30)
        filler = os.urandom(RECORD_BYTES - STAMP.size)
        ready.set()
        go.wait(120)
        result.started = time.time()
        if rate == 0:
            value = filler + os.urandom(STAMP.size)
            for i in range(count):
                while True:
                    try:
                        producer.produce(topic, value, partition=partitions[i % len(partitions)])
                        break
                    except BufferError:
                        producer.poll(0.005)
                if i % 10_000 == 0:
                    producer.poll(0)
        else:
            latencies = result.latencies_ms
            purged: list[float] = []

            def delivered(sent: float, err: Any, _msg: Any) -> None:
                if err is not None and err.code() in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT):
                    purged.append(sent)
                elif err is not None:
                    failures.append(str(err))
                else:
                    latencies.append((time.perf_counter() - sent) * 1000)

            start = time.perf_counter()
            sent_count = 0
            while sent_count < count:
                due = min(count, int((time.perf_counter() - start) * rate) + 1)
                while sent_count < due:
                    sent = time.perf_counter()
                    producer.produce(topic, _value_with_stamp(filler),
                                     partition=partitions[sent_count % len(partitions)],
                                     on_delivery=functools.partial(delivered, sent))
                    sent_count += 1
                producer.poll(0.002)
        undelivered = producer.flush(drain_s if drain_s > 0 else CLIENT_TIMEOUT_S)
        result.ended = time.time()
        result.records = count
        if drain_s > 0 and undelivered:
            producer.purge(in_queue=True, in_flight=True)
            undelivered = producer.flush(30)
            result.records = len(result.latencies_ms)
        if undelivered or failures:
            result.error = f"{undelivered} of {count} undelivered, {len(failures)} failed: {failures[:3]}"
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which stops the run
        result.error = f"{type(exc).__name__}: {exc}"
        ready.set()
    out.put(result)


def consume_client(bootstrap: str, topic: str, partitions: list[int], count: int, stamped: bool,
                   ready: Any, go: Any, out: Any) -> None:
    """Read ``partitions`` from offset 0 until ``count`` records arrived, each offset once and in
    order; with ``stamped`` record each record's end-to-end latency from its value's stamp."""
    result = ClientResult("consumer")
    try:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}", "log_level": 4,
                             **CONSUMER_CONF})
        consumer.list_topics(topic, timeout=30)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        ready.set()
        go.wait(120)
        next_offsets = dict.fromkeys(partitions, 0)
        result.started = time.time()
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while result.records < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"consume stalled at {result.records} of {count} records")
            # consume() waits until it has num_messages or its timeout passed: fine for throughput,
            # but the end-to-end figure needs each record the moment it arrives (poll).
            if stamped:
                one = consumer.poll(0.5)
                messages = [] if one is None else [one]
            else:
                messages = consumer.consume(num_messages=min(10_000, count - result.records), timeout=0.5)
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(str(err))
                partition, value = msg.partition(), msg.value()
                if partition is None or value is None:
                    raise RuntimeError(f"a record without partition or value: {msg}")
                if stamped:
                    received_ns = time.time_ns()
                    result.latencies_ms.append((received_ns - STAMP.unpack_from(value)[0]) / 1e6)
                if msg.offset() != next_offsets[partition]:
                    raise RuntimeError(f"partition {partition}: offset {msg.offset()}"
                                       f" where {next_offsets[partition]} was due")
                next_offsets[partition] += 1
                result.records += 1
        result.ended = time.time()
        consumer.close()
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which stops the run
        result.error = f"{type(exc).__name__}: {exc}"
        ready.set()
    out.put(result)


class ClientGroup:
    """Client processes started together, released at once by ``go``, results collected."""

    def __init__(self) -> None:
        self.ctx = mp.get_context("spawn")
        self.go = self.ctx.Event()
        self.out = self.ctx.Queue()
        self.processes: list[Any] = []
        self.ready_events: list[Any] = []

    def producer(self, bootstrap: str, topic: str, partitions: list[int], count: int, rate: float,
                 drain_s: float = 0.0) -> None:
        self._start(produce_client, bootstrap, topic, partitions, count, rate, drain_s, self._ready(), self.go,
                    self.out)

    def consumer(self, bootstrap: str, topic: str, partitions: list[int], count: int, stamped: bool) -> None:
        self._start(consume_client, bootstrap, topic, partitions, count, stamped, self._ready(), self.go, self.out)

    def _ready(self) -> Any:
        ready = self.ctx.Event()
        self.ready_events.append(ready)
        return ready

    def _start(self, target: Any, *args: Any) -> None:
        process = self.ctx.Process(target=target, args=args, daemon=True)
        process.start()
        self.processes.append(process)

    def run(self, between: Any = None) -> list[ClientResult]:
        """Wait until every client has connected (and consumers are assigned), release them all at
        once, gather every result."""
        for ready in self.ready_events:
            ready.wait(120)
        self.go.set()
        if between is not None:
            between()
        results = [self.out.get(timeout=CLIENT_TIMEOUT_S + 60) for _ in self.processes]
        for process in self.processes:
            process.join(10)
            if process.is_alive():
                process.kill()
        errors = [r.error for r in results if r.error]
        if errors:
            raise RuntimeError(f"client failed: {errors}")
        return results


def span_mb_per_s(results: list[ClientResult]) -> float:
    """Payload of every client over the span from the first start to the last end."""
    seconds = max(r.ended for r in results) - min(r.started for r in results)
    return sum(r.records for r in results) * RECORD_BYTES / MB / seconds


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) of ``values``."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


# ----------------------------------------------------------------------------------------------
# Brokers and the counters of the stores


@dataclass
class Deployment:
    """A single broker or a cluster, with what it takes to count its PUTs and transactions."""

    name: str
    brokers: list[ManagedBroker]
    database: str = ""  # the cluster's metadata database ("" for the single broker)

    def bootstrap_for(self, client: int) -> str:
        """Client ``client`` bootstraps from broker ``client mod n`` first."""
        addresses = [b.bootstrap for b in self.brokers]
        shift = client % len(addresses)
        return ",".join(addresses[shift:] + addresses[:shift])


@dataclass
class StoreCounters:
    """One reading of the metadata store's counters: PostgreSQL's clock, committed transactions
    of the database and the objects each broker recorded (one per upload)."""

    at: float
    xact_commit: int
    objects_by_node: dict[int, int]
    live_by_node: dict[int, int]
    batch_rows: int  # committed record batches (rows of ``batches``)


def read_counters(pg: PostgresServer, database: str) -> StoreCounters:
    """The counters now. Backends flush their transaction counts to pg_stat_database at most once
    a second, so a window of several seconds is read with about a second of skew at each end."""
    with psycopg.connect(pg.dsn(database), autocommit=True) as conn:
        clock = conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8,"
                             " (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),"
                             " (SELECT count(*) FROM batches)").fetchone()
        if clock is None:
            raise RuntimeError("PostgreSQL answered no row")
        at, xacts, batch_rows = clock
        rows = conn.execute("SELECT created_by, count(*), count(*) FILTER (WHERE state <> 'uploading')"
                            " FROM objects GROUP BY created_by").fetchall()
    return StoreCounters(at, int(xacts), {int(n): int(c) for n, c, _ in rows}, {int(n): int(lv) for n, _, lv in rows},
                         int(batch_rows))


@dataclass
class StoreRates:
    """Per broker per second over a window."""

    puts_per_broker_s: float
    commits_per_broker_s: float
    xacts_per_broker_s: float
    puts_by_node_s: dict[int, float]
    batches_per_commit: float  # record batches (about: partitions) per committed object


def rates_between(before: StoreCounters, after: StoreCounters, broker_count: int) -> StoreRates:
    seconds = after.at - before.at
    puts = {n: (after.objects_by_node.get(n, 0) - before.objects_by_node.get(n, 0)) / seconds
            for n in after.objects_by_node}
    live = sum(after.live_by_node.values()) - sum(before.live_by_node.values())
    batches = after.batch_rows - before.batch_rows
    return StoreRates(sum(puts.values()) / broker_count, live / seconds / broker_count,
                      (after.xact_commit - before.xact_commit) / seconds / broker_count, puts,
                      batches / live if live else 0.0)


def start_deployment(name: str, size: int, work_dir: Path, pg: PostgresServer, weed: SeaweedServer) -> Deployment:
    """The single broker (size 0) or a cluster of ``size`` brokers on a fresh database and prefix."""
    if size == 0:
        single = OnceStreamBroker(Path(tempfile.mkdtemp(prefix="single-", dir=work_dir)),
                                  log_file=work_dir / f"{name}.log")
        single.start()
        deployment = Deployment(name, [single])
    else:
        database = create_database(pg, "bench")
        uri = weed.uri(f"bench-{uuid.uuid4().hex[:10]}")
        environ = clean_environ(**weed.env())
        brokers: list[ManagedBroker] = []
        deployment = Deployment(name, brokers, database)
        try:
            for node_id in range(1, size + 1):
                node = ClusterBroker(node_id, pg.url(database), uri, environ, work_dir / name, PRODUCTION_SESSION)
                brokers.append(node)
                node.start()
        except BaseException:
            stop_deployment(deployment)
            raise
    # Every broker answers Metadata listing all of them before the clients start.
    for broker in deployment.brokers:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 4})
        deadline = time.monotonic() + 60
        while len(admin.list_topics(timeout=30).brokers) < len(deployment.brokers):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: a broker does not list all {len(deployment.brokers)} brokers")
            time.sleep(0.2)
    return deployment


def stop_deployment(deployment: Deployment) -> None:
    for broker in deployment.brokers:
        broker.stop(10.0)


def create_topic(deployment: Deployment, partitions: int) -> str:
    topic = f"bench-{partitions}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": deployment.bootstrap_for(0), "log_level": 4})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(60)
    # Every broker knows the topic (cluster brokers cache the catalog up to 1 s).
    for broker in deployment.brokers:
        probe = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 4})
        deadline = time.monotonic() + 30
        while len(probe.list_topics(topic, timeout=30).topics[topic].partitions) < partitions:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic} not visible on {broker.bootstrap}")
            time.sleep(0.2)
    return topic


# ----------------------------------------------------------------------------------------------
# The three measurements


@dataclass
class ConfigResult:
    """Throughput and latency of one deployment."""

    name: str
    broker_count: int
    produce_mb_s: float = 0.0
    consume_mb_s: float = 0.0
    produce_p50_ms: float = 0.0
    produce_p99_ms: float = 0.0
    e2e_p50_ms: float = 0.0
    e2e_p99_ms: float = 0.0
    produce_rates: StoreRates | None = None


def split(items: list[int], parts: int) -> list[list[int]]:
    return [items[i::parts] for i in range(parts)]


def measure_throughput(deployment: Deployment, result: ConfigResult, args: argparse.Namespace,
                       pg: PostgresServer) -> None:
    partitions = PARTITIONS_PER_CLIENT * args.clients
    topic = create_topic(deployment, partitions)
    total = int(args.mb * MB) // RECORD_BYTES
    shares = split(list(range(partitions)), args.clients)
    group = ClientGroup()
    for i, mine in enumerate(shares):
        group.producer(deployment.bootstrap_for(i), topic, mine, total // args.clients, 0.0)
    readings: list[StoreCounters] = []
    produced = group.run(between=functools.partial(read_now, pg, deployment.database, readings))
    if deployment.database:
        readings.append(read_counters(pg, deployment.database))
        result.produce_rates = rates_between(readings[0], readings[1], len(deployment.brokers))
    result.produce_mb_s = span_mb_per_s(produced)
    group = ClientGroup()
    for i, mine in enumerate(shares):
        group.consumer(deployment.bootstrap_for(i), topic, mine, total // args.clients, False)
    result.consume_mb_s = span_mb_per_s(group.run())


def measure_latency(deployment: Deployment, result: ConfigResult, args: argparse.Namespace) -> None:
    topic = create_topic(deployment, LATENCY_PARTITIONS)
    group = ClientGroup()
    expected = int(args.latency_s * args.rate)
    all_partitions = list(range(LATENCY_PARTITIONS))
    group.consumer(deployment.bootstrap_for(1), topic, all_partitions, expected, True)
    group.producer(deployment.bootstrap_for(0), topic, all_partitions, expected, args.rate)
    results = group.run()
    prod = next(r for r in results if r.role == "producer")
    cons = next(r for r in results if r.role == "consumer")
    result.produce_p50_ms = percentile(prod.latencies_ms, 50)
    result.produce_p99_ms = percentile(prod.latencies_ms, 99)
    result.e2e_p50_ms = percentile(cons.latencies_ms, 50)
    result.e2e_p99_ms = percentile(cons.latencies_ms, 99)


@dataclass
class PartitionResult:
    partitions: int  # 0 = idle
    rates: StoreRates  # from the producers' release to the last acknowledgement
    produce_p50_ms: float = 0.0
    produce_p99_ms: float = 0.0
    acked_per_s: float = 0.0  # records acknowledged per second over the phase
    phase_s: float = 0.0


def read_now(pg: PostgresServer, database: str, readings: list[StoreCounters]) -> None:
    """Append a reading of the counters (``database`` "" for the single broker: nothing to read)."""
    if database:
        readings.append(read_counters(pg, database))


def measure_partitions(deployment: Deployment, args: argparse.Namespace, pg: PostgresServer) -> list[PartitionResult]:
    """Idle, then the same total rate over 1, 100 and 1000 partitions."""
    time.sleep(2.0)  # the previous phase's clients leave (group sessions, closing fetches)
    before = read_counters(pg, deployment.database)
    time.sleep(args.window_s)
    out = [PartitionResult(0, rates_between(before, read_counters(pg, deployment.database), len(deployment.brokers)))]
    for partitions in args.partition_counts:
        topic = create_topic(deployment, partitions)
        group = ClientGroup()
        for i in range(args.clients):
            group.producer(deployment.bootstrap_for(i), topic, list(range(partitions)),
                           int(args.window_s * args.rate / args.clients), args.rate / args.clients,
                           args.window_s)
        readings: list[StoreCounters] = []
        results = group.run(between=functools.partial(read_now, pg, deployment.database, readings))
        readings.append(read_counters(pg, deployment.database))
        latencies = [x for r in results for x in r.latencies_ms]
        span_s = max(r.ended for r in results) - min(r.started for r in results)
        out.append(PartitionResult(partitions, rates_between(readings[0], readings[1], len(deployment.brokers)),
                                   percentile(latencies, 50), percentile(latencies, 99),
                                   sum(r.records for r in results) / span_s, span_s))
        print(f"partitions {partitions}: {out[-1]}", flush=True)
    return out


# ----------------------------------------------------------------------------------------------
# Report

PREAMBLE = """\
One run side by side on one machine: PostgreSQL 15 (fsync on) and SeaweedFS (`weed mini`, S3 API on
127.0.0.1) shared by every cluster, each cluster on a fresh database and key prefix; the single
broker with `--data-dir` on the same machine. Cluster brokers use the production lease timings
(session 9 s, heartbeat 2 s) and the default `diskless.append.commit.interval.ms` 250 and
`diskless.append.buffer.max.bytes` 8 MiB. Clients are separate processes (librdkafka), each
bootstrapping from a different broker; librdkafka then sends each partition to its leader, which
the cluster spreads by rendezvous hashing. Every consumed record is checked (offsets 0, 1, 2, ...
once per partition). PUTs are rows of `objects` (one per upload, recorded before the PUT), commits
the ones made live, transactions `pg_stat_database.xact_commit` of the cluster's database (every
broker's: produce commits, heartbeats, lease rounds, fetch reads, the wake-up poll), all divided by
the number of brokers.
"""

READING = """\
How to read it. A cluster broker answers a Produce only after the object holding it is uploaded
and committed, so a request takes at least one commit interval plus an upload and a transaction
(the *cycle*). librdkafka puts one
partition in each ProduceRequest (confluentinc/librdkafka#1700, still open in 2.16) and sends at
most max.in.flight (5) requests per connection; a cluster broker handles those 5 at once, in one
object (broker/produce_pipelining.py), and answers them in order. So each producer connection gets
**at most five partition batches committed per cycle**: with many partitions per connection the
acknowledged rate falls to about connections x 5 batches per cycle, whatever the offered load (the
partitions table: batches per object ~ 5 x the producer connections to that broker). What
the design claims is checked by the same table: objects and commits per broker per second stay at
about one per cycle (at most 4/s at 250 ms) from 1 to 1000 partitions, and the transactions above
the idle baseline grow with the objects (a fixed number per object), not with the partitions (with
1 partition only one broker has work). More producer connections, a larger max.in.flight where
the client allows it, or a shorter commit interval lift the per-connection cap; this run measures
the broker as built.
"""


def report(configs: list[ConfigResult], partitions: list[PartitionResult], args: argparse.Namespace,
           command: str, load_before: tuple[float, ...], load_after: tuple[float, ...]) -> str:
    single = next((c for c in configs if c.broker_count == 0), None)

    def ratio(value: float, base: float | None) -> str:
        return f"{value / base:.2f}" if base else "-"

    lines = [
        PREAMBLE,
        f"Command: `{command}`  ",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  ",
        f"Machine: {machine_description()}  ",
        f"Load average (1/5/15 min) before: {' / '.join(f'{x:.2f}' for x in load_before)},"
        f" after: {' / '.join(f'{x:.2f}' for x in load_after)}  ",
        f"Clients: confluent-kafka (librdkafka {librdkafka_version()[0]}), {args.clients} producer and"
        f" {args.clients} consumer processes, {RECORD_BYTES} B records, acks=all, idempotent, linger.ms=5;"
        f" {args.mb:g} MB per configuration over {PARTITIONS_PER_CLIENT * args.clients} partitions  ",
        "",
        "| deployment | produce MB/s | consume MB/s | produce vs single | consume vs single"
        " | produce p50 / p99 ms | end-to-end p50 / p99 ms | PUTs/s per broker | PG xacts/s per broker |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c in configs:
        rates = c.produce_rates
        lines.append(
            f"| {c.name} | {c.produce_mb_s:.1f} | {c.consume_mb_s:.1f}"
            f" | {ratio(c.produce_mb_s, single.produce_mb_s if single else None)}"
            f" | {ratio(c.consume_mb_s, single.consume_mb_s if single else None)}"
            f" | {c.produce_p50_ms:.0f} / {c.produce_p99_ms:.0f} | {c.e2e_p50_ms:.0f} / {c.e2e_p99_ms:.0f}"
            f" | {f'{rates.puts_per_broker_s:.1f}' if rates else '-'}"
            f" | {f'{rates.xacts_per_broker_s:.1f}' if rates else '-'} |")
    lines += [
        "",
        f"Latency: one producer at {args.rate:g} records/s for {args.latency_s:g} s to {LATENCY_PARTITIONS}"
        " partitions, a delivery callback per record; end to end = consumer receipt - producer stamp.",
    ]
    if partitions:
        lines += [
            "",
            f"Same offered load ({args.rate:g} records/s of {RECORD_BYTES} B for {args.window_s:g} s from"
            f" {args.clients} producers, round robin over the partitions) on the {max(args.sizes)}-broker"
            " cluster; rates from the producers' start to the last acknowledgement (idle: a window with no"
            " client; records not acknowledged within one more window are purged and not counted)."
            " PUTs: rows in `objects` (one per upload); commits: those made live;"
            " transactions: `pg_stat_database.xact_commit` of the cluster's database / brokers:",
            "",
            "| partitions | object PUTs/s per broker | diskless commits/s per broker"
            " | PG transactions/s per broker | transactions per object above idle | PUTs/s by broker"
            " | batches per object | acked records/s | phase s | produce p50 / p99 ms |",
            "| ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |",
        ]
        idle_xacts = partitions[0].rates.xacts_per_broker_s
        for p in partitions:
            rates = p.rates
            above_idle = ((rates.xacts_per_broker_s - idle_xacts) / rates.puts_per_broker_s
                          if p.partitions and rates.puts_per_broker_s else float("nan"))
            by_node = ", ".join(f"{n}: {v:.1f}" for n, v in sorted(p.rates.puts_by_node_s.items())) or "-"
            lines.append(
                f"| {p.partitions or 'idle'} | {p.rates.puts_per_broker_s:.1f} | {p.rates.commits_per_broker_s:.1f}"
                f" | {p.rates.xacts_per_broker_s:.1f} | {above_idle:.1f} | {by_node} | {p.rates.batches_per_commit:.1f}"
                + (f" | {p.acked_per_s:.0f} | {p.phase_s:.1f} | {p.produce_p50_ms:.0f} / {p.produce_p99_ms:.0f} |"
                   if p.partitions else f" | - | {args.window_s:g} | - |"))
    lines += ["", READING]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 5 MB, 3 s latency and 4 s partition windows")
    parser.add_argument("--mb", type=float, default=50.0, help="MB produced per configuration (default 50)")
    parser.add_argument("--clients", type=int, default=3, help="producer and consumer processes (default 3)")
    parser.add_argument("--rate", type=float, default=1000.0,
                        help="records/s of the latency and partition phases (default 1000 = ~1 MB/s)")
    parser.add_argument("--latency-s", type=float, default=10.0, help="latency phase length (default 10)")
    parser.add_argument("--window-s", type=float, default=10.0, help="partition phase windows (default 10)")
    parser.add_argument("--configs", default="single,1,2,3",
                        help="deployments in order: single and/or cluster sizes (default single,1,2,3)")
    parser.add_argument("--partitions", default="1,100,1000", help="partition counts of phase 3")
    parser.add_argument("--write-docs", action="store_true", help="write the section of docs/benchmarks.md")
    args = parser.parse_args(argv)
    if args.quick:
        args.mb, args.latency_s, args.window_s = 5.0, 3.0, 4.0
    args.sizes = [0 if c.strip() == "single" else int(c) for c in args.configs.split(",") if c.strip()]
    args.partition_counts = [int(p) for p in args.partitions.split(",") if p.strip()]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(["PYTHONPATH=src", ".venv/bin/python", "bench/cluster_throughput.py",
                          *(sys.argv[1:] if argv is None else argv)])
    load_before = os.getloadavg()
    work_dir = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    pg = PostgresServer().start()
    weed = SeaweedServer(work_dir / "weed").start()
    configs: list[ConfigResult] = []
    partitions: list[PartitionResult] = []
    finished = False
    try:
        for size in args.sizes:
            name = "single (--data-dir)" if size == 0 else f"cluster of {size}"
            started = time.monotonic()
            deployment = start_deployment(name.split(" ")[0] + str(size), size, work_dir, pg, weed)
            try:
                result = ConfigResult(name, size)
                measure_throughput(deployment, result, args, pg)
                measure_latency(deployment, result, args)
                configs.append(result)
                print(f"{name}: produce {result.produce_mb_s:.1f} MB/s, consume {result.consume_mb_s:.1f} MB/s,"
                      f" produce p50/p99 {result.produce_p50_ms:.0f}/{result.produce_p99_ms:.0f} ms,"
                      f" e2e p50/p99 {result.e2e_p50_ms:.0f}/{result.e2e_p99_ms:.0f} ms"
                      f" ({time.monotonic() - started:.0f} s)", flush=True)
                if size == max(args.sizes) and size > 0 and args.partition_counts:
                    partitions = measure_partitions(deployment, args, pg)
            finally:
                stop_deployment(deployment)
        text = report(configs, partitions, args, command, load_before, os.getloadavg())
        print()
        print(text)
        if args.write_docs:
            write_docs_section(f"{DOCS_HEADING}\n\n{text}", DOCS_HEADING)
            print("wrote the section to docs/benchmarks.md")
        finished = True
    finally:
        weed.kill()
        pg.remove()
        if finished:
            shutil.rmtree(work_dir, ignore_errors=True)
        else:
            print(f"broker logs kept in {work_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
