"""SQL layer benchmark (not a test): end-to-end latency of a filter+project persistent query at low
load. A producer writes records at a steady low rate, each with its record timestamp set to the
wall-clock time it is produced; the query (``QueryRuntime.start_persistent``: parse, analyze,
compile, JSON serde, exactly-once sink) keeps the input's ROWTIME as the output record's timestamp
(docs/sql-on-spark.md), so a read_committed consumer of the sink (confluent-kafka) measures each
output record's latency as its arrival time minus that timestamp: Spark's trigger, the micro-batch,
the sink's transaction commit and the read_committed visibility together.

    .venv/bin/python bench/sql_latency.py [--rate 20] [--seconds 60] [--trigger-ms 200]

Everything runs on this machine: one oncestream broker (two-phase commit enabled) on a free port,
one SparkSession (``local[<cores>]``, ``runtime.spark_session_config()``). The query starts first
(from latest, as a persistent query does) and is warmed up by a short burst that is not measured;
then ``--seconds`` of records at ``--rate`` per second are produced (linger.ms 0) and every output
record that passes the filter is timed. Prints p50, p90, p99 and max in ms, and the median of
Spark's ``durationMs`` phases per micro-batch (where a batch's time goes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (str(ROOT / "src"), str(ROOT)):
    if path not in sys.path:
        sys.path.insert(0, path)

from bench.sql_pipeline import _create_topics, orders_source, sql_bench_runtime  # noqa: E402
from bench.topic_offsets import high_watermarks  # noqa: E402

QUERY = "CREATE STREAM FAST AS SELECT ID, NAME, AMOUNT * 2 AS DOUBLED FROM ORDERS WHERE AMOUNT >= 10 EMIT CHANGES;"


def _percentile(sorted_ms: list[float], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 1) of ascending values."""
    rank = max(1, min(len(sorted_ms), int(-(-q * len(sorted_ms) // 1))))
    return sorted_ms[rank - 1]


def _produce(bootstrap: str, topic: str, rate: float, seconds: float, first_id: int, measured: bool,
             sent: dict[int, int]) -> int:
    """Records at ``rate``/s for ``seconds``; each one's timestamp is its produce time (ms).
    Returns how many pass the filter (AMOUNT >= 10)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    passing = 0
    count = int(rate * seconds)
    start = time.monotonic()
    for n in range(count):
        due = start + n / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        record_id = first_id + n
        amount = 10 + n % 90 if n % 10 else n % 10        # one in ten fails the filter
        ts_ms = int(time.time() * 1000)
        value = f'{{"NAME":"n-{record_id}","AMOUNT":{amount},"NOTE":"x"}}'.encode()
        producer.produce(topic, key=record_id.to_bytes(4, "big"), value=value, timestamp=ts_ms)
        producer.poll(0)
        if amount >= 10 and measured:
            sent[record_id] = ts_ms
        passing += amount >= 10
    assert producer.flush(60) == 0
    return passing


def _consume(bootstrap: str, topic: str, expected: int, sent: dict[int, int], out: list[float],
             stop: threading.Event, timeout_s: float) -> None:
    """Reads the sink read_committed until ``expected`` measured records arrived; appends each
    one's latency (arrival wall-clock time - record timestamp, ms) to ``out``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "latency-bench", "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "fetch.wait.max.ms": 10})
    try:
        meta = consumer.list_topics(topic, timeout=10)
        consumer.assign([TopicPartition(topic, p, 0) for p in sorted(meta.topics[topic].partitions)])
        deadline = time.monotonic() + timeout_s
        while len(out) < expected and time.monotonic() < deadline and not stop.is_set():
            msg = consumer.poll(0.05)
            if msg is None or msg.error() is not None or msg.key() is None:
                continue
            arrived_ms = time.time() * 1000
            record_id = int.from_bytes(msg.key() or b"", "big")
            if record_id in sent:
                out.append(arrived_ms - msg.timestamp()[1])
    finally:
        consumer.close()


def _read_up_to(progress: list, topic: str) -> dict[int, int] | None:
    """The end offsets of ``topic`` in the query's last progress report (Spark's JSON of them)."""
    for report in reversed(progress):
        for source in report["sources"]:
            end = source["endOffset"]
            offsets = json.loads(end) if isinstance(end, str) else end
            if offsets and topic in offsets:
                return {int(p): int(o) for p, o in offsets[topic].items()}
    return None


def _print_batch_phases(progress: list) -> None:
    """Where a micro-batch's time goes: the median of each of Spark's ``durationMs`` phases over
    the recent batches that read rows (Spark keeps the last 100 reports)."""
    busy = [report for report in progress if report["numInputRows"]]
    if not busy:
        return
    phases = sorted({name for report in busy for name in report["durationMs"]})
    medians = {name: statistics.median(report["durationMs"].get(name, 0) for report in busy) for name in phases}
    print(f"\nmedian ms per phase over {len(busy)} micro-batches that read rows (Spark's durationMs):\n")
    print("| " + " | ".join(phases) + " |")
    print("|" + "---|" * len(phases))
    print("| " + " | ".join(f"{medians[name]:.0f}" for name in phases) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=20.0, help="records per second")
    parser.add_argument("--seconds", type=float, default=60.0, help="measured production time")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--trigger-ms", type=int, default=200, help="the query's trigger interval (the server's default)")
    parser.add_argument("--master", default=f"local[{os.cpu_count() or 2}]")
    args = parser.parse_args()

    from oncestream.sql.language.analyzer import analyze_query
    from oncestream.sql.language.catalog import Format, QueryInfo, SourceInfo
    from oncestream.sql.language.parser import parse
    from oncestream.sql.language.sql_ast import CreateAsSelect

    topic_in, topic_out = "orders", "fast"
    with sql_bench_runtime("oncestream-sql-latency-", args.master, trigger_interval_ms=args.trigger_ms) as (
            bootstrap, _spark, runtime, _work):
        _create_topics(bootstrap, args.partitions, topic_in, topic_out)
        (statement,) = parse(QUERY)
        if not isinstance(statement, CreateAsSelect):
            raise TypeError(f"the benchmark query must be a CREATE ... AS SELECT, parsed as {type(statement).__name__}")
        source = orders_source(topic_in, args.partitions)
        analyzed = analyze_query(statement.query, {"ORDERS": source}, sink=statement.name)
        sink = SourceInfo(name=statement.name, kind=analyzed.result_kind, topic=topic_out, key_format=Format.KAFKA,
                          value_format=Format.JSON, columns=tuple(analyzed.columns), statement=statement.text,
                          partitions=args.partitions)
        info = QueryInfo(query_id="CSAS_FAST_0", statement=statement.text, sink=sink.name, sources=("ORDERS",),
                         query=statement.query, output_columns=analyzed.columns, command_offset=0)
        runtime.start_persistent(info, analyzed, sink, {"auto.offset.reset": "latest"})
        status = runtime.status("CSAS_FAST_0")
        if status.state != "RUNNING":
            raise RuntimeError(status.error)
        # warm-up, not measured: the first batches pay for Python workers, class loading and JIT
        sent: dict[int, int] = {}
        latencies: list[float] = []
        warm = _produce(bootstrap, topic_in, args.rate, 10, 0, False, sent)
        # Warm once the query has read up to the input's end. Not a count of rows read: the query
        # starts at latest when its first trigger runs, which may be after the burst began.
        # The warm-up's producer is idempotent, not transactional: its high watermarks are also
        # the query's read_committed end.
        ends = high_watermarks(bootstrap, topic_in, args.partitions)
        deadline = time.monotonic() + 300
        while _read_up_to(runtime.progress("CSAS_FAST_0"), topic_in) != ends:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the query did not read up to {ends} within 300 s of its warm-up")
            time.sleep(0.2)
        stop = threading.Event()
        expected = sum(1 for n in range(int(args.rate * args.seconds)) if n % 10)   # _produce's filter rule
        consumer = threading.Thread(target=_consume, args=(bootstrap, topic_out, expected, sent, latencies, stop,
                                                           args.seconds + 300), daemon=True)
        consumer.start()
        passing = _produce(bootstrap, topic_in, args.rate, args.seconds, 1_000_000, True, sent)
        consumer.join(timeout=300)
        stop.set()
        values = sorted(latencies)
        if not values:
            raise RuntimeError("no output record arrived")
        print(f"\n## End-to-end latency, filter+project CSAS ({args.rate:g} records/s for {args.seconds:g} s, "
              f"{args.partitions} partitions, {args.master}, trigger {args.trigger_ms} ms; warm-up {warm} rows "
              f"not measured)\n")
        print("| output records timed | p50 ms | p90 ms | p99 ms | max ms | mean ms |")
        print("|---|---|---|---|---|---|")
        print(f"| {len(values)} of {passing} | {_percentile(values, 0.5):.0f} | {_percentile(values, 0.9):.0f} | "
              f"{_percentile(values, 0.99):.0f} | {values[-1]:.0f} | {statistics.fmean(values):.0f} |")
        _print_batch_phases(runtime.progress("CSAS_FAST_0"))
        print(f"\nload average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
