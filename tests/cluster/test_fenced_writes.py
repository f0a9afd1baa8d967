"""Fenced coordinator writes (PgInternalTopic) against the real PostgreSQL: a former owner paused
past its lease writes nothing, a new owner loads exactly what the old one committed."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from oncestream.cluster.leases.coordinator_leases import CoordinatorLeases, LeaseLostError, fenced, resource_name
from oncestream.cluster.leases.pg_internal_topic import PgInternalTopic
from oncestream.cluster.pg.store import MetadataStore
from tests.cluster.lease_support import register, run_cluster
from tests.cluster.test_coordinator_leases import LONG_MS, wait_expired

TOPIC = "__transaction_state"
RESOURCES = [resource_name(TOPIC, p) for p in range(2)]


async def _rows(url: str) -> list[tuple[int, bytes, bytes, int]]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        cursor = await conn.execute(
            'SELECT partition, key, value, "offset" FROM coordinator_records WHERE topic = %s'
            ' ORDER BY partition, "offset"', (TOPIC,))
        return [(int(r[0]), bytes(r[1]), bytes(r[2]), int(r[3])) for r in await cursor.fetchall()]


def test_compaction_semantics_and_offsets(pg_database):
    async def main(store: MetadataStore) -> None:
        reg = await register(store, 1, LONG_MS)
        held = (await CoordinatorLeases(store).acquire(reg, RESOURCES)).held
        topic = PgInternalTopic(store, TOPIC, 2)
        topic.own(0, held[RESOURCES[0]])
        await topic.append(0, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2")], 0)
        await topic.append(0, [(b"b", None), (b"c", b"1")], 0)
        assert await topic.read_records([0]) == [(0, 2, b"a", b"2"), (0, 4, b"c", b"1")]
        await topic.append(0, [(b"b", b"3")], 0)  # offsets keep growing after a delete
        assert await topic.read_all() == [(b"a", b"2"), (b"c", b"1"), (b"b", b"3")]
        with pytest.raises(LeaseLostError):  # partition 1 is held but not owned by this topic
            await topic.append(1, [(b"x", b"1")], 0)
        assert [r[0] for r in await _rows(pg_database)] == [0, 0, 0]

    run_cluster(pg_database, main)


def test_a_paused_former_owner_writes_nothing_and_the_new_owner_loads_what_it_committed(pg_database):
    async def main(store: MetadataStore) -> None:
        leases = CoordinatorLeases(store)
        paused = await register(store, 1, 500)
        old_topic = PgInternalTopic(store, TOPIC, 2)
        for resource, lease in (await leases.acquire(paused, RESOURCES)).held.items():
            old_topic.own(int(resource.rsplit("/", 1)[1]), lease)
        await old_topic.append(0, [(b"txn-a", b"prepared"), (b"txn-b", b"ongoing")], 0)
        await old_topic.append(1, [(b"txn-c", b"ongoing")], 0)
        committed = await _rows(pg_database)

        # The old owner stops heartbeating (paused) past its session timeout; another takes over.
        successor = await register(store, 2, LONG_MS)
        await wait_expired(store, paused)
        took = await leases.acquire(successor, RESOURCES)
        assert set(took.held) == set(RESOURCES)
        new_topic = PgInternalTopic(store, TOPIC, 2)
        for resource, lease in took.held.items():
            new_topic.own(int(resource.rsplit("/", 1)[1]), lease)

        # The former owner resumes and writes with the epoch it still believes in: refused.
        with pytest.raises(LeaseLostError):
            await old_topic.append(0, [(b"txn-a", b"complete"), (b"txn-z", b"new")], 0)
        assert await _rows(pg_database) == committed  # no row written, none changed

        # The new owner loads exactly what the old one committed, and writes on.
        assert await new_topic.read_records() == [(p, o, k, v) for p, k, v, o in committed]
        await new_topic.append(0, [(b"txn-a", b"complete")], 0)
        # Offset 2: the refused append took no offset either (one transaction, rolled back).
        assert (0, b"txn-a", b"complete", 2) in await _rows(pg_database)

    run_cluster(pg_database, main)


def test_a_write_in_flight_holds_off_the_takeover_until_it_ends(pg_database):
    """The share lock of ``fenced``: a takeover cannot slip between a write's check and its
    commit, so the new owner's load sees the write (SKIP LOCKED: the round just skips the row)."""
    async def main(store: MetadataStore) -> None:
        leases = CoordinatorLeases(store)
        writer = await register(store, 1, 500)
        lease = (await leases.acquire(writer, RESOURCES[:1])).held[RESOURCES[0]]
        successor = await register(store, 2, LONG_MS)
        async with await psycopg.AsyncConnection.connect(pg_database) as conn:
            async with conn.transaction():
                await fenced(conn, lease.resource, lease.epoch, lease.incarnation)
                await conn.execute(
                    "INSERT INTO coordinator_records (topic, partition, key, value, \"offset\")"
                    " VALUES (%s, 0, 'k', 'late but checked', 0)", (TOPIC,))
                await wait_expired(store, writer)
                skipped = await leases.acquire(successor, RESOURCES[:1])
                assert skipped.held == {}  # the row is locked by the write in flight
            # The write committed; now the takeover goes through and sees it.
        taken = await leases.acquire(successor, RESOURCES[:1])
        assert taken.held[RESOURCES[0]].epoch == lease.epoch + 1
        topic = PgInternalTopic(store, TOPIC, 2)
        topic.own(0, taken.held[RESOURCES[0]])
        assert await topic.read_all([0]) == [(b"k", b"late but checked")]

    run_cluster(pg_database, main)


def test_a_paused_writer_inside_its_transaction_is_ended_by_postgresql(pg_database):
    """``idle_timeout_ms``: a writer stalled inside its fenced transaction loses its session, so
    its lock cannot hold off a takeover for longer than that, and its write never commits."""
    async def main(store: MetadataStore) -> None:
        leases = CoordinatorLeases(store)
        writer = await register(store, 1, LONG_MS)
        lease = (await leases.acquire(writer, RESOURCES[:1])).held[RESOURCES[0]]
        conn = await psycopg.AsyncConnection.connect(pg_database)

        async def stall_inside_a_write() -> None:
            async with conn.transaction():
                await fenced(conn, lease.resource, lease.epoch, lease.incarnation, idle_timeout_ms=200)
                await conn.execute(
                    "INSERT INTO coordinator_records (topic, partition, key, value, \"offset\")"
                    " VALUES (%s, 0, 'k', 'never', 0)", (TOPIC,))
                await asyncio.sleep(1.0)  # paused inside the transaction

        try:
            with pytest.raises((psycopg.errors.IdleInTransactionSessionTimeout, psycopg.OperationalError)):
                await stall_inside_a_write()
        finally:
            await conn.close()
        assert await _rows(pg_database) == []

    run_cluster(pg_database, main)


def test_every_broker_uses_the_partition_count_the_first_one_stored(pg_database):
    async def main(store: MetadataStore) -> None:
        first = await PgInternalTopic.open(store, "__consumer_offsets", 4)
        second = await PgInternalTopic.open(store, "__consumer_offsets", 50)  # configured differently
        other = await PgInternalTopic.open(store, "__transaction_state", 7)
        assert (first.num_partitions, second.num_partitions, other.num_partitions) == (4, 4, 7)

    run_cluster(pg_database, main)
