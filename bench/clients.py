"""Client throughput on one oncestream broker: our client vs confluent-kafka, kafka-python, aiokafka.

One broker process, one run, alternating clients each round; each client produces N 1 KiB records
(acks=all, idempotent where the client supports it) to a fresh one-partition topic, then consumes
them from offset 0. Prints per-round MB/s and the median ratios of ours against each peer.

    .venv/bin/python bench/clients.py [--rounds 3] [--records 100000]

This is a benchmark command, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from oncestream.broker_process import OnceStreamBroker
from tests.support.clients import create_topic

VALUE = b"x" * 1024
MB = 1_000_000


def ours(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from oncestream.client import Consumer, Producer, TopicPartition

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1048576})
    t = time.perf_counter()
    for _ in range(n):
        p.produce(topic, VALUE, partition=0)
    p.flush()
    produce_s = time.perf_counter() - t
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + topic, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got, t = 0, time.perf_counter()
    while got < n:
        got += len(c.consume(10000, 1.0))
    consume_s = time.perf_counter() - t
    c.close()
    return produce_s, consume_s


def confluent(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                  "batch.size": 1048576, "queue.buffering.max.messages": 1000000})
    t = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, VALUE, partition=0)
                break
            except BufferError:
                p.poll(0.001)
    p.flush()
    produce_s = time.perf_counter() - t
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + topic, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    got, t = 0, time.perf_counter()
    while got < n:
        got += sum(1 for m in c.consume(10000, 1.0) if not m.error())
    consume_s = time.perf_counter() - t
    c.close()
    return produce_s, consume_s


def kafka_python(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, batch_size=1048576)
    t = time.perf_counter()
    for _ in range(n):
        p.send(topic, VALUE, partition=0)
    p.flush()
    produce_s = time.perf_counter() - t
    p.close()
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    c.assign([TopicPartition(topic, 0)])
    c.seek(TopicPartition(topic, 0), 0)
    got, t = 0, time.perf_counter()
    while got < n:
        got += sum(len(v) for v in c.poll(1000, max_records=10000).values())
    consume_s = time.perf_counter() - t
    c.close()
    return produce_s, consume_s


def aiokafka(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def run() -> tuple[float, float]:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5,
                             max_batch_size=1048576)
        await p.start()
        t = time.perf_counter()
        futures = [await p.send(topic, VALUE, partition=0) for _ in range(n)]
        await asyncio.gather(*futures)
        produce_s = time.perf_counter() - t
        await p.stop()
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await c.start()
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got, t = 0, time.perf_counter()
        while got < n:
            batches = await c.getmany(timeout_ms=1000, max_records=10000)
            got += sum(len(v) for v in batches.values())
        consume_s = time.perf_counter() - t
        await c.stop()
        return produce_s, consume_s

    return asyncio.run(run())


CLIENTS = {"ours": ours, "confluent-kafka": confluent, "kafka-python": kafka_python, "aiokafka": aiokafka}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in CLIENTS}
    with tempfile.TemporaryDirectory() as tmp:
        broker = OnceStreamBroker(data_dir=Path(tmp) / "data").start()
        try:
            for round_number in range(1, args.rounds + 1):
                for name, fn in CLIENTS.items():
                    topic = f"bench-client-{uuid.uuid4().hex[:8]}"
                    create_topic(broker.bootstrap, topic, partitions=1)
                    produce_s, consume_s = fn(broker.bootstrap, topic, args.records)
                    mb = args.records * len(VALUE) / MB
                    results[name].append((mb / produce_s, mb / consume_s))
                    print(f"round {round_number} {name:16s} produce {mb / produce_s:7.1f} MB/s  "
                          f"consume {mb / consume_s:7.1f} MB/s", flush=True)
        finally:
            broker.stop()
    print("\n| client | median produce MB/s | median consume MB/s |\n| --- | ---: | ---: |")
    med = {n: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs)) for n, rs in results.items()}
    for name, (p, c) in med.items():
        print(f"| {name} | {p:.1f} | {c:.1f} |")
    for peer in ("kafka-python", "aiokafka", "confluent-kafka"):
        print(f"ours/{peer}: produce {med['ours'][0] / med[peer][0]:.2f}x, consume {med['ours'][1] / med[peer][1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
