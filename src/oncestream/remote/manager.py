"""The RemoteLogManager: the broker-level driver of tiered storage (Kafka's RemoteLogManager).

Every ``remote.log.manager.task.interval.ms`` it starts one task per tiered partition (unless the
previous one still runs); a partition's task does, in order:

1. finish what a crash or a failed cleanup left half done (segments in COPY_SEGMENT_STARTED or
   DELETE_SEGMENT_STARTED: objects deleted, DELETE_SEGMENT_FINISHED);
2. copy the closed segments above the highest copied offset, one at a time in offset order
   (``copy_task.copy_segment``), unless ``remote.log.copy.disable``; a failure stops the copies
   of that partition until its capped exponential backoff (``backoff``) has passed, and keeps its
   local segments;
3. local retention: ``PartitionLog.delete_tiered_local_segments`` over the copied segments (the
   files are removed on the broker's disk threads);
4. remote retention (``retention.plan_remote_deletion``): the log start moves first (durable),
   then each expired remote segment is deleted (DELETE_SEGMENT_STARTED, objects, FINISHED).

A topic whose ``remote.storage.enable`` was turned off with ``remote.log.delete.on.disable``
(KIP-950) loses all its remote segments the same way. A deleted topic's remote objects are
deleted in the background, its journal last (``copy_task.purge_topic``); so are those of journals
whose topic no longer exists at start-up.

Threads: the partition logs belong to the event loop and are touched only there; the object
store, the journals and the fsyncs run on this manager's pool (``remote.log.manager.thread.pool.size``),
so a slow or dead store never blocks produce or fetch.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from oncestream.errors import RemoteAccessDeniedError, StorageError, UnknownTopicOrPartitionError
from oncestream.log.flush_job import FdatasyncFn
from oncestream.log.manager import LogManager, TopicInfo
from oncestream.log.partition_log import PartitionLog
from oncestream.remote import copy_task, layout
from oncestream.remote.backoff import Backoff, BackoffPolicy
from oncestream.remote.copy_task import PartitionRef
from oncestream.remote.manager_config import RemoteLogManagerConfig
from oncestream.remote.metadata_journal import JOURNAL_DIR, MetadataJournal, MetadataJournalError, journal_path
from oncestream.remote.object_store import ObjectStore
from oncestream.remote.retention import RetentionLimits, plan_remote_deletion
from oncestream.remote.segment_metadata import RemotePartitionMetadata

log = logging.getLogger(__name__)

T = TypeVar("T")

STATUS_OK = "ok"


class _PartitionTier:
    """One tiered partition's remote state, owned by the event loop (its journal is written only
    by the partition's task, on a pool thread)."""

    def __init__(self, ref: PartitionRef, journal: MetadataJournal, backoff: Backoff) -> None:
        self.ref = ref
        self.topic = ref.topic
        self.topic_id = ref.topic_id
        self.partition = ref.partition
        self.journal = journal
        self.journal_broken = False  # a failed write: reopened (replayed) before the next step
        self.backoff = backoff
        self.task: asyncio.Task[None] | None = None
        self.retired = False  # the topic was deleted: the task stops at its next step


class RemoteLogManager:
    """Copies, retention and cleanup of the tiered partitions of one broker.

    Public API for the other parts of the broker:

    - ``store``: the ``ObjectStore`` (the remote reader reads from it);
    - ``metadata(topic, partition)``: the partition's ``RemotePartitionMetadata`` (None if it
      never tiered);
    - ``remote_info(topic, partition)``: ``(remote_size_bytes, earliest_remote_offset,
      highest_copied_last_offset)`` (-1 offsets when nothing is copied);
    - ``status``: ``"ok"`` or the last error in words (``oncestream.remote.log.storage.status``);
    - ``run()``: the background loop; ``run_round()`` one round (awaited, for tests);
    - ``topic_deleted(info)``: a deleted topic's remote data goes in the background;
    - ``close()``: stop the pool (waits for the running steps).
    """

    def __init__(self, config: RemoteLogManagerConfig, store: ObjectStore, data_dir: Path, logs: LogManager, *,
                 now_ms: Callable[[], int], mono_ms: Callable[[], int],
                 remove_files: Callable[[PartitionLog], None] = lambda _log: None,
                 request_flush: Callable[[PartitionLog], None] = lambda _log: None,
                 fsync: FdatasyncFn | None = None, unit_random: Callable[[], float] = random.random) -> None:
        """``remove_files`` unlinks a log's deleted segment files (the broker: on its disk
        threads); ``request_flush`` starts a flush of a log whose sealed segments are not durable
        yet (the broker: its group-commit flusher; only flushed segments are copied, and after a
        crash the recovered ones wait for a flush that nothing else may start for minutes);
        ``fsync`` replaces ``os.fsync`` for the log start checkpoints."""
        self.config = config
        self.store = store
        self.data_dir = data_dir
        self.metadata_dir = data_dir / JOURNAL_DIR
        self._logs = logs
        self._now_ms = now_ms
        self._mono_ms = mono_ms
        self._remove_files = remove_files
        self._request_flush = request_flush
        self._fsync = fsync
        self._random = unit_random
        self._policy = BackoffPolicy(config.retry_backoff_ms, config.retry_backoff_max_ms, config.retry_jitter)
        self._pool = ThreadPoolExecutor(config.thread_pool_size, thread_name_prefix="oncestream-remote")
        self._tiers: dict[tuple[str, int], _PartitionTier] = {}
        self._purges: dict[str, asyncio.Task[None]] = {}  # topic dir name -> purge task
        # journal folders of topics gone before this start: (folder, topic, topic id)
        self._stale_topic_dirs: list[tuple[Path, str, uuid.UUID]] = []
        # The last failure of each partition (or purge) whose latest store work failed, in the
        # order they happened; cleared by that partition's next success.
        self._errors: dict[str, str] = {}
        self.metadata_dir.mkdir(parents=True, exist_ok=True)
        self._open_journals()

    # --- start-up ---------------------------------------------------------------------------------

    def _open_journals(self) -> None:
        """Replay every journal (blocking: before the broker serves). Journal folders of topics
        that no longer exist, or exist under another id, are queued for purging; each live
        partition's log start is reconciled with its remote segments."""
        topics = self._logs.topics()
        for topic_dir in sorted(p for p in self.metadata_dir.iterdir() if p.is_dir()):
            try:
                topic, topic_id = layout.parse_topic_folder(topic_dir.name)
            except layout.InvalidRemoteKeyError:
                log.warning("%s: not a remote log metadata folder, left alone", topic_dir)
                continue
            info = topics.get(topic)
            if info is None or info.topic_id != topic_id:
                self._stale_topic_dirs.append((topic_dir, topic, topic_id))
                continue
            for partition in range(info.num_partitions):
                if journal_path(self.data_dir, topic, topic_id, partition).exists():
                    self._tier_for(info, partition)
        for tier in self._tiers.values():
            self._reconcile_log_start(tier)

    def _tier_for(self, info: TopicInfo, partition: int) -> _PartitionTier:
        key = (info.name, partition)
        tier = self._tiers.get(key)
        if tier is None or tier.topic_id != info.topic_id:
            ref = PartitionRef(info.name, info.topic_id, partition)
            journal = self._open_journal(ref)
            tier = _PartitionTier(ref, journal, Backoff(self._policy, self._random))
            self._tiers[key] = tier
        return tier

    def _open_journal(self, ref: PartitionRef) -> MetadataJournal:
        return MetadataJournal.open(journal_path(self.data_dir, ref.topic, ref.topic_id, ref.partition),
                                    fsync=self._fsync)

    def _reconcile_log_start(self, tier: _PartitionTier) -> None:
        """The global log start is the lowest offset of the copied segments, else the local log
        start; a log whose checkpoint is behind that (e.g. a crash between a retention pass's
        steps on an older version) moves up, durably, before anything reads it."""
        try:
            partition_log = self._logs.get(tier.topic, tier.partition)
        except UnknownTopicOrPartitionError:
            return
        earliest = tier.journal.metadata.earliest_readable_offset()
        target = earliest if earliest is not None else partition_log.local_log_start_offset
        if partition_log.log_start_offset < target:
            move = partition_log.advance_log_start(target)
            if move is not None:
                move.run(self._fsync)
                partition_log.finish_delete_records(move)
                self._remove_files(partition_log)

    # --- queries ----------------------------------------------------------------------------------

    def metadata(self, topic: str, partition: int) -> RemotePartitionMetadata | None:
        """The remote segments of a partition (reads use only COPY_SEGMENT_FINISHED ones)."""
        tier = self._tiers.get((topic, partition))
        return tier.journal.metadata if tier is not None else None

    def remote_info(self, topic: str, partition: int) -> tuple[int, int, int]:
        """``(remote_size_bytes, earliest_remote_offset, highest_copied_last_offset)`` over the
        copied segments; ``(0, -1, -1)`` when none is."""
        tier = self._tiers.get((topic, partition))
        if tier is None:
            return 0, -1, -1
        # One snapshot: the pool thread may change the metadata meanwhile.
        copied = tier.journal.metadata.readable_segments()
        if not copied:
            return 0, -1, -1
        return sum(s.size_bytes for s in copied), copied[0].base_offset, copied[-1].last_offset

    @property
    def status(self) -> str:
        """``ok``, or in words the latest failure among the partitions whose last store work
        failed (a partition's next success clears its own)."""
        if not self._errors:
            return STATUS_OK
        return next(reversed(self._errors.values()))

    # --- the rounds -------------------------------------------------------------------------------

    async def run(self) -> None:
        """The background loop: a round every ``remote.log.manager.task.interval.ms``."""
        interval_s = self.config.task_interval_ms / 1000
        try:
            while True:
                try:
                    self.start_round()
                except Exception:
                    log.exception("remote log manager round failed")
                await asyncio.sleep(interval_s)
        finally:
            # Stopping: the tasks stop waiting; a step already on a pool thread finishes there
            # (``close`` waits for it), leaving its journal consistent either way.
            for task in [t.task for t in self._tiers.values() if t.task is not None] + list(self._purges.values()):
                task.cancel()

    def start_round(self) -> list[asyncio.Task[None]]:
        """Start a task for each tiered partition whose previous one ended, and the purges of
        stale journals; returns the tasks started."""
        started: list[asyncio.Task[None]] = []
        while self._stale_topic_dirs:
            started.append(self._purge_in_background(*self._stale_topic_dirs.pop()))
        for info in self._logs.topics().values():
            for partition in range(info.num_partitions):
                key = (info.name, partition)
                if not info.config.remote_storage_enable and key not in self._tiers:
                    continue  # never tiered: nothing to do
                tier = self._tier_for(info, partition)
                if tier.task is None or tier.task.done():
                    tier.task = asyncio.create_task(self._partition_round(tier),
                                                    name=f"remote-log {info.name}-{partition}")
                    started.append(tier.task)
        return started

    async def run_round(self) -> None:
        """One round, awaited (tests; the loop does not wait)."""
        await asyncio.gather(*self.start_round())

    async def _in_pool(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

    def _failed(self, source: str, what: str, exc: BaseException) -> None:
        message = f"{what}: {exc}"
        if isinstance(exc, RemoteAccessDeniedError):
            message = f"{what}: the object store {self.store.description} refused the credentials: {exc}"
        if self._errors.get(source) != message:
            log.error("tiered storage: %s", message)
        self._errors.pop(source, None)  # re-inserted last: the latest failure
        self._errors[source] = message

    def _succeeded(self, source: str) -> None:
        if self._errors.pop(source, None) is not None:
            log.info("tiered storage: %s works again", source)

    async def _partition_round(self, tier: _PartitionTier) -> None:
        source = f"{tier.topic}-{tier.partition}"
        try:
            await self._partition_steps(tier, source)
        except UnknownTopicOrPartitionError:
            pass  # deleted meanwhile: topic_deleted purges it
        except (StorageError, OSError) as exc:  # the local log's or the journal's own failure
            if isinstance(exc, MetadataJournalError):
                tier.journal_broken = True
            if not tier.retired:
                self._failed(source, source, exc)
        except Exception as exc:  # a bug must not stop the other partitions' tiering
            log.exception("tiered storage: %s failed", source)
            if not tier.retired:
                self._failed(source, source, exc)

    async def _partition_steps(self, tier: _PartitionTier, source: str) -> None:
        """One round of a partition. Store work (cleanup, copies, remote deletions) runs only
        when the partition's backoff allows; its first failure ends it and backs off. Local
        retention runs every round (it needs no store)."""
        partition_log = self._logs.get(tier.topic, tier.partition)
        config = partition_log.config
        if tier.journal_broken:  # its tail cannot be trusted: replay it
            tier.journal.close()
            tier.journal = await self._in_pool(functools.partial(self._open_journal, tier.ref))
            tier.journal_broken = False
        if tier.backoff.ready(self._mono_ms()):
            try:
                await self._store_steps(tier, partition_log)
            except (StorageError, OSError) as exc:
                if tier.retired:
                    return
                if isinstance(exc, MetadataJournalError):
                    tier.journal_broken = True
                delay_ms = tier.backoff.failed(self._mono_ms())
                self._failed(source, f"{source} (next attempt in {delay_ms} ms)", exc)
            else:
                tier.backoff.succeeded()
                self._succeeded(source)
        if config.remote_storage_enable:
            self._delete_local_copies(tier, partition_log)

    def _delete_local_copies(self, tier: _PartitionTier, partition_log: PartitionLog) -> None:
        """Local retention over the segments whose copy finished (their files go on the
        broker's disk threads)."""
        if tier.retired or partition_log.closed:
            return
        copied_last = tier.journal.metadata.highest_copied_last_offset()
        if partition_log.delete_tiered_local_segments(copied_last, self._now_ms()):
            self._remove_files(partition_log)

    async def _store_steps(self, tier: _PartitionTier, partition_log: PartitionLog) -> None:
        if tier.journal.metadata.unfinished():  # left by a crash or a failed cleanup
            await self._in_pool(functools.partial(
                copy_task.clean_unfinished, self.store, tier.journal, tier.ref, self._now_ms))
        config = partition_log.config
        if not config.remote_storage_enable:
            if config.remote_log_delete_on_disable:
                await self._delete_all_remote(tier, partition_log)
            return
        if not config.remote_log_copy_disable:
            await self._copy_ready_segments(tier, partition_log)
        await self._apply_remote_retention(tier, partition_log)

    async def _copy_ready_segments(self, tier: _PartitionTier, partition_log: PartitionLog) -> None:
        """Copy the closed segments above the highest copied offset, oldest first, one at a
        time; a failure propagates (the partition backs off, its local segments stay)."""
        while not tier.retired and not partition_log.closed:
            after = self.remote_info(tier.topic, tier.partition)[2] + 1
            ready = [s for s in partition_log.closed_segments_to_tier(after)
                     if s.last_offset >= partition_log.log_start_offset]
            if not ready:
                if partition_log.wants_flush():
                    self._request_flush(partition_log)  # copied by the next round, once durable
                return
            await self._in_pool(functools.partial(
                copy_task.copy_segment, self.store, tier.journal, tier.ref, ready[0], self._now_ms))
            # Local retention after every copy, not after the whole backlog: a partition that
            # fell far behind (the store was down) gives its disk back as it catches up.
            self._delete_local_copies(tier, partition_log)

    async def _apply_remote_retention(self, tier: _PartitionTier, partition_log: PartitionLog) -> None:
        copied = tier.journal.metadata.readable_segments()
        if not copied:
            return
        local_copies = sum(s.size_bytes for s in copied if s.base_offset >= partition_log.local_log_start_offset)
        config = partition_log.config
        plan = plan_remote_deletion(
            copied, log_start_offset=partition_log.log_start_offset,
            local_only_bytes=max(0, partition_log.size_bytes - local_copies),
            limits=RetentionLimits(config.retention_ms, config.retention_bytes), now_ms=self._now_ms())
        if not plan.segments:
            return
        await self._advance_log_start(partition_log, plan.log_start_offset)
        for remote, reason in zip(plan.segments, plan.reasons, strict=True):
            if tier.retired:
                return
            log.info("%s-%d: deleting remote segment %d..%d (%s)", tier.topic, tier.partition,
                     remote.base_offset, remote.last_offset, reason)
            await self._in_pool(functools.partial(
                copy_task.delete_segment, self.store, tier.journal, tier.ref, remote, self._now_ms))

    async def _advance_log_start(self, partition_log: PartitionLog, offset: int) -> None:
        """Move the global log start to ``offset`` durably (before any remote segment below it is
        deleted: a reader is never sent to data that is going)."""
        move = partition_log.advance_log_start(offset)
        if move is None:
            return
        await self._in_pool(lambda: move.run(self._fsync))
        if not partition_log.closed:
            partition_log.finish_delete_records(move)
            self._remove_files(partition_log)

    async def _delete_all_remote(self, tier: _PartitionTier, partition_log: PartitionLog) -> None:
        """KIP-950: remote.storage.enable turned off with remote.log.delete.on.disable: every
        remote segment goes; the log starts at the local log start."""
        copied = tier.journal.metadata.readable_segments()
        if not copied:
            return
        await self._advance_log_start(partition_log, partition_log.local_log_start_offset)
        for remote in copied:
            await self._in_pool(functools.partial(
                copy_task.delete_segment, self.store, tier.journal, tier.ref, remote, self._now_ms))
        log.info("%s-%d: remote storage disabled; %d remote segment(s) deleted", tier.topic, tier.partition,
                 len(copied))

    # --- topic deletion ---------------------------------------------------------------------------

    def topic_deleted(self, info: TopicInfo) -> asyncio.Task[None] | None:
        """A deleted topic (its local files are going): its partitions stop tiering, and once
        their running steps ended, every object under its prefix is deleted, then its journals.
        Returns the purge task (None if the topic never tiered)."""
        topic_dir = journal_path(self.data_dir, info.name, info.topic_id, 0).parent
        tiers = [t for key, t in list(self._tiers.items()) if key[0] == info.name and t.topic_id == info.topic_id]
        for tier in tiers:
            tier.retired = True
            del self._tiers[(tier.topic, tier.partition)]
            self._errors.pop(str(tier.ref), None)  # its failures end with it
        if not tiers and not topic_dir.exists():
            return None
        return self._purge_in_background(topic_dir, info.name, info.topic_id,
                                         [t.task for t in tiers if t.task is not None], [t.journal for t in tiers])

    def _purge_in_background(self, topic_dir: Path, topic: str, topic_id: uuid.UUID,
                             running: list[asyncio.Task[None]] | None = None,
                             journals: list[MetadataJournal] | None = None) -> asyncio.Task[None]:
        existing = self._purges.get(topic_dir.name)
        if existing is not None and not existing.done():
            return existing
        prefix = layout.topic_prefix(topic, topic_id)

        async def purge() -> None:
            if running:  # their steps end before anything is listed: no upload lands after it
                await asyncio.gather(*running, return_exceptions=True)
            for journal in journals or ():
                journal.close()
            backoff = Backoff(self._policy, self._random)
            while True:
                try:
                    removed = await self._in_pool(functools.partial(copy_task.purge_topic, self.store, topic_dir,
                                                                    prefix))
                except (StorageError, OSError) as exc:
                    delay_ms = backoff.failed(0)
                    self._failed(topic_dir.name, f"deleting the remote data of deleted topic {topic} "
                                 f"(next attempt in {delay_ms} ms)", exc)
                    await asyncio.sleep(delay_ms / 1000)
                    continue
                self._succeeded(topic_dir.name)
                log.info("remote data of deleted topic %s (%s): %d object(s) deleted", topic, topic_id, removed)
                return

        task = asyncio.create_task(purge(), name=f"remote-purge {topic_dir.name}")
        self._purges[topic_dir.name] = task
        return task

    # --- lifecycle --------------------------------------------------------------------------------

    async def wait_idle(self) -> None:
        """Wait until every partition task and purge ended (tests, shutdown)."""
        tasks = [t.task for t in self._tiers.values() if t.task is not None] + list(self._purges.values())
        await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        """Stop the pool; a step under way finishes (its journal stays consistent either way)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        for tier in self._tiers.values():
            tier.journal.close()
