"""Transaction request forms that ordinary clients never send, checked over the wire against a
real broker process, request by request:

- KIP-447 zombie fencing on TxnOffsetCommit v3: a transaction whose consumer-group generation
  is stale (the group rebalanced since) is refused with ILLEGAL_GENERATION, and committing
  that transaction afterwards makes none of its offsets visible, while the current generation's
  transactional offsets do become visible.
- KIP-890 part 1, AddPartitionsToTxn v4 with ``verify_only`` (the batched form a partition
  leader sends to the transaction coordinator before appending a transactional batch): a
  partition the ongoing transaction added answers NONE, one it did not add answers
  INVALID_TXN_STATE (TRANSACTION_ABORTABLE only exists from v5, which this broker does not
  advertise), each transaction of the batch gets its own answer, and verifying adds nothing:
  a transactional produce to the unverified partition is still refused.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from oncestream.client.common.connection import BrokerConnection, parse_bootstrap
from oncestream.protocol.codec import build
from tests.support.brokers import BrokerProcess
from tests.support.clients import CLIENT_TIMEOUT_S, create_topic, unique_topic
from tests.support.txn import (
    WireTxnProducer,
    committed_offsets,
    describe_transaction,
    fetch_committed_offset,
    list_offset,
    start_txn_broker,
    wait_until,
    wire_connection,
)

pytestmark = pytest.mark.interop

JOIN_GROUP, SYNC_GROUP, ADD_PARTITIONS = 11, 14, 24
# Long enough that the hand-driven member (which never heartbeats) outlives any test here.
SESSION_TIMEOUT = datetime.timedelta(seconds=60)
NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: the group has no committed offset


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """Our broker with the transaction suites' settings (no initial rebalance delay)."""
    process = start_txn_broker(tmp_path_factory.mktemp("txn-wire-forms") / "data")
    try:
        yield process
    finally:
        process.stop()


# -- a consumer-group member driven by hand ------------------------------------------------------
def subscription_v0(topic: str) -> bytes:
    """ConsumerProtocolSubscription v0 for one topic (version, topics, null user data), encoded
    here rather than with the client's encoder so the test does not share its code."""
    name = topic.encode()
    return struct.pack(">hih", 0, 1, len(name)) + name + struct.pack(">i", -1)


def join_and_sync(conn: BrokerConnection, group: str, topic: str, member_id: str = "") -> tuple[str, int]:
    """JoinGroup (repeated once with the assigned id when the broker answers MEMBER_ID_REQUIRED,
    KIP-394), then SyncGroup as the leader. Alone in its group, the member completes every
    rebalance itself, so each call forms the next generation. Returns (member id, generation)."""

    def join(mid: str):
        return conn.call(
            JOIN_GROUP,
            lambda m: build(
                m.JoinGroupRequest,
                group_id=group,
                session_timeout=SESSION_TIMEOUT,
                rebalance_timeout=SESSION_TIMEOUT,
                member_id=mid,
                group_instance_id=None,
                protocol_type="consumer",
                protocols=(build(m.JoinGroupRequestProtocol, name="range", metadata=subscription_v0(topic)),),
                reason=None,
            ),
        )

    joined = join(member_id)
    if joined.error_code == ErrorCode.member_id_required:
        joined = join(joined.member_id)
    assert joined.error_code == ErrorCode.none, f"JoinGroup: {joined.error_code.name}"
    assert joined.leader == joined.member_id, "a lone member must lead its group"
    synced = conn.call(
        SYNC_GROUP,
        lambda m: build(
            m.SyncGroupRequest,
            group_id=group,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments=(build(m.SyncGroupRequestAssignment, member_id=joined.member_id, assignment=b""),),
        ),
    )
    assert synced.error_code == ErrorCode.none, f"SyncGroup: {synced.error_code.name}"
    return joined.member_id, joined.generation_id


# -- transactional offset commits ----------------------------------------------------------------
def test_kip447_zombie_txn_offset_commit_with_a_stale_generation_is_refused_and_never_visible(txn_broker) -> None:
    bootstrap = txn_broker.bootstrap
    topic, group = unique_topic("zombie-in"), unique_topic("zombie-group")
    create_topic(bootstrap, topic, partitions=1)
    zombie = WireTxnProducer(unique_topic("zombie-txn"))
    live = WireTxnProducer(unique_topic("live-txn"))
    with wire_connection(bootstrap) as conn:
        member, stale_generation = join_and_sync(conn, group, topic)
        # The group rebalances: the zombie's consumer metadata (member, stale generation) is
        # from before it, the group itself stays alive with the same member id.
        same_member, generation = join_and_sync(conn, group, topic, member)
        assert same_member == member
        assert generation > stale_generation

        zombie.init(conn)
        assert zombie.add_offsets(conn, group) == ErrorCode.none
        refused = zombie.txn_offset_commit(conn, group, topic, 99, member_id=member, generation_id=stale_generation)
        assert refused == ErrorCode.illegal_generation
        # Its transaction still commits (it holds the offsets partition): the commit marker
        # must find nothing of the zombie's to make visible.
        assert zombie.end(conn, commit=True) == ErrorCode.none
        wait_until(lambda: describe_transaction(bootstrap, zombie.transactional_id).state == "CompleteCommit",
                   CLIENT_TIMEOUT_S, "the zombie's commit to complete")
        assert fetch_committed_offset(conn, group, topic, require_stable=True) == (ErrorCode.none, -1)
        assert committed_offsets(bootstrap, group, topic, 1) == {0: NO_OFFSET}

        # The same request with the group's current generation is accepted and, once its
        # transaction commits, visible: the refusal above was the generation check.
        live.init(conn)
        assert live.add_offsets(conn, group) == ErrorCode.none
        assert live.txn_offset_commit(conn, group, topic, 7, member_id=member, generation_id=generation) == ErrorCode.none
        assert fetch_committed_offset(conn, group, topic, require_stable=True)[0] == ErrorCode.unstable_offset_commit
        assert live.end(conn, commit=True) == ErrorCode.none
        wait_until(lambda: fetch_committed_offset(conn, group, topic, require_stable=True) == (ErrorCode.none, 7),
                   CLIENT_TIMEOUT_S,
                   "the live transaction's offset to become visible")
    assert committed_offsets(bootstrap, group, topic, 1) == {0: 7}


# -- AddPartitionsToTxn v4, verify only ----------------------------------------------------------
def broker_to_broker_connection(bootstrap: str) -> BrokerConnection:
    """A connection that may use AddPartitionsToTxn v4 (what a partition leader sends)."""
    host, port = parse_bootstrap(bootstrap)
    return BrokerConnection(host, port, client_id="verify-only", timeout_s=CLIENT_TIMEOUT_S, max_versions={ADD_PARTITIONS: 4})


def verify_only(
    conn: BrokerConnection, checks: list[tuple[WireTxnProducer, str, list[int]]]
) -> dict[str, dict[tuple[str, int], ErrorCode]]:
    """One batched AddPartitionsToTxn v4 request with ``verify_only`` set for every transaction
    in ``checks`` (producer, topic, partitions); returns the errors per transactional id."""

    def make(m, version: int):
        assert version == 4, f"AddPartitionsToTxn negotiated v{version}, the test needs v4"
        return build(
            m.AddPartitionsToTxnRequest,
            transactions=tuple(
                build(
                    m.AddPartitionsToTxnTransaction,
                    transactional_id=producer.transactional_id,
                    producer_id=producer.producer_id,
                    producer_epoch=producer.producer_epoch,
                    verify_only=True,
                    topics=(build(m.AddPartitionsToTxnTopic, name=topic, partitions=tuple(partitions)),),
                )
                for producer, topic, partitions in checks
            ),
        )

    resp = conn.call_with_version(ADD_PARTITIONS, make)
    assert resp.error_code == ErrorCode.none
    return {
        result.transactional_id: {
            (t.name, p.partition_index): p.partition_error_code
            for t in result.topic_results
            for p in t.results_by_partition
        }
        for result in resp.results_by_transaction
    }


def test_kip890_verify_only_answers_per_partition_and_adds_nothing(txn_broker) -> None:
    bootstrap = txn_broker.bootstrap
    topic = unique_topic("verify")
    create_topic(bootstrap, topic, partitions=2)
    producer = WireTxnProducer(unique_topic("verify-txn"))
    idle = WireTxnProducer(unique_topic("verify-idle"))
    with wire_connection(bootstrap) as conn, broker_to_broker_connection(bootstrap) as leader:
        producer.init(conn)
        idle.init(conn)
        assert producer.add_partitions(conn, topic, [0]) == {(topic, 0): ErrorCode.none}
        assert producer.produce(conn, topic, 0, [b"in-txn"])[0] == ErrorCode.none

        answers = verify_only(leader, [(producer, topic, [0, 1]), (idle, topic, [0])])
        assert answers == {
            producer.transactional_id: {(topic, 0): ErrorCode.none, (topic, 1): ErrorCode.invalid_txn_state},
            # A transactional id with no ongoing transaction has added nothing.
            idle.transactional_id: {(topic, 0): ErrorCode.invalid_txn_state},
        }
        # Verifying is read-only: the transaction still holds exactly the partition it added...
        assert describe_transaction(bootstrap, producer.transactional_id).partitions == {(topic, 0)}
        assert describe_transaction(bootstrap, idle.transactional_id).state == "Empty"
        # ...so a transactional batch for the unverified partition is still refused (KIP-890
        # part 1: otherwise it would open a transaction no marker ever ends).
        assert producer.produce(conn, topic, 1, [b"not-added"])[0] == ErrorCode.invalid_txn_state
        assert list_offset(bootstrap, topic, 1, read_committed=False) == 0

        assert producer.end(conn, commit=True) == ErrorCode.none
    assert list_offset(bootstrap, topic, 0, read_committed=True) == list_offset(bootstrap, topic, 0, read_committed=False)


def test_kip890_verify_only_with_a_stale_epoch_is_fenced(txn_broker) -> None:
    """The verification checks the producer's identity first (Kafka's order): an epoch older than
    the transactional id's current one answers PRODUCER_FENCED for every partition, and a producer
    id the transactional id does not map to answers INVALID_PRODUCER_ID_MAPPING."""
    bootstrap = txn_broker.bootstrap
    topic = unique_topic("verify-fenced")
    create_topic(bootstrap, topic, partitions=1)
    producer = WireTxnProducer(unique_topic("verify-fenced-txn"))
    with wire_connection(bootstrap) as conn, broker_to_broker_connection(bootstrap) as leader:
        producer.init(conn)
        assert producer.add_partitions(conn, topic, [0]) == {(topic, 0): ErrorCode.none}
        stale = WireTxnProducer(producer.transactional_id)
        stale.producer_id, stale.producer_epoch = producer.producer_id, producer.producer_epoch
        producer.init(conn)  # a new instance: epoch bump, the open transaction is aborted
        assert producer.producer_epoch > stale.producer_epoch
        assert verify_only(leader, [(stale, topic, [0])]) == {
            stale.transactional_id: {(topic, 0): ErrorCode.producer_fenced}
        }
        stranger = WireTxnProducer(producer.transactional_id)
        stranger.producer_id, stranger.producer_epoch = producer.producer_id + 1000, producer.producer_epoch
        assert verify_only(leader, [(stranger, topic, [0])]) == {
            stranger.transactional_id: {(topic, 0): ErrorCode.invalid_producer_id_mapping}
        }
