"""Transactions on a cluster of ``oncestream broker`` processes (PostgreSQL + SeaweedFS), real clients.

- A librdkafka transactional producer bootstrapped from all three brokers commits and aborts
  transactions over three partitions (flushed before the abort: librdkafka purges unsent records
  otherwise): read_committed consumers on each broker see exactly the committed records, in
  order; read_uncommitted consumers see the aborted ones too, and librdkafka's own
  read_committed filtering (aborted transactions list + markers) removes exactly them.
- KIP-890 verification of diskless produce: a transactional batch for a partition the producer
  never added to its transaction is refused (INVALID_TXN_STATE), and nothing of it is readable.
- A KIP-939 prepared transaction (oncestream's client, 2PC) survives the death (SIGKILL) of every
  broker; a new broker (another node id) loads it from PostgreSQL, read_committed stays held at
  its first offset, and a new producer instance with keep_prepared_txn commits it.
- ListTransactions through a coordinator's death: while the SIGKILLed broker's
  ``__transaction_state`` partition has no live owner, every survivor answers
  COORDINATOR_LOAD_IN_PROGRESS (raw wire) instead of a listing without its transactions; once a
  survivor took it, the admin client lists and describes the open transaction. (librdkafka has no
  ListTransactions; the window is held open by a share lock on the lease row, which the takeover
  round skips as it skips a row an in-flight write holds.)
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import psycopg
import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from oncestream.client import Admin as OurAdmin
from oncestream.client import PreparedTxnState
from oncestream.client import Producer as OurProducer
from oncestream.coordinator.group.partitioning import partition_for
from oncestream.protocol.api_keys import LIST_TRANSACTIONS
from oncestream.protocol.codec import build
from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.cluster import Cluster, ClusterBroker, cluster_factory  # noqa: F401  (fixture)
from tests.support.narrow import present
from tests.support.txn import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    WireTxnProducer,
    isolated_consumer,
    list_offset,
    plain_produce,
    poll_records_for,
    read_to_end,
    run_transaction,
    transaction_values,
    transactional_producer,
    values_of,
    wire_connection,
)

pytestmark = pytest.mark.interop

PARTITIONS = 3
TXN_CONFIG = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "transaction.two.phase.commit.enable": "true",
}
QUIET_WINDOW_S = 2.0  # observation window for "a read_committed reader gets nothing more"


def test_commit_and_abort_read_committed_and_uncommitted(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3, TXN_CONFIG)
    topic = unique_topic("ctxn")
    create_topic(cluster.brokers[0].bootstrap, topic, partitions=PARTITIONS)
    producer = transactional_producer(cluster.bootstrap, f"ctxn-{uuid.uuid4().hex[:8]}")
    producer.init_transactions(CLIENT_TIMEOUT_S)
    committed: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    everything: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for n, commit in enumerate((True, False, True, False, True)):
        values = transaction_values(f"t{n}-{'c' if commit else 'a'}", range(PARTITIONS), 7)
        run_transaction(producer, topic, values, commit=commit)
        for p, vs in values.items():
            everything[p].extend(vs)
            if commit:
                committed[p].extend(vs)
    producer.flush(CLIENT_TIMEOUT_S)
    for broker in cluster.brokers:
        assert values_of(read_to_end(broker.bootstrap, topic, PARTITIONS, isolation=READ_COMMITTED)) == committed
    uncommitted = values_of(read_to_end(cluster.brokers[1].bootstrap, topic, PARTITIONS, isolation=READ_UNCOMMITTED))
    assert uncommitted == everything
    for p in range(PARTITIONS):  # read_committed's end is the high watermark once every marker is in
        assert (list_offset(cluster.brokers[2].bootstrap, topic, p, read_committed=True)
                == list_offset(cluster.brokers[2].bootstrap, topic, p, read_committed=False))


def test_a_transactional_batch_outside_its_transaction_is_refused(cluster_factory: Callable[..., Cluster]) -> None:
    """The wire-level check of KIP-890 part 1 in the diskless commit: Produce v11 (no implicit
    add) of a transactional batch to a partition never added to the transaction."""
    cluster = cluster_factory(1, TXN_CONFIG)
    topic = unique_topic("ctxn-verify")
    create_topic(cluster.bootstrap, topic, partitions=2)
    with wire_connection(cluster.bootstrap) as conn:
        raw = WireTxnProducer(f"ctxn-v-{uuid.uuid4().hex[:8]}")
        raw.init(conn)
        assert raw.add_partitions(conn, topic, [0]) == {(topic, 0): ErrorCode.none}
        assert raw.produce(conn, topic, 0, [b"in-txn"])[0] == ErrorCode.none
        refused, offset = raw.produce(conn, topic, 1, [b"never-added"])
        assert raw.end(conn, commit=True) == ErrorCode.none
    assert (refused, offset) == (ErrorCode.invalid_txn_state, -1)
    committed = values_of(read_to_end(cluster.bootstrap, topic, 2, isolation=READ_COMMITTED))
    assert committed == {0: [b"in-txn"], 1: []}


def _tpc_producer(bootstrap: str, transactional_id: str) -> OurProducer:
    return OurProducer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                        "transaction.two.phase.commit.enable": True, "transaction.timeout.ms": 1500,
                        "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500})


def test_a_prepared_transaction_survives_every_broker(cluster_factory: Callable[..., Cluster], tmp_path) -> None:
    cluster = cluster_factory(3, TXN_CONFIG)
    topic = unique_topic("ctpc")
    create_topic(cluster.brokers[0].bootstrap, topic, partitions=1)
    plain_produce(cluster.bootstrap, topic, {0: [b"before-%d" % i for i in range(3)]})
    transactional_id = f"ctpc-{uuid.uuid4().hex[:8]}"
    producer = _tpc_producer(cluster.bootstrap, transactional_id)
    try:
        producer.init_transactions(CLIENT_TIMEOUT_S)
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, b"prepared-%02d" % i, partition=0)
        stored = PreparedTxnState.from_string(str(producer.prepare_transaction()))
    finally:
        producer.close()
    cluster.kill_all()
    # A broker that never ran before, on the same stores, takes every lease over.
    newcomer = ClusterBroker(4, cluster.metadata_store, cluster.object_store_uri, cluster.environ,
                             tmp_path / "logs", TXN_CONFIG)
    cluster.brokers.append(newcomer)
    newcomer.start()
    bootstrap = newcomer.bootstrap
    plain_produce(bootstrap, topic, {0: [b"after"]})
    assert list_offset(bootstrap, topic, 0, read_committed=True) == 3, "the LSO moved past the prepared transaction"
    reader = isolated_consumer(bootstrap, READ_COMMITTED)
    try:
        reader.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        held = [r.value for r in poll_records_for(reader, QUIET_WINDOW_S)]
    finally:
        reader.close()
    assert held == [b"before-%d" % i for i in range(3)]
    recovered = _tpc_producer(bootstrap, transactional_id)
    try:
        recovered.init_transactions(CLIENT_TIMEOUT_S, keep_prepared_txn=True)
        assert recovered.prepared_transaction_state() == stored
        assert recovered.complete_transaction(stored, CLIENT_TIMEOUT_S) is True
    finally:
        recovered.close()
    expected = [b"before-%d" % i for i in range(3)] + [b"prepared-%02d" % i for i in range(10)] + [b"after"]
    assert values_of(read_to_end(bootstrap, topic, 1, isolation=READ_COMMITTED))[0] == expected


def _owner_of(conn: psycopg.Connection, resource: str) -> int | None:
    """The live owner of a coordinator lease by PostgreSQL's clock (what the brokers' rounds see)."""
    row = conn.execute(
        "SELECT l.owner_node_id FROM coordinator_leases l JOIN brokers b ON b.node_id = l.owner_node_id"
        " AND b.incarnation = l.owner_incarnation AND b.lease_expires_at > clock_timestamp()"
        " WHERE l.resource = %s", (resource,)).fetchone()
    return None if row is None else int(row[0])


def _wire_list_transactions(bootstrap: str) -> tuple[int, set[str]]:
    """ListTransactions of one broker on the wire: (error code, transactional ids listed)."""
    with wire_connection(bootstrap, "wire-list-txn") as conn:
        response = conn.call(LIST_TRANSACTIONS, lambda m: build(
            m.ListTransactionsRequest, state_filters=(), producer_id_filters=(), duration_filter=-1))
    return int(response.error_code), {t.transactional_id for t in response.transaction_states}


def test_list_transactions_after_the_coordinator_is_killed(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3, TXN_CONFIG)
    topic = unique_topic("clist")
    create_topic(cluster.brokers[0].bootstrap, topic, partitions=1)
    transactional_id = f"clist-{uuid.uuid4().hex[:8]}"
    producer = transactional_producer(cluster.bootstrap, transactional_id, **{"transaction.timeout.ms": 600000})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0  # left open (closing would abort it)
    deadline = time.monotonic() + 60  # a bound on a hang only
    with psycopg.connect(cluster.metadata_store, autocommit=True) as watch, \
            psycopg.connect(cluster.metadata_store) as holder:
        (count,) = present(watch.execute("SELECT num_partitions FROM coordinator_topics"
                                         " WHERE topic = '__transaction_state'").fetchone(), "partition count")
        resource = f"__transaction_state/{partition_for(transactional_id, count)}"
        victim = cluster.broker(present(_owner_of(watch, resource), "the coordinator"))
        survivors = [b for b in cluster.brokers if b is not victim]
        # Held open until released below: no round can take the dead broker's lease meanwhile.
        holder.execute("SELECT 1 FROM coordinator_leases WHERE resource = %s FOR SHARE", (resource,))
        victim.kill()
        while _owner_of(watch, resource) is not None:  # the victim's broker lease expires
            assert time.monotonic() < deadline, f"{resource} still owned by node {victim.node_id}"
            time.sleep(0.05)
        for broker in survivors:  # what a client then asks: the brokers of the survivors' Metadata
            metadata = AdminClient({"bootstrap.servers": broker.bootstrap})
            while victim.node_id in metadata.list_topics(timeout=10).brokers:
                assert time.monotonic() < deadline, f"node {broker.node_id} still lists node {victim.node_id}"
                time.sleep(0.05)
        for broker in survivors:
            error, listed = _wire_list_transactions(broker.bootstrap)
            assert error == ErrorCode.coordinator_load_in_progress, (broker.node_id, error, listed)
        assert _owner_of(watch, resource) is None
        holder.rollback()  # a survivor's next round takes the lease and loads the partition
    admin = OurAdmin({"bootstrap.servers": ",".join(b.bootstrap for b in survivors)})
    try:
        listing = {t.transactional_id: t for t in admin.list_transactions(timeout=CLIENT_TIMEOUT_S)}
        assert listing[transactional_id].state == "Ongoing"
        described = admin.describe_transactions([transactional_id], timeout=CLIENT_TIMEOUT_S)[transactional_id]
        assert (described.error, described.state) == (None, "Ongoing")
        assert [(tp.topic, tp.partition) for tp in described.partitions] == [(topic, 0)]
        producer.abort_transaction(CLIENT_TIMEOUT_S)  # at the survivor that took the coordinator over
        described = admin.describe_transactions([transactional_id], timeout=CLIENT_TIMEOUT_S)[transactional_id]
        assert described.state == "CompleteAbort"
    finally:
        admin.close()
        producer.close()
