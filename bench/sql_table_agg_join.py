"""SQL layer benchmark (not a test): records/s of a table aggregation and of an n-way join run
through the SQL runtime (``QueryRuntime.start_persistent``: parse, analyze, compile, JSON serde,
exactly-once sink) against the same logic written by hand in PySpark with our connector and the
same sink, one run each (issue 24's goal: SQL / hand-written >= 0.8).

    .venv/bin/python bench/sql_table_agg_join.py [--rows 100000] [--rounds 1]

- **Table aggregation**: ``SELECT REGION, COUNT(*), SUM(AMOUNT) FROM USERS GROUP BY REGION`` over
  a TABLE whose rows are updated (each key written several times), so each update retracts the
  row's old contribution. Hand-written: ``applyInPandasWithState`` keyed by the record key (state:
  the row's region and amount) emitting signed deltas, then Spark's ``sum`` per region (update
  mode): the usual PySpark way to aggregate a changelog.
- **N-way join**: ``ORDERS JOIN CUSTOMERS ON CID JOIN PRODUCTS ON PID`` (a stream enriched by two
  tables). Hand-written: two chained stateful operators (``applyInPandasWithState``, then
  ``transformWithState``: Spark allows one ``applyInPandasWithState`` per query), each keyed by its join
  key, holding the table's latest value (typed columns, not JSON) and emitting each order joined
  with it, a key's rows in (ROWTIME, table first, partition, offset) order.

Everything runs on this machine: one oncestream broker (two-phase commit enabled) on a free port
and one SparkSession configured with ``runtime.spark_session_config()``. The inputs are written
first (tables before the stream, with earlier timestamps); every pipeline reads them from earliest
with the same maxOffsetsPerTrigger and trigger interval and writes its own output topic. The time of
a run is from building the plan until Spark's progress counts every input record (so it includes the
last batch's commit). Each pipeline first runs once, unmeasured, over small topics (warm-up).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (str(ROOT / "src"), str(ROOT)):
    if path not in sys.path:
        sys.path.insert(0, path)

from bench.sql_pipeline import _create_topics, _show_batches, _wait_all, sql_bench_runtime  # noqa: E402

REGIONS = 50
T0 = 1_700_000_000_000

AGG_SOURCE = ("CREATE TABLE USERS (ID INT PRIMARY KEY, REGION STRING, AMOUNT BIGINT) "
              "WITH (KAFKA_TOPIC='{users}', VALUE_FORMAT='JSON');")
AGG_QUERY = ("CREATE TABLE AGG_{n} AS SELECT REGION, COUNT(*) AS C, SUM(AMOUNT) AS S FROM USERS GROUP BY REGION "
             "EMIT CHANGES;")
JOIN_SOURCES = ("CREATE STREAM ORDERS (ID INT KEY, CID INT, PID INT, AMOUNT BIGINT) "
                "WITH (KAFKA_TOPIC='{orders}', VALUE_FORMAT='JSON');",
                "CREATE TABLE CUSTOMERS (ID INT PRIMARY KEY, NAME STRING) WITH (KAFKA_TOPIC='{customers}', VALUE_FORMAT='JSON');",
                "CREATE TABLE PRODUCTS (ID INT PRIMARY KEY, TITLE STRING) WITH (KAFKA_TOPIC='{products}', VALUE_FORMAT='JSON');")
JOIN_QUERY = ("CREATE STREAM ENRICHED_{n} AS SELECT O.PID, O.ID AS ORDER_ID, O.AMOUNT, C.NAME, P.TITLE FROM ORDERS O "
              "JOIN CUSTOMERS C ON O.CID = C.ID JOIN PRODUCTS P ON O.PID = P.ID EMIT CHANGES;")


def _produce(bootstrap: str, topic: str, records: Iterator[tuple[int, dict[str, Any] | None, int]]) -> int:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "batch.size": 1 << 20})
    count = 0
    for key, value, ts in records:
        body = None if value is None else json.dumps(value, separators=(",", ":")).encode()
        while True:
            try:
                producer.produce(topic, value=body, key=key.to_bytes(4, "big"), timestamp=ts)
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
    if producer.flush(120) != 0:
        raise RuntimeError(f"{topic}: records not acknowledged")
    return count


def _fill_agg(bootstrap: str, topic: str, rows: int) -> int:
    """``rows`` updates of ``rows // 4`` users (each key written about 4 times, 1 in 50 a delete)."""
    keys = max(rows // 4, 1)

    def records() -> Iterator[tuple[int, dict[str, Any] | None, int]]:
        for i in range(rows):
            value = None if i % 50 == 49 else {"REGION": f"r{(i * 7) % REGIONS}", "AMOUNT": i % 1000}
            yield i % keys, value, T0 + i
    return _produce(bootstrap, topic, records())


def _fill_join(bootstrap: str, topics: dict[str, str], rows: int) -> int:
    """Customers and products first (earlier timestamps), then ``rows`` orders."""
    customers, products = max(rows // 10, 1), max(rows // 100, 1)
    total = _produce(bootstrap, topics["customers"], ((c, {"NAME": f"customer-{c}"}, T0 + c) for c in range(customers)))
    total += _produce(bootstrap, topics["products"], ((p, {"TITLE": f"product-{p}"}, T0 + p) for p in range(products)))
    total += _produce(bootstrap, topics["orders"], ((i, {"CID": (i * 13) % customers, "PID": (i * 7) % products,
                                                         "AMOUNT": i % 500}, T0 + customers + i) for i in range(rows)))
    return total


def _run_sql(runtime: Any, sources: dict[str, Any], query: str, query_id: str, topic_out: str, records: int) -> float:
    from oncestream.sql.language.analyzer import analyze_query
    from oncestream.sql.language.catalog import Format, QueryInfo, SourceInfo
    from oncestream.sql.language.parser import parse
    from oncestream.sql.language.sql_ast import CreateAsSelect

    (statement,) = parse(query)
    if not isinstance(statement, CreateAsSelect):
        raise TypeError(f"the benchmark query must be a CREATE ... AS SELECT, parsed as {type(statement).__name__}")
    started = time.perf_counter()
    analyzed = analyze_query(statement.query, sources, sink=statement.name)
    sink = SourceInfo(name=statement.name, kind=analyzed.result_kind, topic=topic_out, key_format=Format.KAFKA,
                      value_format=Format.JSON, columns=tuple(analyzed.columns), statement=statement.text, partitions=2)
    info = QueryInfo(query_id=query_id, statement=statement.text, sink=sink.name, sources=tuple(sources),
                     query=statement.query, output_columns=analyzed.columns, command_offset=0)
    runtime.start_persistent(info, analyzed, sink, {"auto.offset.reset": "earliest"})
    status = runtime.status(query_id)
    if status.state != "RUNNING":
        raise RuntimeError(status.error)
    def progress() -> list[Any]:
        failed = runtime.status(query_id)
        if failed.state == "ERROR":
            raise RuntimeError(f"query {query_id} failed: {failed.error}")
        return list(runtime.progress(query_id))

    elapsed = _wait_all(progress, records, started)
    _show_batches("sql", runtime.progress(query_id))
    runtime.stop_persistent(query_id)
    return elapsed


def _read(spark: Any, bootstrap: str, topic: str, max_offsets: int) -> Any:
    return (spark.readStream.format("oncestream").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").option("includeHeaders", "false")
            .option("maxOffsetsPerTrigger", str(max_offsets)).load())


def _hand_agg(spark: Any, bootstrap: str, topic: str, max_offsets: int) -> tuple[Any, str]:
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    parsed = _read(spark, bootstrap, topic, max_offsets).select(
        F.hex("key").alias("K"), F.from_json(F.col("value").cast("string"), "REGION string, AMOUNT bigint").alias("v"),
        F.col("value").isNotNull().alias("PRESENT"), "partition", "offset")
    rows = parsed.select("K", "v.REGION", "v.AMOUNT", "PRESENT", "partition", "offset")

    def contributions(key: Any, frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        batch = pd.concat(list(frames), ignore_index=True).sort_values(["partition", "offset"], kind="stable")
        previous = state.get if state.exists else None
        regions: list[str] = []
        counts: list[int] = []
        sums: list[int] = []
        for region, amount, present in zip(batch["REGION"], batch["AMOUNT"], batch["PRESENT"], strict=True):
            if previous is not None:
                regions.append(previous[0])
                counts.append(-1)
                sums.append(-int(previous[1]))
            previous = (region, int(amount)) if present and isinstance(region, str) else None
            if previous is not None:
                regions.append(previous[0])
                counts.append(1)
                sums.append(previous[1])
        if previous is None:
            if state.exists:
                state.remove()
        else:
            state.update(previous)
        yield pd.DataFrame({"REGION": regions, "C": pd.Series(counts, dtype="int64"), "S": pd.Series(sums, dtype="int64")})

    deltas = rows.groupBy("K").applyInPandasWithState(
        contributions, "REGION string, C bigint, S bigint", "REGION string, AMOUNT bigint", "append",
        GroupStateTimeout.NoTimeout)
    totals = deltas.groupBy("REGION").agg(F.sum("C").alias("C"), F.sum("S").alias("S"))
    out = totals.select(F.col("REGION").cast("binary").alias("key"),
                        F.to_json(F.struct("C", "S")).cast("binary").alias("value"))
    return out, "update"


def _table_value_processor(carried: list[str], table_column: str) -> Any:
    """A ``transformWithState`` processor of the same join (Spark allows one
    ``applyInPandasWithState`` per query, so a second join is one of these)."""
    from pyspark.sql import Row
    from pyspark.sql import types as T
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class TableValue(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.value = handle.getValueState("value", T.StructType([T.StructField("v", T.StringType())]))

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            batch = sorted(rows, key=lambda r: (r["__TS"], r["SIDE"], r["partition"], r["offset"]))
            current = self.value.get()[0] if self.value.exists() else None
            out = []
            for r in batch:
                if r["SIDE"] == 0:
                    current = r[table_column]
                elif current is not None:
                    out.append(Row(__TS=r["__TS"], partition=r["partition"], offset=r["offset"],
                                   **{c: r[c] for c in carried}, **{table_column: current}))
            if current is None:
                if self.value.exists():
                    self.value.clear()
            else:
                self.value.update((current,))
            return iter(out)

        def close(self) -> None:
            pass

    return TableValue()


def _stream_table(stream: Any, table: Any, stream_key: str, carried: list[str], table_column: str,
                  pandas_state: bool = True) -> Any:
    """Stream rows (``carried`` columns, ``__TS``/``partition``/``offset``) joined with the table's
    latest ``table_column`` per key (INNER)."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    def nulls(names: list[str], frame_columns: list[str]) -> list[Any]:
        return [F.col(n) if n in frame_columns else F.lit(None).cast("string").alias(n) for n in names]

    payload = [*carried, table_column]
    union = (stream.select(F.col(stream_key).cast("string").alias("JK"), F.lit(1).alias("SIDE"), "__TS", "partition",
                           "offset", *[F.col(c).cast("string").alias(c) for c in carried],
                           F.lit(None).cast("string").alias(table_column))
             .unionByName(table.select(F.col("ID").cast("string").alias("JK"), F.lit(0).alias("SIDE"), "__TS", "partition",
                                       "offset", *nulls(carried, []), F.col(table_column))))

    def join(key: Any, frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        batch = pd.concat(list(frames), ignore_index=True).sort_values(["__TS", "SIDE", "partition", "offset"],
                                                                      kind="stable")
        current = state.get[0] if state.exists else None
        keep = []
        values = []
        for i, (side, value) in enumerate(zip(batch["SIDE"], batch[table_column], strict=True)):
            if side == 0:
                current = value if isinstance(value, str) else None
            elif current is not None:
                keep.append(i)
                values.append(current)
        if current is None:
            if state.exists:
                state.remove()
        else:
            state.update((current,))
        out = batch.iloc[keep][["__TS", "partition", "offset", *carried]].copy()
        out[table_column] = values
        yield out

    schema = ", ".join(["__TS bigint", "partition int", "offset bigint", *(f"{c} string" for c in payload)])
    if not pandas_state:
        from pyspark.sql import types as T

        struct = T.StructType([T.StructField("__TS", T.LongType()), T.StructField("partition", T.IntegerType()),
                               T.StructField("offset", T.LongType()),
                               *(T.StructField(c, T.StringType()) for c in payload)])
        return union.groupBy("JK").transformWithState(_table_value_processor(carried, table_column), struct, "Append",
                                                      "None")
    return union.groupBy("JK").applyInPandasWithState(join, schema, f"{table_column} string", "append",
                                                     GroupStateTimeout.NoTimeout)


def _hand_join(spark: Any, bootstrap: str, topics: dict[str, str], max_offsets: int) -> tuple[Any, str]:
    from pyspark.sql import functions as F

    def source(topic: str, schema: str) -> Any:
        raw = _read(spark, bootstrap, topic, max_offsets)
        return raw.select(F.conv(F.hex("key"), 16, 10).cast("int").alias("ID"),
                          F.from_json(F.col("value").cast("string"), schema).alias("v"),
                          F.unix_millis("timestamp").alias("__TS"), "partition", "offset").select(
            "ID", "v.*", "__TS", "partition", "offset")

    orders = source(topics["orders"], "CID int, PID int, AMOUNT bigint")
    customers = source(topics["customers"], "NAME string")
    products = source(topics["products"], "TITLE string")
    with_customer = _stream_table(orders, customers, "CID", ["ID", "PID", "AMOUNT"], "NAME")
    enriched = _stream_table(with_customer, products, "PID", ["ID", "PID", "AMOUNT", "NAME"], "TITLE", pandas_state=False)
    out = enriched.select(
        F.unhex(F.lpad(F.hex(F.col("PID").cast("int")), 8, "0")).alias("key"),
        F.to_json(F.struct(F.col("ID").cast("int").alias("ORDER_ID"), F.col("AMOUNT").cast("bigint").alias("AMOUNT"),
                           "NAME", "TITLE")).cast("binary").alias("value"))
    return out, "append"


def _run_hand(build: Callable[[], tuple[Any, str]], bootstrap: str, topic_out: str, checkpoint: str, records: int,
              trigger_ms: int) -> float:
    # timed from building the plan, as the SQL run is timed from analyzing the statement
    from oncestream.sql.engine.compile.update_sink import batch_writer

    started = time.perf_counter()
    out, mode = build()
    options = {"kafka.bootstrap.servers": bootstrap, "topic": topic_out,
               "kafka.transactional.id": f"bench-hand-{topic_out}"}
    # the connector is append-only as a streaming sink: update-mode results go through its writer
    # from foreachBatch, as the SQL runtime writes them
    writer = out.writeStream.foreachBatch(batch_writer(options)) if mode == "update" else \
        out.writeStream.format("oncestream").options(**options)
    query = (writer.option("checkpointLocation", checkpoint).outputMode(mode)
             .trigger(processingTime=f"{trigger_ms} milliseconds").start())
    def progress() -> list[Any]:
        if query.exception() is not None:
            raise RuntimeError(f"hand-written query failed: {query.exception()}")
        return list(query.recentProgress)

    elapsed = _wait_all(progress, records, started)
    _show_batches("hand", query.recentProgress)
    query.stop()
    return elapsed


def _retried(run: Callable[[int], float], attempts: int = 3) -> float:
    """``run(attempt)``, again when Spark's Python worker did not connect back in time (a loaded
    machine; it says nothing about the pipeline)."""
    for attempt in range(attempts):
        try:
            return run(attempt)
        except RuntimeError as e:
            if ("connect back" not in str(e) and "CANNOT_OPEN_SOCKET" not in str(e)) or attempt == attempts - 1:
                raise
            print(f"retrying after: {str(e)[:120]}", file=sys.stderr, flush=True)
            time.sleep(5)
    raise RuntimeError("no attempt")


def _sources(statements: tuple[str, ...], partitions: int, **topics: str) -> dict[str, Any]:
    from oncestream.sql.language.catalog import Column, Format, Namespace, SourceInfo
    from oncestream.sql.language.parser import parse
    from oncestream.sql.language.sql_ast import CreateSource

    out = {}
    for text in statements:
        (ddl,) = parse(text.format(**topics))
        if not isinstance(ddl, CreateSource):
            raise TypeError(f"a benchmark source must be a CREATE STREAM/TABLE, parsed as {type(ddl).__name__}")
        topic = str(ddl.properties.get("KAFKA_TOPIC", "")).strip("'")
        out[ddl.name] = SourceInfo(name=ddl.name, kind=ddl.kind, topic=topic, key_format=Format.KAFKA,
                                   value_format=Format.JSON,
                                   columns=tuple(Column(c.name, c.type, Namespace.KEY if c.key else Namespace.VALUE)
                                                 for c in ddl.columns), statement=ddl.text, partitions=partitions)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="table updates, and orders")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--max-offsets", type=int, default=50_000, help="maxOffsetsPerTrigger of every pipeline")
    parser.add_argument("--trigger-ms", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=1, help="runs of each pipeline, alternating which goes first")
    parser.add_argument("--master", default=f"local[{os.cpu_count() or 2}]")
    parser.add_argument("--only", choices=("agg", "join"), default=None)
    args = parser.parse_args()

    with sql_bench_runtime("oncestream-sql-agg-join-bench-", args.master, trigger_interval_ms=args.trigger_ms,
                           max_offsets_per_trigger=args.max_offsets) as (bootstrap, spark, runtime, work):
        results: list[tuple[str, int, list[float], list[float]]] = []
        workloads = [w for w in ("agg", "join") if args.only in (None, w)]
        for workload in workloads:
            datasets = {}
            for label, rows in (("warm", min(args.rows, 5_000)), ("main", args.rows)):
                if workload == "agg":
                    topics = {"users": f"{label}-users"}
                    _create_topics(bootstrap, args.partitions, *topics.values())
                    count = _fill_agg(bootstrap, topics["users"], rows)
                    sources = _sources((AGG_SOURCE,), args.partitions, **topics)
                else:
                    topics = {name: f"{label}-{name}" for name in ("orders", "customers", "products")}
                    _create_topics(bootstrap, args.partitions, *topics.values())
                    count = _fill_join(bootstrap, topics, rows)
                    sources = _sources(JOIN_SOURCES, args.partitions, **topics)
                datasets[label] = (topics, count, sources)
            sql_s: list[float] = []
            hand_s: list[float] = []
            runs = [("warm", 0, False)] + [("main", r, True) for r in range(args.rounds)]
            for label, r, measured in runs:
                topics, count, sources = datasets[label]
                order = ("sql", "hand") if r % 2 == 0 else ("hand", "sql")
                for kind in order:
                    out_topic = f"out-{workload}-{label}-{kind}-{r}"
                    _create_topics(bootstrap, args.partitions, out_topic)
                    n = f"{label.upper()}_{r}"
                    query = (AGG_QUERY if workload == "agg" else JOIN_QUERY).format(n=n)

                    def run(attempt: int, kind: str = kind, query: str = query, n: str = n, out_topic: str = out_topic,
                            topics: dict[str, str] = topics, sources: dict[str, Any] = sources, workload: str = workload,
                            count: int = count) -> float:
                        if kind == "sql":
                            return _run_sql(runtime, sources, query.replace(f"_{n} ", f"_{n}_{attempt} "),
                                            f"Q_{workload.upper()}_{n}_{attempt}", out_topic, count)

                        def build() -> tuple[Any, str]:
                            if workload == "agg":
                                return _hand_agg(spark, bootstrap, topics["users"], args.max_offsets)
                            return _hand_join(spark, bootstrap, topics, args.max_offsets)
                        return _run_hand(build, bootstrap, out_topic, str(work / f"hand-{workload}-{n}-{attempt}"), count,
                                         args.trigger_ms)
                    elapsed = _retried(run)
                    print(f"{workload} {label} round {r} {kind}: {elapsed:.2f} s", flush=True)
                    if measured:
                        (sql_s if kind == "sql" else hand_s).append(elapsed)
            results.append((workload, datasets["main"][1], sql_s, hand_s))
        print(f"\n## Table aggregation and n-way join: SQL layer vs hand-written PySpark ({args.rows} rows, "
              f"{args.partitions} partitions, {args.master}, maxOffsetsPerTrigger {args.max_offsets}, "
              f"trigger {args.trigger_ms} ms, {args.rounds} round(s))\n")
        print("| workload | input records | SQL records/s | hand-written records/s | ratio SQL / hand | runs SQL; hand (s) |")
        print("|---|---|---|---|---|---|")
        for workload, count, sql_runs, hand_runs in results:
            sql_rate = count / statistics.median(sql_runs)
            hand_rate = count / statistics.median(hand_runs)
            name = "table aggregation (COUNT, SUM by region)" if workload == "agg" else "stream-table-table join"
            print(f"| {name} | {count:,} | {sql_rate:,.0f} | {hand_rate:,.0f} | {sql_rate / hand_rate:.3f} | "
                  f"{', '.join(f'{s:.2f}' for s in sql_runs)}; {', '.join(f'{s:.2f}' for s in hand_runs)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
