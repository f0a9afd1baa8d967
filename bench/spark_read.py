"""Source read benchmark (not a test): MB/s of a batch read through ``format("oncestream")`` into
Spark's noop sink vs a plain librdkafka consumer (confluent-kafka) reading the same topic.

    .venv/bin/python bench/spark_read.py [--records 200000] [--record-bytes 1024] [--rounds 3]

One oncestream broker on a free port, one topic of ``--partitions`` partitions filled by
librdkafka with 1 KiB values, one local[N] SparkSession in this process (N = cores). After a
warm-up read (JVM, Python workers), ``--rounds`` rounds each time the Spark read and the
librdkafka read in alternating order; the medians and their ratio are printed. Only the read is
timed (the pipeline figures are bench/spark_pipeline.py's). ``--decoder python`` forces the
pure-Python column builder (ONCESTREAM_NATIVE=0) in the Spark workers, to compare it with the
native one.
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
        _spark_read_mb_s(spark, bootstrap, "in", args.records, args.record_bytes)  # warm-up
        spark_runs, rdk_runs = [], []
        for r in range(args.rounds):
            order = ("spark", "rdk") if r % 2 == 0 else ("rdk", "spark")
            for name in order:
                if name == "spark":
                    spark_runs.append(_spark_read_mb_s(spark, bootstrap, "in", args.records, args.record_bytes)[0])
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
    print(f"\nSpark source / librdkafka: **{spark_mb_s / rdk_mb_s:.2f}x**")
    return 0


if __name__ == "__main__":
    sys.exit(main())
