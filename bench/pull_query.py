"""Pull-query latency (issue 13 part 3): p50/p99 of key lookups under concurrent load on one node.

    .venv/bin/python bench/pull_query.py --keys 100000 --clients 8 --queries 2000
    .venv/bin/python bench/pull_query.py --mode node --keys 100000 --clients 8 --queries 1000
    .venv/bin/python bench/pull_query.py --mode rest --server http://HOST:PORT --table T --keys N
    .venv/bin/python bench/pull_query.py --mode restart --keys 100000 --restarts 3

``--mode package`` (default): one broker (ours), a table topic of ``--keys`` rows (KAFKA BIGINT
key, JSON value, ``--partitions`` partitions), materialized by ``TableMaterializations`` as a
node does it; then ``--clients`` threads each run ``--queries`` pull queries
``SELECT * FROM BENCH WHERE ID = <random key>;`` through the same path a node takes for
``/query``: ksqlDB parser (``oncestream.sql.language.parser``), analyzer, ``pull_query`` (store reader,
lookup, serde decode, projection). While they run, a producer keeps updating random keys
(``--update-rate`` records/s, transactional, committed every 100 records) so the materializer
applies and commits concurrently, as on a live node. Latency is per query, wall clock, in the
client thread. Without the parser/analyzer installed, the queries are built from sqlglot
directly (said in the output).

``--mode node``: the same table and updates, but served by a real ``oncestream sql-server``
process (``CREATE SOURCE TABLE`` over the topic, Spark not started) and queried by the client
threads through its REST API, ``POST /query-stream`` over HTTP/2 (h2c, one httpx connection per
client thread). Needs the node to answer pull queries (``oncestream.sql.engine.pull.node_hooks``).

``--mode rest``: the same lookups against an already running SQL server, table and key range
given on the command line.

``--mode restart`` (issue 24 point 5): a node with Spark started at once (the default
``ksql.spark.start=eager``) materializes the table, is SIGKILLed and started again on the same
state directory, ``--restarts`` times. Each restart measures, from the process's spawn, when its
ready file appears, when the first pull query ``SELECT * FROM BENCH WHERE ID = 0`` is answered
with its row (polled every 20 ms), and when the node logs that its Spark session is up.

This is a benchmark command, not a test.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from oncestream.sql.language.catalog import Column, Format, Namespace, SourceInfo
from oncestream.sql.language.sql_ast import SourceKind
from oncestream.sql.language.types import BIGINT, STRING

TABLE = "BENCH"


def _source(topic: str, partitions: int) -> SourceInfo:
    return SourceInfo(name=TABLE, kind=SourceKind.TABLE, topic=topic, key_format=Format.KAFKA, value_format=Format.JSON,
                      columns=(Column("ID", BIGINT, Namespace.KEY), Column("NAME", STRING), Column("AMOUNT", BIGINT)),
                      statement=f"CREATE SOURCE TABLE {TABLE} (ID BIGINT PRIMARY KEY, NAME STRING, AMOUNT BIGINT) "
                                f"WITH (KAFKA_TOPIC='{topic}', KEY_FORMAT='KAFKA', VALUE_FORMAT='JSON');",
                      partitions=partitions, read_only=True)


def _value(i: int, generation: int) -> bytes:
    return json.dumps({"NAME": f"name-{i}-{generation}", "AMOUNT": i * 10 + generation}).encode()


def _produce(bootstrap: str, topic: str, partitions: int, keys: int) -> None:
    from confluent_kafka import Producer

    from oncestream.sql.engine.serde import layout_of

    layout = layout_of(_source(topic, partitions))
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    for i in range(keys):
        while True:
            try:
                producer.produce(topic, _value(i, 0), key=layout.encode_key({"ID": i}), partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120) != 0:
        raise SystemExit("produce did not finish")


def _updater(bootstrap: str, topic: str, partitions: int, keys: int, rate: int, stop: threading.Event,
             counter: list[int]) -> None:
    """Keeps the materializer busy: transactional updates of random keys at ``rate`` records/s."""
    from confluent_kafka import Producer

    from oncestream.sql.engine.serde import layout_of

    layout = layout_of(_source(topic, partitions))
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"pull-bench-{time.time_ns()}",
                         "linger.ms": 5})
    producer.init_transactions(30)
    rng = random.Random(7)
    generation = 0
    while not stop.is_set():
        started = time.monotonic()
        generation += 1
        producer.begin_transaction()
        for _ in range(100):
            i = rng.randrange(keys)
            producer.produce(topic, _value(i, generation), key=layout.encode_key({"ID": i}), partition=i % partitions)
        producer.commit_transaction(30)
        counter[0] += 100
        pause = 100 / rate - (time.monotonic() - started)
        if pause > 0:
            stop.wait(pause)


def _query_runner(mats: Any, source: SourceInfo) -> tuple[str, Callable[[int], list[list[Any]]]]:
    """A function running ``SELECT * FROM BENCH WHERE ID = k`` the way a node does."""
    try:
        from oncestream.sql.engine.pull import pull_query
        from oncestream.sql.language.analyzer import analyze_query
        from oncestream.sql.language.parser import parse
        from oncestream.sql.language.sql_ast import QueryStatement

        def full(key: int) -> list[list[Any]]:
            statement = parse(f"SELECT * FROM {TABLE} WHERE ID = {key};")[0]
            if not isinstance(statement, QueryStatement):
                raise TypeError(f"a pull query parsed as {type(statement).__name__}")
            analyzed = analyze_query(statement.query, {TABLE: source})
            return pull_query(mats, analyzed)[1]

        return "parser + analyzer + pull_query", full
    except ImportError:
        import sqlglot

        from oncestream.sql.engine.pull import PullPlan, run_plan, star_outputs

        outputs = tuple(star_outputs(source))

        def direct(key: int) -> list[list[Any]]:
            plan = PullPlan(outputs, sqlglot.parse_one(f"ID = {key}"))
            with mats.reader(TABLE) as reader:
                return run_plan(plan, source, reader)[1]

        return "sqlglot WHERE + run_plan (parser/analyzer not installed)", direct


def _load(run: Callable[[int], Any], keys: int, clients: int, queries: int) -> tuple[list[float], float, int]:
    latencies: list[list[float]] = [[] for _ in range(clients)]
    misses = [0] * clients
    barrier = threading.Barrier(clients + 1)

    def client(n: int) -> None:
        rng = random.Random(n)
        barrier.wait()
        for _ in range(queries):
            key = rng.randrange(keys)
            started = time.perf_counter()
            rows = run(key)
            latencies[n].append(time.perf_counter() - started)
            if len(rows) != 1:
                misses[n] += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    return [x for per in latencies for x in per], elapsed, sum(misses)


def _load_while_updating(run: Callable[[int], Any], bootstrap: str, topic: str,
                         args: argparse.Namespace) -> tuple[list[float], float, int, int]:
    """``_load`` while ``_updater`` writes ``args.update_rate`` records/s (none at 0); also returns
    how many updates were written meanwhile."""
    stop = threading.Event()
    updated = [0]
    updater = threading.Thread(target=_updater, args=(bootstrap, topic, args.partitions, args.keys,
                                                      args.update_rate, stop, updated))
    if args.update_rate > 0:
        updater.start()
    try:
        latencies, elapsed, misses = _load(run, args.keys, args.clients, args.queries)
    finally:
        stop.set()
        if updater.is_alive():
            updater.join()
    return latencies, elapsed, misses, updated[0]


def _report(label: str, latencies: list[float], elapsed: float, misses: int, clients: int) -> None:
    ordered = sorted(latencies)
    p = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000  # noqa: E731
    print(f"{label}: {len(ordered)} queries by {clients} concurrent clients in {elapsed:.2f} s "
          f"({len(ordered) / elapsed:,.0f} queries/s); latency p50 {p(0.50):.2f} ms, p99 {p(0.99):.2f} ms, "
          f"max {ordered[-1] * 1000:.2f} ms, mean {statistics.fmean(ordered) * 1000:.2f} ms; misses {misses}")


def run_package(args: argparse.Namespace) -> None:
    from oncestream.sql.engine.pull import TableMaterializations
    from tests.support.brokers import BrokerProcess
    from tests.support.clients import create_topic

    with tempfile.TemporaryDirectory(prefix="pull-bench-") as tmp_name:
        tmp = Path(tmp_name)
        broker = BrokerProcess(data_dir=tmp / "broker").start()
        try:
            topic = "pull-bench"
            create_topic(broker.bootstrap, topic, partitions=args.partitions)
            started = time.monotonic()
            _produce(broker.bootstrap, topic, args.partitions, args.keys)
            print(f"produced {args.keys} rows in {time.monotonic() - started:.1f} s")
            source = _source(topic, args.partitions)
            mats = TableMaterializations(tmp / "state", broker.bootstrap, {}, commit_interval_ms=args.commit_interval_ms)
            try:
                started = time.monotonic()
                mats.ensure(source)
                while True:
                    lag = mats.lag(TABLE)
                    if len(lag) == args.partitions and not any(lag.values()):
                        break
                    time.sleep(0.1)
                print(f"materialized in {time.monotonic() - started:.1f} s")
                label, run = _query_runner(mats, source)
                run(0)  # warm up imports and caches
                latencies, elapsed, misses, updated = _load_while_updating(run, broker.bootstrap, topic, args)
                _report(f"package ({label}), {args.keys} rows, {updated} concurrent updates", latencies, elapsed,
                        misses, args.clients)
            finally:
                mats.close()
        finally:
            broker.stop()


def _rest_runner(server: str, table: str, key_column: str) -> Callable[[int], list[list[Any]]]:
    import httpx

    local = threading.local()

    def run(key: int) -> list[list[Any]]:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = httpx.Client(base_url=server, http2=True, http1=False, timeout=30)
        response = client.post("/query-stream", json={"sql": f"SELECT * FROM {table} WHERE {key_column} = {key};",
                                                      "properties": {}}, headers={"Accept": "application/json"})
        response.raise_for_status()
        body = response.json()
        return [row for row in body[1:] if isinstance(row, list)]

    return run


def run_rest(args: argparse.Namespace) -> None:
    run = _rest_runner(args.server, args.table, args.key_column)
    run(0)
    latencies, elapsed, misses = _load(run, args.keys, args.clients, args.queries)
    _report(f"REST /query-stream at {args.server}, table {args.table}", latencies, elapsed, misses, args.clients)


def _node_with_table(bootstrap: str, node: Any, topic: str, args: argparse.Namespace) -> float:
    """Fill ``topic``, start ``node``, create the table over it and wait until the node has
    materialized all of it; returns the seconds that took after the CREATE."""
    from tests.support.clients import create_topic

    create_topic(bootstrap, topic, partitions=args.partitions)
    _produce(bootstrap, topic, args.partitions, args.keys)
    node.start()
    node.ok(_source(topic, args.partitions).statement)
    started = time.monotonic()
    while "materialization-lag: 0 records" not in node.ok(f"DESCRIBE {TABLE} EXTENDED;")[0][
            "sourceDescription"]["statistics"]:
        time.sleep(0.2)
    return time.monotonic() - started


def run_node(args: argparse.Namespace) -> None:
    from tests.support.brokers import BrokerProcess
    from tests.support.sql_servers import LAZY_SPARK, SqlServerProcess

    with tempfile.TemporaryDirectory(prefix="pull-bench-") as tmp_name:
        tmp = Path(tmp_name)
        broker = BrokerProcess(data_dir=tmp / "broker", config={"group.initial.rebalance.delay.ms": "0"}).start()
        node = SqlServerProcess(bootstrap=broker.bootstrap, service_id="pullbench_", state_dir=tmp / "node",
                                config=LAZY_SPARK, name="node")
        try:
            topic = "pull-bench"
            print(f"materialized by the node in {_node_with_table(broker.bootstrap, node, topic, args):.1f} s")
            assert node.url is not None
            run = _rest_runner(node.url, TABLE, "ID")
            run(0)
            latencies, elapsed, misses, updated = _load_while_updating(run, broker.bootstrap, topic, args)
            _report(f"node (REST /query-stream, HTTP/2), {args.keys} rows, {updated} concurrent updates", latencies,
                    elapsed, misses, args.clients)
        finally:
            node.kill()
            broker.stop()


_SPARK_STARTING = "Spark session starting"
_SPARK_UP = "Spark session ready"


def _first_answer_s(node: Any, spawned: float, timeout_s: float = 300.0) -> tuple[float, float, str]:
    """(ready file, first answered pull query) in seconds after ``spawned``, and what the node's
    log said of Spark when the answer arrived."""
    import httpx

    ready = node.state_dir / f"ready-{node.runs - 1}.json"
    deadline = spawned + timeout_s
    while not ready.exists():
        if time.monotonic() > deadline or not node.alive:
            raise SystemExit(f"node not ready:\n{node.log_tail()}")
        time.sleep(0.01)
    ready_s = time.monotonic() - spawned
    url = json.loads(ready.read_text())["url"]
    with httpx.Client(base_url=url, timeout=30) as client:
        while True:
            response = client.post("/query-stream", json={"sql": f"SELECT * FROM {TABLE} WHERE ID = 0;",
                                                          "properties": {}}, headers={"Accept": "application/json"})
            if response.status_code == 200 and len(response.json()) == 2:
                answered_s = time.monotonic() - spawned
                log = node.log_tail(1 << 20)
                spark = ("after Spark was up" if _SPARK_UP in log else "before Spark was up" if _SPARK_STARTING in log
                         else "Spark's start not logged: it was up before the node listened")
                return ready_s, answered_s, spark
            if time.monotonic() > deadline:
                raise SystemExit(f"no pull-query answer: {response.status_code} {response.text}")
            time.sleep(0.02)


def run_restart(args: argparse.Namespace) -> None:
    from tests.support.brokers import BrokerProcess
    from tests.support.sql_servers import SqlServerProcess

    with tempfile.TemporaryDirectory(prefix="pull-bench-") as tmp_name:
        tmp = Path(tmp_name)
        broker = BrokerProcess(data_dir=tmp / "broker", config={"group.initial.rebalance.delay.ms": "0"}).start()
        node = SqlServerProcess(bootstrap=broker.bootstrap, service_id="pullrestart_", state_dir=tmp / "node",
                                config={}, name="node")
        try:
            _node_with_table(broker.bootstrap, node, "pull-bench", args)
            for n in range(args.restarts):
                node.kill()
                spawned = time.monotonic()
                node.start(wait=False)
                ready_s, answered_s, when = _first_answer_s(node, spawned)
                # A node that does not log it (older code: Spark was up before it listened) says nothing.
                wait_spark = time.monotonic() + 60.0
                while _SPARK_UP not in node.log_tail(1 << 20) and time.monotonic() < wait_spark:
                    time.sleep(0.05)
                spark = f"~{time.monotonic() - spawned:.1f} s" if _SPARK_UP in node.log_tail(1 << 20) else "not logged"
                print(f"restart {n + 1} ({args.keys} rows on disk): ready file {ready_s:.2f} s, first pull answer "
                      f"{answered_s:.2f} s after spawn ({when}; "
                      f"Spark up at {spark})", flush=True)
        finally:
            node.kill()
            broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("package", "node", "rest", "restart"), default="package")
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--queries", type=int, default=2_000, help="per client")
    parser.add_argument("--update-rate", type=int, default=2_000, help="records/s updated while querying (0: none)")
    parser.add_argument("--restarts", type=int, default=3, help="restart mode: SIGKILL and restart this often")
    parser.add_argument("--commit-interval-ms", type=int, default=200)
    parser.add_argument("--server", help="rest mode: the SQL server's URL")
    parser.add_argument("--table", default=TABLE, help="rest mode: the table")
    parser.add_argument("--key-column", default="ID", help="rest mode: its BIGINT key column (keys 0..--keys-1)")
    args = parser.parse_args(argv)
    if args.mode == "rest":
        if not args.server:
            parser.error("--mode rest needs --server")
        run_rest(args)
    elif args.mode == "node":
        run_node(args)
    elif args.mode == "restart":
        run_restart(args)
    else:
        run_package(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
