"""Share groups (KIP-932) on a cluster broker: which share-partitions this broker owns, their
state loaded from and saved to PostgreSQL under their leases (cluster/leases/share_state.py).

The owner of a share-partition (group, topic-partition) is the broker Metadata names leader of
the topic-partition (``ClusterNode.leader_of``), holding the share-partition's lease:

- ``own(key)`` before a ShareFetch or ShareAcknowledge touches ``key``: NONE when this broker
  owns it (the first time: the lease taken, the persisted snapshot loaded, or a new
  share-partition started at ``share.auto.offset.reset``); NOT_LEADER_OR_FOLLOWER when another
  broker leads the topic-partition or still holds the lease (the client refreshes its metadata
  and retries there, or here once the former owner's broker lease has expired);
- ``save(keys)`` (ShareService.persist_async): each snapshot in one transaction fenced by the
  lease; a lost lease unloads the share-partition (nothing written, nothing promised);
- ``run()``: every heartbeat interval, the changes that promised nothing (records given back by
  lock expiry or a member leaving) are saved, share-partitions whose topic-partition now has
  another leader (a broker joined) are unloaded and their leases released, and those whose lease
  the group's coordinator took (``overwrite``) are unloaded;
- ``overwrite(group_id, writes)``: on the group's coordinator, AlterShareGroupOffsets,
  DeleteShareGroupOffsets and DeleteGroups of an empty share group write the share-partitions'
  state through the owners' fencing rules (PgShareState.overwrite: the coordinator's lease fences
  the write, the owners' leases are taken from them in the same transaction); an owner's stale
  copy is never written again, and is reloaded at the next ShareFetch.

A broker that dies keeps its leases until its broker lease expires (PostgreSQL's clock); then the
new leader takes them, and records that were acquired come back available: delivered again, as
KIP-932 allows when an acquisition lock ends; acknowledged records were saved before the
acknowledgement was answered, so they never come back.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from kio.schema.errors import ErrorCode

from oncestream.broker.cluster_node import ClusterNode
from oncestream.broker.share_group_configs import AUTO_OFFSET_RESET, ISOLATION_LEVEL, reset_by_duration_ms
from oncestream.broker.share_service import SharePartitionKey, ShareService
from oncestream.cluster.diskless.offsets_query import list_offset
from oncestream.cluster.leases.coordinator_leases import Lease, LeaseLostError
from oncestream.cluster.leases.share_state import PgShareState
from oncestream.coordinator.share.partition import SharePartition
from oncestream.coordinator.share.records import ShareStateValue
from oncestream.errors import NotCoordinatorError, OnceStreamError

log = logging.getLogger("oncestream.broker")

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


class ClusterShares:
    """Share-partition ownership of one cluster broker (see the module docstring)."""

    def __init__(self, node: ClusterNode, shares: ShareService, *, idle_timeout_ms: int, interval_ms: int) -> None:
        self._node = node
        self._shares = shares
        self._state = PgShareState(node.store, idle_timeout_ms=idle_timeout_ms)
        self._interval_ms = interval_ms
        self.leases: dict[SharePartitionKey, Lease] = {}
        self._loading: dict[SharePartitionKey, asyncio.Lock] = {}
        shares.use_durable_save(self.save)
        shares.use_topics(lambda: {name: (meta.topic_id, meta.num_partitions)
                                   for name, meta in node.topic_snapshot().items() if not meta.internal})

    async def _leader(self, topic_id: uuid.UUID, partition: int) -> int:
        live = [broker.node_id for broker in await self._node.live_brokers()]
        return self._node.leader_of(topic_id, partition, live)

    async def own(self, key: SharePartitionKey, topic: str) -> ErrorCode:
        """Whether this broker serves share-partition ``key`` of ``topic`` (loading it if needed)."""
        group_id, topic_id, partition = key
        registration = self._node.registration
        if registration is None:
            return ErrorCode.not_leader_or_follower
        if await self._leader(topic_id, partition) != self._node.node_id:
            if key in self.leases:
                await self._hand_over([key])
            return ErrorCode.not_leader_or_follower
        lease = self.leases.get(key)
        if lease is not None and lease.incarnation == registration.incarnation and key in self._shares.partitions:
            return ErrorCode.none
        lock = self._loading.setdefault(key, asyncio.Lock())
        async with lock:
            lease = self.leases.get(key)
            if lease is not None and lease.incarnation == registration.incarnation and key in self._shares.partitions:
                return ErrorCode.none
            try:
                taken = await self._state.take(registration, key)
                if taken is None:
                    return ErrorCode.not_leader_or_follower  # the former owner's lease still holds
                # The group's configs (start offset, lock duration) as they are now, with a change
                # made through another broker a moment ago.
                async with self._shares.group_config_lock:
                    await self._shares.refresh_group_configs()
                value = await self._state.load(key)
                if value is None:
                    # A new share-partition's start is saved before anything is served from it:
                    # the next owner (this broker dead) starts where this one did, not at a later
                    # ``latest``, and DescribeShareGroupOffsets shows it at once.
                    self._shares.install(key, await self._start_offset(group_id, topic_id, partition))
                    started = self._shares.snapshot_value(key)
                    if started is not None:
                        await self._state.save(taken, key, started)
                else:
                    self._shares.install(key, value.start_offset, value.batches, value.snapshot_epoch)
            except OnceStreamError as exc:
                log.warning("cannot load share-partition %s: %s", key, exc)
                self._shares.unload([key])
                return exc.code
            self.leases[key] = taken
            log.info("node %d owns share-partition %s/%s-%d at lease epoch %d", self._node.node_id, group_id,
                     topic, partition, taken.epoch)
        return ErrorCode.none

    async def group_state(self, group_id: str) -> dict[SharePartitionKey, SharePartition]:
        """The share-partitions of ``group_id`` as persisted (the owners' last saves), for
        DescribeShareGroupOffsets on the group's coordinator."""
        out = {}
        for key, value in (await self._state.load_group(group_id)).items():
            sp = out[key] = SharePartition(self._shares.partition_config(group_id), value.start_offset)
            sp.apply_persisted(value.start_offset, value.batches, replace=True)
        return out

    async def overwrite(self, group_id: str, writes: dict[SharePartitionKey, ShareStateValue | None]) -> None:
        """The group's coordinator replaces (a value) or deletes (None) the state of these
        share-partitions of ``group_id``, whoever owns them (see the module docstring).
        NotCoordinatorError when this broker does not coordinate the group (or lost its lease:
        nothing written); a MetadataStoreError when PostgreSQL failed."""
        coordinators = self._node.coordinators
        lease = None if coordinators is None else coordinators.group_lease(group_id)
        if lease is None:
            raise NotCoordinatorError(f"node {self._node.node_id} does not coordinate group {group_id}")
        if any(key[0] != group_id for key in writes):
            raise ValueError(f"share-partitions of another group than {group_id} in one overwrite")
        await self._state.overwrite(lease, writes)
        self._drop([key for key in writes if key in self.leases])  # this broker's copies are stale now

    async def high_watermark(self, topic_id: uuid.UUID, partition: int) -> int:
        """The partition's high watermark (the lag of DescribeShareGroupOffsets)."""
        return (await list_offset(self._node.reader, topic_id, partition, LATEST_TIMESTAMP)).offset

    async def _start_offset(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        """Where a new share-partition starts (``share.auto.offset.reset``, as the single broker)."""
        reset = self._shares.group_config(group_id, AUTO_OFFSET_RESET)
        read_committed = self._shares.group_config(group_id, ISOLATION_LEVEL) == "read_committed"
        reader = self._node.reader
        if reset == "earliest":
            return (await list_offset(reader, topic_id, partition, EARLIEST_TIMESTAMP)).offset
        latest = (await list_offset(reader, topic_id, partition, LATEST_TIMESTAMP, read_committed=read_committed)).offset
        look_back_ms = reset_by_duration_ms(reset)
        if look_back_ms is None:
            return latest
        found = await list_offset(reader, topic_id, partition, self._shares.now_ms() - look_back_ms,
                                  read_committed=read_committed)
        return latest if found.offset < 0 else min(found.offset, latest)

    async def save(self, keys: list[SharePartitionKey]) -> set[SharePartitionKey]:
        """Save these share-partitions' snapshots, each fenced by its lease; the keys not saved
        (lease lost: unloaded; PostgreSQL failed: kept, saved again at the next change)."""
        failed: set[SharePartitionKey] = set()
        for key in keys:
            lease = self.leases.get(key)
            value = self._shares.snapshot_value(key)
            if lease is None or value is None:
                failed.add(key)
                continue
            try:
                await self._state.save(lease, key, value)
            except LeaseLostError as exc:
                log.warning("share-partition %s: %s; unloading it", key, exc)
                self._drop([key])
                failed.add(key)
            except OnceStreamError as exc:
                log.error("cannot save share-partition %s: %s", key, exc)
                failed.add(key)
        return failed

    def _drop(self, keys: list[SharePartitionKey]) -> None:
        self._shares.unload(keys)
        for key in keys:
            self.leases.pop(key, None)

    async def _hand_over(self, keys: list[SharePartitionKey]) -> None:
        """Another broker leads these now: save them (their last changes), unload, release."""
        await self.save([key for key in keys if key in self._shares.partitions])
        self._drop(keys)
        registration = self._node.registration
        if registration is not None:
            await self._state.release(registration, keys)

    async def _drop_overwritten(self) -> None:
        """Unload the share-partitions whose lease the group's coordinator took (``overwrite``):
        their copies are stale (a write from them would be fenced anyway)."""
        registration = self._node.registration
        if registration is None or not self.leases:
            return
        leases = dict(self.leases)
        lost = await self._state.lost(registration, leases.values())
        stale = [key for key, lease in leases.items() if lease.resource in lost and self.leases.get(key) is lease]
        if stale:
            log.info("node %d: share-partitions %s were changed by their group's coordinator; unloading them",
                     self._node.node_id, stale)
            self._drop(stale)

    async def run(self) -> None:
        """Save what waits and hand over what moved, every interval, until cancelled."""
        while True:
            await asyncio.sleep(self._interval_ms / 1000)
            try:
                dirty = self._shares.take_dirty()
                if dirty:
                    await self.save(dirty)
                moved = [key for key in list(self.leases) if await self._leader(key[1], key[2]) != self._node.node_id]
                if moved:
                    await self._hand_over(moved)
                await self._drop_overwritten()
            except OnceStreamError as exc:
                log.warning("share-partition round failed: %s", exc)
            except Exception:  # a loop that ended would leave the state unsaved for good
                log.exception("share-partition round failed unexpectedly")
