"""Produce and consume throughput of oncestream against Tansu, side by side, with librdkafka.

Both brokers run on this machine, one at a time, in alternating rounds (ours, tansu, ours, tansu,
...), each round on a freshly started broker and a fresh topic, so slow drift of the machine (other
processes, thermal state, page cache) lands on both sides alike. The producer and consumer loops are
the same functions for both brokers; only the broker command differs.

Workload (the figures in docs/benchmarks.md): 1 KiB records, one partition, acks=all,
enable.idempotence=true, linger.ms=5, batch.size=1 MiB, about 200 MB per round.

    .venv/bin/python bench/produce_consume.py                 # both brokers, 3 rounds each
    .venv/bin/python bench/produce_consume.py --brokers tansu # harness check against Tansu only
    .venv/bin/python bench/produce_consume.py --profile       # plus one py-spy'd round of ours

This is a benchmark command, not a test: it asserts only that every record arrived exactly once.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import os
import platform
import re
import shlex
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka import libversion as librdkafka_version
from confluent_kafka.admin import AdminClient, NewTopic

from machine import machine_description
from oncestream.broker_process import BrokerStartError, ManagedBroker, OnceStreamBroker, TansuBroker, tansu_executable

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "bench" / "results"
BROKER_READY_TIMEOUT_S = 30.0
BROKER_STOP_TIMEOUT_S = 10.0
MB = 1_000_000  # throughput is reported in decimal megabytes per second


# ----------------------------------------------------------------------------------------------
# Brokers


def venv_bin() -> Path:
    """The bin/ folder of the interpreter running this script (the project's .venv in practice)."""
    return Path(sys.executable).parent


class BaselineBroker(OnceStreamBroker):
    """Our broker from another checkout's ``src/`` (``--baseline-src``): the same command with that
    tree first on PYTHONPATH, so a change is measured against the code before it in one run."""

    def __init__(self, source_dir: Path, data_dir: Path, **kwargs) -> None:
        super().__init__(data_dir, **kwargs)
        self.source_dir = source_dir

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env["PYTHONPATH"] = str(self.source_dir)
        return env


# Set from --baseline-src: where the "before" broker's package lives.
BASELINE_SRC: Path | None = None
# Set from --partitions: the benchmark topic's partitions; records go round-robin over them.
PARTITIONS = 1
# The PKI (tests/support/certs.py) our brokers serve TLS with: made when a broker named *-tls
# runs, or with --security-protocol SSL (every one of our brokers over TLS).
TLS_PKI: Any = None
# Set from --security-protocol SSL.
ALL_OVER_TLS = False
# With TLS: CPU s/GB that decrypting full-size TLS records costs one thread here (tls_offload.py),
# the least a TLS listener pays per byte received; part of the cores ceiling (tls_ceiling_lines).
CIPHER_FLOOR_S_PER_GB = 0.0


def over_tls(name: str) -> bool:
    """Whether the clients of broker ``name`` connect over TLS: ``ours-tls`` and ``before-tls``
    always, every one of ours with --security-protocol SSL; Tansu never (not set up for TLS here)."""
    return name.endswith("-tls") or (ALL_OVER_TLS and name != "tansu")


def broker_config(name: str) -> dict[str, str]:
    """Broker ``name``'s properties: the default PLAINTEXT listener, or over TLS a PLAINTEXT
    listener (admin, readiness) plus an SSL one the clients use."""
    if not over_tls(name):
        return {}
    return {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(TLS_PKI.server_keystore)}


def client_connection(name: str, broker: ManagedBroker) -> dict[str, str]:
    """The producer's and consumer's connection properties for broker ``name``."""
    if not over_tls(name):
        return {"bootstrap.servers": broker.bootstrap}
    if not isinstance(broker, OnceStreamBroker):
        raise TypeError(f"{name}: only our brokers are set up for TLS here")
    return {"bootstrap.servers": broker.listener_bootstrap("SSL"), "security.protocol": "SSL",
            "ssl.ca.location": str(TLS_PKI.ca)}


# Topic configs per broker name. "ours-fsync" is our broker with the durable mode of
# docs/architecture.md ("Durability"): flush.messages=1, so acks=all is answered only after the
# fdatasync covering the batch. "ours" answers once the batch is in the page cache (Kafka's
# default; survives SIGKILL, not power loss). Tansu runs memory:// and writes no file at all.
TOPIC_CONFIGS: dict[str, dict[str, str]] = {"ours-fsync": {"flush.messages": "1"},
                                             "before-fsync": {"flush.messages": "1"}}
BROKER_NAMES = ("ours", "ours-fsync", "ours-tls", "tansu", "before", "before-fsync", "before-tls")


def start_broker(name: str, work_dir: Path) -> ManagedBroker:
    """Start broker `name` (one of BROKER_NAMES) on a free loopback port and wait until it answers."""
    log_file = work_dir / f"{name}-{uuid.uuid4().hex[:8]}.log"
    broker: ManagedBroker
    if name in ("ours", "ours-fsync", "ours-tls"):
        data_dir = Path(tempfile.mkdtemp(prefix="oncestream-bench-", dir=work_dir))
        broker = OnceStreamBroker(data_dir, config=broker_config(name), log_file=log_file,
                                  ready_timeout_s=BROKER_READY_TIMEOUT_S)
    elif name in ("before", "before-fsync", "before-tls"):
        if BASELINE_SRC is None:
            raise ValueError("the 'before' broker needs --baseline-src")
        data_dir = Path(tempfile.mkdtemp(prefix="oncestream-bench-", dir=work_dir))
        broker = BaselineBroker(BASELINE_SRC, data_dir, config=broker_config(name), log_file=log_file,
                                ready_timeout_s=BROKER_READY_TIMEOUT_S)
    elif name == "tansu":
        broker = TansuBroker(log_file=log_file, ready_timeout_s=BROKER_READY_TIMEOUT_S)
    else:
        raise ValueError(f"unknown broker {name!r}")
    try:
        broker.start()
        wait_until_answering(broker)
    except BrokerStartError as exc:
        broker.kill()
        raise SystemExit(str(exc)) from None
    except BaseException:
        broker.kill()
        raise
    return broker


def stop_broker(broker: ManagedBroker) -> None:
    """SIGTERM (SIGKILL past the cap), then remove our broker's data dir."""
    broker.stop(BROKER_STOP_TIMEOUT_S)
    if isinstance(broker, OnceStreamBroker):
        shutil.rmtree(broker.data_dir, ignore_errors=True)


def wait_until_answering(broker: ManagedBroker) -> None:
    """Beyond accepting connections: wait until the broker answers a Metadata request."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 4})
    admin.list_topics(timeout=BROKER_READY_TIMEOUT_S)


def tail(path: Path, lines: int = 30) -> str:
    """The last `lines` lines of a log file, for error messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def create_topic(bootstrap: str, topic: str, config: dict[str, str] | None = None, partitions: int = 1) -> None:
    """Create a topic (with topic ``config``) and wait for the broker's answer."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                            config=config or {})])
    futures[topic].result(timeout=30)


# ----------------------------------------------------------------------------------------------
# Client loops: the same code runs against both brokers


PRODUCER_CONF = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "batch.size": 1_048_576,
    "compression.type": "none",
    # Room for the whole round in the client queue so produce() rarely waits on BufferError.
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "message.max.bytes": 2_097_152,
}

CONSUMER_CONF = {
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "fetch.max.bytes": 52_428_800,
    # max.partition.fetch.bytes: librdkafka's default (1 MiB; Kafka's too). Until 2026-11-30 this
    # was 8 MiB, which only our broker honoured (Tansu answers ~5 MB per fetch either way), and
    # librdkafka consumed our 6.5 MB responses at 235-493 MB/s from run to run against 407-425
    # at 1 MiB (docs/benchmarks.md, "The consumer's fetch size").
    "fetch.wait.max.ms": 100,
    "queued.max.messages.kbytes": 262_144,
    # librdkafka (>= 2.4) postpones a partition's next fetch by fetch.queue.backoff.ms, 1 s by
    # default, whenever its queue is over queued.max.messages.kbytes or queued.min.messages: a
    # broker that serves faster than the benchmark's Python loop takes records fills the queue and
    # then sees no fetch for a second, so the figure became librdkafka's pause, not the broker
    # (1 KiB, 1000 MB: ours 155-162 MB/s at the default against 274-298 at 10 ms; Tansu 228-247
    # either way; docs/benchmarks.md, "The consumer's queue backoff"). Both brokers get 10 ms.
    "fetch.queue.backoff.ms": 10,
}


def thread_cpu_s() -> dict[str, float]:
    """User + system CPU seconds of each thread of this process, from /proc/self/task."""
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            out[tid] = stat_cpu_s(Path(f"/proc/self/task/{tid}/stat"))
        except FileNotFoundError:  # the thread ended between listdir and read
            continue
    return out


@dataclass(frozen=True)
class ClientCpu:
    """What the client process spent over a phase: the client shares the 2 cores with the broker,
    so a broker that costs less CPU only shows in MB/s while the client has CPU to spare."""

    total_s: float
    busiest_thread_s: float

    @staticmethod
    def between(before: dict[str, float], after: dict[str, float]) -> ClientCpu:
        """From two `thread_cpu_s()` samples (threads started in between count from zero)."""
        spent = [after_s - before.get(tid, 0.0) for tid, after_s in after.items()]
        return ClientCpu(total_s=sum(spent), busiest_thread_s=max(spent, default=0.0))


@dataclass
class Measurement:
    """One direction of one round."""

    records: int
    payload_bytes: int
    seconds: float
    broker_cpu_s: float | None = None  # the broker process's user+system CPU over the phase
    client: ClientCpu | None = None  # this (the client) process's CPU over the timed part

    @property
    def client_cpu_s_per_gb(self) -> float:
        """The client process's CPU seconds (all threads: librdkafka's and this loop's) per GB."""
        return self.client.total_s / (self.payload_bytes / 1e9) if self.client else float("nan")

    @property
    def busiest_client_thread_share(self) -> float:
        """CPU seconds of the client's busiest thread over the phase's wall seconds: near 1.0, that
        thread (the Python loop or librdkafka's broker thread) set the pace, not the broker."""
        return self.client.busiest_thread_s / self.seconds if self.client else float("nan")

    @property
    def cpu_s_per_gb(self) -> float | None:
        """Broker CPU seconds per decimal GB of payload: shows a saving even when the client,
        not the broker, limits MB/s."""
        if self.broker_cpu_s is None:
            return None
        return self.broker_cpu_s / (self.payload_bytes / 1e9)

    @property
    def mb_per_s(self) -> float:
        """Payload (record value) throughput in decimal MB/s."""
        return self.payload_bytes / MB / self.seconds


def produce(conf: dict, topic: str, record_count: int, value: bytes, warmup_topic: str) -> Measurement:
    """Produce `record_count` copies of `value` and wait until every one is acknowledged.
    ``conf``: the connection properties (``bootstrap.servers``, security); ``warmup_topic``: a
    topic of its own that takes one record, acknowledged before the clock starts."""
    failures: list[str] = []

    def on_delivery(err, _msg) -> None:
        failures.append(str(err))

    producer = Producer({
        **conf, **PRODUCER_CONF,
        # Only failures call back into Python: the client shares 2 cores with the broker, and
        # flush() returning 0 with no failure reported means every record was acknowledged
        # (consume() then checks offsets 0..N-1 arrived exactly once).
        "delivery.report.only.error": True, "on_delivery": on_delivery,
    })
    # Connect, fetch metadata and get the producer id before the clock starts, so the figure is
    # the steady stream. list_topics() alone is not enough: librdkafka asks for the producer id
    # only when a broker connection is up, and when it looks while the bootstrap connection is
    # being replaced by the one to the advertised broker it tries again 500 ms later. Half or
    # more of the rounds then spent 0.5 s idle before the first Produce request (seen in the
    # client's protocol debug log for Tansu and for us alike), which at 100-200 MB per round
    # was most of the produce time: the "bimodal" figures of earlier runs.
    producer.list_topics(topic, timeout=30)
    producer.produce(warmup_topic, b"warm-up", partition=0)
    if producer.flush(30) or failures:
        raise RuntimeError(f"warm-up record not acknowledged: {failures[:3]}")
    threads_before = thread_cpu_s()
    started = time.perf_counter()
    for i in range(record_count):
        while True:
            try:
                producer.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.005)
        if i % 10_000 == 0:
            producer.poll(0)  # serve error callbacks without blocking the loop
    undelivered = producer.flush(120)
    seconds = time.perf_counter() - started
    client = ClientCpu.between(threads_before, thread_cpu_s())
    if undelivered or failures:
        raise RuntimeError(
            f"produce incomplete: {undelivered} of {record_count} undelivered, {len(failures)} failed:"
            f" {failures[:3]}"
        )
    return Measurement(record_count, record_count * len(value), seconds, client=client)


def consume(conf: dict, topic: str, record_count: int, value_size: int) -> Measurement:
    """Read every partition from offset 0 until `record_count` records arrived; check each once.
    ``conf``: the connection properties (``bootstrap.servers``, security)."""
    consumer = Consumer({**conf, "group.id": f"bench-{uuid.uuid4().hex}", **CONSUMER_CONF})
    try:
        consumer.list_topics(topic, timeout=30)
        received = 0
        payload_bytes = 0
        next_offsets = [0] * PARTITIONS
        threads_before = thread_cpu_s()
        started = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 300
        while received < record_count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"consume stalled at {received} of {record_count} records")
            # Ask for no more than what is left: consume() waits out its timeout for a short batch.
            batch = consumer.consume(num_messages=min(10_000, record_count - received), timeout=1.0)
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(err)
                # Exactly once and in order: offsets arrive as 0, 1, 2, ... with nothing skipped.
                partition = msg.partition() or 0  # typed Optional; a consumed record always has one
                if msg.offset() != next_offsets[partition]:
                    raise RuntimeError(f"expected offset {next_offsets[partition]} in partition {partition},"
                                       f" got {msg.offset()}")
                next_offsets[partition] += 1
                payload_bytes += len(msg.value() or b"")
                received += 1
        seconds = time.perf_counter() - started
        client = ClientCpu.between(threads_before, thread_cpu_s())
        # Nothing beyond the N records either (a duplicate would sit past offset N-1). Not via
        # the high watermark: Tansu 0.6.0 answers ListOffsets(latest) with the last batch's base
        # offset + 1, so get_watermark_offsets() undercounts there.
        extra = [m for m in consumer.consume(num_messages=1, timeout=0.5) if m.error() is None]
        if extra:
            raise RuntimeError(f"record at offset {extra[0].offset()} beyond the {record_count} produced")
    finally:
        consumer.close()
    assert payload_bytes == record_count * value_size, (payload_bytes, record_count, value_size)
    return Measurement(received, payload_bytes, seconds, client=client)


# ----------------------------------------------------------------------------------------------
# Profiling our broker with py-spy


class Profiler:
    """py-spy sampling the broker process for one round; writes folded stacks and a top summary."""

    def __init__(self, pid: int, out_stem: Path) -> None:
        py_spy = venv_bin() / "py-spy"
        if not py_spy.exists():
            found = shutil.which("py-spy")
            if not found:
                raise SystemExit("py-spy is not installed: pip install -e '.[bench]'")
            py_spy = Path(found)
        self.folded_path = out_stem.with_suffix(".folded")
        self.summary_path = out_stem.with_suffix(".top.txt")
        self.log_path = out_stem.with_suffix(".py-spy.log")
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - py-spy's log, closed once py-spy has stopped
        # --nonblocking: sample without pausing the broker, so the profiled round runs near full speed.
        self.process = subprocess.Popen(
            [str(py_spy), "record", "--pid", str(pid), "--rate", "500", "--nonblocking",
             "--format", "raw", "--output", str(self.folded_path)],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        time.sleep(0.5)  # let py-spy attach before the round starts

    def finish(self) -> None:
        """Stop sampling (SIGINT makes py-spy write its output) and write the text summary."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()
        if not self.folded_path.exists():
            print(f"py-spy wrote no profile; its log:\n{tail(self.log_path)}")
            return
        self.summary_path.write_text(summarize_folded(self.folded_path.read_text()))
        print(f"profile: {self.folded_path} (load in speedscope.app or flamegraph.pl)")
        print(f"profile summary: {self.summary_path}")


def summarize_folded(folded: str, top_n: int = 40) -> str:
    """A `py-spy top`-like table from folded stacks: own and total sample share per function."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in folded.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        # Frames read "func (file.py:LINE)"; drop the line so a function's samples add up.
        frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]
        samples += count
        own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
    if samples == 0:
        return "no samples\n"
    lines = [f"{samples} samples\n", "OWN%   TOTAL%  FUNCTION (FILE:LINE)"]
    for frame, count in own.most_common(top_n):
        lines.append(f"{100 * count / samples:5.1f}  {100 * total[frame] / samples:6.1f}  {frame}")
    lines.append("\nBy total (inclusive) share:")
    lines.append("TOTAL%  FUNCTION (FILE:LINE)")
    for frame, count in total.most_common(top_n):
        lines.append(f"{100 * count / samples:6.1f}  {frame}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# Rounds and report


@dataclass
class RoundResult:
    """One round on one broker."""

    broker: str
    round_no: int
    produce: Measurement
    consume: Measurement


CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def stat_cpu_s(stat_path: Path) -> float:
    """User + system CPU seconds from a /proc stat file (a process's or one thread's)."""
    stat = stat_path.read_text()
    # Fields after the parenthesised command name (which may hold spaces): utime is the 14th
    # field of the line, stime the 15th, i.e. the 12th and 13th after the closing parenthesis.
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) from /proc/PID/stat."""
    return stat_cpu_s(Path(f"/proc/{pid}/stat"))


def run_round(name: str, round_no: int, record_count: int, value: bytes, work_dir: Path,
              profile_stem: Path | None = None) -> RoundResult:
    """Start a fresh broker, produce then consume one fresh topic, stop the broker; the broker's
    CPU time is read before and after each phase."""
    broker = start_broker(name, work_dir)
    profiler = None
    try:
        # One length for every broker's topic: the name is in each Produce request, and librdkafka's TLS
        # write pattern (a record per write at segment boundaries) moves with the bytes before the records.
        topic = f"bench-{round_no}-{uuid.uuid4().hex[:12]}"
        create_topic(broker.bootstrap, topic, TOPIC_CONFIGS.get(name), PARTITIONS)
        create_topic(broker.bootstrap, f"{topic}-warmup")
        if profile_stem is not None:
            profiler = Profiler(broker.pid, profile_stem)
        connection = client_connection(name, broker)
        cpu_start_s = process_cpu_s(broker.pid)
        produced = produce(connection, topic, record_count, value, f"{topic}-warmup")
        cpu_produced_s = process_cpu_s(broker.pid)
        consumed = consume(connection, topic, record_count, len(value))
        produced.broker_cpu_s = cpu_produced_s - cpu_start_s
        consumed.broker_cpu_s = process_cpu_s(broker.pid) - cpu_produced_s
    finally:
        if profiler is not None:
            profiler.finish()
        stop_broker(broker)
    return RoundResult(name, round_no, produced, consumed)




def filesystem_of(path: Path) -> str:
    """The filesystem type holding `path` (ext4, tmpfs, ...), from /proc/mounts."""
    best, fs_type = "", "unknown filesystem"
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            _dev, mount_point, kind = line.split()[:3]
            inside = str(path.resolve()).startswith(mount_point.rstrip("/") + "/") or mount_point == "/"
            if inside and len(mount_point) >= len(best):
                best, fs_type = mount_point, kind
    except OSError:
        pass
    return fs_type


def tansu_version() -> str:
    """`tansu --version`, e.g. 'tansu 0.6.0'."""
    try:
        out = subprocess.run([tansu_executable(), "--version"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "tansu"
    except (OSError, subprocess.TimeoutExpired, BrokerStartError):
        return "tansu"


def markdown_report(results: list[RoundResult], args: argparse.Namespace, command: str,
                    load_before: tuple[float, float, float]) -> str:
    """The results as markdown: per-round table plus medians and ours/Tansu ratios."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Command: `{command}`  ",
        f"Date: {now}  ",
        f"Machine: {machine_description()}  ",
        # Other processes share the 2 cores; the load average says how quiet the machine was.
        f"Load average (1/5/15 min) before: {load_before[0]:.2f} / {load_before[1]:.2f} /"
        f" {load_before[2]:.2f}, after: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}  ",
        f"Clients: confluent-kafka (librdkafka {librdkafka_version()[0]}), Python {platform.python_version()}  ",
        f"Workload: {args.record_size} B records, {results[0].produce.records} records"
        f" ({results[0].produce.payload_bytes / MB:.0f} MB) per round, {PARTITIONS} partition(s) (round-robin), acks=all,"
        f" idempotent, linger.ms=5, batch.size=1048576; fresh broker and topic each round."
        f" oncestream: default config (ours-fsync: flush.messages=1 on the topic),"
        f" data dir in {tempfile.gettempdir()} ({filesystem_of(Path(tempfile.gettempdir()))});"
        f" {tansu_version()}: memory:// storage engine",
        "",
        f"Clients connect over TLS to: {', '.join(n for n in dict.fromkeys(args.broker_names) if over_tls(n)) or 'none'}"
        f" (the others: PLAINTEXT). Broker CPU: user+system seconds of the broker"
        f" process (all threads, /proc/PID/stat) per decimal GB of payload, over each phase.",
        "",
        "Client CPU: this process (librdkafka's threads and the Python loop) per GB; busiest client"
        " thread: its CPU seconds over the phase's wall seconds (near 1.0, the client set the pace).",
        "",
        "| round | broker | produce MB/s | consume MB/s | produce s | consume s | produce CPU s/GB | consume CPU s/GB"
        " | client CPU s/GB produce / consume | busiest client thread produce / consume |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        lines.append(
            f"| {r.round_no} | {r.broker} | {r.produce.mb_per_s:.1f} | {r.consume.mb_per_s:.1f}"
            f" | {r.produce.seconds:.2f} | {r.consume.seconds:.2f}"
            f" | {r.produce.cpu_s_per_gb:.1f} | {r.consume.cpu_s_per_gb:.1f}"
            f" | {r.produce.client_cpu_s_per_gb:.1f} / {r.consume.client_cpu_s_per_gb:.1f}"
            f" | {r.produce.busiest_client_thread_share:.2f} / {r.consume.busiest_client_thread_share:.2f} |"
        )
    lines += ["", "| broker | median produce MB/s | median consume MB/s | median produce CPU s/GB"
              " | median consume CPU s/GB |", "| --- | ---: | ---: | ---: | ---: |"]
    medians: dict[str, tuple[float, float]] = {}
    for name in dict.fromkeys(r.broker for r in results):
        mine = [r for r in results if r.broker == name]
        medians[name] = (
            statistics.median(r.produce.mb_per_s for r in mine),
            statistics.median(r.consume.mb_per_s for r in mine),
        )
        cpu = (statistics.median(r.produce.cpu_s_per_gb or 0.0 for r in mine),
               statistics.median(r.consume.cpu_s_per_gb or 0.0 for r in mine))
        lines.append(f"| {name} | {medians[name][0]:.1f} | {medians[name][1]:.1f} | {cpu[0]:.1f} | {cpu[1]:.1f} |")
    for top, bottom, label in (("ours", "tansu", "ours/Tansu"), ("ours-fsync", "tansu", "ours-fsync/Tansu"),
                               ("ours-fsync", "ours", "ours-fsync/ours"), ("ours", "before", "ours/before"),
                               ("ours-fsync", "before-fsync", "ours-fsync/before-fsync"),
                               ("ours-tls", "ours", "ours-tls/ours (TLS/plaintext)"),
                               ("before-tls", "before", "before-tls/before (TLS/plaintext)")):
        if top in medians and bottom in medians:
            lines += [
                "",
                f"Median ratio {label}: produce **{medians[top][0] / medians[bottom][0]:.2f}**, "
                f"consume **{medians[top][1] / medians[bottom][1]:.2f}**",
            ]
    for tls_name, plain_name in (("ours-tls", "ours"), ("before-tls", "before")):
        if tls_name in medians and plain_name in medians:
            lines += ["", *tls_ceiling_lines(results, tls_name, plain_name)]
    return "\n".join(lines) + "\n"


def cipher_floor_s_per_gb(pki: Any) -> float:
    """The least CPU s/GB a TLS listener pays here: the median of three measurements of one thread
    decrypting full-size records with the PKI's server certificate (tls_offload.py)."""
    from tls_offload import decrypt_cpu_s_per_gb

    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(pki.server_keystore))
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.load_verify_locations(str(pki.ca))
    client_ctx.check_hostname = False
    return statistics.median(decrypt_cpu_s_per_gb(server_ctx, client_ctx) for _ in range(3))


def tls_ceiling_lines(results: list[RoundResult], tls_name: str, plain_name: str) -> list[str]:
    """How fast a TLS round could have been at most with this client on this machine, whatever the
    broker did, as a share of the plaintext rounds' median MB/s; two bounds per direction:

    - cores: the client and the broker share the machine's cores, so MB/s <= cores / (client CPU
      s/GB over TLS + broker CPU s/GB over *plaintext* + the cipher floor), i.e. as if TLS cost the
      broker nothing beyond decrypting (or encrypting) full-size records, measured in this run;
    - client thread: librdkafka serves a broker connection from one thread, so MB/s <= the TLS
      round's MB/s / its busiest client thread's share of a core (that thread alone at 100%).

    A ceiling under a TLS/plaintext goal means no broker work can meet that goal with this client
    here; the client's own TLS cost takes the cores (docs/benchmarks.md, "What bounds TLS produce")."""
    cores = os.cpu_count() or 1
    tls = [r for r in results if r.broker == tls_name]
    plain = [r for r in results if r.broker == plain_name]
    lines = [f"Ceilings of {tls_name} with this client on {cores} cores, as a share of {plain_name}'s median MB/s"
             f" (cores: client TLS CPU + broker plaintext CPU + cipher floor {CIPHER_FLOOR_S_PER_GB:.2f} s/GB;"
             " client thread: MB/s over its busiest thread's share):",
             "", "| direction | TLS/plaintext measured | cores ceiling | client-thread ceiling |", "| --- | ---: | ---: | ---: |"]
    for direction in ("produce", "consume"):
        def phase(r: RoundResult, direction: str = direction) -> Measurement:
            return r.produce if direction == "produce" else r.consume
        plain_mb_s = statistics.median(phase(r).mb_per_s for r in plain)
        tls_mb_s = statistics.median(phase(r).mb_per_s for r in tls)
        client_s_per_gb = statistics.median(phase(r).client_cpu_s_per_gb for r in tls)
        broker_plain_s_per_gb = statistics.median(phase(r).cpu_s_per_gb or 0.0 for r in plain)
        cores_mb_s = cores * 1000.0 / (client_s_per_gb + broker_plain_s_per_gb + CIPHER_FLOOR_S_PER_GB)
        thread_mb_s = statistics.median(phase(r).mb_per_s / phase(r).busiest_client_thread_share for r in tls)
        lines.append(f"| {direction} | {tls_mb_s / plain_mb_s:.2f} | {cores_mb_s / plain_mb_s:.2f}"
                     f" | {thread_mb_s / plain_mb_s:.2f} |")
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", default="ours,tansu",
                        help="comma-separated, alternated in this order each round (default: ours,tansu);"
                             " ours-fsync is ours with flush.messages=1 on the topic (fsync before acks=all);"
                             " ours-tls is ours with the clients connecting over TLS (before-fsync and"
                             " before-tls likewise)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per broker (default: 3)")
    parser.add_argument("--size-mb", type=float, default=200.0,
                        help="payload produced per round, decimal MB (default: 200)")
    parser.add_argument("--partitions", type=int, default=1,
                        help="partitions of the topic, records round-robin (default: 1); librdkafka"
                             " sends one partition per Produce request, so >1 puts several in flight")
    parser.add_argument("--record-size", type=int, default=1024, help="bytes per record value (default: 1024)")
    parser.add_argument("--profile", action="store_true",
                        help="after the measured rounds, run one extra round of ours under py-spy"
                             " (not counted) and write bench/results/profile-*.folded and *.top.txt")
    parser.add_argument("--security-protocol", default="PLAINTEXT", choices=["PLAINTEXT", "SSL"],
                        help="SSL: the clients of every one of our brokers connect over TLS (Tansu is not set"
                             " up for TLS); to compare TLS and plaintext in one run, use --brokers ours,ours-tls")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--baseline-src", type=Path, default=None,
                        help="the src/ of another checkout (e.g. a git worktree of the last release):"
                             " adds the broker 'before', our broker built from it, for before/after ratios")
    args = parser.parse_args(argv)
    args.broker_names = [b.strip() for b in args.brokers.split(",") if b.strip()]
    for name in args.broker_names:
        if name not in BROKER_NAMES:
            parser.error(f"unknown broker {name!r}: use {', '.join(BROKER_NAMES)}")
        if name.startswith("before") and args.baseline_src is None:
            parser.error("the broker 'before' needs --baseline-src")
    if args.security_protocol == "SSL" and "tansu" in args.broker_names:
        parser.error("--security-protocol SSL is for our brokers only (--brokers ours or ours,before)")
    if args.rounds < 1 or args.size_mb <= 0 or args.record_size < 1 or args.partitions < 1:
        parser.error("--rounds, --size-mb, --record-size and --partitions must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the alternating rounds, print per-round figures and the summary, save the markdown."""
    args = parse_args(argv)
    global BASELINE_SRC
    BASELINE_SRC = args.baseline_src.resolve() if args.baseline_src is not None else None
    command = shlex.join([".venv/bin/python", "bench/produce_consume.py", *(sys.argv[1:] if argv is None else argv)])
    record_count = int(args.size_mb * MB) // args.record_size
    value = os.urandom(args.record_size)  # incompressible, and no codec is configured anyway
    args.results_dir.mkdir(parents=True, exist_ok=True)
    global TLS_PKI, PARTITIONS, ALL_OVER_TLS, CIPHER_FLOOR_S_PER_GB
    PARTITIONS = args.partitions
    load_before = os.getloadavg()
    work_dir = Path(tempfile.mkdtemp(prefix="oncestream-bench-"))
    ALL_OVER_TLS = args.security_protocol == "SSL"
    if any(over_tls(name) for name in args.broker_names):
        sys.path.insert(0, str(REPO_ROOT))  # the test PKI maker, as bench/tls.py uses it
        from tests.support.certs import make_pki

        TLS_PKI = make_pki(work_dir / "pki")
        CIPHER_FLOOR_S_PER_GB = cipher_floor_s_per_gb(TLS_PKI)
    results: list[RoundResult] = []
    try:
        print(f"{record_count} records of {args.record_size} B per round; work dir {work_dir}", flush=True)
        for round_no in range(1, args.rounds + 1):
            for name in args.broker_names:
                r = run_round(name, round_no, record_count, value, work_dir)
                results.append(r)
                print(
                    f"round {round_no} {name:6s}: produce {r.produce.mb_per_s:7.1f} MB/s"
                    f" ({r.produce.seconds:.2f} s, {r.produce.cpu_s_per_gb:.1f} CPU s/GB)"
                    f"  consume {r.consume.mb_per_s:7.1f} MB/s"
                    f" ({r.consume.seconds:.2f} s, {r.consume.cpu_s_per_gb:.1f} CPU s/GB);"
                    f" client {r.produce.client_cpu_s_per_gb:.1f} / {r.consume.client_cpu_s_per_gb:.1f} CPU s/GB,"
                    f" busiest thread {r.produce.busiest_client_thread_share:.2f} /"
                    f" {r.consume.busiest_client_thread_share:.2f}",
                    flush=True,
                )
        stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        report = markdown_report(results, args, command, load_before)
        report_path = args.results_dir / f"produce_consume-{stamp}.md"
        report_path.write_text(report)
        print()
        print(report)
        print(f"saved {report_path}")
        if args.profile:
            stem = args.results_dir / f"profile-ours-{stamp}"
            r = run_round("ours", 0, record_count, value, work_dir, profile_stem=stem)
            print(f"profiled round (not counted): produce {r.produce.mb_per_s:.1f} MB/s,"
                  f" consume {r.consume.mb_per_s:.1f} MB/s")
    finally:
        # Keep broker logs of a failed run for reading; drop the work dir after a clean one.
        if len(results) == args.rounds * len(args.broker_names):
            shutil.rmtree(work_dir, ignore_errors=True)
        else:
            print(f"broker logs kept in {work_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
