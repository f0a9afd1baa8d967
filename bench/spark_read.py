"""Source read benchmark (not a test): MB/s of a batch read through ``format("oncestream")`` into
Spark's noop sink vs a plain librdkafka consumer (confluent-kafka) reading the same topic.

    .venv/bin/python bench/spark_read.py [--records 200000] [--record-bytes 1024] [--rounds 3]

One oncestream broker on a free port, one topic of ``--partitions`` partitions filled by
librdkafka with 1 KiB values, one local[N] SparkSession in this process (N = cores). After
``--warmup`` untimed reads of each Spark reader (JVM start and JIT, Python workers), ``--rounds``
rounds each time the Spark read and the librdkafka read in alternating order; the medians and
their ratio are printed. Only the read is timed (the pipeline figures are
bench/spark_pipeline.py's). ``--decoder python`` forces the
pure-Python column builder (ONCESTREAM_NATIVE=0) in the Spark workers, to compare it with the
native one. The "Spark floor" row is a Python data source with the same schema, tasks and rows that
yields one prebuilt Arrow batch over and over (no broker, no decoding): what Spark's Python data
source path itself costs (worker hand-off, Arrow IPC to the JVM, rows for the sink).
``--min-partitions N`` adds a fourth reader: the same batch read with ``minPartitions=N`` (more
Spark tasks than Kafka partitions, each an offset range). Each reader's row also gives the CPU
seconds of one of its runs by process (the Spark JVM, its Python workers, the broker, this
process, from /proc): on a shared 2-core machine the CPU a read costs is steadier than its wall
time. The script refuses to run with the pure-Python column builder unless ``--decoder python``
asks for it (a checkout without the built extension silently measured that builder before).
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


def _floor_source(rows_per_task: int, record_bytes: int, tasks: int = 2):
    """A data source whose ``tasks`` tasks yield one prebuilt Arrow batch of the source's schema until
    ``rows_per_task`` rows are out."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from oncestream.spark.partition_reader import ARROW_SCHEMA, ROWS_PER_ARROW_BATCH, SPARK_SCHEMA_DDL

    class FloorReader(DataSourceReader):
        def partitions(self):
            return [InputPartition(i) for i in range(tasks)]

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


def _process_cpu_s() -> dict[str, float]:
    """CPU seconds (user + system) so far of this process and its descendants, by kind: the Spark
    JVM (driver and executors), Spark's Python workers, the broker, this process."""
    tick = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, str, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # exited meanwhile
        # utime + stime, plus cutime + cstime: the time of children already reaped (a Python
        # worker that exited within the run), which would otherwise vanish with them.
        procs[int(entry)] = (int(fields[1]), cmd, sum(int(x) for x in fields[11:15]) / tick)
    mine, grew = {os.getpid()}, True
    while grew:
        grew = False
        for pid, (ppid, _, _) in procs.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                grew = True
    out: dict[str, float] = {}
    for pid in mine:
        if pid not in procs:
            continue
        _, cmd, cpu_s = procs[pid]
        kind = ("this process" if pid == os.getpid() else "JVM" if os.path.basename(cmd.split(" ")[0]) == "java"
                else "broker" if " broker " in cmd else "Python workers" if "pyspark" in cmd else "other")
        out[kind] = out.get(kind, 0.0) + cpu_s
    return out


def _cpu_delta(before: dict[str, float], after: dict[str, float]) -> str:
    parts = [f"{k} {after.get(k, 0.0) - before.get(k, 0.0):.2f}" for k in ("JVM", "Python workers", "broker", "this process")]
    return ", ".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3, help="untimed reads of each Spark reader first")
    parser.add_argument("--decoder", choices=["default", "python"], default="default",
                        help="python: the pure-Python column builder (ONCESTREAM_NATIVE=0)")
    parser.add_argument("--master", default=f"local[{os.cpu_count() or 2}]",
                        help="Spark master, e.g. local[2] or local-cluster[2,1,1024] (separate executor JVMs)")
    parser.add_argument("--min-partitions", type=int, default=0,
                        help="also time the batch read with minPartitions=N (0: not)")
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = sys.executable
    # Executors (local-cluster) inherit this process's environment: their Python workers must
    # import this checkout's oncestream and this script's floor source.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "src"), str(ROOT), str(ROOT / "bench"), os.environ.get("PYTHONPATH", "")) if p)
    if args.decoder == "python":
        os.environ["ONCESTREAM_NATIVE"] = "0"
    from oncestream.spark.arrow_columns import native_available

    builder = "pure-Python" if args.decoder == "python" else "C (oncestream._native.record_columns)"
    if args.decoder == "default" and not native_available():
        print("the C column builder is not built (pip install -e . or python setup.py build_ext --inplace); "
              "pass --decoder python to measure the pure-Python one", file=sys.stderr)
        return 2
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="oncestream-spark-read-"))
    broker = OnceStreamBroker(work / "data")
    broker.start()
    try:
        bootstrap = broker.bootstrap
        _create_topics(bootstrap, args.partitions, "in")
        _fill(bootstrap, "in", args.records, args.record_bytes)

        from pyspark.sql import SparkSession

        import oncestream.spark

        spark = (SparkSession.builder.master(args.master).appName("oncestream-read-bench")
                 .config("spark.ui.enabled", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        oncestream.spark.register(spark)
        spark.dataSource.register(_floor_source(args.records // args.partitions, args.record_bytes, args.partitions))
        # Warm-up: the JVM compiles the row conversion as it runs, and the first reads after start
        # are markedly slower (JVM CPU per read fell ~25% over the first ten reads in one session).
        for _ in range(args.warmup):
            _spark_read_mb_s(spark, bootstrap, "in", args.records, args.record_bytes)
            _floor_mb_s(spark, args.records, args.record_bytes)
            if args.min_partitions:
                _spark_read_mb_s(spark, bootstrap, "in", args.records, args.record_bytes,
                                 min_partitions=args.min_partitions)
        readers = ["spark", "rdk", "floor"] + (["split"] if args.min_partitions else [])
        runs: dict[str, list[float]] = {name: [] for name in readers}
        cpu: dict[str, str] = {}
        for r in range(args.rounds):
            for name in (readers if r % 2 == 0 else readers[::-1]):
                before = _process_cpu_s()
                if name == "spark":
                    mb_s = _spark_read_mb_s(spark, bootstrap, "in", args.records, args.record_bytes)[0]
                elif name == "split":
                    mb_s = _spark_read_mb_s(spark, bootstrap, "in", args.records, args.record_bytes,
                                            min_partitions=args.min_partitions)[0]
                elif name == "floor":
                    mb_s = _floor_mb_s(spark, args.records, args.record_bytes)
                else:
                    mb_s = _librdkafka_read_mb_s(bootstrap, "in", args.partitions, args.records)[0]
                runs[name].append(mb_s)
                cpu[name] = _cpu_delta(before, _process_cpu_s())  # the last round's
        spark.stop()
    finally:
        broker.stop()

    load = os.getloadavg()
    median = {name: statistics.median(values) for name, values in runs.items()}
    split = f" --min-partitions {args.min_partitions}" if args.min_partitions else ""
    print(f"\nCommand: `.venv/bin/python bench/spark_read.py --records {args.records} --record-bytes "
          f"{args.record_bytes} --partitions {args.partitions} --rounds {args.rounds} --warmup {args.warmup} "
          f"--decoder {args.decoder}{split} "
          f"--master '{args.master}'`  ")
    print(f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  ")
    print(f"Machine: {os.cpu_count()} cores, {platform.system()} {platform.release()}, "
          f"Python {platform.python_version()}; column builder: {builder}; load average before: "
          f"{load_before[0]:.2f} / {load_before[1]:.2f} / {load_before[2]:.2f}, after: "
          f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}\n")
    labels = {
        "spark": f"format(\"oncestream\") batch read, {args.partitions} tasks, noop sink",
        "split": f"format(\"oncestream\") batch read, minPartitions={args.min_partitions}, noop sink",
        "rdk": "librdkafka consumer, read_committed, one Python thread",
        "floor": f"Spark floor: prebuilt Arrow batches, same schema and rows, {args.partitions} tasks, noop sink",
    }
    print("| reader | runs MB/s | median MB/s | CPU s of the last run |")
    print("| --- | --- | ---: | --- |")
    for name in runs:
        print(f"| {labels[name]} | {', '.join(f'{x:.0f}' for x in runs[name])} | {median[name]:.1f} | {cpu[name]} |")
    print(f"\nSpark source / librdkafka: **{median['spark'] / median['rdk']:.2f}x**; Spark floor / librdkafka: "
          f"{median['floor'] / median['rdk']:.2f}x; source / floor: {median['spark'] / median['floor']:.2f}")
    if args.min_partitions:
        print(f"minPartitions={args.min_partitions} / default split: {median['split'] / median['spark']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
