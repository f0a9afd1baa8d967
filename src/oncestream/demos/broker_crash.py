"""`oncestream demo`: records stream through broker crashes and come out exactly once, in order.

What it does, with a real Kafka client (librdkafka through confluent-kafka):

1. starts an oncestream broker as a subprocess on a free loopback port, with its data in
   ``./data/demo`` (wiped first);
2. creates a topic and streams N records, each value carrying its sequence number, through an
   idempotent producer (acks=all), while a second client tails the topic live;
3. SIGKILLs the broker in the middle of the stream, with records in flight, and restarts it on the
   same port and data dir (twice by default);
4. reads the whole topic back from offset 0 and checks: every acknowledged record is there, at the
   offset it was acknowledged with, nothing is lost, nothing is duplicated, order is kept.

It exits 0 when every check holds and 1 otherwise. ``--broker tansu`` runs the same script against
Tansu with its in-memory engine, which forgets everything on restart: the check then fails, which
shows that it can.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from oncestream.broker_process import BrokerStartError, ManagedBroker, OnceStreamBroker, TansuBroker

_T = TypeVar("_T")
DEFAULT_DATA_DIR = Path("data") / "demo"
DEMO_MARKER = ".oncestream-demo"  # written into the data dir so a later run may wipe it safely
TOPIC = "demo-events"
SEQ_DIGITS = 10
BROKER_READY_TIMEOUT_S = 30.0
FLUSH_TIMEOUT_S = 90.0
CATCH_UP_STALL_S = 3.0
READ_BACK_TIMEOUT_S = 60.0
PROGRESS_INTERVAL_S = 1.0


def _say(text: str) -> None:
    print(text, flush=True)


# ----------------------------------------------------------------------------------------------
# The broker under test


def make_broker(kind: str, data_dir: Path, log_path: Path) -> ManagedBroker:
    """The demo's broker on a free loopback port, its output appended to ``log_path`` across
    restarts: ours with its data dir, or Tansu with its in-memory engine (keeps nothing across
    restarts)."""
    if kind == "oncestream":
        return OnceStreamBroker(data_dir, log_file=log_path, ready_timeout_s=BROKER_READY_TIMEOUT_S)
    return TansuBroker(log_file=log_path, ready_timeout_s=BROKER_READY_TIMEOUT_S)


class DemoFailure(Exception):
    """The demo could not run to the end (as opposed to a completed run whose check failed)."""


# ----------------------------------------------------------------------------------------------
# Records


def encode_value(seq: int, value_bytes: int) -> bytes:
    """A record value: the zero-padded sequence number, then filler up to `value_bytes`."""
    head = f"{seq:0{SEQ_DIGITS}d}|".encode()
    return head + b"x" * max(0, value_bytes - len(head))


def decode_seq(value: bytes | None) -> int | None:
    """The sequence number carried by a record value, or None for a value that is not ours."""
    if value is None or len(value) < SEQ_DIGITS + 1 or value[SEQ_DIGITS:SEQ_DIGITS + 1] != b"|":
        return None
    digits = value[:SEQ_DIGITS]
    return int(digits) if digits.isdigit() else None


@dataclass
class ProducerLedger:
    """What the producer was told: acknowledgements with their offsets, and failures."""

    acked: dict[int, tuple[int, int]] = field(default_factory=dict)  # seq -> (partition, offset)
    failed: dict[int, str] = field(default_factory=dict)  # seq -> error
    fatal_errors: list[str] = field(default_factory=list)
    double_acks: int = 0
    foreign_reports: int = 0  # delivery reports for values the demo did not write

    def on_delivery(self, err, msg) -> None:
        """librdkafka delivery report (called from producer.poll/flush on this thread)."""
        seq = decode_seq(msg.value())
        if seq is None:  # cannot happen: every produce() carries encode_value(); counted, not fatal
            self.foreign_reports += 1
            return
        if err is not None:
            self.failed[seq] = str(err)
        elif seq in self.acked:
            self.double_acks += 1
        else:
            self.acked[seq] = (msg.partition(), msg.offset())


# ----------------------------------------------------------------------------------------------
# The live consumer


@dataclass
class LiveStats:
    """What the live consumer counted during the run (the input of the check, apart from the thread)."""

    read: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    error: str | None = None


class LiveTail(threading.Thread):
    """Tails the topic from offset 0 while the stream runs, through the broker restarts."""

    def __init__(self, bootstrap: str, partitions: int, client_logger: logging.Logger) -> None:
        super().__init__(name="demo-live-tail", daemon=True)
        self._bootstrap_servers = bootstrap
        self._partitions = partitions
        self._logger = client_logger
        self._stop_event = threading.Event()
        self.seen: set[int] = set()
        self.read = 0
        self.duplicates = 0
        self.out_of_order = 0
        self.error: str | None = None

    def run(self) -> None:
        """Consume until stop() is called; count what arrives."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        consumer = Consumer({
            "bootstrap.servers": self._bootstrap_servers,
            "group.id": "oncestream-demo-live",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 250,
            "logger": self._logger,
        })
        last_seq = [-1] * self._partitions
        try:
            consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(self._partitions)])
            while not self._stop_event.is_set():
                for msg in consumer.consume(num_messages=1000, timeout=0.1):
                    err = msg.error()
                    if err is not None:
                        # Transport errors while the broker is down are expected; librdkafka retries.
                        if err.code() != KafkaError._PARTITION_EOF and not err.retriable():
                            self._logger.warning("live tail: %s", err)
                        continue
                    seq = decode_seq(msg.value())
                    self.read += 1
                    if seq is None:  # not the demo's record: the read-back check reports it
                        continue
                    partition = int(msg.partition() or 0)
                    if seq in self.seen:
                        self.duplicates += 1
                    else:
                        self.seen.add(seq)
                    if seq <= last_seq[partition]:
                        self.out_of_order += 1
                    last_seq[partition] = max(last_seq[partition], seq)
        except Exception as exc:  # noqa: BLE001 - reported in the summary; the read-back check still runs
            self.error = repr(exc)
        finally:
            consumer.close()

    def stop(self) -> None:
        """Ask the thread to finish and wait for it."""
        self._stop_event.set()
        self.join(timeout=10)

    def stats(self) -> LiveStats:
        """A snapshot of the counts, for ``check``."""
        return LiveStats(self.read, self.duplicates, self.out_of_order, self.error)


# ----------------------------------------------------------------------------------------------
# Read-back


@dataclass
class ReadBack:
    """Every record of the topic from offset 0, as (partition, offset, seq) in log order."""

    records: list[tuple[int, int, int | None]]


def read_back(bootstrap: str, partitions: int, logger: logging.Logger) -> ReadBack:
    """Read each partition from 0 to its end (partition EOF) with a fresh consumer.

    The end is taken from the Fetch responses, not from ListOffsets: Tansu 0.6.0 answers
    ListOffsets(latest) with the last batch's base offset + 1, which would cut the read short.
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "oncestream-demo-check",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "logger": logger,
    })
    records: list[tuple[int, int, int | None]] = []
    try:
        pending = set(range(partitions))
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in pending])
        deadline = time.monotonic() + READ_BACK_TIMEOUT_S
        while pending:
            if time.monotonic() > deadline:
                raise DemoFailure(f"read-back stalled; partitions still pending: {sorted(pending)}")
            for msg in consumer.consume(num_messages=5000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                        continue
                    if err.retriable():
                        continue
                    raise DemoFailure(f"read-back error: {err}")
                records.append((int(msg.partition() or 0), int(msg.offset() or 0), decode_seq(msg.value())))
    finally:
        consumer.close()
    return ReadBack(records)


# ----------------------------------------------------------------------------------------------
# The check


@dataclass
class Verdict:
    """The final report: counts plus every violation found."""

    lines: list[str]
    violations: list[str]

    @property
    def exit_code(self) -> int:
        """The demo's exit code: 0 when exactly-once held, 1 on any violation."""
        return 1 if self.violations else 0


def check(requested: int, record_count: int, ledger: ProducerLedger, back: ReadBack,
          live: LiveStats) -> Verdict:
    """Compare what was produced, acknowledged and read; list every broken guarantee.

    A pure function of what the run observed (no broker, no clients), so each kind of violation
    can be fed to it directly. `requested` records were to be streamed; `record_count` (seqs
    0..record_count-1) were handed to the producer before it finished or failed.
    """
    violations: list[str] = []
    if record_count != requested:
        violations.append(f"the producer stopped after {record_count} of {requested} records")
    seqs_read = [seq for _p, _o, seq in back.records]
    foreign = sum(1 for seq in seqs_read if seq is None or not 0 <= seq < record_count)
    distinct = {seq for seq in seqs_read if seq is not None and 0 <= seq < record_count}
    duplicated = len(seqs_read) - foreign - len(distinct)
    lost = [seq for seq in range(record_count) if seq not in distinct]
    lost_acked = [seq for seq in lost if seq in ledger.acked]
    # A write the producer was told failed must not be visible to a read_committed reader either:
    # that would be an aborted write (or a torn batch's remains) served as committed data.
    failed_visible = sorted(seq for seq in distinct if seq in ledger.failed)

    out_of_order = 0
    last_by_partition: dict[int, int] = {}
    misplaced = 0
    for partition, offset, seq in back.records:
        if seq is None:
            continue
        if seq <= last_by_partition.get(partition, -1):
            out_of_order += 1
        last_by_partition[partition] = max(seq, last_by_partition.get(partition, -1))
        if seq in ledger.acked and ledger.acked[seq] != (partition, offset):
            misplaced += 1

    if ledger.failed:
        first = next(iter(ledger.failed.items()))
        violations.append(f"{len(ledger.failed)} records failed to produce (first: seq {first[0]}: {first[1]})")
    if len(ledger.acked) != record_count:
        violations.append(f"acknowledged {len(ledger.acked)} of {record_count} records")
    if failed_visible:
        violations.append(f"{len(failed_visible)} records reported as failed are visible in the log"
                          f" (first seqs: {failed_visible[:5]})")
    if ledger.double_acks:
        violations.append(f"{ledger.double_acks} records were acknowledged twice")
    if ledger.fatal_errors:
        violations.append(f"producer fatal error: {ledger.fatal_errors[0]}")
    if lost:
        violations.append(f"lost {len(lost)} records (first seqs: {lost[:5]}), {len(lost_acked)} of them acknowledged")
    if duplicated:
        violations.append(f"{duplicated} duplicated records in the log")
    if foreign:
        violations.append(f"{foreign} records in the log that the demo never wrote")
    if out_of_order:
        violations.append(f"{out_of_order} records out of order within their partition")
    if misplaced:
        violations.append(f"{misplaced} records are not at the offset their acknowledgement gave")
    if ledger.foreign_reports:
        violations.append(f"{ledger.foreign_reports} delivery reports for records the demo never wrote")
    if live.duplicates or live.out_of_order:
        violations.append(f"live consumer saw {live.duplicates} duplicates, {live.out_of_order} out of order")
    if live.error:
        violations.append(f"live consumer failed: {live.error}")

    lines = [
        f"  produced      {record_count}   (of {requested} to stream)",
        f"  acknowledged  {len(ledger.acked)}   (failed {len(ledger.failed)})",
        f"  read back     {len(seqs_read)}   (live consumer read {live.read} during the run)",
        f"  lost          {len(lost)}   (acknowledged and lost {len(lost_acked)})",
        f"  duplicated    {duplicated}",
        f"  order kept    {'yes' if out_of_order == 0 else f'no ({out_of_order} out of order)'}",
        f"  at acked offset {'yes' if misplaced == 0 else f'no ({misplaced} moved)'}",
    ]
    return Verdict(lines, violations)


def report(verdict: Verdict, elapsed_s: float) -> int:
    """Print the verdict (counts, then OK or every violation); returns the demo's exit code."""
    for line in verdict.lines:
        _say(line)
    if verdict.violations:
        _say(f"\nFAILED ({elapsed_s:.1f} s):")
        for violation in verdict.violations:
            _say(f"  - {violation}")
    else:
        _say(f"\nOK: no loss, no duplicates, order kept ({elapsed_s:.1f} s)")
    return verdict.exit_code


# ----------------------------------------------------------------------------------------------
# Main


def prepare_data_dir(data_dir: Path, made_by: str = "`oncestream demo`") -> None:
    """Wipe the demo's data dir, refusing to touch a non-empty folder the demo did not create
    (``made_by`` names the demo in the marker file)."""
    if data_dir.exists():
        if any(data_dir.iterdir()) and not (data_dir / DEMO_MARKER).exists():
            raise DemoFailure(f"{data_dir} is not empty and was not created by the demo; not wiping it")
        shutil.rmtree(data_dir)
    data_dir.mkdir(parents=True)
    (data_dir / DEMO_MARKER).write_text(f"created by {made_by}; wiped at each run\n")


def client_logger(path: Path) -> logging.Logger:
    """librdkafka's log lines (connection refused while the broker is down, ...) go to a file."""
    logger = logging.getLogger("oncestream.demo.clients")
    logger.handlers.clear()
    handler = logging.FileHandler(path, mode="w")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        prog="oncestream demo",
        description="Stream records through broker crashes (SIGKILL + restart) and check exactly-once.",
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR,
                        help=f"broker data dir, wiped at start (default: ./{DEFAULT_DATA_DIR})")
    parser.add_argument("--records", type=int, default=50_000, help="records to stream (default: 50000)")
    parser.add_argument("--rate", type=int, default=5_000,
                        help="records per second offered to the producer (default: 5000)")
    parser.add_argument("--value-bytes", type=int, default=100, help="bytes per record value (default: 100)")
    parser.add_argument("--partitions", type=int, default=1, help="topic partitions (default: 1)")
    parser.add_argument("--restarts", type=int, default=2,
                        help="times to SIGKILL and restart the broker mid-stream (default: 2)")
    parser.add_argument("--downtime-ms", type=int, default=1000,
                        help="how long the broker stays dead each time (default: 1000)")
    parser.add_argument("--broker", choices=("oncestream", "tansu"), default="oncestream",
                        help="broker to run (tansu: in-memory peer, expected to fail the check)")
    args = parser.parse_args(argv)
    if args.records < 1 or args.rate < 1 or args.partitions < 1 or args.restarts < 0:
        parser.error("--records, --rate and --partitions must be positive, --restarts not negative")
    if args.value_bytes < SEQ_DIGITS + 1:
        parser.error(f"--value-bytes must be at least {SEQ_DIGITS + 1}")
    return args


class DemoRun:
    """One run of the demo, phase by phase: start, stream with crashes, drain, verify.

    Owns the broker process and the clients; close() releases them whatever happened.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.data_dir: Path = args.data_dir.resolve()
        self.broker_log = self.data_dir.parent / f"{self.data_dir.name}-broker.log"
        self.clients_log = self.data_dir.parent / f"{self.data_dir.name}-clients.log"
        self.started_at = time.monotonic()
        self.ledger = ProducerLedger()
        self.seq = 0  # records handed to the producer so far; the next record's sequence number
        self._broker: ManagedBroker | None = None
        self._live: LiveTail | None = None
        self._producer: Any = None  # confluent_kafka.Producer, imported only when the demo runs
        self._logger: logging.Logger | None = None

    # -- what start() sets up (a DemoFailure, not an AttributeError, if used before) ---------

    @property
    def broker(self) -> ManagedBroker:
        """The broker under test."""
        return _started(self._broker, "broker")

    @property
    def live(self) -> LiveTail:
        """The live consumer thread."""
        return _started(self._live, "live consumer")

    @property
    def producer(self) -> Any:
        """The idempotent librdkafka producer."""
        return _started(self._producer, "producer")

    @property
    def logger(self) -> logging.Logger:
        """The clients' log."""
        return _started(self._logger, "client logger")

    # -- phases ------------------------------------------------------------------------------

    def start(self) -> None:
        """Fresh data dir, broker up, topic created, producer and live consumer connected."""
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        prepare_data_dir(self.data_dir)
        self.broker_log.write_bytes(b"")
        self._logger = client_logger(self.clients_log)
        self._broker = make_broker(self.args.broker, self.data_dir, self.broker_log)
        self._start_broker()
        _say(f"broker ({self.args.broker}) pid {self.broker.pid} on {self.broker.bootstrap},"
             f" data in {self.data_dir}")
        _say(f"logs: {self.broker_log}, {self.clients_log}")

        admin_conf: dict[str, Any] = {"bootstrap.servers": self.broker.bootstrap, "logger": self.logger}
        admin = AdminClient(admin_conf)
        partitions = self.args.partitions
        futures = admin.create_topics([NewTopic(TOPIC, num_partitions=partitions, replication_factor=1)])
        futures[TOPIC].result(timeout=30)
        _say(f"created topic {TOPIC} ({partitions} partition{'s' if partitions > 1 else ''})")

        self._producer = Producer({
            "bootstrap.servers": self.broker.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 120_000,  # outlive the restarts: retry rather than give up
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 250,
            "retry.backoff.ms": 50,
            "retry.backoff.max.ms": 250,
            "on_delivery": self.ledger.on_delivery,
            "error_cb": self._on_client_error,
            "logger": self.logger,
        })
        self._live = LiveTail(self.broker.bootstrap, partitions, self.logger)
        self.live.start()

    def stream(self) -> None:
        """Offer records at the configured rate; SIGKILL and restart the broker at set points."""
        from confluent_kafka import KafkaException

        args, broker, ledger = self.args, self.broker, self.ledger
        total = args.records
        kill_at = [total * (i + 1) // (args.restarts + 1) for i in range(args.restarts)]
        _say(f"streaming {total} records at ~{args.rate}/s; SIGKILL + restart at records {kill_at}")
        stream_started = time.monotonic()
        next_progress = stream_started + PROGRESS_INTERVAL_S
        down_since: float | None = None
        while self.seq < total or down_since is not None:
            now = time.monotonic()
            # Offer records at the configured rate so the kills land in the middle of the stream.
            target = min(total, int((now - stream_started) * args.rate) + 1)
            while self.seq < target:
                value = encode_value(self.seq, args.value_bytes)
                try:
                    self.producer.produce(TOPIC, value, partition=self.seq % args.partitions)
                except BufferError:
                    break  # local queue full while the broker is down: retry on the next tick
                except KafkaException as exc:
                    # A fatal idempotence error (e.g. the broker forgot the producer's sequence
                    # numbers): this producer can never send again. Stop and let the check report.
                    ledger.fatal_errors.append(str(exc.args[0]))
                    _say(f"*** producer failed fatally at record {self.seq}: {exc.args[0]}")
                    break
                self.seq += 1
            self._serve_callbacks(0)
            if ledger.fatal_errors:
                break
            if kill_at and self.seq >= kill_at[0] and broker.is_alive():
                kill_at.pop(0)
                pid = broker.pid
                broker.kill()
                down_since = now
                _say(f"*** SIGKILL broker pid {pid} at record {self.seq}"
                     f" ({self._in_flight()} records unacknowledged)")
            if down_since is not None and now - down_since >= args.downtime_ms / 1000:
                self._restart_broker()
                down_since = None
            self._check_broker_alive()
            if now >= next_progress:
                self._progress()
                next_progress = now + PROGRESS_INTERVAL_S
            time.sleep(0.005)
        if not broker.is_alive():  # the producer failed while the broker was down: bring it back to check
            self._restart_broker()

    def drain(self) -> None:
        """Wait for every acknowledgement, then for the live consumer to catch up."""
        ledger = self.ledger
        deadline = time.monotonic() + FLUSH_TIMEOUT_S
        undelivered = 0 if ledger.fatal_errors else self._serve_callbacks(0, flush=True)
        while not ledger.fatal_errors and undelivered > 0 and time.monotonic() < deadline:
            self._check_broker_alive()
            self._progress(" (flushing)")
            undelivered = self._serve_callbacks(PROGRESS_INTERVAL_S, flush=True)
        if ledger.fatal_errors:
            self.producer.purge()  # drop what the dead producer still holds; it can never be sent
            self._progress(" (producer failed)")
        else:
            self._progress(" (producer done)" if undelivered == 0 else f" ({undelivered} never acknowledged)")

        # Let the live consumer catch up with what was acknowledged, or stop once it stalls.
        live = self.live
        stalled_since, last_read = time.monotonic(), live.read
        while len(live.seen) < len(ledger.acked) and time.monotonic() - stalled_since < CATCH_UP_STALL_S:
            time.sleep(0.1)
            if live.read != last_read:
                stalled_since, last_read = time.monotonic(), live.read
        live.stop()

    def verify(self) -> int:
        """Read everything back, print the check; 0 if exactly-once held, else 1."""
        _say("reading the topic back from offset 0 ...")
        back = read_back(self.broker.bootstrap, self.args.partitions, self.logger)
        verdict = check(self.args.records, self.seq, self.ledger, back, self.live.stats())
        _say(f"\nexactly-once check after {self.broker.kill_count} SIGKILLs and {self.broker.start_count - 1}"
             " restarts:")
        return report(verdict, time.monotonic() - self.started_at)

    def close(self) -> None:
        """Stop the live consumer, drop the producer, then stop the broker (SIGTERM)."""
        if self._live is not None and self._live.is_alive():
            self._live.stop()
        if self._producer is not None:
            self._producer.purge()  # nothing left to wait for; lets the client close at once
            # Drop the client before stopping the broker, so it sees it leave instead of waiting.
            self._producer = None
        if self._broker is not None:
            self._broker.stop()

    # -- helpers -----------------------------------------------------------------------------

    def _on_client_error(self, err) -> None:
        # Transport errors while the broker is dead are expected; a fatal one ends idempotence.
        if err.fatal():
            self.ledger.fatal_errors.append(str(err))
        self.logger.warning("producer error: %s", err)

    def _serve_callbacks(self, timeout_s: float, flush: bool = False) -> int:
        """poll()/flush() the producer; a fatal error raised there is recorded, not thrown."""
        from confluent_kafka import KafkaException

        try:
            return self.producer.flush(timeout_s) if flush else self.producer.poll(timeout_s)
        except KafkaException as exc:
            self.ledger.fatal_errors.append(str(exc.args[0]))
            _say(f"*** producer failed fatally: {exc.args[0]}")
            return 0

    def _start_broker(self) -> None:
        try:
            self.broker.start()
        except BrokerStartError as exc:
            raise DemoFailure(str(exc)) from None

    def _restart_broker(self) -> None:
        self._start_broker()
        _say(f"*** restarted broker: pid {self.broker.pid}, same port {self.broker.port},"
             " same data dir")

    def _check_broker_alive(self) -> None:
        code = self.broker.exited_on_its_own()
        if code is not None:
            raise DemoFailure(f"broker exited on its own with code {code}; log {self.broker_log}:\n"
                              f"{self.broker.output_tail()}")

    def _in_flight(self) -> int:
        return self.seq - len(self.ledger.acked) - len(self.ledger.failed)

    def _progress(self, tag: str = "") -> None:
        state = f"up (pid {self.broker.pid})" if self.broker.is_alive() else "DOWN"
        _say(f"[{time.monotonic() - self.started_at:5.1f}s] produced {self.seq:>7}"
             f"  acked {len(self.ledger.acked):>7}  in flight {self._in_flight():>6}"
             f"  live read {self.live.read:>7}  broker {state}{tag}")


def _started(value: _T | None, what: str) -> _T:
    if value is None:
        raise DemoFailure(f"the demo's {what} is used before start()")
    return value


def main(argv: list[str] | None = None) -> int:
    """Run the demo; 0 when every exactly-once check holds, 1 on any violation or failure."""
    args = parse_args(argv)
    try:
        from confluent_kafka import KafkaException
    except ImportError:
        _say("the demo needs confluent-kafka: pip install -e '.[demo]'")
        return 1
    run = DemoRun(args)
    try:
        run.start()
        run.stream()
        run.drain()
        return run.verify()
    except DemoFailure as exc:
        _say(f"\nFAILED: {exc}")
        return 1
    except KafkaException as exc:
        _say(f"\nFAILED: client error: {exc.args[0]}")
        return 1
    except KeyboardInterrupt:
        _say("\ninterrupted")
        return 130
    finally:
        run.close()


if __name__ == "__main__":
    sys.exit(main())
