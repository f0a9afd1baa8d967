"""A Spark driver the tests start as a subprocess and SIGKILL: one streaming query with a checkpoint.

Modes:
  passthrough  in-topic -> format("oncestream") sink -> out-topic (exactly once)
  dualwrite    in-topic -> foreachBatch(dual_write) -> out-topic + table ``events`` in a database
``--master local-cluster[2,1,1024]`` runs the tasks in two executor JVMs (default: local[2,4]); the
executors are started by this JVM and stay in its process group, so a SIGKILL of the group takes
the whole cluster down, like a crash of the machine it runs on. With --available-now the query
drains what is there and the process exits 0; otherwise it runs until killed. Progress is printed as
JSON lines ``{"batch": N, "rows": M}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for path in (str(ROOT / "src"), str(ROOT)):
    if path not in sys.path:
        sys.path.insert(0, path)

from oncestream.spark.driver_python import launcher_path  # noqa: E402
from tests.support.spark_faults import fault_options  # noqa: E402


def _store(spec: str):
    from oncestream.spark.stores import PostgresStore, SqliteStore

    kind, _, target = spec.partition(":")
    return PostgresStore(target) if kind == "postgres" else SqliteStore(target)


def _apply_events(tx, batch_df, batch_id: int) -> None:
    rows = batch_df.select("key", "value").collect()
    tx.executemany("INSERT INTO events (k, v, batch_id) VALUES (?, ?, ?)",
                   [(bytes(r.key).decode() if r.key is not None else None, bytes(r.value).decode(), batch_id)
                    for r in rows])


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The driver's arguments (``argv``: this process's when None)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--in-topic", required=True)
    parser.add_argument("--out-topic", required=True)
    parser.add_argument("--mode", choices=("passthrough", "dualwrite"), default="passthrough")
    parser.add_argument("--store", default="", help="sqlite:PATH or postgres:DSN (dualwrite)")
    parser.add_argument("--max-offsets", type=int, default=50)
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--master", default="local[2,4]")
    parser.add_argument("--crash-at", default="", help="SparkFaults crashAt: step:batch,...")
    parser.add_argument("--crash-marker", default="", help="file noting an injected crash")
    return parser.parse_args(argv)


def start_query(spark, args: argparse.Namespace, faults: dict[str, str] | None = None):
    """The driver's streaming query (``--master`` and the crash options aside), started on
    ``spark``: tests run it in their own session too, to resume a crashed driver's checkpoint
    without starting another JVM."""
    import oncestream.spark

    faults = faults or {}
    source = (spark.readStream.format("oncestream").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.in_topic).option("startingOffsets", "earliest")
              .option("includeHeaders", "true").option("maxOffsetsPerTrigger", str(args.max_offsets)).load())
    if args.mode == "passthrough":
        writer = (source.select("key", "value", "headers").writeStream.format("oncestream")
                  .option("kafka.bootstrap.servers", args.bootstrap).option("topic", args.out_topic)
                  .options(**faults))
    else:
        store = _store(args.store)
        with store.transaction() as tx:
            tx.execute("CREATE TABLE IF NOT EXISTS events (k TEXT, v TEXT NOT NULL, batch_id BIGINT NOT NULL)")
        writer = source.writeStream.foreachBatch(oncestream.spark.dual_write(
            options={"kafka.bootstrap.servers": args.bootstrap, **faults},
            transactional_id=f"crash-driver-{args.out_topic}", store=store,
            apply=_apply_events, to_log=lambda df: df.select("key", "value"), topic=args.out_topic))
    writer = writer.option("checkpointLocation", args.checkpoint)
    writer = writer.trigger(availableNow=True) if args.available_now else writer.trigger(processingTime="200 milliseconds")
    return writer.start()


def main() -> int:
    args = parse()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = launcher_path()   # as the SQL server starts them
    # The crash kills this process group: the driver, its JVM and the JVM's Python workers (where
    # the sink's commit runs), and a local cluster's executors.
    faults = fault_options(crash_at=args.crash_at, kill_group=os.getpgrp(),
                           crash_marker=args.crash_marker) if args.crash_at else {}
    from pyspark.sql import SparkSession

    import oncestream.spark

    builder = SparkSession.builder
    if args.master.startswith("local-cluster"):
        # Executors' Python workers must import the oncestream under test; a lost task is retried.
        builder = (builder.config("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", ""))
                   .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
                   .config("spark.task.maxFailures", "4"))
    spark = (builder.master(args.master).appName("oncestream-crash-driver")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             # A short-lived driver: JIT tier 1 only starts the JVM a few seconds sooner.
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    oncestream.spark.register(spark)
    query = start_query(spark, args, faults)
    seen = -1
    while query.isActive:
        for progress in query.recentProgress:
            if progress["batchId"] > seen:
                seen = progress["batchId"]
                print(json.dumps({"batch": seen, "rows": progress["numInputRows"]}), flush=True)
        time.sleep(0.2)
    query.awaitTermination()  # raises the query's error, if any
    print("DONE", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
