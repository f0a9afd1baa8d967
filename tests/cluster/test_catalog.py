"""Catalog (cluster/pg/catalog.py) against a real PostgreSQL: topics with their partitions and
configs created and deleted in one transaction, partitions added, configs altered, dynamic broker
configs per node and cluster-wide, a NOTIFY after each change; the coordinators' internal topics
described from the partition counts they stored."""

from __future__ import annotations

import asyncio
import uuid

import psycopg
import pytest

from oncestream.cluster.leases.pg_internal_topic import internal_topic_partitions
from oncestream.cluster.pg.catalog import CATALOG_CHANNEL, Catalog, internal_topic_id
from oncestream.cluster.pg.store import MetadataStore
from oncestream.errors import InvalidPartitionsError, TopicAlreadyExistsError, UnknownTopicOrPartitionError


def _rows(url: str, query: str, *params: object) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(query, params).fetchall()


async def _catalog(url: str) -> Catalog:
    return Catalog(await MetadataStore.open(url))


def test_cluster_id_is_stable(pg_database):
    async def main() -> tuple[str, str]:
        first, second = await _catalog(pg_database), await _catalog(pg_database)
        try:
            return await first.cluster_id(), await second.cluster_id()
        finally:
            await first.store.close()
            await second.store.close()

    a, b = asyncio.run(main())
    assert a == b
    assert len(a) == 22


def test_topics_are_created_with_partitions_and_configs_once(pg_database):
    given_id = uuid.uuid4()

    async def main() -> None:
        catalog = await _catalog(pg_database)
        try:
            info = await catalog.create_topic("orders", 3, {"retention.ms": "1000"}, topic_id=given_id)
            assert info.topic_id == given_id
            with pytest.raises(TopicAlreadyExistsError, match="'orders' already exists"):
                await catalog.create_topic("orders", 1)
            with pytest.raises(InvalidPartitionsError):
                await catalog.create_topic("empty", 0)
            # Concurrent creates of one name (as from several brokers): exactly one wins.
            results = await asyncio.gather(*(catalog.create_topic("raced", 2) for _ in range(4)),
                                           return_exceptions=True)
            assert sum(not isinstance(r, BaseException) for r in results) == 1
            assert all(isinstance(r, TopicAlreadyExistsError) for r in results if isinstance(r, BaseException))
            await catalog.create_topic("__internal", 1, internal=True)
            topics = await catalog.topics()
            assert sorted(topics) == ["__internal", "orders", "raced"]
            assert topics["orders"].num_partitions == 3
            assert topics["orders"].configs == {"retention.ms": "1000"}
            assert topics["__internal"].internal
            assert not topics["orders"].internal
        finally:
            await catalog.store.close()

    asyncio.run(main())
    assert _rows(pg_database, "SELECT partition, log_start_offset, high_watermark FROM partitions"
                              " WHERE topic_id = %s ORDER BY partition", given_id) == [(0, 0, 0), (1, 0, 0), (2, 0, 0)]


def test_internal_topics_are_described_from_the_counts_the_coordinators_stored(pg_database):
    async def main() -> None:
        first, second = await _catalog(pg_database), await _catalog(pg_database)
        try:
            assert await first.internal_topics() == {}  # no coordinator opened its topic yet
            assert await internal_topic_partitions(first.store, "__consumer_offsets", 7) == 7
            assert await internal_topic_partitions(second.store, "__consumer_offsets", 50) == 7  # the first count stays
            assert await internal_topic_partitions(second.store, "__transaction_state", 3) == 3
            await first.create_topic("orders", 2)
            cluster_id = await first.cluster_id()
            seen = [await catalog.internal_topics() for catalog in (first, second)]
            assert seen[0] == seen[1]  # every broker derives the same topic ids
            described = seen[0]
            assert {name: (t.num_partitions, t.internal, t.configs) for name, t in described.items()} == {
                "__consumer_offsets": (7, True, {}), "__transaction_state": (3, True, {})}
            ids = {t.topic_id for t in described.values()}
            assert ids == {internal_topic_id(cluster_id, "__consumer_offsets"),
                           internal_topic_id(cluster_id, "__transaction_state")}
            assert len(ids) == 2
            assert (await first.topics())["orders"].topic_id not in ids
            # Not data topics: the catalog's topics (Produce's and Fetch's lookups) do not hold them.
            assert sorted(await first.topics()) == ["orders"]
            assert await first.topic("__consumer_offsets") is None
            with pytest.raises(UnknownTopicOrPartitionError):
                await first.create_partitions("__consumer_offsets", 8)
        finally:
            await first.store.close()
            await second.store.close()

    asyncio.run(main())
    assert internal_topic_id("a" * 22, "__consumer_offsets") != internal_topic_id("b" * 22, "__consumer_offsets")


def test_partitions_are_added_and_configs_altered(pg_database):
    async def main() -> None:
        catalog = await _catalog(pg_database)
        try:
            info = await catalog.create_topic("t", 2, {"a": "1", "b": "2"})
            grown = await catalog.create_partitions("t", 5)
            assert grown.num_partitions == 5
            with pytest.raises(InvalidPartitionsError, match="must be larger"):
                await catalog.create_partitions("t", 5)
            with pytest.raises(UnknownTopicOrPartitionError):
                await catalog.create_partitions("nope", 5)
            assert [r[0] for r in _rows(pg_database, "SELECT partition FROM partitions WHERE topic_id = %s"
                                                     " ORDER BY partition", info.topic_id)] == [0, 1, 2, 3, 4]
            changed = await catalog.alter_topic_configs("t", {"b": "20", "c": "3"}, ["a", "missing"])
            assert changed.configs == {"b": "20", "c": "3"}
            replaced = await catalog.alter_topic_configs("t", {"d": "4"}, replace_all=True)
            assert replaced.configs == {"d": "4"}
            fetched = await catalog.topic("t")
            assert fetched is not None
            assert fetched.configs == {"d": "4"}
            with pytest.raises(UnknownTopicOrPartitionError):
                await catalog.alter_topic_configs("nope", {"x": "1"})
        finally:
            await catalog.store.close()

    asyncio.run(main())


def test_delete_topic_removes_its_rows_and_frees_the_name(pg_database):
    async def main() -> tuple[uuid.UUID, uuid.UUID]:
        catalog = await _catalog(pg_database)
        try:
            info = await catalog.create_topic("gone", 2, {"x": "1"})
            await catalog.create_topic("kept", 1, {"y": "2"})
            assert await catalog.delete_topic("gone") == info.topic_id
            with pytest.raises(UnknownTopicOrPartitionError):
                await catalog.delete_topic("gone")
            assert sorted(await catalog.topics()) == ["kept"]
            again = await catalog.create_topic("gone", 1)
            return info.topic_id, again.topic_id
        finally:
            await catalog.store.close()

    old_id, new_id = asyncio.run(main())
    assert old_id != new_id
    assert _rows(pg_database, "SELECT count(*) FROM partitions WHERE topic_id = %s", old_id) == [(0,)]
    assert _rows(pg_database, "SELECT count(*) FROM topic_configs WHERE topic_id = %s", old_id) == [(0,)]
    assert _rows(pg_database, "SELECT count(*) FROM topic_configs") == [(1,)]  # kept's


def test_dynamic_broker_configs_per_node_and_cluster_wide(pg_database):
    async def main() -> None:
        catalog = await _catalog(pg_database)
        try:
            assert await catalog.broker_configs(None) == {}
            assert await catalog.alter_broker_configs(None, {"log.retention.ms": "1"}) == {"log.retention.ms": "1"}
            assert await catalog.alter_broker_configs(1, {"num.io.threads": "4", "x": "y"}) == {
                "num.io.threads": "4", "x": "y"}
            assert await catalog.alter_broker_configs(1, {}, ["x"]) == {"num.io.threads": "4"}
            assert await catalog.broker_configs(2) == {}
            assert await catalog.broker_configs(None) == {"log.retention.ms": "1"}
            assert await catalog.alter_broker_configs(None, {"z": "1"}, replace_all=True) == {"z": "1"}
            assert await catalog.broker_configs(1) == {"num.io.threads": "4"}
            with pytest.raises(ValueError, match="None names the cluster-wide default"):
                await catalog.broker_configs(-1)
        finally:
            await catalog.store.close()

    asyncio.run(main())


def test_every_change_notifies_the_other_brokers(pg_database):
    async def main() -> list[str]:
        catalog = await _catalog(pg_database)
        listener = catalog.store.listen(CATALOG_CHANNEL)
        got: list[str] = []
        try:
            pending = asyncio.ensure_future(anext(listener))
            # Until the LISTEN is in place, changes are not heard: repeat a harmless change.
            for _ in range(100):
                await catalog.alter_broker_configs(None, {"k": "v"})
                done, _ = await asyncio.wait({pending}, timeout=0.2)
                if done:
                    break
            got.append(pending.result())
            await catalog.create_topic("n", 1)
            await catalog.alter_topic_configs("n", {"a": "b"})
            await catalog.create_partitions("n", 2)
            await catalog.delete_topic("n")
            while len(got) < 100 and got[-4:] != ["topic:n"] * 4:
                got.append(await asyncio.wait_for(anext(listener), 30))
        finally:
            await listener.aclose()
            await catalog.store.close()
        return got

    got = asyncio.run(main())
    assert got[0] == "broker_configs:"
    assert got[-4:] == ["topic:n"] * 4
