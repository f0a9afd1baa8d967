"""SQL layer benchmark (not a test): records/s of a filter+project persistent query run through
the SQL runtime (``QueryRuntime.start_persistent``: parse, analyze, compile, JSON serde, exactly-once
sink) against the same query written by hand in PySpark with our connector (from_json / to_json,
the same sink), one run each, in alternating order. Issue 12's goal: ratio SQL / hand-written >= 0.9.

    .venv/bin/python bench/sql_pipeline.py [--records 200000] [--rounds 3]

Everything runs on this machine: one oncestream broker (two-phase commit enabled) on a free port
and one SparkSession (``local[<cores>]``) configured with ``runtime.spark_session_config()``.
Both pipelines read the same input topic from earliest with the same maxOffsetsPerTrigger and
trigger interval and write to their own output topic; the time of a run is from ``start()`` until
Spark's progress reports every input record processed (so it includes the last batch's commit).
Both pipelines first run once, unmeasured, over a small topic (JVM and Python-worker warm-up).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
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

QUERY = ("CREATE STREAM OUT_{n} AS SELECT ID, NAME, AMOUNT * 2 AS DOUBLED FROM ORDERS "
         "WHERE AMOUNT >= 10 EMIT CHANGES;")
SOURCE = ("CREATE STREAM ORDERS (ID INT KEY, NAME STRING, AMOUNT INT, NOTE STRING) "
          "WITH (KAFKA_TOPIC='{topic}', VALUE_FORMAT='JSON');")


def _create_topics(bootstrap: str, partitions: int, *names: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
        future.result(60)


def _fill(bootstrap: str, topic: str, records: int) -> int:
    """JSON orders; returns how many pass the WHERE clause."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "batch.size": 1 << 20})
    passing = 0
    note = "x" * 120
    for i in range(records):
        amount = i % 100
        passing += amount >= 10
        value = json.dumps({"NAME": f"name-{i}", "AMOUNT": amount, "NOTE": note}, separators=(",", ":")).encode()
        while True:
            try:
                producer.produce(topic, value=value, key=i.to_bytes(4, "big"))
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    return passing


def _wait_all(progress, records: int, started: float, timeout_s: float = 1800) -> float:
    """Seconds from ``started`` until the query's progress counts ``records`` input rows."""
    seen: dict[str, int] = {}
    while time.perf_counter() - started < timeout_s:
        for p in progress():
            seen[f"{p['runId']}-{p['batchId']}"] = p["numInputRows"]
        if sum(seen.values()) >= records:
            return time.perf_counter() - started
        time.sleep(0.05)
    raise RuntimeError(f"only {sum(seen.values())} of {records} rows processed in {timeout_s} s")


def _show_batches(kind: str, progress) -> None:
    for p in progress:
        if p["numInputRows"]:
            d = p["durationMs"]
            print(f"  {kind} batch {p['batchId']}: {p['numInputRows']} rows, trigger {d.get('triggerExecution')} ms, "
                  f"addBatch {d.get('addBatch')} ms, latestOffset {d.get('latestOffset')} ms", file=sys.stderr)


def _run_sql(runtime, source, round_no: int, topic_out: str, records: int) -> float:
    from oncestream.sql.language.analyzer import analyze_query
    from oncestream.sql.language.catalog import Format, QueryInfo, SourceInfo
    from oncestream.sql.language.parser import parse
    from oncestream.sql.language.sql_ast import CreateAsSelect

    (statement,) = parse(QUERY.format(n=round_no))
    if not isinstance(statement, CreateAsSelect):
        raise TypeError(f"the benchmark query must be a CREATE ... AS SELECT, parsed as {type(statement).__name__}")
    analyzed = analyze_query(statement.query, {"ORDERS": source}, sink=statement.name)
    sink = SourceInfo(name=statement.name, kind=analyzed.result_kind, topic=topic_out, key_format=Format.KAFKA,
                      value_format=Format.JSON, columns=tuple(analyzed.columns), statement=statement.text, partitions=2)
    query_id = f"CSAS_OUT_{round_no}"
    info = QueryInfo(query_id=query_id, statement=statement.text, sink=sink.name, sources=("ORDERS",),
                     query=statement.query, output_columns=analyzed.columns, command_offset=round_no)
    started = time.perf_counter()
    runtime.start_persistent(info, analyzed, sink, {"auto.offset.reset": "earliest"})
    status = runtime.status(query_id)
    if status.state != "RUNNING":
        raise RuntimeError(status.error)
    elapsed = _wait_all(lambda: runtime.progress(query_id), records, started)
    _show_batches("sql", runtime.progress(query_id))
    runtime.stop_persistent(query_id)
    return elapsed


def _run_hand_written(spark, bootstrap: str, topic_in: str, topic_out: str, checkpoint: str, records: int,
                      max_offsets: int, trigger_ms: int) -> float:
    from pyspark.sql import functions as F

    # Timed from building the plan, as the SQL run is timed from start_persistent (which compiles).
    started = time.perf_counter()
    schema = "NAME string, AMOUNT int, NOTE string"
    source = (spark.readStream.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic_in).option("startingOffsets", "earliest").option("includeHeaders", "false")
              .option("maxOffsetsPerTrigger", str(max_offsets)).load())
    parsed = source.select("key", F.from_json(F.col("value").cast("string"), schema).alias("v"))
    out = parsed.where(F.col("v.AMOUNT") >= 10).select(
        "key", F.to_json(F.struct(F.col("v.NAME").alias("NAME"), (F.col("v.AMOUNT") * 2).alias("DOUBLED")))
        .cast("binary").alias("value"))
    query = (out.writeStream.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
             .option("topic", topic_out).option("checkpointLocation", checkpoint)
             .trigger(processingTime=f"{trigger_ms} milliseconds").start())
    elapsed = _wait_all(lambda: query.recentProgress, records, started)
    _show_batches("hand", query.recentProgress)
    query.stop()
    return elapsed


def sql_spark_session(master: str, app_name: str):
    """A SparkSession with the SQL server's settings (``runtime.spark_session_config()``), Python
    workers importing this checkout, and the connector registered."""
    from pyspark.sql import SparkSession

    import oncestream.spark
    from oncestream.sql.engine.runtime import spark_session_config

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    builder = SparkSession.builder.master(master).appName(app_name).config("spark.ui.enabled", "false")
    for key, value in spark_session_config().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    oncestream.spark.register(spark)
    return spark


@contextlib.contextmanager
def sql_bench_runtime(prefix: str, master: str, **settings):
    """A broker (two-phase commit on) on a free port, a SparkSession (``sql_spark_session``) and a
    ``QueryRuntime`` on them with ``settings`` (``RuntimeSettings`` fields); yields (bootstrap,
    spark, runtime, work directory) and stops all three."""
    from oncestream.sql.engine.runtime import QueryRuntime, RuntimeSettings

    work = Path(tempfile.mkdtemp(prefix=prefix))
    broker = OnceStreamBroker(work / "data", config={"transaction.two.phase.commit.enable": "true"})
    broker.start()
    spark = runtime = None
    try:
        spark = sql_spark_session(master, prefix.rstrip("-"))
        runtime = QueryRuntime(spark, RuntimeSettings(bootstrap_servers=broker.bootstrap, checkpoint_root=str(work / "cp"),
                                                      service_id="bench", **settings))
        yield broker.bootstrap, spark, runtime, work
    finally:
        if runtime is not None:
            runtime.stop_all()
        if spark is not None:
            spark.stop()
        broker.stop()


def orders_source(topic: str, partitions: int):
    """The benchmarks' ORDERS stream (``SOURCE``) on ``topic``, as the metastore records it."""
    from oncestream.sql.language.catalog import Column, Format, Namespace, SourceInfo
    from oncestream.sql.language.parser import parse
    from oncestream.sql.language.sql_ast import CreateSource

    (ddl,) = parse(SOURCE.format(topic=topic))
    if not isinstance(ddl, CreateSource):
        raise TypeError(f"the benchmark source must be a CREATE STREAM, parsed as {type(ddl).__name__}")
    return SourceInfo(name="ORDERS", kind=ddl.kind, topic=topic, key_format=Format.KAFKA, value_format=Format.JSON,
                      columns=tuple(Column(c.name, c.type, Namespace.KEY if c.key else Namespace.VALUE)
                                    for c in ddl.columns), statement=ddl.text, partitions=partitions)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--max-offsets", type=int, default=50_000, help="maxOffsetsPerTrigger of both pipelines")
    parser.add_argument("--trigger-ms", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each pipeline, alternating which goes first")
    parser.add_argument("--master", default=f"local[{os.cpu_count() or 2}]")
    args = parser.parse_args()

    with sql_bench_runtime("oncestream-sql-bench-", args.master, trigger_interval_ms=args.trigger_ms,
                           max_offsets_per_trigger=args.max_offsets) as (bootstrap, spark, runtime, work):
        topic_in = "orders"
        outs = [f"out-{kind}-{r}" for r in range(args.rounds) for kind in ("sql", "hand")]
        _create_topics(bootstrap, args.partitions, topic_in, *outs)
        passing = _fill(bootstrap, topic_in, args.records)
        from oncestream.sql.language.catalog import SourceInfo

        source = orders_source(topic_in, args.partitions)
        # Warm-up, not measured: the first streaming query of a JVM pays for Python workers, class
        # loading and JIT; run both pipelines once over a small topic first.
        warm_in = "warmup"
        _create_topics(bootstrap, args.partitions, warm_in, "warm-sql", "warm-hand")
        warm_records = min(args.records, 50_000)
        _fill(bootstrap, warm_in, warm_records)
        warm_source = SourceInfo(**{**source.__dict__, "topic": warm_in})
        _run_sql(runtime, warm_source, 1000, "warm-sql", warm_records)
        _run_hand_written(spark, bootstrap, warm_in, "warm-hand", str(work / "warm-hand"), warm_records,
                          args.max_offsets, args.trigger_ms)
        sql_s, hand_s = [], []
        for r in range(args.rounds):
            order = ("sql", "hand") if r % 2 == 0 else ("hand", "sql")
            for kind in order:
                if kind == "sql":
                    sql_s.append(_run_sql(runtime, source, r, f"out-sql-{r}", args.records))
                else:
                    hand_s.append(_run_hand_written(spark, bootstrap, topic_in, f"out-hand-{r}", str(work / f"hand-{r}"),
                                                    args.records, args.max_offsets, args.trigger_ms))
                print(f"round {r} {kind}: {(sql_s if kind == 'sql' else hand_s)[-1]:.2f} s", flush=True)
        sql_rate = args.records / statistics.median(sql_s)
        hand_rate = args.records / statistics.median(hand_s)
        print(f"\n## SQL layer vs hand-written PySpark ({args.records} JSON records, {passing} pass the filter, "
              f"{args.partitions} partitions, {args.master}, maxOffsetsPerTrigger {args.max_offsets}, "
              f"trigger {args.trigger_ms} ms, {args.rounds} round(s))\n")
        print("| pipeline | records/s (median) | runs (s) |")
        print("|---|---|---|")
        print(f"| SQL runtime (CSAS filter+project) | {sql_rate:,.0f} | {', '.join(f'{s:.2f}' for s in sql_s)} |")
        print(f"| hand-written PySpark | {hand_rate:,.0f} | {', '.join(f'{s:.2f}' for s in hand_s)} |")
        print(f"\nratio SQL / hand-written: {sql_rate / hand_rate:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
