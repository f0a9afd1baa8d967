"""Drives share groups (KIP-932) from the asyncio broker: membership, share sessions, the
share-partitions and their durable state in ``__share_group_state``.

The durability contract is the group coordinator's (group_service.py): an answer that promises a
state (records acquired, acknowledgements applied) is sent only after the records saying so are
appended to ``__share_group_state``. Each change of a share-partition is one ShareUpdate record;
every ``share.coordinator.snapshot.update.records.per.snapshot`` updates a ShareSnapshot carries
its whole state. At start-up the topic is replayed (snapshot, then the updates after it), and every
record that was acquired comes back AVAILABLE with its delivery count (acquisitions are persisted
that way), so nothing acknowledged is delivered again and nothing acquired is lost.

The state topic is created on the first share-partition write, so a broker that never serves a
share group has no such topic.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
import zlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from oncestream.async_wait import run_deadline_timer
from oncestream.broker.internal_topic import InternalAppender, InternalTopic
from oncestream.broker.share_group_configs import (
    AUTO_OFFSET_RESET,
    DEFAULTS,
    DELIVERY_COUNT_LIMIT,
    HEARTBEAT_INTERVAL_MS,
    ISOLATION_LEVEL,
    RECORD_LOCK_DURATION_MS,
    SESSION_TIMEOUT_MS,
    GroupConfigLimits,
    GroupConfigStore,
    reset_by_duration_ms,
)
from oncestream.coordinator.share.group import ShareGroupConfig, ShareGroupCoordinator
from oncestream.coordinator.share.partition import SharePartition, SharePartitionConfig, StateBatch
from oncestream.coordinator.share.records import (
    SNAPSHOT_TYPE,
    UPDATE_TYPE,
    ShareRecordError,
    ShareStateKey,
    ShareStateValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from oncestream.coordinator.share.sessions import ShareSessionCache
from oncestream.errors import CoordinatorInvariantError, InvalidConfigError, NotLeaderOrFollowerError, OnceStreamError
from oncestream.log.manager import LogManager

log = logging.getLogger("oncestream.broker")

SHARE_STATE_TOPIC = "__share_group_state"
_MAX_TICK_SLEEP_S = 0.2
# A member that leaves (heartbeat epoch -1) keeps its share session and records this long:
# librdkafka sends its last ShareAcknowledge (session epoch -1) on another connection at the same
# moment as the leave, and those acknowledgements must not find the records already released.
LEAVE_GRACE_MS = 2000
# How often the state topic is pruned below the oldest snapshot still needed (Kafka's share
# coordinator prunes after each snapshot; whole segments go, so doing it rarely loses nothing).
PRUNE_INTERVAL_MS = 60000
SharePartitionKey = tuple[str, uuid.UUID, int]  # (group id, topic id, partition)
# Cluster mode: persists the share-partitions' snapshots in PostgreSQL, fenced by their leases
# (broker/cluster_shares.py); returns the keys not written.
DurableSave = Callable[[list[SharePartitionKey]], Awaitable[set[SharePartitionKey]]]



async def _nothing_to_refresh() -> None:
    """The single broker's group configs are its own file's: nothing to re-read."""


def _bool(props: dict[str, str], name: str, default: bool) -> bool:
    return props.get(name, str(default)).strip().lower() in ("true", "1", "yes")


_Settings = TypeVar("_Settings", SharePartitionConfig, ShareGroupConfig)


def _with_own(base: _Settings, own: Mapping[str, str], fields: Mapping[str, str]) -> _Settings:
    """``base`` (the broker's settings) with a group's own integer configs: ``fields`` maps a
    group config name to the settings field it replaces."""
    changes = {field_name: int(own[name]) for name, field_name in fields.items() if name in own}
    return dataclasses.replace(base, **changes) if changes else base


@dataclass(frozen=True)
class ShareSettings:
    """Broker properties of share groups (Kafka's names and defaults unless noted)."""

    enabled: bool = True  # group.share.enable, and share.version >= 1
    partition: SharePartitionConfig = field(default_factory=SharePartitionConfig)
    group: ShareGroupConfig = field(default_factory=ShareGroupConfig)
    max_share_sessions: int = 2000  # group.share.max.share.sessions
    state_topic_partitions: int = 10  # share.coordinator.state.topic.num.partitions (Kafka: 50)
    updates_per_snapshot: int = 500  # share.coordinator.snapshot.update.records.per.snapshot
    state_segment_bytes: int = 104857600  # share.coordinator.state.topic.segment.bytes
    # The bounds of a group's own integer configs (group.share.{min,max}.*; share_group_configs.py).
    group_config_limits: GroupConfigLimits = field(default_factory=GroupConfigLimits)

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> ShareSettings:
        def num(name: str, default: int) -> int:
            try:
                return int(props.get(name, default))
            except ValueError as exc:
                raise InvalidConfigError(f"{name}: {exc}") from exc

        p, g = SharePartitionConfig(), ShareGroupConfig()
        settings = cls(
            enabled=_bool(props, "group.share.enable", True) and num("share.version", 1) >= 1,
            partition=SharePartitionConfig(
                record_lock_duration_ms=num("group.share.record.lock.duration.ms", p.record_lock_duration_ms),
                delivery_count_limit=num("group.share.delivery.count.limit", p.delivery_count_limit),
                max_record_locks=num("group.share.partition.max.record.locks", p.max_record_locks),
            ),
            group=ShareGroupConfig(
                session_timeout_ms=num("group.share.session.timeout.ms", g.session_timeout_ms),
                heartbeat_interval_ms=num("group.share.heartbeat.interval.ms", g.heartbeat_interval_ms),
                max_size=num("group.share.max.size", g.max_size),
            ),
            max_share_sessions=num("group.share.max.share.sessions", 2000),
            state_topic_partitions=num("share.coordinator.state.topic.num.partitions", 10),
            updates_per_snapshot=num("share.coordinator.snapshot.update.records.per.snapshot", 500),
            state_segment_bytes=num("share.coordinator.state.topic.segment.bytes", 104857600),
            group_config_limits=GroupConfigLimits.from_properties(props),
        )
        if settings.partition.record_lock_duration_ms < 1 or settings.partition.delivery_count_limit < 1:
            raise InvalidConfigError("group.share.record.lock.duration.ms and group.share.delivery.count.limit must be >= 1")
        if settings.partition.max_record_locks < 1 or settings.state_topic_partitions < 1:
            raise InvalidConfigError("group.share.partition.max.record.locks and the state topic partitions must be >= 1")
        return settings


class ShareService:
    """Share groups of one broker: membership, sessions, share-partitions and their state topic."""

    def __init__(self, logs: LogManager, props: dict[str, str], now_ms: Callable[[], int],
                 mono_ms: Callable[[], int], appender: InternalAppender | None = None,
                 on_available: Callable[[str, int], None] | None = None,
                 group_configs: dict[str, dict[str, str]] | None = None,
                 group_config_store: GroupConfigStore | None = None) -> None:
        """``on_available(topic, partition)`` wakes long-polling ShareFetches when records become
        deliverable again (released, lock expired, member gone)."""
        self.settings = ShareSettings.from_properties(props)
        self.now_ms = now_ms
        self.mono_ms = mono_ms
        self._logs = logs
        self._appender = appender
        self._on_available = on_available or (lambda topic, partition: None)
        self.groups = ShareGroupCoordinator(self.settings.group, self._topic_lookup, self.group_settings)
        self.sessions = ShareSessionCache(self.settings.max_share_sessions)
        self.partitions: dict[SharePartitionKey, SharePartition] = {}
        self._updates_since_snapshot: dict[SharePartitionKey, int] = {}
        self._snapshot_epoch: dict[SharePartitionKey, int] = {}
        # Per-group share configs (GROUP config resources; durable in ``group_config_store``:
        # the data dir's file, or PostgreSQL in cluster mode). ``refresh_group_configs`` re-reads
        # them where another broker may have changed them (cluster mode; the caller holds
        # ``group_config_lock``), before a share-partition starts by them or they are described.
        self.group_configs: dict[str, dict[str, str]] = dict(group_configs or {})
        self.group_config_store = group_config_store
        self.group_config_lock = asyncio.Lock()
        self.refresh_group_configs: Callable[[], Awaitable[None]] = _nothing_to_refresh
        self._topic: InternalTopic | None = None
        self._departures: dict[tuple[str, str], int] = {}  # (group, member) -> release at (mono ms)
        # Where each share-partition's latest snapshot is: (state topic partition, offset). The
        # topic is pruned below the oldest of them (nothing older is read at a replay).
        self._snapshot_at: dict[SharePartitionKey, tuple[int, int]] = {}
        self._next_prune_ms = mono_ms() + PRUNE_INTERVAL_MS
        self._wake = asyncio.Event()
        # Cluster mode (``use_durable_save``): the state is PostgreSQL's, not the state topic's;
        # changes that promise nothing (records given back) wait in ``_dirty`` for the next save.
        self._durable_save: DurableSave | None = None
        # The topics by name: (topic id, partition count); the local logs' unless replaced
        # (cluster mode: the catalog's snapshot, ``use_topics``).
        self._topics: Callable[[], dict[str, tuple[uuid.UUID, int]]] = lambda: {
            name: (info.topic_id, info.num_partitions) for name, info in self._logs.topics().items()}
        self._dirty: set[SharePartitionKey] = set()
        if SHARE_STATE_TOPIC in logs.topics():
            self._load(self._state_topic())
            for group_id, _topic_id, _partition in self.partitions:
                self.groups.ensure(group_id)  # Empty until its members heartbeat again

    def use_durable_save(self, save: DurableSave) -> None:
        """Cluster mode: persist through ``save`` (PostgreSQL, fenced by the share-partitions'
        leases) instead of the local ``__share_group_state``; share-partitions are installed by
        their owner (``install``) before they are served."""
        self._durable_save = save

    def use_topics(self, topics: Callable[[], dict[str, tuple[uuid.UUID, int]]]) -> None:
        """Cluster mode: the topics (by name: topic id, partition count) come from ``topics``."""
        self._topics = topics

    @property
    def clustered(self) -> bool:
        """Whether the state is persisted in PostgreSQL (cluster mode)."""
        return self._durable_save is not None

    def install(self, key: SharePartitionKey, start_offset: int, batches: Iterable[StateBatch] = (),
                snapshot_epoch: int = -1) -> SharePartition:
        """Cluster mode: serve ``key`` from this state (loaded by its new owner; records that were
        acquired come back AVAILABLE)."""
        sp = self.partitions[key] = SharePartition(self.partition_config(key[0]), start_offset)
        sp.apply_persisted(start_offset, list(batches), replace=True)
        sp.take_changes()
        self._snapshot_epoch[key] = snapshot_epoch
        self._dirty.discard(key)
        return sp

    def unload(self, keys: Iterable[SharePartitionKey]) -> None:
        """Cluster mode: stop serving these share-partitions (their lease is lost or handed over)."""
        for key in keys:
            self.partitions.pop(key, None)
            self._snapshot_epoch.pop(key, None)
            self._dirty.discard(key)

    def snapshot_value(self, key: SharePartitionKey) -> ShareStateValue | None:
        """Cluster mode: the next snapshot of ``key`` to persist (its epoch bumped), or None."""
        sp = self.partitions.get(key)
        if sp is None:
            return None
        sp.take_changes()
        start, batches = sp.snapshot()
        epoch = self._snapshot_epoch[key] = self._snapshot_epoch.get(key, -1) + 1
        now = self.now_ms()
        return ShareStateValue(epoch, start, tuple(batches), create_timestamp_ms=now, write_timestamp_ms=now)

    async def persist_async(self, keys: Iterable[SharePartitionKey]) -> set[SharePartitionKey]:
        """``persist`` that may wait for PostgreSQL (cluster mode): the keys not made durable."""
        if self._durable_save is None:
            return self.persist(keys)
        wanted = list(dict.fromkeys(keys))
        self._dirty.difference_update(wanted)
        return await self._durable_save(wanted)

    def take_dirty(self) -> list[SharePartitionKey]:
        """Cluster mode: the share-partitions changed without a save since (records given back)."""
        dirty = [key for key in self._dirty if key in self.partitions]
        self._dirty.clear()
        return dirty

    # --- topics --------------------------------------------------------------------------------

    def _topic_lookup(self, name: str) -> tuple[uuid.UUID, int] | None:
        return self._topics().get(name)

    def topic_info(self, name: str) -> tuple[uuid.UUID, int] | None:
        """(topic id, partition count) of topic ``name`` (None if there is none)."""
        return self._topics().get(name)

    def topic_name(self, topic_id: uuid.UUID | None) -> str | None:
        """The name of the topic with id ``topic_id`` (None if there is none)."""
        for name, (found_id, _count) in self._topics().items():
            if found_id == topic_id:
                return name
        return None

    def group_config(self, group_id: str, name: str) -> str:
        """A share config of ``group_id``: its own, else the default."""
        return self.group_configs.get(group_id, {}).get(name, DEFAULTS[name])

    def partition_config(self, group_id: str) -> SharePartitionConfig:
        """The share-partition settings of ``group_id``: the broker's, with the group's own
        ``share.record.lock.duration.ms`` and ``share.delivery.count.limit`` where it has them."""
        return _with_own(self.settings.partition, self.group_configs.get(group_id, {}),
                         {RECORD_LOCK_DURATION_MS: "record_lock_duration_ms",
                          DELIVERY_COUNT_LIMIT: "delivery_count_limit"})

    def group_settings(self, group_id: str) -> ShareGroupConfig:
        """The membership settings of ``group_id``: the broker's, with the group's own
        ``share.session.timeout.ms`` and ``share.heartbeat.interval.ms`` where it has them."""
        return _with_own(self.settings.group, self.group_configs.get(group_id, {}),
                         {SESSION_TIMEOUT_MS: "session_timeout_ms", HEARTBEAT_INTERVAL_MS: "heartbeat_interval_ms"})

    def apply_group_configs(self) -> None:
        """The group configs changed: every loaded share-partition takes its group's settings
        (records acquired from now on are locked for the group's lock duration)."""
        for (group_id, _topic_id, _partition), sp in self.partitions.items():
            sp.config = self.partition_config(group_id)

    # --- share-partitions -----------------------------------------------------------------------

    def share_partition(self, group_id: str, topic: str, topic_id: uuid.UUID, partition: int) -> SharePartition:
        """The share-partition of ``group_id`` on ``topic``-``partition``, created at the offset
        ``share.auto.offset.reset`` picks when the group first reads it; its start follows the log
        start forward (records deleted by retention are gone)."""
        key = (group_id, topic_id, partition)
        if self._durable_save is not None:  # cluster mode: installed by the owner (cluster_shares.py)
            installed = self.partitions.get(key)
            if installed is None:
                raise NotLeaderOrFollowerError(f"share-partition {key} is not loaded on this broker")
            return installed
        plog = self._logs.get(topic, partition)
        sp = self.partitions.get(key)
        if sp is None:
            reset = self.group_config(group_id, AUTO_OFFSET_RESET)
            latest = (plog.last_stable_offset if self.group_config(group_id, ISOLATION_LEVEL) == "read_committed"
                      else plog.high_watermark)
            look_back_ms = reset_by_duration_ms(reset)
            if reset == "earliest":
                start = plog.log_start_offset
            elif look_back_ms is not None:
                # The first record at most that old (by record timestamp), else the latest offset.
                found = plog.offset_for_timestamp(self.now_ms() - look_back_ms)
                start = latest if found is None else min(found[0], latest)
            else:
                start = latest
            sp = self.partitions[key] = SharePartition(self.partition_config(group_id), start)
        if sp.start_offset < plog.log_start_offset:
            sp.move_start(plog.log_start_offset)
        return sp

    def state_of(self, group_id: str) -> dict[SharePartitionKey, SharePartition]:
        """Every share-partition ``group_id`` has state for."""
        return {key: sp for key, sp in self.partitions.items() if key[0] == group_id}

    def reset_partition(self, key: SharePartitionKey, start_offset: int) -> bool:
        """AlterShareGroupOffsets: the share-partition starts afresh at ``start_offset`` (no
        record in flight); persisted as a new snapshot. False if the append failed. Single
        broker only: a cluster's coordinator writes through broker/cluster_shares.py ``overwrite``."""
        if self._durable_save is not None:
            raise CoordinatorInvariantError(f"reset_partition({key}) in cluster mode: ClusterShares.overwrite writes it")
        self.partitions[key] = SharePartition(self.partition_config(key[0]), start_offset)
        self._snapshot_epoch.pop(key, None)  # the next persist writes a snapshot
        return key not in self.persist([key])

    def delete_partition(self, key: SharePartitionKey) -> bool:
        """DeleteShareGroupOffsets: forget the share-partition (a tombstone in the state topic;
        the next fetch starts it again by ``share.auto.offset.reset``). False if not durable.
        Single broker only: a cluster's coordinator writes through broker/cluster_shares.py ``overwrite``."""
        if self._durable_save is not None:
            raise CoordinatorInvariantError(f"delete_partition({key}) in cluster mode: ClusterShares.overwrite writes it")
        topic = self._state_topic()
        try:
            topic.append(self._state_partition(key, topic),
                         [(encode_key(ShareStateKey(SNAPSHOT_TYPE, *key)), None)], self.now_ms())
        except (OnceStreamError, OSError) as exc:
            log.error("cannot append to %s: %s", SHARE_STATE_TOPIC, exc)
            return False
        self.partitions.pop(key, None)
        self._snapshot_epoch.pop(key, None)
        self._updates_since_snapshot.pop(key, None)
        self._snapshot_at.pop(key, None)
        return True

    def release_member(self, group_id: str, member_id: str) -> None:
        """Give back every record ``member_id`` holds in ``group_id`` (it left, timed out or
        closed its share session) and persist the change."""
        touched = []
        for key, sp in self.partitions.items():
            if key[0] == group_id and sp.release_member(member_id):
                touched.append(key)
        self.persist(touched)
        self._announce(touched)

    def member_left(self, group_id: str, member_id: str) -> None:
        """``member_id`` left ``group_id``: its session closes and its records are given back
        after ``LEAVE_GRACE_MS`` (unless its final request closed the session first)."""
        self._departures[(group_id, member_id)] = self.mono_ms() + LEAVE_GRACE_MS
        self.wake()

    def _announce(self, keys: Iterable[SharePartitionKey]) -> None:
        for _group, topic_id, partition in keys:
            name = self.topic_name(topic_id)
            if name is not None:
                self._on_available(name, partition)

    # --- persistence ---------------------------------------------------------------------------

    def _state_topic(self) -> InternalTopic:
        if self._topic is None:
            self._topic = InternalTopic(
                self._logs, SHARE_STATE_TOPIC, self.settings.state_topic_partitions,
                {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1",
                 "segment.bytes": str(self.settings.state_segment_bytes)},
                self.now_ms(), appender=self._appender)
        return self._topic

    def _state_partition(self, key: SharePartitionKey, topic: InternalTopic) -> int:
        group_id, topic_id, partition = key
        return zlib.crc32(f"{group_id}:{topic_id}:{partition}".encode()) % topic.num_partitions

    def persist(self, keys: Iterable[SharePartitionKey]) -> set[SharePartitionKey]:
        """Append the changes of these share-partitions; returns those whose append failed (their
        answers must not promise the change; their in-memory state is reloaded from the log).
        Cluster mode: the keys wait for the next durable save (nothing is promised by the callers
        of this synchronous form there: records given back)."""
        if self._durable_save is not None:
            self._dirty.update(key for key in keys if key in self.partitions)
            return set()
        pending: dict[int, list[tuple[bytes, bytes | None]]] = {}
        owners: dict[int, list[tuple[SharePartitionKey, int]]] = {}
        topic: InternalTopic | None = None
        for key in dict.fromkeys(keys):
            sp = self.partitions.get(key)
            if sp is None:
                continue
            count = self._updates_since_snapshot.get(key, 0)
            if count >= self.settings.updates_per_snapshot or key not in self._snapshot_epoch:
                sp.take_changes()
                start, batches = sp.snapshot()
                epoch = self._snapshot_epoch.get(key, -1) + 1
                self._snapshot_epoch[key] = epoch
                self._updates_since_snapshot[key] = 0
                record_type = SNAPSHOT_TYPE
                now = self.now_ms()
                value = ShareStateValue(epoch, start, tuple(batches), create_timestamp_ms=now, write_timestamp_ms=now)
            else:
                changes = sp.take_changes()
                if changes is None:
                    continue
                start, batches = changes
                self._updates_since_snapshot[key] = count + 1
                record_type = UPDATE_TYPE
                value = ShareStateValue(self._snapshot_epoch[key], start, tuple(batches))
            topic = topic or self._state_topic()
            partition = self._state_partition(key, topic)
            record_key = encode_key(ShareStateKey(record_type, key[0], key[1], key[2]))
            pending.setdefault(partition, []).append((record_key, encode_value(record_type, value)))
            owners.setdefault(partition, []).append((key, record_type))
        failed: set[SharePartitionKey] = set()
        for partition, records in pending.items():
            if topic is None:  # unreachable: a pending record came with its topic
                break
            base_offset = self._logs.get(SHARE_STATE_TOPIC, partition).log_end_offset
            try:
                topic.append(partition, records, self.now_ms())
            except (OnceStreamError, OSError) as exc:
                log.error("cannot append to %s-%d: %s", SHARE_STATE_TOPIC, partition, exc)
                failed.update(key for key, _ in owners[partition])
                continue
            for index, (key, record_type) in enumerate(owners[partition]):
                if record_type == SNAPSHOT_TYPE:
                    self._snapshot_at[key] = (partition, base_offset + index)
        if failed:
            self._reload(failed)
        return failed

    def _reload(self, keys: set[SharePartitionKey]) -> None:
        """Rebuild these share-partitions from what the log holds (after a failed append)."""
        for key in keys:
            self.partitions.pop(key, None)
            self._snapshot_epoch.pop(key, None)
            self._updates_since_snapshot.pop(key, None)
        topic = self._state_topic()
        partitions = sorted({self._state_partition(key, topic) for key in keys})
        try:
            self._load(topic, partitions, only=keys)
        except (OnceStreamError, OSError) as exc:
            log.error("cannot reload %s: %s", SHARE_STATE_TOPIC, exc)

    def _load(self, topic: InternalTopic, partitions: list[int] | None = None,
              only: set[SharePartitionKey] | None = None) -> None:
        for state_partition, offset, key_bytes, value_bytes in topic.read_records(partitions):
            try:
                key = decode_key(key_bytes)
                value = None if value_bytes is None else decode_value(key.record_type, value_bytes)
            except ShareRecordError as exc:
                log.error("skipping a %s record: %s", SHARE_STATE_TOPIC, exc)
                continue
            sp_key = (key.group_id, key.topic_id, key.partition)
            if only is not None and sp_key not in only:
                continue
            if value is None:  # DeleteShareGroupOffsets: the state is gone
                self.partitions.pop(sp_key, None)
                self._snapshot_epoch.pop(sp_key, None)
                self._updates_since_snapshot.pop(sp_key, None)
                self._snapshot_at.pop(sp_key, None)
                continue
            sp = self.partitions.get(sp_key)
            if key.record_type == SNAPSHOT_TYPE:
                if sp is None:
                    sp = self.partitions[sp_key] = SharePartition(self.partition_config(sp_key[0]),
                                                                  value.start_offset)
                sp.apply_persisted(value.start_offset, value.batches, replace=True)
                self._snapshot_epoch[sp_key] = value.snapshot_epoch
                self._snapshot_at[sp_key] = (state_partition, offset)
                self._updates_since_snapshot[sp_key] = 0
            elif sp is not None:  # an update without its snapshot cannot be placed: skipped
                sp.apply_persisted(value.start_offset, value.batches, replace=False)
                self._updates_since_snapshot[sp_key] = self._updates_since_snapshot.get(sp_key, 0) + 1

    # --- timers --------------------------------------------------------------------------------

    def tick(self) -> None:
        """Expire acquisition locks and member sessions; persist and announce what changed."""
        now = self.mono_ms()
        for group_id, member_id in self.groups.expire(now):
            self.sessions.close(group_id, member_id)
            self.release_member(group_id, member_id)
        # Sessions unused for a whole member session timeout belong to clients that are gone.
        for session in self.sessions.idle(now, lambda group_id: self.group_settings(group_id).session_timeout_ms):
            self.release_member(session.group_id, session.member_id)
        for (group_id, member_id), due_ms in list(self._departures.items()):
            if due_ms <= now:
                del self._departures[(group_id, member_id)]
                group = self.groups.group(group_id)
                if group is None or member_id not in group.members:  # not back in the meantime
                    self.sessions.close(group_id, member_id)
                    self.release_member(group_id, member_id)
        touched = [key for key, sp in self.partitions.items() if sp.expire_locks(now)]
        self.persist(touched)
        self._announce(touched)
        if now >= self._next_prune_ms:
            self._next_prune_ms = now + PRUNE_INTERVAL_MS
            self.prune()

    def prune(self) -> list[int]:
        """Delete the state topic's whole segments below the oldest snapshot any share-partition
        still needs (its replay starts there); returns the state partitions pruned."""
        if self._topic is None:
            return []
        pruned = []
        for partition in range(self._topic.num_partitions):
            plog = self._logs.get(SHARE_STATE_TOPIC, partition)
            needed = min((offset for p, offset in self._snapshot_at.values() if p == partition),
                         default=plog.high_watermark)
            bases = plog.segment_base_offsets()
            if len(bases) < 2 or bases[1] > needed:
                continue  # no whole segment below it: moving the log start would free nothing
            try:
                plog.delete_records(needed)
            except (OnceStreamError, OSError) as exc:
                log.error("cannot prune %s-%d: %s", SHARE_STATE_TOPIC, partition, exc)
                continue
            pruned.append(partition)
        return pruned

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for d in (sp.next_lock_deadline_ms() for sp in self.partitions.values()) if d is not None]
        member = self.groups.next_deadline_ms()
        if member is not None:
            deadlines.append(member)
        deadlines.extend(self._departures.values())
        return min(deadlines) if deadlines else None

    def wake(self) -> None:
        """A call created an earlier deadline (new locks, a new member): re-arm the timer."""
        self._wake.set()

    async def run_timers(self) -> None:
        """Lock expiry, member expiry, departures and pruning, at their deadlines."""
        await run_deadline_timer(self.next_deadline_ms, self.mono_ms, self._wake, self.tick, _MAX_TICK_SLEEP_S,
                                 log, "share group")
