"""The cluster's catalog in PostgreSQL: its id, topics with their partitions and configs, and the
dynamic broker configs (per node id and the cluster-wide default).

Every change is one transaction run by ``MetadataStore.run`` and ends with
``pg_notify('oncestream_catalog', ...)`` (``CATALOG_CHANNEL``): a wake-up for the other brokers'
metadata caches, which re-read (the payload names what changed: ``topic:<name>`` or
``broker_configs:<node id>``; ``''`` from ``MetadataStore.listen`` means anything may have changed).

Names and config values are validated by the broker's existing code (broker/config_admin.py,
log/topic_config_defs.py) before they reach the catalog: it stores what the caller validated. A
change whose commit outcome is unknown is resolved by reading back (each method says how).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from oncestream.cluster.pg.errors import MetadataStoreError
from oncestream.cluster.pg.store import Conn, MetadataStore
from oncestream.errors import InvalidPartitionsError, TopicAlreadyExistsError, UnknownTopicOrPartitionError

CATALOG_CHANNEL = "oncestream_catalog"
# The uuid5 namespace of the internal topics' ids (any constant unique to this use).
_INTERNAL_TOPIC_ID_NAMESPACE = uuid.UUID("3f1c3a52-6d0e-4b8e-9a61-6f6e63657374")
# node_id of the cluster-wide default row of broker_configs (Kafka's empty broker resource name).
CLUSTER_DEFAULT_NODE_ID = -1


@dataclass(frozen=True)
class TopicInfo:
    """One topic as the catalog holds it."""

    topic_id: uuid.UUID
    name: str
    num_partitions: int
    internal: bool
    configs: dict[str, str] = field(default_factory=dict)


async def _notify(conn: Conn, payload: str) -> None:
    await conn.execute("SELECT pg_notify(%s, %s)", (CATALOG_CHANNEL, payload))


async def _topic(conn: Conn, name: str, *, lock: bool = False) -> TopicInfo | None:
    cursor = await conn.execute(
        "SELECT topic_id, num_partitions, internal FROM topics WHERE name = %s" + (" FOR UPDATE" if lock else ""),
        (name,))
    row = await cursor.fetchone()
    if row is None:
        return None
    cursor = await conn.execute("SELECT key, value FROM topic_configs WHERE topic_id = %s", (row[0],))
    configs = {str(k): str(v) for k, v in await cursor.fetchall()}
    return TopicInfo(row[0], name, int(row[1]), bool(row[2]), configs)


async def _require_topic(conn: Conn, name: str, *, lock: bool = False) -> TopicInfo:
    info = await _topic(conn, name, lock=lock)
    if info is None:
        raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
    return info


def internal_topic_id(cluster_id: str, name: str) -> uuid.UUID:
    """The topic id of internal topic ``name`` in cluster ``cluster_id``: a version-5 uuid, so it
    never equals a created topic's (version 4) id, and the same wherever it is computed."""
    return uuid.uuid5(_INTERNAL_TOPIC_ID_NAMESPACE, f"{cluster_id}/{name}")


def _broker_scope(node_id: int | None) -> int:
    if node_id is not None and node_id < 0:
        raise ValueError(f"a broker node id is >= 0, got {node_id}; None names the cluster-wide default")
    return CLUSTER_DEFAULT_NODE_ID if node_id is None else node_id


class Catalog:
    """Topics, partitions, topic configs and dynamic broker configs of the cluster."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._cluster_id: str | None = None

    async def cluster_id(self) -> str:
        """The cluster id (22 characters, chosen when the schema was first applied; never changes)."""
        if self._cluster_id is None:
            async def read(conn: Conn) -> str:
                cursor = await conn.execute("SELECT value FROM cluster_meta WHERE key = 'cluster.id'")
                row = await cursor.fetchone()
                if row is None:
                    raise MetadataStoreError("cluster_meta has no cluster.id: the schema was not applied")
                return str(row[0])

            self._cluster_id = await self.store.run(read)
        return self._cluster_id

    async def create_topic(self, name: str, partitions: int, configs: Mapping[str, str] | None = None,
                           topic_id: uuid.UUID | None = None, *, internal: bool = False) -> TopicInfo:
        """Create a topic with ``partitions`` partitions (log start and high watermark 0) and its
        configs, in one transaction. ``TopicAlreadyExistsError`` when the name is taken,
        ``InvalidPartitionsError`` for a count below 1. An unknown commit outcome is resolved by
        looking for the topic with this call's topic id."""
        if partitions < 1:
            raise InvalidPartitionsError(f"topic {name!r}: the number of partitions must be at least 1, got {partitions}")
        new_id = topic_id if topic_id is not None else uuid.uuid4()
        config_rows = dict(configs or {})
        wanted = TopicInfo(new_id, name, partitions, internal, config_rows)

        async def create(conn: Conn) -> TopicInfo:
            cursor = await conn.execute(
                "INSERT INTO topics (topic_id, name, num_partitions, internal) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT DO NOTHING RETURNING topic_id", (new_id, name, partitions, internal))
            if await cursor.fetchone() is None:
                existing = await _topic(conn, name)
                if existing is not None:
                    raise TopicAlreadyExistsError(f"topic {name!r} already exists")
                raise TopicAlreadyExistsError(f"topic id {new_id} is already used by another topic")
            await conn.execute(
                "INSERT INTO partitions (topic_id, partition) SELECT %s, generate_series(0, %s - 1)",
                (new_id, partitions))
            if config_rows:
                async with conn.cursor() as cur:
                    await cur.executemany("INSERT INTO topic_configs (topic_id, key, value) VALUES (%s, %s, %s)",
                                          [(new_id, k, v) for k, v in config_rows.items()])
            await _notify(conn, f"topic:{name}")
            return wanted

        async def created(conn: Conn) -> TopicInfo | None:
            existing = await _topic(conn, name)
            return existing if existing is not None and existing.topic_id == new_id else None

        return await self.store.run(create, read_back=created)

    async def delete_topic(self, name: str) -> uuid.UUID:
        """Delete the topic's catalog rows (partitions, configs and, by cascade, every row keyed by
        its partitions); its topic id, for the diskless side to collect what pointed at objects.
        ``UnknownTopicOrPartitionError`` when there is no such topic. An unknown commit outcome is
        resolved by checking that the name is gone."""
        deleted: list[uuid.UUID] = []

        async def delete(conn: Conn) -> uuid.UUID:
            cursor = await conn.execute("DELETE FROM topics WHERE name = %s RETURNING topic_id", (name,))
            row = await cursor.fetchone()
            if row is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            topic_id: uuid.UUID = row[0]
            deleted.append(topic_id)
            await _notify(conn, f"topic:{name}")
            return topic_id

        async def gone(conn: Conn) -> uuid.UUID | None:
            if deleted and await _topic(conn, name) is None:
                return deleted[-1]
            return None

        return await self.store.run(delete, read_back=gone)

    async def topic(self, name: str) -> TopicInfo | None:
        """One topic, or None."""
        return await self.store.run(lambda conn: _topic(conn, name))

    async def topics(self) -> dict[str, TopicInfo]:
        """Every topic by name, with its configs (one consistent snapshot)."""

        async def read(conn: Conn) -> dict[str, TopicInfo]:
            cursor = await conn.execute("SELECT topic_id, name, num_partitions, internal FROM topics")
            rows = await cursor.fetchall()
            cursor = await conn.execute("SELECT topic_id, key, value FROM topic_configs")
            configs: dict[uuid.UUID, dict[str, str]] = {}
            for topic_id, key, value in await cursor.fetchall():
                configs.setdefault(topic_id, {})[str(key)] = str(value)
            return {str(name): TopicInfo(topic_id, str(name), int(n), bool(internal), configs.get(topic_id, {}))
                    for topic_id, name, n, internal in rows}

        return await self.store.run(read)

    async def internal_topics(self) -> dict[str, TopicInfo]:
        """The coordinators' internal topics by name (``internal`` set, no config overrides), as
        the brokers opened them in ``coordinator_topics`` (see the module docstring)."""
        cluster_id = await self.cluster_id()

        async def read(conn: Conn) -> dict[str, TopicInfo]:
            cursor = await conn.execute("SELECT topic, num_partitions FROM coordinator_topics")
            return {str(name): TopicInfo(internal_topic_id(cluster_id, str(name)), str(name), int(n), True)
                    for name, n in await cursor.fetchall()}

        return await self.store.run(read)

    async def create_partitions(self, name: str, new_count: int) -> TopicInfo:
        """Grow the topic to ``new_count`` partitions (the new ones empty). ``InvalidPartitionsError``
        when ``new_count`` is not above the current count, ``UnknownTopicOrPartitionError`` when
        there is no such topic. An unknown commit outcome is resolved by reading the count back."""
        grown = False

        async def grow(conn: Conn) -> TopicInfo:
            nonlocal grown
            info = await _require_topic(conn, name, lock=True)
            if new_count <= info.num_partitions:
                raise InvalidPartitionsError(
                    f"topic {name!r} has {info.num_partitions} partitions; the new count {new_count} must be larger")
            await conn.execute(
                "INSERT INTO partitions (topic_id, partition) SELECT %s, generate_series(%s, %s - 1)",
                (info.topic_id, info.num_partitions, new_count))
            await conn.execute("UPDATE topics SET num_partitions = %s WHERE topic_id = %s", (new_count, info.topic_id))
            await _notify(conn, f"topic:{name}")
            grown = True
            return TopicInfo(info.topic_id, name, new_count, info.internal, info.configs)

        async def grew(conn: Conn) -> TopicInfo | None:
            info = await _topic(conn, name)
            return info if grown and info is not None and info.num_partitions == new_count else None

        return await self.store.run(grow, read_back=grew)

    async def alter_topic_configs(self, name: str, set_configs: Mapping[str, str],
                                  delete_configs: Iterable[str] = (), *, replace_all: bool = False) -> TopicInfo:
        """Set and delete topic config overrides (IncrementalAlterConfigs); with ``replace_all``
        the overrides become exactly ``set_configs`` (AlterConfigs). Idempotent, so an unknown
        commit outcome is resolved by applying it again. The topic as changed."""
        to_set = dict(set_configs)
        to_delete = [key for key in delete_configs if key not in to_set]

        async def alter(conn: Conn) -> TopicInfo:
            info = await _require_topic(conn, name, lock=True)
            if replace_all:
                await conn.execute("DELETE FROM topic_configs WHERE topic_id = %s AND NOT (key = ANY(%s))",
                                   (info.topic_id, list(to_set)))
            elif to_delete:
                await conn.execute("DELETE FROM topic_configs WHERE topic_id = %s AND key = ANY(%s)",
                                   (info.topic_id, to_delete))
            if to_set:
                async with conn.cursor() as cur:
                    await cur.executemany(
                        "INSERT INTO topic_configs (topic_id, key, value) VALUES (%s, %s, %s)"
                        " ON CONFLICT (topic_id, key) DO UPDATE SET value = EXCLUDED.value",
                        [(info.topic_id, k, v) for k, v in to_set.items()])
            await _notify(conn, f"topic:{name}")
            return await _require_topic(conn, name)

        return await self.store.run(alter, read_back=_apply_again)

    async def broker_configs(self, node_id: int | None) -> dict[str, str]:
        """The dynamic configs of broker ``node_id`` (None: the cluster-wide default), without
        inheritance: the caller layers node over default over static."""
        scope = _broker_scope(node_id)

        async def read(conn: Conn) -> dict[str, str]:
            cursor = await conn.execute("SELECT key, value FROM broker_configs WHERE node_id = %s", (scope,))
            return {str(k): str(v) for k, v in await cursor.fetchall()}

        return await self.store.run(read)

    async def alter_broker_configs(self, node_id: int | None, set_configs: Mapping[str, str],
                                   delete_configs: Iterable[str] = (), *, replace_all: bool = False) -> dict[str, str]:
        """Set and delete dynamic configs of broker ``node_id`` (None: the cluster-wide default),
        as ``alter_topic_configs`` does for a topic; the configs as changed."""
        scope = _broker_scope(node_id)
        to_set = dict(set_configs)
        to_delete = [key for key in delete_configs if key not in to_set]

        async def alter(conn: Conn) -> dict[str, str]:
            # Serialise the changes of one scope (rows may not exist yet to lock).
            await conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_BROKER_CONFIGS_LOCK, scope))
            if replace_all:
                await conn.execute("DELETE FROM broker_configs WHERE node_id = %s AND NOT (key = ANY(%s))",
                                   (scope, list(to_set)))
            elif to_delete:
                await conn.execute("DELETE FROM broker_configs WHERE node_id = %s AND key = ANY(%s)",
                                   (scope, to_delete))
            if to_set:
                async with conn.cursor() as cur:
                    await cur.executemany(
                        "INSERT INTO broker_configs (node_id, key, value) VALUES (%s, %s, %s)"
                        " ON CONFLICT (node_id, key) DO UPDATE SET value = EXCLUDED.value",
                        [(scope, k, v) for k, v in to_set.items()])
            await _notify(conn, f"broker_configs:{'' if node_id is None else node_id}")
            cursor = await conn.execute("SELECT key, value FROM broker_configs WHERE node_id = %s", (scope,))
            return {str(k): str(v) for k, v in await cursor.fetchall()}

        async def again(conn: Conn) -> dict[str, str] | None:
            return None

        return await self.store.run(alter, read_back=again)


# pg_advisory_xact_lock(int, int) class key of the broker configs (any constant unique to this use).
_BROKER_CONFIGS_LOCK = 0x6F6E6362


async def _apply_again(conn: Conn) -> TopicInfo | None:
    """Read-back of an idempotent change: never found, so the change is simply applied again."""
    return None
