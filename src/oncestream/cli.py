"""The ``oncestream`` command: broker, topics, produce, consume, transactions, demo.

The client commands are built on ``oncestream.client`` (``Admin``, ``Producer``, ``Consumer``),
not on hand-made protocol requests: what the CLI does is what any client of the library can do.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oncestream.cli_client import admin_session as _admin
from oncestream.cli_client import client_conf as _conf
from oncestream.cli_client import client_errors as _client_errors
from oncestream.cli_client_metrics import register as register_client_metrics
from oncestream.cli_common import CliError
from oncestream.cli_groups import register as register_groups
from oncestream.cli_quotas import register as register_quotas
from oncestream.cli_users import register as register_users
from oncestream.client import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Admin,
    Consumer,
    KafkaError,
    NewTopic,
    Producer,
    TopicDescription,
    TopicPartition,
    TransactionDescription,
)
from oncestream.client.common.errors import KafkaException
from oncestream.client.common.list_offsets import EARLIEST_LOCAL, LATEST_TIERED
from oncestream.client.producer.partitioner import partition_for_key
from oncestream.console.command import register as register_console
from oncestream.demos.broker_crash import main as demo_main
from oncestream.errors import InvalidConfigError
from oncestream.schema_registry.command import register as register_schema_registry
from oncestream.sql.conformance.cli_entry import register as register_sql_conformance
from oncestream.sql.server.server_main import register
from oncestream.sql.server.shell import register as register_sql_shell

if TYPE_CHECKING:
    from oncestream.broker.seams import BrokerSeams


def _parse_props(items: list[str] | None) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--config expects key=value, got {item!r}")
        props[key.strip()] = value.strip()
    return props


def _parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep:
        raise CliError(f"--listen expects HOST:PORT, got {listen!r}")
    return host or "0.0.0.0", int(port)


# --- broker --------------------------------------------------------------------------------------


def cmd_broker(args: argparse.Namespace, seams: BrokerSeams | None = None) -> int:
    """``oncestream broker``; ``seams`` are interfaces a caller building the broker from Python
    injects (broker/seams.py), none from the command line."""
    from oncestream.broker.connection_context import log_fields
    from oncestream.broker.server import run_broker
    from oncestream.broker.state import DataDirInUseError
    from oncestream.logging_setup import LogConfigError, LogSettings, configure_logging

    props = _parse_props(args.config)
    try:
        # Every line a connection causes carries its client address and principal.
        configure_logging(LogSettings.from_properties(props, args.log_level), context=log_fields)
    except LogConfigError as exc:
        raise CliError(str(exc)) from None
    if args.listen is not None and "listeners" in props:
        raise CliError("give either --listen or --config listeners=..., not both")
    host, port = _parse_listen(args.listen or "127.0.0.1:9092")
    ready_file = Path(args.ready_file) if args.ready_file else None
    if args.metadata_store is not None:
        return _cluster_broker(args, host, port, props, ready_file, seams)
    if args.object_store is not None:
        raise CliError("--object-store belongs to cluster mode (--metadata-store); a single broker's "
                       "tiered storage is configured with --config rsm.config.storage.uri=...")
    try:
        return run_broker(Path(args.data_dir), host, port, props, ready_file=ready_file, seams=seams)
    except (DataDirInUseError, InvalidConfigError) as exc:
        raise CliError(str(exc)) from None


def _cluster_broker(args: argparse.Namespace, host: str, port: int, props: dict[str, str],
                    ready_file: Path | None, seams: BrokerSeams | None) -> int:
    """``oncestream broker --metadata-store ... --object-store ...`` (docs/cluster.md): a broker of a
    cluster. A store that cannot be used at start exits with EXIT_STORE_UNAVAILABLE (3)."""
    from oncestream.broker.cluster_run import run_cluster_broker
    from oncestream.broker.cluster_settings import EXIT_STORE_UNAVAILABLE, ClusterSettings, ClusterStartError

    try:
        settings = ClusterSettings.from_options(args.metadata_store, args.object_store, props)
        return run_cluster_broker(settings, host, port, props, ready_file=ready_file, seams=seams)
    except InvalidConfigError as exc:
        raise CliError(str(exc)) from None
    except ClusterStartError as exc:
        print(f"oncestream: {exc}", file=sys.stderr)
        return EXIT_STORE_UNAVAILABLE


def cmd_cluster(args: argparse.Namespace) -> int:
    """``oncestream cluster status``: brokers, leases and objects as PostgreSQL holds them."""
    import asyncio

    from oncestream.broker.cluster_status import ClusterStatusError, read_cluster_status

    try:
        status = asyncio.run(read_cluster_status(args.metadata_store))
    except ClusterStatusError as exc:
        raise CliError(str(exc)) from None
    for line in status.lines():
        print(line)
    return 0


# --- clients -------------------------------------------------------------------------------------

# How long `transactions abort` waits for the coordinator to finish the abort it started.
_ABORT_WAIT_S = 30.0
_ENDED_STATES = ("CompleteAbort", "CompleteCommit", "Empty", "Dead")
_EARLIEST, _LATEST = -2, -1
_UNSUPPORTED_VERSION, _CLUSTER_AUTHORIZATION_FAILED = 35, 31
_FETCH_WAIT_S = 0.5
_PRODUCE_FLUSH_TIMEOUT_S = 60.0
_FIRST_FETCH_CAP_S = 60.0


def _describe_topic(args: argparse.Namespace, admin: Admin, topic: str) -> TopicDescription:
    with _client_errors(args, f"topic {topic!r}"):
        described = admin.describe_topics([topic]).get(topic)
    if described is None:
        raise CliError(f"topic {topic!r}: UNKNOWN_TOPIC_OR_PARTITION")
    if described.error is not None:
        raise CliError(f"topic {topic!r}: {described.error.name()}")
    return described


def _fail_on(what: str, error: KafkaError | None) -> None:
    """``what: ERROR_NAME: broker's message`` for a per-item admin error."""
    if error is not None:
        message = error.str()
        raise CliError(f"{what}: {error.name()}: {message if message != error.name() else ''}")


def _print_topic(args: argparse.Namespace, admin: Admin, t: TopicDescription) -> None:
    """``topics describe``: per partition the log start, the local log start (tiered storage:
    the first offset still on the broker's disk), the latest tiered offset (-1: none), the high
    watermark, the bytes on the broker's disk and in the remote store; then the topic's configs.
    A value the broker cannot give (an older ListOffsets, DescribeLogDirs not allowed) is ``-``."""
    print(f"topic {t.name} id {t.topic_id} partitions {len(t.partitions)}")
    tps = [(t.name, p.id) for p in t.partitions]
    with _client_errors(args, f"offsets of {t.name!r}"):
        lows = admin.list_offsets({tp: _EARLIEST for tp in tps})
        highs = admin.list_offsets({tp: _LATEST for tp in tps})
        local_starts = _tiered_offsets(admin, tps, EARLIEST_LOCAL)
        tiered = _tiered_offsets(admin, tps, LATEST_TIERED)
        local_bytes, remote_bytes = _partition_bytes(admin, tps)
        configs = admin.describe_configs(topics=[t.name]).get(t.name, {})
    for p in t.partitions:
        key = (t.name, p.id)
        print(f"  partition {p.id} leader {p.leader} offsets [{lows[key]}, {highs[key]}) "
              f"local-log-start {local_starts.get(key, '-')} latest-tiered {tiered.get(key, '-')} "
              f"local-bytes {local_bytes.get(key, '-')} remote-bytes {remote_bytes.get(key, '-')}")
    for name, value in configs.items():
        print(f"  config {name}={value}")


def _tiered_offsets(admin: Admin, tps: list[tuple[str, int]], spec: int) -> dict[tuple[str, int], int]:
    """ListOffsets -4 / -5 (v8 / v9); {} when the broker does not serve those versions."""
    try:
        return admin.list_offsets({tp: spec for tp in tps})
    except KafkaException as exc:
        if exc.args[0].code() == _UNSUPPORTED_VERSION:
            return {}
        raise


def _partition_bytes(admin: Admin, tps: list[tuple[str, int]]) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
    """(local, remote) bytes per partition from DescribeLogDirs: the broker's log directories and
    its remote store's entry (``remote:...``, docs/tiered-storage.md; with tiered storage on, a
    partition with nothing tiered has 0 remote bytes). ({}, {}) when DescribeLogDirs is refused."""
    try:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in tps:
            by_topic.setdefault(topic, []).append(partition)
        brokers = admin.describe_log_dirs(topic_partitions=by_topic)
    except KafkaException as exc:
        if exc.args[0].code() in (_UNSUPPORTED_VERSION, _CLUSTER_AUTHORIZATION_FAILED):
            return {}, {}
        raise
    local: dict[tuple[str, int], int] = {}
    remote: dict[tuple[str, int], int] = {}
    has_remote_store = False
    for dirs in brokers.values():
        for log_dir in dirs.values():
            if log_dir.error is not None:
                continue
            has_remote_store |= log_dir.is_remote
            into = remote if log_dir.is_remote else local
            for key, replica in log_dir.replica_infos.items():
                if not replica.is_future:
                    into[key] = into.get(key, 0) + replica.size
    if has_remote_store:
        remote = {key: remote.get(key, 0) for key in local} | remote
    return local, remote


def cmd_topics(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        if args.action == "list":
            with _client_errors(args, "list topics"):
                names = admin.list_topics(include_internal=True)
            for name in names:
                print(name)
        elif args.action == "create":
            new = NewTopic(args.name, num_partitions=args.partitions, config=_parse_props(args.config))
            with _client_errors(args, f"create {args.name!r}"):
                result = admin.create_topics([new])
            _fail_on(f"create {args.name!r}", result.get(args.name))
            print(f"created topic {args.name} with {args.partitions} partition(s)")
        elif args.action == "alter":
            # Only the partition count can grow here; configs go through the admin API.
            with _client_errors(args, f"alter {args.name!r}"):
                result = admin.create_partitions({args.name: args.partitions})
            _fail_on(f"alter {args.name!r}", result.get(args.name))
            print(f"topic {args.name} now has {args.partitions} partition(s)")
        elif args.action == "delete":
            with _client_errors(args, f"delete {args.name!r}"):
                result = admin.delete_topics([args.name])
            error = result.get(args.name)
            if error is not None:
                raise CliError(f"delete {args.name!r}: {error.name()}")
            print(f"deleted topic {args.name}")
        elif args.action == "describe":
            _print_topic(args, admin, _describe_topic(args, admin, args.name))
    return 0


# --- produce -------------------------------------------------------------------------------------


def cmd_produce(args: argparse.Namespace) -> int:
    """stdin lines -> records, idempotent, acks=all, at most --batch-records unacknowledged."""
    with _admin(args) as admin:
        num_partitions = len(_describe_topic(args, admin, args.topic).partitions)
    failures: list[tuple[int, KafkaError]] = []
    acked = 0

    def delivered(err: KafkaError | None, msg: Any) -> None:
        nonlocal acked
        if err is not None:
            failures.append((msg.partition(), err))
        else:
            acked += 1

    with _client_errors(args, "producer"):
        producer = Producer(_conf(args, **{"enable.idempotence": True, "acks": "all", "linger.ms": 5,
                                           "on_delivery": delivered}))
    try:
        round_robin = 0
        queued = 0

        def flush() -> None:
            with _client_errors(args, f"produce to {args.topic}"):
                left = producer.flush(_PRODUCE_FLUSH_TIMEOUT_S)
            if failures:
                partition, err = failures[0]
                raise CliError(f"produce to {args.topic}[{partition}]: {err.name()}")
            if left:
                raise CliError(f"produce to {args.topic}: {left} record(s) not acknowledged within "
                               f"{_PRODUCE_FLUSH_TIMEOUT_S:.0f} s")

        for line in sys.stdin.buffer:
            line = line.rstrip(b"\r\n")
            key = None
            value = line
            if args.key_separator:
                sep = args.key_separator.encode()
                if sep in line:
                    key, value = line.split(sep, 1)
            if args.partition is not None:
                partition = args.partition
            elif key is not None:
                partition = partition_for_key(key, num_partitions)
            else:
                partition = round_robin % num_partitions
                round_robin += 1
            with _client_errors(args, f"produce to {args.topic}[{partition}]"):
                producer.produce(args.topic, value, key, partition=partition)
            queued += 1
            if queued >= args.batch_records:
                flush()
                queued = 0
        flush()
    finally:
        producer.close(10)
    print(f"produced {acked} record(s) to {args.topic}", file=sys.stderr)
    return 0



# --- consume -------------------------------------------------------------------------------------


def cmd_consume(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        num_partitions = len(_describe_topic(args, admin, args.topic).partitions)
    start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
    conf = _conf(args, **{
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "isolation.level": "read_committed" if args.read_committed else "read_uncommitted",
        "fetch.wait.max.ms": int(_FETCH_WAIT_S * 1000),
    })
    if args.group:
        conf["group.id"] = args.group
    with _client_errors(args, "consumer"):
        consumer = Consumer(conf)
    try:
        partitions = [TopicPartition(args.topic, p, start) for p in range(num_partitions)]
        if args.group:
            # Resume where the group committed (a simple, memberless group: assign, no join).
            with _client_errors(args, f"offsets of group {args.group!r}"):
                committed = consumer.committed(partitions)
            for tp, c in zip(partitions, committed):
                if c.error is not None:
                    raise CliError(f"offsets of group {args.group!r}: {c.error.name()}")
                if c.offset >= 0:
                    tp.offset = c.offset
        consumer.assign(partitions)
        _consume_loop(args, consumer, partitions)
    finally:
        consumer.close()
    return 0


def _consume_loop(args: argparse.Namespace, consumer: Consumer, partitions: list[TopicPartition]) -> None:
    """Print records until --max-messages, or until --idle-timeout-ms passes without one."""
    printed = 0
    idle_deadline = time.monotonic() + args.idle_timeout_ms / 1000 if args.idle_timeout_ms else None
    # The idle time counts from the first fetch answer for every partition (its high watermark is
    # known then), not from start-up: a consumer still resolving its positions is not idle.
    first_fetch_deadline = time.monotonic() + _FIRST_FETCH_CAP_S
    answered = False
    out = sys.stdout.buffer
    sep = (args.key_separator or "").encode()
    while args.max_messages is None or printed < args.max_messages:
        now = time.monotonic()
        if not answered:
            answered = all(consumer.get_watermark_offsets(tp, cached=True)[1] >= 0 for tp in partitions)
            if not answered and idle_deadline is not None:
                if now > first_fetch_deadline:
                    raise CliError(f"fetch {args.topic}: no answer within {_FIRST_FETCH_CAP_S:.0f} s")
                idle_deadline = now + args.idle_timeout_ms / 1000
        if idle_deadline is not None and now > idle_deadline:
            break
        with _client_errors(args, f"fetch {args.topic}"):
            messages = consumer.consume(num_messages=1000, timeout=_FETCH_WAIT_S)
        next_offsets: dict[int, int] = {}
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise CliError(f"fetch {args.topic}[{msg.partition()}]: {err.name()}")
            if args.key_separator is not None:
                out.write((msg.key() or b"") + sep)
            out.write((msg.value() or b"") + b"\n")
            printed += 1
            # Commit exactly what was printed, not the rest of the batch.
            next_offsets[msg.partition()] = msg.offset() + 1
            if args.max_messages is not None and printed >= args.max_messages:
                break
        out.flush()
        if next_offsets and args.group:
            offsets = [TopicPartition(args.topic, p, o) for p, o in sorted(next_offsets.items())]
            with _client_errors(args, f"commit for group {args.group!r}"):
                result = consumer.commit(offsets=offsets, asynchronous=False) or []
            for tp in result:
                if tp.error is not None:
                    raise CliError(f"commit {args.topic}[{tp.partition}] for group {args.group!r}: {tp.error.name()}")
        if next_offsets and args.idle_timeout_ms:
            idle_deadline = time.monotonic() + args.idle_timeout_ms / 1000


# --- transactions (KIP-664) ---------------------------------------------------------------------


def cmd_transactions(args: argparse.Namespace) -> int:
    with _admin(args) as admin:
        if args.action == "list":
            with _client_errors(args, "list transactions"):
                listing = admin.list_transactions()
            print("TransactionalId\tProducerId\tState")
            for entry in sorted(listing, key=lambda e: e.transactional_id):
                print(f"{entry.transactional_id}\t{entry.producer_id}\t{entry.state}")
        elif args.action == "describe":
            if not args.transactional_id:
                raise CliError("transactions describe needs --transactional-id")
            t = _describe_transaction(args, admin, args.transactional_id)
            if t.error is not None:
                raise CliError(f"describe {args.transactional_id!r}: {t.error.name()}")
            timeout = datetime.timedelta(milliseconds=t.timeout_ms)
            print(f"transactional id {t.transactional_id}: state {t.state}, producer {t.producer_id} "
                  f"epoch {t.producer_epoch}, timeout {timeout}")
            by_topic: dict[str, list[int]] = {}
            for tp in t.partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            for topic, parts in by_topic.items():
                print(f"  {topic}: partitions {parts}")
        elif args.action == "abort":
            return _abort_hanging(args, admin)
    return 0


def _describe_transaction(args: argparse.Namespace, admin: Admin, txn_id: str) -> TransactionDescription:
    with _client_errors(args, f"describe {txn_id!r}"):
        return admin.describe_transactions([txn_id])[txn_id]


def _abort_hanging(args: argparse.Namespace, admin: Admin) -> int:
    """Abort the open transaction(s) on one partition through their coordinator.

    kafka-transactions.sh abort writes an ABORT marker with WriteTxnMarkers, which needs the
    brokers' ClusterAction right; our broker refuses that API to every client (a forged marker
    could end anyone's transaction behind its coordinator's back). Instead: find the partition's
    open producers (DescribeProducers), map each producer id to its transactional id
    (ListTransactions), and fence that id (``Admin.fence_producers``, InitProducerId), which makes
    the coordinator abort its transaction, markers and all; then wait until it has."""
    if args.topic is None or args.partition is None:
        raise CliError("transactions abort needs --topic and --partition")
    key = (args.topic, args.partition)
    with _client_errors(args, "describe producers"):
        producers = admin.describe_producers([TopicPartition(*key)]).get(key, [])
    hanging = [p for p in producers
               if p.current_txn_start_offset >= 0 and (args.producer_id is None or p.producer_id == args.producer_id)]
    if not hanging:
        raise CliError(f"no open transaction on {args.topic}[{args.partition}]")
    with _client_errors(args, "list transactions"):
        by_producer = {t.producer_id: t.transactional_id for t in admin.list_transactions()}
    for p in hanging:
        txn_id = by_producer.get(p.producer_id)
        if txn_id is None:
            raise CliError(f"producer {p.producer_id}: no transactional id known to the coordinator")
        with _client_errors(args, f"abort {txn_id!r}"):
            error = admin.fence_producers([txn_id]).get(txn_id)
        if error is not None:
            raise CliError(f"abort {txn_id!r}: {error.name()}")
        _wait_transaction_ended(args, admin, txn_id)
        print(f"aborted transaction {txn_id!r} of producer {p.producer_id} (epoch {p.producer_epoch}) "
              f"starting at offset {p.current_txn_start_offset}")
    return 0


def _wait_transaction_ended(args: argparse.Namespace, admin: Admin, txn_id: str) -> None:
    deadline = time.monotonic() + _ABORT_WAIT_S
    while True:
        t = _describe_transaction(args, admin, txn_id)
        if t.error is None and t.state in _ENDED_STATES:
            return
        if time.monotonic() > deadline:
            raise CliError(f"abort {txn_id!r}: still {t.state} after {_ABORT_WAIT_S:.0f} s")
        time.sleep(0.05)


# --- entry point ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="oncestream", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    b = sub.add_parser("broker", help="run a broker in the foreground")
    where = b.add_mutually_exclusive_group(required=True)
    where.add_argument("--data-dir", help="the single broker: its logs and state in this directory")
    where.add_argument("--metadata-store", metavar="postgresql://USER@HOST:PORT/DB",
                       help="cluster mode (docs/cluster.md): metadata, offsets and leases in this PostgreSQL "
                            "database; needs --object-store and --config node.id=N")
    b.add_argument("--object-store", metavar="s3://BUCKET/PREFIX",
                   help="cluster mode: the records' objects (S3 endpoint and credentials from AWS_ENDPOINT_URL, "
                        "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION; file:///DIR for one machine)")
    b.add_argument("--listen", default=None,
                   help="HOST:PORT of one PLAINTEXT listener (default 127.0.0.1:9092; port 0 picks a free one); "
                        "leave out when --config listeners=... is given")
    b.add_argument("--ready-file", default=None, metavar="PATH",
                   help="write the bound listeners as JSON to PATH once all are listening")
    b.add_argument("--config", action="append", metavar="KEY=VALUE", help="Kafka broker property")
    b.add_argument("--log-level", default="info",
                   help="root log level unless --config log.level=... is given (docs/logging.md)")
    b.set_defaults(func=cmd_broker)

    def client_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092")
        p.add_argument("--command-config", metavar="FILE",
                       help="client properties file (key=value, librdkafka names: security.protocol, ssl.*, sasl.*)")

    t = sub.add_parser("topics", help="create, list, describe, alter (grow partitions) or delete topics")
    t.add_argument("action", choices=["create", "list", "describe", "alter", "delete"])
    t.add_argument("name", nargs="?")
    t.add_argument("--partitions", type=int, default=1)
    t.add_argument("--config", action="append", metavar="KEY=VALUE", help="topic config")
    client_args(t)
    t.set_defaults(func=cmd_topics)

    p = sub.add_parser("produce", help="stdin lines to records (idempotent, acks=all)")
    p.add_argument("topic")
    p.add_argument("--key-separator", help="split each line into key and value at this string")
    p.add_argument("--partition", type=int)
    p.add_argument("--batch-records", type=int, default=1000)
    client_args(p)
    p.set_defaults(func=cmd_produce)

    c = sub.add_parser("consume", help="print records, one per line")
    c.add_argument("topic")
    start = c.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true")
    start.add_argument("--latest", action="store_true", help="start at the end (the default)")
    c.add_argument("--max-messages", type=int)
    c.add_argument("--idle-timeout-ms", type=int, default=0, help="stop after this long without records")
    c.add_argument("--key-separator", help="print key<SEP>value")
    c.add_argument("--read-committed", action="store_true")
    c.add_argument("--group", help="resume from and commit to this consumer group's offsets")
    client_args(c)
    c.set_defaults(func=cmd_consume)

    x = sub.add_parser("transactions", help="list, describe or abort transactions (KIP-664)")
    x.add_argument("action", choices=["list", "describe", "abort"])
    x.add_argument("--transactional-id")
    x.add_argument("--topic")
    x.add_argument("--partition", type=int)
    x.add_argument("--producer-id", type=int)
    client_args(x)
    x.set_defaults(func=cmd_transactions)

    cl = sub.add_parser("cluster", help="cluster mode: status of a cluster from its metadata store (docs/cluster.md)")
    cl.add_argument("action", choices=["status"])
    cl.add_argument("--metadata-store", required=True, metavar="postgresql://USER@HOST:PORT/DB")
    cl.set_defaults(func=cmd_cluster)

    register_groups(sub)  # consumer and share groups (cli_groups.py)
    register_users(sub)  # SCRAM users
    register_quotas(sub)  # client quotas (KIP-546)
    register_client_metrics(sub)  # KIP-714 client metrics subscriptions
    register_sql_shell(sub)  # oncestream sql: the SQL shell
    _register_sql_server(sub)
    register_sql_conformance(sub)  # oncestream sql-conformance: ksqlDB's query-validation tests (docs/sql-conformance.md)
    register_schema_registry(sub)  # oncestream schema-registry (oncestream.schema_registry.server_main)
    register_console(sub)  # oncestream console: the web console (oncestream.console)

    d = sub.add_parser("demo", help="run the end-to-end demo")
    d.add_argument("rest", nargs=argparse.REMAINDER)
    d.set_defaults(func=lambda a: demo_main(a.rest))
    return parser


def _register_sql_server(sub: Any) -> None:
    """``oncestream sql-server`` (its options and code live in oncestream.sql.server.server_main)."""
    register(sub)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["demo"]:
        # The demo parses its own options (argparse REMAINDER rejects a leading --option).
        return demo_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "topics" and args.action != "list" and not args.name:
        parser.error("topics create|describe|delete need a topic name")
    try:
        return int(args.func(args) or 0)
    except CliError as exc:
        print(f"oncestream: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
