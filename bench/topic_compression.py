"""Produce throughput into a topic with compression.type=producer (batches stored verbatim) against
topics whose compression.type makes the broker recompress every batch (Kafka's LogValidator
behaviour, ``PartitionLog.append`` -> ``compression.recompress_batch``).

One broker, one fresh topic per round, rounds alternating between the topic types so drift of the
machine lands on every side alike. librdkafka producer: acks=all, idempotent, linger.ms=5,
batch.size=1 MiB, 1 KiB JSON-like records (compressible, as real payloads are), the producer's
own compression.type given by --producer-codec (default none: the broker does all the work).

    .venv/bin/python bench/topic_compression.py                       # producer vs zstd, 3 rounds
    .venv/bin/python bench/topic_compression.py --types producer zstd lz4 --mb 100

Reports decimal MB/s of record payload acknowledged, per round and the median per type. This is a
benchmark command, not a test: it checks only that every record was acknowledged.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncestream.broker_process import OnceStreamBroker

MB = 1_000_000
RECORD_BYTES = 1024


def _values(count: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    words = ["order", "created", "shipped", "customer", "amount", "currency", "EUR", "USD", "status", "ok"]
    out = []
    for i in range(count):
        body = ",".join(f'"{rng.choice(words)}_{j}":{rng.randint(0, 10**6)}' for j in range(60))
        out.append(("{" + f'"id":{i},' + body + "}").encode()[:RECORD_BYTES].ljust(RECORD_BYTES, b" "))
    return out


def produce_all(producer: Producer, topic: str, values: list[bytes], count: int) -> None:
    """Produce ``count`` records (``values`` in turn) to partition 0, waiting for queue space, and
    flush; exit with the first errors if any record was not acknowledged."""
    failed: list[object] = []
    for i in range(count):
        while True:
            try:
                producer.produce(topic, values[i % len(values)], partition=0,
                                 on_delivery=lambda err, _m: failed.append(err) if err else None)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0 or failed:
        raise SystemExit(f"undelivered records: {failed[:3]}")


def _round(bootstrap: str, topic_type: str, total_bytes: int, producer_codec: str, values: list[bytes]) -> float:
    topic = f"bench-{topic_type}-{time.monotonic_ns()}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"compression.type": topic_type})])[topic].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "batch.size": 1 << 20, "compression.type": producer_codec,
                         "queue.buffering.max.kbytes": 1 << 20})
    count = total_bytes // RECORD_BYTES
    started = time.perf_counter()
    produce_all(producer, topic, values, count)
    elapsed_s = time.perf_counter() - started
    return count * RECORD_BYTES / MB / elapsed_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--types", nargs="+", default=["producer", "zstd"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mb", type=int, default=50, help="payload per round, decimal MB")
    parser.add_argument("--producer-codec", default="none")
    args = parser.parse_args()
    values = _values(2000)
    results: dict[str, list[float]] = {t: [] for t in args.types}
    with tempfile.TemporaryDirectory() as tmp:
        broker = OnceStreamBroker(Path(tmp) / "data")
        broker.start()
        try:
            for round_index in range(args.rounds):
                for topic_type in args.types:
                    mbps = _round(broker.bootstrap, topic_type, args.mb * MB, args.producer_codec, values)
                    results[topic_type].append(mbps)
                    print(f"round {round_index + 1} compression.type={topic_type:<12} {mbps:7.1f} MB/s", flush=True)
        finally:
            broker.stop()
    for topic_type, figures in results.items():
        print(f"median compression.type={topic_type:<12} {statistics.median(figures):7.1f} MB/s "
              f"(producer codec {args.producer_codec}, {args.mb} MB x {args.rounds} rounds)")


if __name__ == "__main__":
    main()
