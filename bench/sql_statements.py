"""SQL server benchmark (not a test), issue 12: statement latency and time to a query's first output.

    PYTHONPATH=src .venv/bin/python bench/sql_statements.py [--pairs 100] [--repetitions 5]

Everything is real processes on this machine: one ``oncestream broker`` (two-phase commit enabled,
for the queries' exactly-once sink) and ``oncestream sql-server`` nodes started as the SQL test
suites start them (``tests/support/sql_servers.py``).

1. **Statement latency** (the command-topic round trip as a client sees it): ``--pairs`` pairs of
   ``CREATE STREAM`` / ``DROP STREAM`` sent one after another with ``POST /ksql``, each timed at the
   HTTP client (keep-alive connection, from sending the request to the whole response read); the
   response comes once the node has written the command to the command topic and applied it.
   Once with one node, once with two nodes of one service id, statements alternately sent to each
   (so every statement is written by the other node than the previous one). The first
   ``--warmup-pairs`` pairs of each setup are not counted. These nodes start Spark lazily (a
   statement never needs it). p50 / p99 / max over every counted statement, and per kind.
2. **Time to first output**: an eager-Spark node (its JVM already up); ``--input`` JSON records
   produced into the source topic before anything runs; then per repetition a confluent-kafka
   consumer (``isolation.level=read_committed``, ``auto.offset.reset=earliest``, a new group) is
   subscribed to the output topic, and the clock runs from sending ``CREATE STREAM ... AS SELECT``
   (``auto.offset.reset=earliest``) until that consumer returns the first record. Same for
   ``CREATE TABLE ... AS SELECT ... GROUP BY``. Each query is terminated and its sink dropped
   before the next repetition; one unmeasured CSAS first warms up Spark's Python workers.
   Median over ``--repetitions``. Also reported: when the POST was answered, and when the node
   logged that the query-assignment group gave it the query (its log's wall clock; ms resolution),
   so the time splits into placement and Spark (start, first micro-batch, transaction commit).

Prints each figure, the machine's load average before and after, and a JSON summary at the end.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (str(ROOT / "src"), str(ROOT)):
    if path not in sys.path:
        sys.path.insert(0, path)

import httpx  # noqa: E402

from oncestream.broker_process import OnceStreamBroker  # noqa: E402
from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess  # noqa: E402

HEADERS = {"Accept": "application/vnd.ksql.v1+json"}
HTTP_TIMEOUT_S = 120.0
FIRST_OUTPUT_TIMEOUT_S = 300.0
# The node's INFO line when the query-assignment group hands it queries (sql/server/assignment.py).
ASSIGNED_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO oncestream\.sql: oncestream sql: "
                           r"generation \d+ assigns this node \[(.*)\]$", re.MULTILINE)


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of ``samples``."""
    ordered = sorted(samples)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100)
    return ordered[int(rank) - 1]


def summary_ms(samples_s: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in samples_s]
    return {"n": len(ms), "p50_ms": round(percentile(ms, 50), 1), "p99_ms": round(percentile(ms, 99), 1),
            "max_ms": round(max(ms), 1), "mean_ms": round(statistics.fmean(ms), 1)}


def post_ksql(client: httpx.Client, url: str, statement: str, properties: dict[str, Any] | None = None) -> list[Any]:
    response = client.post(f"{url}/ksql", json={"ksql": statement, "streamsProperties": properties or {}},
                           headers=HEADERS, timeout=HTTP_TIMEOUT_S)
    if response.status_code != 200:
        raise RuntimeError(f"{statement!r}: {response.status_code} {response.text}")
    return response.json()


# --- 1. statement latency -------------------------------------------------------------------------

def statement_latency(nodes: list[SqlServerProcess], pairs: int, warmup_pairs: int) -> dict[str, Any]:
    """CREATE/DROP pairs, statement i sent to ``nodes[i % len(nodes)]``; latencies in seconds."""
    clients = [httpx.Client() for _ in nodes]
    name = f"LAT_{uuid.uuid4().hex[:6].upper()}"
    create = f"CREATE STREAM {name} (ID INT KEY, V STRING) WITH (KAFKA_TOPIC='{name.lower()}', PARTITIONS=1, " \
             "VALUE_FORMAT='JSON');"
    drop = f"DROP STREAM {name};"
    by_kind: dict[str, list[float]] = {"CREATE STREAM": [], "DROP STREAM": []}
    sent = 0
    try:
        for pair in range(warmup_pairs + pairs):
            for kind, statement in (("CREATE STREAM", create), ("DROP STREAM", drop)):
                i = sent % len(nodes)
                sent += 1
                started = time.perf_counter()
                entities = post_ksql(clients[i], str(nodes[i].url), statement)
                elapsed = time.perf_counter() - started
                status = entities[0].get("commandStatus", {}).get("status")
                if status != "SUCCESS":
                    raise RuntimeError(f"{statement!r} on {nodes[i].name}: {entities}")
                if pair >= warmup_pairs:
                    by_kind[kind].append(elapsed)
    finally:
        for client in clients:
            client.close()
    every = by_kind["CREATE STREAM"] + by_kind["DROP STREAM"]
    return {"all": summary_ms(every), **{kind: summary_ms(v) for kind, v in by_kind.items()}}


# --- 2. time to first output ----------------------------------------------------------------------

def produce_input(bootstrap: str, topic: str, records: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(records):
        value = json.dumps({"NAME": f"name-{i}", "AMOUNT": i % 100}, separators=(",", ":")).encode()
        producer.produce(topic, value=value, key=struct.pack(">i", i % 10))
    if producer.flush(60) != 0:
        raise RuntimeError("input not delivered")


def assigned_after_s(node: SqlServerProcess, query_id: str, sent_epoch_s: float) -> float | None:
    """Seconds from ``sent_epoch_s`` until the node logged that the assignment group gave it
    ``query_id`` (its log's wall-clock time, local time zone, millisecond resolution)."""
    for match in ASSIGNED_LINE.finditer(node.log_tail(1 << 22)):
        if f"'{query_id}'" in match.group(2):
            logged = datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            return logged - sent_epoch_s
    return None


def first_output_s(node: SqlServerProcess, client: httpx.Client, bootstrap: str, statement: str,
                   topic: str) -> tuple[float, float, str, float]:
    """(seconds to the first committed output record, seconds of the POST itself, query id, the
    wall-clock time the statement was sent)."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "enable.auto.commit": False,
                         # the output topic does not exist yet: look for it often, not every 5 min
                         "topic.metadata.refresh.interval.ms": 100,
                         "allow.auto.create.topics": False})
    consumer.subscribe([topic])
    try:
        consumer.poll(0.1)  # joins the group before the clock starts (no partitions yet)
        sent_epoch_s = time.time()
        started = time.perf_counter()
        entities = post_ksql(client, str(node.url), statement, {"ksql.streams.auto.offset.reset": "earliest"})
        posted = time.perf_counter() - started
        status = entities[0].get("commandStatus", {})
        if status.get("status") != "SUCCESS":
            raise RuntimeError(f"{statement!r}: {entities}")
        while time.perf_counter() - started < FIRST_OUTPUT_TIMEOUT_S:
            msg = consumer.poll(0.02)
            if msg is None:
                continue
            if msg.error() is not None:
                continue  # UNKNOWN_TOPIC_OR_PART until the sink topic exists
            return time.perf_counter() - started, posted, str(status.get("queryId")), sent_epoch_s
        raise RuntimeError(f"no output on {topic} within {FIRST_OUTPUT_TIMEOUT_S:.0f} s:\n{node.log_tail()}")
    finally:
        consumer.close()


def time_to_first_output(node: SqlServerProcess, bootstrap: str, repetitions: int, records: int) -> dict[str, Any]:
    client = httpx.Client()
    source_topic = f"bench_src_{uuid.uuid4().hex[:6]}"
    post_ksql(client, str(node.url), f"CREATE STREAM SRC (ID INT KEY, NAME STRING, AMOUNT INT) WITH "
                                     f"(KAFKA_TOPIC='{source_topic}', PARTITIONS=1, VALUE_FORMAT='JSON');")
    produce_input(bootstrap, source_topic, records)
    kinds = {
        "CSAS": ("STREAM", "CREATE STREAM {name} WITH (KAFKA_TOPIC='{topic}') AS SELECT ID, NAME, AMOUNT * 2 AS "
                           "DOUBLED FROM SRC WHERE AMOUNT >= 10 EMIT CHANGES;"),
        "CTAS GROUP BY": ("TABLE", "CREATE TABLE {name} WITH (KAFKA_TOPIC='{topic}') AS SELECT ID, COUNT(*) AS N, "
                                   "SUM(AMOUNT) AS TOTAL FROM SRC GROUP BY ID EMIT CHANGES;"),
    }
    results: dict[str, Any] = {}
    try:
        plan = [("warm-up", "CSAS")] + [(str(r), kind) for r in range(1, repetitions + 1) for kind in kinds]
        for label, kind in plan:
            source_kind, template = kinds[kind]
            name = f"OUT_{uuid.uuid4().hex[:6].upper()}"
            topic = f"bench_out_{name.lower()}"
            first_s, posted_s, query_id, sent_epoch_s = first_output_s(
                node, client, bootstrap, template.format(name=name, topic=topic), topic)
            assigned_s = assigned_after_s(node, query_id, sent_epoch_s)
            assigned_ms = None if assigned_s is None else round(assigned_s * 1000, 1)
            print(f"  {kind} {label}: first output after {first_s * 1000:.0f} ms "
                  f"(POST answered after {posted_s * 1000:.0f} ms, query assigned after {assigned_ms} ms)", flush=True)
            if label != "warm-up":
                results.setdefault(kind, {"first_output_ms": [], "post_ms": [], "assigned_ms": []})
                results[kind]["first_output_ms"].append(round(first_s * 1000, 1))
                results[kind]["post_ms"].append(round(posted_s * 1000, 1))
                results[kind]["assigned_ms"].append(assigned_ms)
            post_ksql(client, str(node.url), f"TERMINATE {query_id};")
            post_ksql(client, str(node.url), f"DROP {source_kind} {name};")
    finally:
        client.close()
    for figures in results.values():
        figures["median_first_output_ms"] = statistics.median(figures["first_output_ms"])
        figures["median_post_ms"] = statistics.median(figures["post_ms"])
        assigned = [a for a in figures["assigned_ms"] if a is not None]
        figures["median_assigned_ms"] = statistics.median(assigned) if assigned else None
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=100, help="counted CREATE/DROP pairs per setup")
    parser.add_argument("--warmup-pairs", type=int, default=5)
    parser.add_argument("--repetitions", type=int, default=5, help="CSAS and CTAS runs for time to first output")
    parser.add_argument("--input", type=int, default=1000, help="records in the source topic before the queries")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-first-output", action="store_true")
    args = parser.parse_args()

    summary: dict[str, Any] = {"load_average_before": load_average(), "started_utc": time.strftime(
        "%Y-%m-%d %H:%M", time.gmtime()), "argv": sys.argv[1:]}
    print(f"load average before: {summary['load_average_before']}", flush=True)
    with tempfile.TemporaryDirectory(prefix="sql-statements-bench-") as tmp:
        work = Path(tmp)
        broker = OnceStreamBroker(work / "data", config={"transaction.two.phase.commit.enable": "true",
                                                         "group.initial.rebalance.delay.ms": "0"})
        broker.start()
        nodes: list[SqlServerProcess] = []
        try:
            bootstrap = broker.bootstrap
            if not args.skip_latency:
                one = SqlServerProcess(bootstrap=bootstrap, service_id="bench_one_", state_dir=work / "one",
                                       config=LAZY_SPARK, name="one")
                nodes.append(one.start())
                summary["one_node"] = statement_latency([one], args.pairs, args.warmup_pairs)
                print(f"one node: {json.dumps(summary['one_node'])}", flush=True)
                one.terminate()
                pair = [SqlServerProcess(bootstrap=bootstrap, service_id="bench_two_", state_dir=work / n,
                                         config=LAZY_SPARK, name=n) for n in ("a", "b")]
                for node in pair:
                    nodes.append(node.start())
                summary["two_nodes"] = statement_latency(pair, args.pairs, args.warmup_pairs)
                print(f"two nodes: {json.dumps(summary['two_nodes'])}", flush=True)
                for node in pair:
                    node.terminate()
            if not args.skip_first_output:
                eager = SqlServerProcess(bootstrap=bootstrap, service_id="bench_first_", state_dir=work / "eager",
                                         name="eager")
                nodes.append(eager.start())
                summary["first_output"] = time_to_first_output(eager, bootstrap, args.repetitions, args.input)
                eager.terminate()
        finally:
            for node in nodes:
                if node.alive:
                    node.kill()
            broker.stop()
    summary["load_average_after"] = load_average()
    print(f"load average after: {summary['load_average_after']}")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(main())
