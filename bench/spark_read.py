"""Source read benchmark (not a test): MB/s of a batch read through ``format("oncestream")`` into
Spark's noop sink vs a plain librdkafka consumer (confluent-kafka) reading the same topic.

    .venv/bin/python bench/spark_read.py [--records 200000] [--record-bytes 1024] [--rounds 3]

One oncestream broker on a free port, one topic of ``--partitions`` partitions filled by
librdkafka with 1 KiB values, one local[N] SparkSession in this process (N = cores). After a
warm-up read (JVM, Python workers), ``--rounds`` rounds each time the Spark read and the
librdkafka read in alternating order; the medians and their ratio are printed. Only the read is
timed (the pipeline figures are bench/spark_pipeline.py's). ``--decoder python`` forces the
pure-Python column builder (ONCESTREAM_NATIVE=0) in the Spark workers, to compare it with the
native one. The "Spark floor" row is a Python data source with the same schema, tasks and rows that
yields one prebuilt Arrow batch over and over (no broker, no decoding): what Spark's Python data
source path itself costs (worker hand-off, Arrow IPC to the JVM, rows for the sink).
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
for path in (str(ROOT / "src"), str(ROOT), str(ROOT / "bench")):
    if path not in sys.path:
        sys.path.insert(0, path)

from oncestream.broker_process import OnceStreamBroker  # noqa: E402
from spark_pipeline import _create_topics, _fill, _librdkafka_read_mb_s, _spark_read_mb_s  # noqa: E402


def _floor_source(rows_per_task: int, record_bytes: int):
    """A data source whose two tasks yield one prebuilt Arrow batch of the source's schema until
    ``rows_per_task`` rows are out."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from oncestream.spark.partition_reader import ARROW_SCHEMA, ROWS_PER_ARROW_BATCH, SPARK_SCHEMA_DDL

    class FloorReader(DataSourceReader):
        def partitions(self):
            return [InputPartition(0), InputPartition(1)]

        def read(self, partition):
            import pyarrow as pa

            n = ROWS_PER_ARROW_BATCH
            batch = pa.RecordBatch.from_arrays([
                pa.repeat(pa.scalar(b"k", pa.binary()), n),
                pa.repeat(pa.scalar(os.urandom(record_bytes), pa.binary()), n),
                pa.repeat(pa.scalar("in"), n), pa.repeat(pa.scalar(0, pa.int32()), n),
                pa.array(range(n), pa.int64()), pa.array([0] * n, ARROW_SCHEMA.field("timestamp").type),
                pa.repeat(pa.scalar(0, pa.int32()), n), pa.nulls(n, ARROW_SCHEMA.field("headers").type),
            ], schema=ARROW_SCHEMA).drop_columns(["headers"])
            for start in range(0, rows_per_task, n):
                yield batch.slice(0, min(n, rows_per_task - start))

    class FloorSource(DataSource):
        @classmethod
        def name(cls):
            return "oncestream-bench-floor"

        def schema(self):
            return SPARK_SCHEMA_DDL.rsplit(", headers", 1)[0]

        def reader(self, schema):
            return FloorReader()

    return FloorSource


def _floor_mb_s(spark, records: int, record_bytes: int) -> float:
    start = time.perf_counter()
    spark.read.format("oncestream-bench-floor").load().write.format("noop").mode("overwrite").save()
    return records * record_bytes / (time.perf_counter() - start) / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--decoder", choices=["default", "python"], default="default",
                        help="python: the pure-Python column builder (ONCESTREAM_NATIVE=0)")
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    if args.decoder == "python":
        os.environ["ONCESTREAM_NATIVE"] = "0"
    work = Path(tempfile.mkdtemp(prefix="oncestream-spark-read-"))
    broker = OnceStreamBroker(work / "data")
    broker.start()
    try:
        bootstrap = broker.bootstrap
        _create_topics(bootstrap, args.partitions, "in")
        _fill(bootstrap, "in", args.records, args.record_bytes)

        from pyspark.sql import SparkSession

        import oncestream.spark

        spark = (SparkSession.builder.master(f"local[{os.cpu_count() or 2}]").appName("oncestream-read-bench")
                 .config("spark.ui.enabled", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        oncestream.spark.register(spark)
        spark.dataSource.register(_floor_source(args.records // 2, args.record_bytes))
        _spark_read_mb_s(spark, bootstrap, "in", args.records, args.record_bytes)  # warm-up
        _floor_mb_s(spark, args.records, args.record_bytes)
        spark_runs, rdk_runs, floor_runs = [], [], []
        for r in range(args.rounds):
            order = ("spark", "rdk", "floor") if r % 2 == 0 else ("floor", "rdk", "spark")
            for name in order:
                if name == "spark":
                    spark_runs.append(_spark_read_mb_s(spark, bootstrap, "in", args.records, args.record_bytes)[0])
                elif name == "floor":
                    floor_runs.append(_floor_mb_s(spark, args.records, args.record_bytes))
                else:
                    rdk_runs.append(_librdkafka_read_mb_s(bootstrap, "in", args.partitions, args.records)[0])
        spark.stop()
    finally:
        broker.stop()

    load = os.getloadavg()
    spark_mb_s, rdk_mb_s = statistics.median(spark_runs), statistics.median(rdk_runs)
    print(f"\nCommand: `.venv/bin/python bench/spark_read.py --records {args.records} --record-bytes "
          f"{args.record_bytes} --partitions {args.partitions} --rounds {args.rounds} --decoder {args.decoder}`  ")
    print(f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  ")
    print(f"Machine: {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
          f"Python {platform.python_version()}; load average after: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}\n")
    print("| reader | runs MB/s | median MB/s |")
    print("| --- | --- | ---: |")
    print(f"| format(\"oncestream\") batch read, {args.partitions} tasks, noop sink | "
          f"{', '.join(f'{x:.0f}' for x in spark_runs)} | {spark_mb_s:.1f} |")
    print(f"| librdkafka consumer, read_committed, one Python thread | "
          f"{', '.join(f'{x:.0f}' for x in rdk_runs)} | {rdk_mb_s:.1f} |")
    floor_mb_s = statistics.median(floor_runs)
    print(f"| Spark floor: prebuilt Arrow batches, same schema and rows, 2 tasks, noop sink | "
          f"{', '.join(f'{x:.0f}' for x in floor_runs)} | {floor_mb_s:.1f} |")
    print(f"\nSpark source / librdkafka: **{spark_mb_s / rdk_mb_s:.2f}x**; Spark floor / librdkafka: "
          f"{floor_mb_s / rdk_mb_s:.2f}x; source / floor: {spark_mb_s / floor_mb_s:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
