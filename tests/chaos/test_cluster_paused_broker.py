"""A cluster broker SIGSTOPped past its session timeout, then resumed, writes nothing late.

Three brokers (session timeout 3 s, ``tests/support/cluster.py``). A consumer group commits
offsets through librdkafka; the broker owning the group's coordinator partition (its lease row in
``coordinator_leases``) is SIGSTOPped while an idempotent producer writes through every broker,
and with two requests waiting in its socket: an OffsetCommit of a marker offset for the group
(sent raw, so nothing retries it) and whatever produce requests librdkafka had in flight to it.
It is paused, when a few short tries manage it, inside a produce commit with partition rows
locked: the load must go on meanwhile (PostgreSQL ends that transaction after the commit's idle
timeout, the broker's session timeout; before, every other broker's commits to those partitions
waited, and the whole load with them, for as long as the broker stayed paused).
Another broker takes the lease over (a new epoch); the group keeps committing through it. Then
the paused broker is resumed:
- its late OffsetCommit is refused, and the marker offset is never stored: the group's committed
  offsets are exactly the last ones committed through the new owner;
- the lease keeps the new owner and its epoch (the old broker neither wrote nor took it back);
- the old broker registers again as a new incarnation;
- every acknowledged record is read exactly once at its acknowledged offset (the producer's
  retries of the paused broker's requests went elsewhere; its late appends are duplicates the
  commit transaction recognises).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from tests.support.clients import create_topic, unique_topic
from tests.support.cluster import Cluster, ClusterBroker, cluster_factory  # noqa: F401  (fixture)
from tests.support.cluster_clients import consume_all
from tests.support.cluster_faults import NumberedLoad, assert_acknowledged_exactly_once
from tests.support.wire import ResponseReader, WireConnection, frame, int32, int64, nullable_string, request_header

pytestmark = pytest.mark.chaos

# Twelve partitions over three brokers: the paused broker leads some of them (rendezvous hashing
# leaves a given broker none with probability (2/3)^12 < 1 %; the test checks it leads one).
PARTITIONS = 12
WAIT_S = 60.0  # a bound on a hang only
API_OFFSET_COMMIT = 8
ERROR_NONE = 0
MARKER_OFFSET = 999_999  # committed only by the late request; must never be stored
PAUSE_TRIES_S = 10.0  # how long to try pausing the broker inside a produce commit
# A session of the paused broker idles at least this long before it is looked for; a running
# broker's commit waits for its client only for moments between statements.
PAUSED_IDLE_S = 0.25
# Sessions idle for PAUSED_IDLE_S inside a transaction holding partition rows locked
# (SELECT ... FOR UPDATE takes ROW SHARE on the table until the transaction ends).
_IDLE_PARTITION_LOCKERS = """
SELECT a.pid FROM pg_stat_activity a
JOIN pg_locks l ON l.pid = a.pid JOIN pg_class c ON c.oid = l.relation
WHERE a.datname = current_database() AND a.state = 'idle in transaction'
  AND now() - a.state_change > %s * interval '1 second'
  AND c.relname = 'partitions' AND l.mode = 'RowShareLock'
"""


def _rows(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return list(conn.execute(sql, params).fetchall())


def _group_resource(url: str, group: str) -> str:
    """The coordinator partition holding ``group``'s offsets (from its stored commit)."""
    rows = _rows(url, "SELECT DISTINCT partition FROM coordinator_records "
                      "WHERE topic = '__consumer_offsets' AND position(%s::bytea in key) > 0", group.encode())
    assert len(rows) == 1, f"group {group} found in coordinator partitions {rows}"
    return f"__consumer_offsets/{rows[0][0]}"


def _lease(url: str, resource: str) -> tuple[int | None, str | None, int]:
    rows = _rows(url, "SELECT owner_node_id, owner_incarnation::text, epoch FROM coordinator_leases "
                      "WHERE resource = %s", resource)
    assert rows, f"no lease row for {resource}"
    owner, incarnation, epoch = rows[0]
    return owner, incarnation, int(epoch)


def _stored_offsets(url: str, group: str) -> list[int]:
    """The group's committed offsets as PostgreSQL holds them (OffsetCommitValue: int16 version,
    then the int64 offset), in key order (one partition each)."""
    rows = _rows(url, "SELECT value FROM coordinator_records WHERE topic = '__consumer_offsets' "
                      "AND position(%s::bytea in key) > 0 ORDER BY key", group.encode())
    return [int(struct.unpack_from(">q", bytes(value), 2)[0]) for (value,) in rows]


def _incarnation(url: str, node_id: int) -> str | None:
    rows = _rows(url, "SELECT incarnation::text FROM brokers WHERE node_id = %s", node_id)
    return rows[0][0] if rows else None


def _wait(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"not within {WAIT_S} s: {what}"
        time.sleep(0.2)


def _commit(consumer: Consumer, topic: str, offset: int) -> None:
    """Commit ``offset`` for every partition, retrying while the coordinator moves (bounded)."""
    offsets = [TopicPartition(topic, p, offset) for p in range(PARTITIONS)]
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
            return
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"commit of {offset} kept failing: {exc}") from exc
            time.sleep(0.5)


def _committed(consumer: Consumer, topic: str) -> list[int]:
    """The group's committed offsets as a client reads them (OffsetFetch), retried while the
    coordinator moves (bounded)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=WAIT_S)
            return [tp.offset for tp in committed]
        except KafkaException as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"reading the committed offsets kept failing: {exc}") from exc
            time.sleep(0.5)


def _offset_commit_v2(group: str, topic: str, offset: int) -> bytes:
    """OffsetCommit v2 of a group without members (generation -1): ``offset`` for every partition."""
    partitions = b"".join(int32(p) + int64(offset) + nullable_string(None) for p in range(PARTITIONS))
    return (nullable_string(group) + int32(-1) + nullable_string("") + int64(-1)
            + int32(1) + nullable_string(topic) + int32(PARTITIONS) + partitions)


def _offset_commit_errors(frame_body: bytes) -> list[int]:
    reader = ResponseReader(frame_body)
    reader.take(">i")  # correlation id
    errors = []
    for _ in range(reader.take(">i")):
        reader.string()
        for _ in range(reader.take(">i")):
            reader.take(">i")
            errors.append(reader.take(">h"))
    return errors


def _holds_partition_locks_idle(conn: psycopg.Connection[Any]) -> bool:
    """Whether a session sits idle inside a transaction that locked partition rows (a produce
    commit, FOR UPDATE of ``partitions``) for ``PAUSED_IDLE_S``: the paused broker's session."""
    return bool(conn.execute(_IDLE_PARTITION_LOCKERS, (PAUSED_IDLE_S,)).fetchall())


def _pause_inside_a_commit(broker: ClusterBroker, url: str) -> bool:
    """SIGSTOP ``broker``, preferably while it is inside a produce commit with partitions locked,
    the case that held every other broker's commits (and so the whole idempotent load) for as long
    as the broker stayed paused, before commits bounded their idle time. Short pauses (well within
    the session timeout) are tried until one lands there (bounded); True when one did."""
    deadline = time.monotonic() + PAUSE_TRIES_S
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            broker.pause()
            time.sleep(PAUSED_IDLE_S + 0.05)  # a statement in flight ends; then its session idles
            if _holds_partition_locks_idle(conn):
                return True
            if time.monotonic() > deadline:
                return False
            broker.resume()
            time.sleep(0.2)


def test_paused_coordinator_is_fenced_and_its_produce_requests_duplicate_nothing(
        cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3)
    url = cluster.metadata_store
    topic = unique_topic("cluster-paused")
    group = unique_topic("paused-group")
    create_topic(cluster.brokers[0].bootstrap, topic, partitions=PARTITIONS)
    # The consumer's requests to the paused broker time out after 6 s, so its commits move on;
    # so do the producer's, which are then retried through the new leaders once the broker left
    # Metadata (session timeout 3 s). librdkafka times a ProduceRequest out after socket.timeout.ms
    # (default 60 s), and an idempotent producer sends a partition's next batch only after its
    # requests in flight ended: left at 60 s, the partitions the paused broker led stalled the load
    # for the test's whole 60 s wait (3547 acknowledged, 64 after the takeover, in one CI run).
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "socket.timeout.ms": 6000})
    load = NumberedLoad(cluster.bootstrap, topic, extra_conf={"request.timeout.ms": 6000, "socket.timeout.ms": 6000})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        _commit(consumer, topic, 1)
        resource = _group_resource(url, group)
        owner, _, epoch_before = _lease(url, resource)
        assert owner is not None, f"{resource} has no owner after a commit"
        old: ClusterBroker = cluster.broker(owner)
        old_incarnation = _incarnation(url, owner)
        load.start()
        load.wait_for_acks(100, WAIT_S)

        leaders = {p.leader for p in consumer.list_topics(topic, timeout=WAIT_S).topics[topic].partitions.values()}
        assert owner in leaders, f"node {owner} leads no partition of {topic} (leaders {leaders})"
        late = WireConnection(old.host, old.port, timeout_s=WAIT_S)
        try:
            paused_in_commit = _pause_inside_a_commit(old, url)
            try:
                late_request = request_header(API_OFFSET_COMMIT, 2, 7, flexible=False)
                assert late.send(frame(late_request + _offset_commit_v2(group, topic, MARKER_OFFSET)))
                # The lease moves once the paused broker's registration expired (PostgreSQL's clock).
                _wait(f"another broker owns {resource}",
                      lambda: _lease(url, resource)[0] not in (None, owner))
                new_owner, new_incarnation, epoch_after = _lease(url, resource)
                assert epoch_after > epoch_before, f"the takeover kept epoch {epoch_before}"
                acked_at_takeover = load.acked_count()
                for offset in (10, 20, 30):  # the group keeps working through the new owner
                    _commit(consumer, topic, offset)
                assert _lease(url, resource) == (new_owner, new_incarnation, epoch_after)
                assert _stored_offsets(url, group) == [30] * PARTITIONS
                # The load goes on while the broker stays paused, even when it was paused inside a
                # commit: PostgreSQL ends that transaction after the broker's session timeout.
                load.wait_for_acks(acked_at_takeover + 100, WAIT_S)
                with psycopg.connect(url, autocommit=True) as conn:
                    _wait(f"PostgreSQL ended the paused broker's transaction (paused inside a commit: "
                          f"{paused_in_commit})", lambda: not _holds_partition_locks_idle(conn))
            finally:
                old.resume()
            errors = _offset_commit_errors(late.recv_frame())
        finally:
            late.close()
        assert errors, "the late OffsetCommit's answer names no partition"
        assert all(code != ERROR_NONE for code in errors), (
            f"the paused former coordinator accepted a late OffsetCommit: errors {errors}")
        _wait(f"node {owner} registered again", lambda: _incarnation(url, owner) not in (None, old_incarnation))
        time.sleep(2.0)  # let the resumed broker run its lease rounds and flush what it held
        # The resumed broker is the resource's preferred owner again (rendezvous hashing), so it
        # may take the lease back, but only as its new incarnation and at a newer epoch.
        owner_now, incarnation_now, epoch_now = _lease(url, resource)
        assert incarnation_now != old_incarnation, f"{resource} is held by node {owner}'s old incarnation"
        assert epoch_now >= epoch_after, f"{resource}'s epoch went back from {epoch_after} to {epoch_now}"
        assert (owner_now, incarnation_now) == (new_owner, new_incarnation) or epoch_now > epoch_after
        assert _stored_offsets(url, group) == [30] * PARTITIONS, "the group's stored offsets changed"
        assert _committed(consumer, topic) == [30] * PARTITIONS
        load.wait_for_acks(load.acked_count() + 50, WAIT_S)
        load.finish()
    finally:
        consumer.close()
    gone = [broker.node_id for broker in cluster.brokers if not broker.is_alive()]
    assert not gone, f"brokers {gone} exited"
    for isolation in ("read_committed", "read_uncommitted"):
        consumed = consume_all(cluster.bootstrap, topic, PARTITIONS, len(load.acked), {"isolation.level": isolation})
        assert_acknowledged_exactly_once(load.acked, consumed)
