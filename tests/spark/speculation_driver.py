"""A Spark driver the speculation tests start as a subprocess: one streaming query, in-topic ->
format("oncestream") sink -> out-topic, with speculative execution on and aggressive thresholds,
on the master given (a standalone cluster whose workers have distinct hosts: Spark neither
speculates in local mode nor places a copy on a host already running the task).

A few write tasks are slow: attempt 0 of partition 0 of every batch whose id is 1 modulo 3 waits,
before its rows reach the sink, until another attempt of the same task has started (a marker file
in --marks), so Spark's speculation check sees a straggler and launches a copy; both attempts then
write and prepare concurrently. A hang guard ends the wait if no copy comes; the test checks that
copies did come. Drains what is there (availableNow) and exits 0, or with the query's error.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for path in (str(ROOT / "src"), str(ROOT)):
    if path not in sys.path:
        sys.path.insert(0, path)

HANG_GUARD_S = 120.0  # not a timing assumption: copies start within seconds of the check


def _gate(marks: str):
    """A pass-through Python UDF on ``value`` (plain, not Arrow: no pandas needed) that marks each
    task attempt it runs in and holds the slow ones at their first row."""
    seen: set[tuple[int, int, int]] = set()  # per task: the closure is unpickled per task

    def pass_through(value):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:
            raise RuntimeError("pass_through runs outside a Spark task")
        batch_property = ctx.getLocalProperty("streaming.sql.batchId")
        if batch_property is None:
            raise RuntimeError("no streaming.sql.batchId: pass_through runs outside a micro-batch")
        batch_id = int(batch_property)
        partition, attempt = ctx.partitionId(), ctx.attemptNumber()
        if (batch_id, partition, attempt) in seen:
            return value
        seen.add((batch_id, partition, attempt))
        mark_dir = Path(marks)
        (mark_dir / f"b{batch_id}-p{partition}-a{attempt}").touch()
        if attempt == 0 and partition == 0 and batch_id % 3 == 1:
            started = time.monotonic()
            while time.monotonic() - started < HANG_GUARD_S:
                if any(mark_dir.glob(f"b{batch_id}-p{partition}-a[1-9]*")):
                    break
                time.sleep(0.05)
        return value

    return pass_through


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--in-topic", required=True)
    parser.add_argument("--out-topic", required=True)
    parser.add_argument("--marks", required=True)
    parser.add_argument("--max-offsets", type=int, default=20)
    parser.add_argument("--master", required=True)
    args = parser.parse_args()

    from oncestream.spark.driver_python import launcher_path

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = launcher_path()   # as the SQL server starts them
    pythonpath = os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    os.environ["PYTHONPATH"] = pythonpath
    from pyspark.sql import SparkSession

    import oncestream.spark

    spark = (SparkSession.builder.master(args.master).appName("oncestream-speculation")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.executorEnv.PYTHONPATH", pythonpath)
             .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
             .config("spark.speculation", "true").config("spark.speculation.multiplier", "1")
             .config("spark.speculation.quantile", "0.1").config("spark.speculation.minTaskRuntime", "0")
             .config("spark.task.maxFailures", "4")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    oncestream.spark.register(spark)
    source = (spark.readStream.format("oncestream").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.in_topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(args.max_offsets)).load())
    from pyspark.sql.functions import udf

    gate = udf(_gate(args.marks), "binary")
    query = (source.select(gate("value").alias("value")).writeStream.format("oncestream")
             .option("kafka.bootstrap.servers", args.bootstrap).option("topic", args.out_topic)
             .option("checkpointLocation", args.checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()  # raises the query's error, if any
    print(f"QUERY {query.id} BATCHES {query.lastProgress['batchId'] if query.lastProgress else -1}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
