"""Spark connector benchmark (not a test): end-to-end records/s of a pass-through streaming query
with the exactly-once sink vs exactlyOnce=false, and the source's read MB/s vs a plain librdkafka
consumer on the same topic.

    .venv/bin/python bench/spark_pipeline.py [--records 100000] [--record-bytes 1024]
    .venv/bin/python bench/spark_pipeline.py --master 'local-cluster[2,1,1024]'

Everything runs on this machine: one oncestream broker (two-phase commit enabled) on a free port,
one SparkSession in this process: ``local[<cores>]`` by default (tasks in the driver's JVM), or with
``--master local-cluster[N,cores,MiB]`` N executor JVMs with their own Python workers, as on a
cluster (rows cross process boundaries between executors, broker and driver). Each pipeline run is a fresh query with its own
checkpoint, Trigger.AvailableNow, maxOffsetsPerTrigger micro-batches, reading the same input topic
and writing to its own output topic; ``--rounds`` runs of each sink alternate in order (ABBA...) so
neither always runs first on a JVM still warming up. The figures are printed as a Markdown section for
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (str(ROOT / "src"), str(ROOT)):
    if path not in sys.path:
        sys.path.insert(0, path)

from oncestream.broker_process import OnceStreamBroker  # noqa: E402


def _create_topics(bootstrap: str, partitions: int, *names: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
        future.result(60)


def _fill(bootstrap: str, topic: str, records: int, record_bytes: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "batch.size": 1 << 20})
    payload = os.urandom(record_bytes)
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=payload, key=str(i).encode())
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def _librdkafka_read_mb_s(bootstrap: str, topic: str, partitions: int, records: int) -> tuple[float, float]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 8388608,
                         "isolation.level": "read_committed"})
    start = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    count = size = 0
    while count < records:
        for msg in consumer.consume(10000, 1.0):
            if msg.error() is None:
                count += 1
                size += len(msg.value() or b"")
    elapsed = time.perf_counter() - start
    consumer.close()
    return size / elapsed / 1e6, elapsed


def _committed_count(bootstrap: str, topic: str, partitions: int) -> int:
    """Records a read_committed librdkafka consumer finds in ``topic`` (to its end)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-check", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    count, at_end = 0, set[int | None]()
    while len(at_end) < partitions:
        for msg in consumer.consume(10000, 1.0):
            error = msg.error()
            if error is None:
                count += 1
            elif error.code() == -191:  # _PARTITION_EOF
                at_end.add(msg.partition())
    consumer.close()
    return count


def _spark_read_mb_s(spark, bootstrap: str, topic: str, records: int, record_bytes: int, *,
                     min_partitions: int = 0) -> tuple[float, float]:
    start = time.perf_counter()
    reader = spark.read.format("oncestream").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
    if min_partitions:
        reader = reader.option("minPartitions", str(min_partitions))
    reader.load().write.format("noop").mode("overwrite").save()
    elapsed = time.perf_counter() - start
    return records * record_bytes / elapsed / 1e6, elapsed


def _pipeline(spark, bootstrap: str, topic_in: str, topic_out: str, checkpoint: Path, exactly_once: bool,
              max_offsets: int) -> dict:
    source = (spark.readStream.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic_in).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(max_offsets)).load())
    start = time.perf_counter()
    query = (source.select("key", "value").writeStream.format("oncestream")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", topic_out)
             .option("exactlyOnce", str(exactly_once).lower()).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    elapsed = time.perf_counter() - start
    if query.exception() is not None:
        raise RuntimeError(query.exception())
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in batches)
    batch_s = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    commit_s = sum(p["durationMs"].get("addBatch", 0) for p in batches) / 1000
    return {"rows": rows, "elapsed_s": elapsed, "batches": len(batches), "batch_s": batch_s,
            "add_batch_s": commit_s, "rows_per_s": rows / elapsed, "rows_per_batch_s": rows / batch_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--max-offsets", type=int, default=50_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--master", default=f"local[{os.cpu_count() or 2}]",
                        help="Spark master, e.g. local[2] or local-cluster[2,1,1024] (separate executor JVMs)")
    parser.add_argument("--rounds", type=int, default=4,
                        help="pipeline runs per sink, in alternating order (EOS first in odd rounds)")
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    # Executors (local-cluster) inherit this process's environment: their Python workers must
    # import this checkout's oncestream.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    work = Path(tempfile.mkdtemp(prefix="oncestream-spark-bench-"))
    broker = OnceStreamBroker(work / "data", config={"transaction.two.phase.commit.enable": "true"})
    broker.start()
    try:
        bootstrap = broker.bootstrap
        outputs = [f"out-{mode}-{r}" for r in range(args.rounds) for mode in ("eos", "alo")]
        _create_topics(bootstrap, args.partitions, "in", "warm-in", "warm-out-eos", "warm-out-alo", *outputs)
        _fill(bootstrap, "in", args.records, args.record_bytes)
        _fill(bootstrap, "warm-in", 2000, args.record_bytes)

        from pyspark.sql import SparkSession

        import oncestream.spark

        spark = (SparkSession.builder.master(args.master).appName("oncestream-bench")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                 .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
                 .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable).getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        oncestream.spark.register(spark)
        # Warm-up of both sinks: JVM JIT, Python workers, broker caches.
        _pipeline(spark, bootstrap, "warm-in", "warm-out-eos", work / "cp-warm-eos", True, 1000)
        _pipeline(spark, bootstrap, "warm-in", "warm-out-alo", work / "cp-warm-alo", False, 1000)
        # Alternating order (EOS, ALO, then ALO, EOS, ...) so neither sink always runs first.
        runs: dict[str, list[dict]] = {"exactly-once": [], "at-least-once": []}
        for r in range(args.rounds):
            order = (("exactly-once", "eos"), ("at-least-once", "alo"))
            for name, mode in (order if r % 2 == 0 else order[::-1]):
                runs[name].append(_pipeline(spark, bootstrap, "in", f"out-{mode}-{r}", work / f"cp-{mode}-{r}",
                                            mode == "eos", args.max_offsets))
                # The figures count only if the output holds every input record exactly once.
                written = _committed_count(bootstrap, f"out-{mode}-{r}", args.partitions)
                assert written == args.records == runs[name][-1]["rows"], (name, r, written, args.records)
        spark_mb_s, spark_s = _spark_read_mb_s(spark, bootstrap, "in", args.records, args.record_bytes)
        rdk_mb_s, rdk_s = _librdkafka_read_mb_s(bootstrap, "in", args.partitions, args.records)
        spark.stop()
    finally:
        broker.stop()

    from pyspark import __version__ as pyspark_version

    load = os.getloadavg()
    print(f"\nCommand: `.venv/bin/python bench/spark_pipeline.py --records {args.records} --record-bytes "
          f"{args.record_bytes} --partitions {args.partitions} --max-offsets {args.max_offsets} "
          f"--rounds {args.rounds} --master '{args.master}'`  ")
    print(f"Spark master: {args.master}  ")
    print(f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  ")
    print(f"Machine: {os.cpu_count()} cores, {platform.system()} {platform.release()}, PySpark {pyspark_version}, "
          f"Python {platform.python_version()}; load average after: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}\n")
    print("| sink | run | records | micro-batches | wall s | records/s (wall) | records/s (in batches) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, results in runs.items():
        for i, run in enumerate(results, 1):
            print(f"| {name} | {i} | {run['rows']} | {run['batches']} | {run['elapsed_s']:.1f} | {run['rows_per_s']:,.0f} | "
                  f"{run['rows_per_batch_s']:,.0f} |")
    med = {name: (statistics.median(r["rows_per_s"] for r in results),
                  statistics.median(r["rows_per_batch_s"] for r in results)) for name, results in runs.items()}
    eos, alo = med["exactly-once"], med["at-least-once"]
    print(f"\nExactly-once / at-least-once, medians over {args.rounds} run(s) each: **{eos[0] / alo[0]:.2f}** (wall), "
          f"{eos[1] / alo[1]:.2f} (in batches)\n")
    print("| reader | MB/s | s |")
    print("| --- | ---: | ---: |")
    print(f"| format(\"oncestream\") batch read, {args.partitions} tasks, noop sink | {spark_mb_s:.1f} | {spark_s:.1f} |")
    print(f"| librdkafka consumer, read_committed, one Python thread | {rdk_mb_s:.1f} | {rdk_s:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
