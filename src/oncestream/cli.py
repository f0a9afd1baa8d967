"""The ``oncestream`` command: broker, topics, produce, consume, demo."""

from __future__ import annotations

import argparse
import datetime
import logging
import sys
import time
from pathlib import Path

from kio.schema.errors import ErrorCode

from oncestream.client.connection import (
    BrokerConnection,
    BrokerUnreachableError,
    parse_bootstrap,
)
from oncestream.client.partitioner import partition_for_key
from oncestream.protocol.codec import build
from oncestream.protocol.api_keys import CREATE_PARTITIONS
from oncestream.protocol.records import NewRecord, committed_records, encode_batch

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH = 8, 9
CREATE_TOPICS, DELETE_TOPICS, INIT_PRODUCER_ID, DESCRIBE_CONFIGS = 19, 20, 22, 32
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66


class CliError(Exception):
    """A user-facing failure: printed without a traceback, exit code 1."""


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


def cmd_broker(args: argparse.Namespace) -> int:
    from oncestream.broker.server import run_broker
    from oncestream.broker.state import DataDirInUseError

    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    host, port = _parse_listen(args.listen)
    try:
        return run_broker(Path(args.data_dir), host, port, _parse_props(args.config))
    except DataDirInUseError as exc:
        raise CliError(str(exc)) from None


# --- admin helpers -------------------------------------------------------------------------------


def _connect(args: argparse.Namespace) -> BrokerConnection:
    host, port = parse_bootstrap(args.bootstrap_server)
    try:
        return BrokerConnection(host, port, client_id="oncestream-cli")
    except BrokerUnreachableError as exc:
        raise CliError(f"broker unreachable at {host}:{port} ({exc.__cause__ or exc})") from None


def _metadata(conn: BrokerConnection, topics: list[str] | None):
    def make(m):
        req_topics = None
        if topics is not None:
            req_topics = tuple(build(m.MetadataRequestTopic, name=t, topic_id=None) for t in topics)
        return build(
            m.MetadataRequest,
            topics=req_topics,
            allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )

    return conn.call(METADATA, make)


def _partitions_of(conn: BrokerConnection, topic: str) -> int:
    meta = _metadata(conn, [topic])
    (t,) = meta.topics
    if t.error_code != ErrorCode.none:
        raise CliError(f"topic {topic!r}: {t.error_code.name.upper()}")
    return len(t.partitions)


def cmd_topics(args: argparse.Namespace) -> int:
    with _connect(args) as conn:
        if args.action == "list":
            for t in sorted(_metadata(conn, None).topics, key=lambda t: t.name or ""):
                print(t.name)
        elif args.action == "create":
            props = _parse_props(args.config)

            def make(m):
                return m.CreateTopicsRequest(
                    topics=(
                        m.CreatableTopic(
                            name=args.name,
                            num_partitions=args.partitions,
                            replication_factor=1,
                            assignments=(),
                            configs=tuple(m.CreatableTopicConfig(name=k, value=v) for k, v in props.items()),
                        ),
                    ),
                    timeout=datetime.timedelta(seconds=30),
                    validate_only=False,
                )

            (res,) = conn.call(CREATE_TOPICS, make).topics
            if res.error_code != ErrorCode.none:
                raise CliError(f"create {args.name!r}: {res.error_code.name.upper()}: {res.error_message or ''}")
            print(f"created topic {args.name} with {args.partitions} partition(s)")
        elif args.action == "alter":
            # Only the partition count can grow here; configs go through the admin API.
            def make(m):
                return m.CreatePartitionsRequest(
                    topics=(m.CreatePartitionsTopic(name=args.name, count=args.partitions, assignments=None),),
                    timeout=datetime.timedelta(seconds=30),
                    validate_only=False,
                )

            (res,) = conn.call(CREATE_PARTITIONS, make).results
            if res.error_code != ErrorCode.none:
                raise CliError(f"alter {args.name!r}: {res.error_code.name.upper()}: {res.error_message or ''}")
            print(f"topic {args.name} now has {args.partitions} partition(s)")
        elif args.action == "delete":

            def make(m, version):
                if "topic_names" in m.DeleteTopicsRequest.__dataclass_fields__:
                    return m.DeleteTopicsRequest(topic_names=(args.name,), timeout=datetime.timedelta(seconds=30))
                return m.DeleteTopicsRequest(
                    topics=(m.DeleteTopicState(name=args.name, topic_id=None),),
                    timeout=datetime.timedelta(seconds=30),
                )

            (res,) = conn.call_with_version(DELETE_TOPICS, make).responses
            if res.error_code != ErrorCode.none:
                raise CliError(f"delete {args.name!r}: {res.error_code.name.upper()}")
            print(f"deleted topic {args.name}")
        elif args.action == "describe":
            meta = _metadata(conn, [args.name])
            (t,) = meta.topics
            if t.error_code != ErrorCode.none:
                raise CliError(f"topic {args.name!r}: {t.error_code.name.upper()}")
            print(f"topic {t.name} id {t.topic_id} partitions {len(t.partitions)}")
            for p in sorted(t.partitions, key=lambda p: p.partition_index):
                low, high = _watermarks(conn, args.name, p.partition_index)
                print(f"  partition {p.partition_index} leader {p.leader_id} offsets [{low}, {high})")

            def make_cfg(m):
                return m.DescribeConfigsRequest(
                    resources=(m.DescribeConfigsResource(resource_type=2, resource_name=args.name, configuration_keys=None),)
                )

            (res,) = conn.call(DESCRIBE_CONFIGS, make_cfg).results
            for c in res.configs:
                print(f"  config {c.name}={c.value}")
    return 0


def _list_offset(conn: BrokerConnection, topic: str, partition: int, timestamp: int) -> int:
    def make(m):
        return m.ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=(m.ListOffsetsTopic(name=topic, partitions=(m.ListOffsetsPartition(partition_index=partition, timestamp=timestamp),)),),
        )

    (t,) = conn.call(LIST_OFFSETS, make).topics
    (p,) = t.partitions
    if p.error_code != ErrorCode.none:
        raise CliError(f"{topic}[{partition}]: {p.error_code.name.upper()}")
    return p.offset


def _watermarks(conn: BrokerConnection, topic: str, partition: int) -> tuple[int, int]:
    return _list_offset(conn, topic, partition, -2), _list_offset(conn, topic, partition, -1)


# --- produce -------------------------------------------------------------------------------------


def cmd_produce(args: argparse.Namespace) -> int:
    """stdin lines -> records, idempotent, acks=all, batched per partition."""
    with _connect(args) as conn:
        num_partitions = _partitions_of(conn, args.topic)
        pid_resp = conn.call(
            INIT_PRODUCER_ID,
            lambda m: m.InitProducerIdRequest(transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60)),
        )
        if pid_resp.error_code != ErrorCode.none:
            raise CliError(f"InitProducerId: {pid_resp.error_code.name.upper()}")
        producer_id, epoch = pid_resp.producer_id, pid_resp.producer_epoch
        sequences = [0] * num_partitions
        pending: dict[int, list[NewRecord]] = {}
        round_robin = 0
        sent = 0

        def flush() -> None:
            nonlocal sent
            for partition, recs in list(pending.items()):
                batch = encode_batch(
                    recs,
                    now_ms=int(time.time() * 1000),
                    producer_id=producer_id,
                    producer_epoch=epoch,
                    base_sequence=sequences[partition],
                )

                def make(m, partition=partition, batch=batch):
                    return m.ProduceRequest(
                        acks=-1,
                        timeout=datetime.timedelta(seconds=30),
                        topic_data=(m.TopicProduceData(name=args.topic, partition_data=(m.PartitionProduceData(index=partition, records=batch),)),),
                    )

                (t,) = conn.call(PRODUCE, make).responses
                (p,) = t.partition_responses
                if p.error_code != ErrorCode.none:
                    raise CliError(f"produce to {args.topic}[{partition}]: {p.error_code.name.upper()}")
                sequences[partition] += len(recs)
                sent += len(recs)
            pending.clear()

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
            pending.setdefault(partition, []).append(NewRecord(value=value, key=key))
            if sum(len(v) for v in pending.values()) >= args.batch_records:
                flush()
        flush()
        print(f"produced {sent} record(s) to {args.topic}", file=sys.stderr)
    return 0


# --- consume -------------------------------------------------------------------------------------


def cmd_consume(args: argparse.Namespace) -> int:
    with _connect(args) as conn:
        num_partitions = _partitions_of(conn, args.topic)
        start_ts = -2 if args.from_beginning else -1
        committed = _committed_offsets(conn, args.group, args.topic, num_partitions) if args.group else {}
        positions = {
            p: committed[p] if committed.get(p, -1) >= 0 else _list_offset(conn, args.topic, p, start_ts)
            for p in range(num_partitions)
        }
        printed = 0
        idle_deadline = time.monotonic() + args.idle_timeout_ms / 1000 if args.idle_timeout_ms else None
        out = sys.stdout.buffer
        sep = (args.key_separator or "").encode()
        while args.max_messages is None or printed < args.max_messages:
            if idle_deadline is not None and time.monotonic() > idle_deadline:
                break

            def make(m):
                return m.FetchRequest(
                    replica_id=-1,
                    max_wait=datetime.timedelta(milliseconds=500),
                    min_bytes=1,
                    max_bytes=52428800,
                    isolation_level=1 if args.read_committed else 0,
                    topics=(m.FetchTopic(topic=args.topic, partitions=tuple(
                        m.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1048576)
                        for p, o in positions.items()
                    )),),
                    forgotten_topics_data=(),
                )

            resp = conn.call(FETCH, make)
            got_any = False
            for p in (p for t in resp.responses for p in t.partitions):
                if p.error_code != ErrorCode.none:
                    raise CliError(f"fetch {args.topic}[{p.partition_index}]: {p.error_code.name.upper()}")
                requested = positions[p.partition_index]
                aborted = p.aborted_transactions if args.read_committed else None
                for batch, rec in committed_records(p.records or b"", aborted):
                    positions[p.partition_index] = max(positions[p.partition_index], batch.header.next_offset)
                    if rec is None or rec.offset < requested:  # control/aborted, or before the fetch offset
                        continue
                    got_any = True
                    if args.key_separator is not None:
                        out.write((rec.key or b"") + sep)
                    out.write((rec.value or b"") + b"\n")
                    printed += 1
                    if args.max_messages is not None and printed >= args.max_messages:
                        # Commit exactly what was printed, not the rest of the batch.
                        positions[p.partition_index] = rec.offset + 1
                        break
                if args.max_messages is not None and printed >= args.max_messages:
                    break
            out.flush()
            if got_any and args.group:
                _commit_offsets(conn, args.group, args.topic, positions)
            if got_any and args.idle_timeout_ms:
                idle_deadline = time.monotonic() + args.idle_timeout_ms / 1000
    return 0


# --- transactions (KIP-664) ---------------------------------------------------------------------


def cmd_transactions(args: argparse.Namespace) -> int:
    with _connect(args) as conn:
        if args.action == "list":
            resp = conn.call(
                LIST_TRANSACTIONS,
                lambda m: build(m.ListTransactionsRequest, state_filters=(), producer_id_filters=(), duration_filter=-1),
            )
            if resp.error_code != ErrorCode.none:
                raise CliError(f"list transactions: {resp.error_code.name.upper()}")
            print("TransactionalId\tProducerId\tState")
            for t in sorted(resp.transaction_states, key=lambda t: t.transactional_id):
                print(f"{t.transactional_id}\t{t.producer_id}\t{t.transaction_state}")
        elif args.action == "describe":
            if not args.transactional_id:
                raise CliError("transactions describe needs --transactional-id")
            resp = conn.call(
                DESCRIBE_TRANSACTIONS, lambda m: m.DescribeTransactionsRequest(transactional_ids=(args.transactional_id,))
            )
            (t,) = resp.transaction_states
            if t.error_code != ErrorCode.none:
                raise CliError(f"describe {args.transactional_id!r}: {t.error_code.name.upper()}")
            print(f"transactional id {t.transactional_id}: state {t.transaction_state}, producer {t.producer_id} epoch {t.producer_epoch}, timeout {t.transaction_timeout}")
            for topic in t.topics:
                print(f"  {topic.topic}: partitions {list(topic.partitions)}")
        elif args.action == "abort":
            return _abort_hanging(conn, args)
    return 0


# How long `transactions abort` waits for the coordinator to finish the abort it started.
_ABORT_WAIT_S = 30.0
_ENDED_STATES = ("CompleteAbort", "CompleteCommit", "Empty", "Dead")


def _abort_hanging(conn: BrokerConnection, args: argparse.Namespace) -> int:
    """Abort the open transaction(s) on one partition through their coordinator.

    kafka-transactions.sh abort writes an ABORT marker with WriteTxnMarkers, which needs the
    brokers' ClusterAction right; our broker refuses that API to every client (a forged marker
    could end anyone's transaction behind its coordinator's back). Instead: find the partition's
    open producers (DescribeProducers), map each producer id to its transactional id
    (ListTransactions), and send InitProducerId for that id, which fences the old producer and
    makes the coordinator abort its transaction, markers and all; then wait until it has."""
    if args.topic is None or args.partition is None:
        raise CliError("transactions abort needs --topic and --partition")
    resp = conn.call(
        DESCRIBE_PRODUCERS,
        lambda m: m.DescribeProducersRequest(topics=(m.TopicRequest(name=args.topic, partition_indexes=(args.partition,)),)),
    )
    (part,) = resp.topics[0].partitions
    if part.error_code != ErrorCode.none:
        raise CliError(f"describe producers: {part.error_code.name.upper()}")
    hanging = [
        p for p in part.active_producers
        if p.current_txn_start_offset >= 0 and (args.producer_id is None or p.producer_id == args.producer_id)
    ]
    if not hanging:
        raise CliError(f"no open transaction on {args.topic}[{args.partition}]")
    listing = conn.call(
        LIST_TRANSACTIONS,
        lambda m: build(m.ListTransactionsRequest, state_filters=(), producer_id_filters=(), duration_filter=-1),
    )
    by_producer = {t.producer_id: t.transactional_id for t in listing.transaction_states}
    for p in hanging:
        txn_id = by_producer.get(p.producer_id)
        if txn_id is None:
            raise CliError(f"producer {p.producer_id}: no transactional id known to the coordinator")
        init = conn.call(
            INIT_PRODUCER_ID,
            lambda m, txn_id=txn_id: build(
                m.InitProducerIdRequest, transactional_id=txn_id,
                transaction_timeout=datetime.timedelta(milliseconds=60000), producer_id=-1, producer_epoch=-1,
                enable2_pc=False, keep_prepared_txn=False,
            ),
        )
        # CONCURRENT_TRANSACTIONS: the abort has started (Kafka's answer while it completes).
        if init.error_code not in (ErrorCode.none, ErrorCode.concurrent_transactions):
            raise CliError(f"abort {txn_id!r}: {init.error_code.name.upper()}")
        _wait_transaction_ended(conn, txn_id)
        print(f"aborted transaction {txn_id!r} of producer {p.producer_id} (epoch {p.producer_epoch}) "
              f"starting at offset {p.current_txn_start_offset}")
    return 0


def _wait_transaction_ended(conn: BrokerConnection, txn_id: str) -> None:
    deadline = time.monotonic() + _ABORT_WAIT_S
    while True:
        resp = conn.call(DESCRIBE_TRANSACTIONS, lambda m: m.DescribeTransactionsRequest(transactional_ids=(txn_id,)))
        (t,) = resp.transaction_states
        if t.error_code == ErrorCode.none and t.transaction_state in _ENDED_STATES:
            return
        if time.monotonic() > deadline:
            raise CliError(f"abort {txn_id!r}: still {t.transaction_state} after {_ABORT_WAIT_S:.0f} s")
        time.sleep(0.05)


def _committed_offsets(conn: BrokerConnection, group: str, topic: str, num_partitions: int) -> dict[int, int]:
    """The group's committed offsets for ``topic`` (OffsetFetch); -1 where none."""

    def make(m):
        if hasattr(m, "OffsetFetchRequestGroup"):  # v8+: the multi-group form
            return build(
                m.OffsetFetchRequest,
                groups=(
                    build(
                        m.OffsetFetchRequestGroup,
                        group_id=group,
                        topics=(build(m.OffsetFetchRequestTopics, name=topic, partition_indexes=tuple(range(num_partitions))),),
                    ),
                ),
                require_stable=True,
            )
        return build(
            m.OffsetFetchRequest,
            group_id=group,
            topics=(build(m.OffsetFetchRequestTopic, name=topic, partition_indexes=tuple(range(num_partitions))),),
            require_stable=True,
        )

    resp = conn.call(OFFSET_FETCH, make)
    topics = resp.groups[0].topics if hasattr(resp, "groups") else resp.topics
    error = resp.groups[0].error_code if hasattr(resp, "groups") else getattr(resp, "error_code", ErrorCode.none)
    if error != ErrorCode.none:
        raise CliError(f"offsets of group {group!r}: {error.name.upper()}")
    return {p.partition_index: p.committed_offset for t in topics for p in t.partitions}


def _commit_offsets(conn: BrokerConnection, group: str, topic: str, positions: dict[int, int]) -> None:
    """Commit positions as a simple (memberless, generation -1) group commit."""

    def make(m):
        return build(
            m.OffsetCommitRequest,
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            retention_time=datetime.timedelta(milliseconds=-1),
            topics=(
                build(
                    m.OffsetCommitRequestTopic,
                    name=topic,
                    partitions=tuple(
                        build(
                            m.OffsetCommitRequestPartition,
                            partition_index=p,
                            committed_offset=o,
                            committed_leader_epoch=-1,
                            committed_metadata="",
                        )
                        for p, o in positions.items()
                    ),
                ),
            ),
        )

    resp = conn.call(OFFSET_COMMIT, make)
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code != ErrorCode.none:
                raise CliError(f"commit {topic}[{p.partition_index}] for group {group!r}: {p.error_code.name.upper()}")


# --- entry point ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="oncestream", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    b = sub.add_parser("broker", help="run a broker in the foreground")
    b.add_argument("--data-dir", required=True)
    b.add_argument("--listen", default="127.0.0.1:9092", help="HOST:PORT (port 0 picks a free one)")
    b.add_argument("--config", action="append", metavar="KEY=VALUE", help="Kafka broker property")
    b.add_argument("--log-level", default="info")
    b.set_defaults(func=cmd_broker)

    def client_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092")

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

    d = sub.add_parser("demo", help="run the end-to-end demo")
    d.add_argument("rest", nargs=argparse.REMAINDER)
    d.set_defaults(func=lambda a: __import__("oncestream.demo", fromlist=["main"]).main(a.rest))
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["demo"]:
        # The demo parses its own options (argparse REMAINDER rejects a leading --option).
        from oncestream.demo import main as demo_main

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
    except BrokerUnreachableError as exc:
        print(f"oncestream: broker unreachable: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into head & co.
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
