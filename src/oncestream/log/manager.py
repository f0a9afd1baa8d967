"""All partition logs of one data directory, and the topics they belong to.

Layout of the directory the manager owns::

    <data_dir>/__topics/<topic id>.json  name, topic id, partition count, config overrides
    <data_dir>/<topic>-<partition>/      one PartitionLog each

The JSON file is the commit point of a topic. CreateTopics makes the partition directories first
and writes the JSON last; DeleteTopics removes the JSON first and the directories after. So after a
crash, a partition directory whose topic has no JSON (or whose number is beyond the topic's
partition count) is the remains of an unfinished create or delete and is removed at start-up.
JSON files are written to a temp file, fsynced and renamed; they are named by topic id because a
249-character topic name plus ``.json.tmp`` would exceed the 255-byte file name limit.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kio.schema.errors import ErrorCode

from oncestream.durable_files import fsync_directory, write_file_atomically
from oncestream.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidTopicError,
    LogInvariantError,
    OnceStreamError,
    StorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from oncestream.log.config import LogConfig
from oncestream.log.descriptors import SegmentDescriptors
from oncestream.log.file_removal import FileRemoval
from oncestream.log.partition_log import PartitionLog, parse_partition_dir_name

log = logging.getLogger(__name__)

TOPICS_DIR = "__topics"
MAX_TOPIC_NAME_LENGTH = 249
MAX_PARTITIONS = 100_000
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
_METADATA_VERSION = 1


@dataclass(frozen=True)
class TopicInfo:
    """A topic as the broker describes it."""

    name: str
    topic_id: uuid.UUID
    num_partitions: int
    configs: dict[str, str] = field(default_factory=dict)  # overrides only (Kafka topic names)
    config: LogConfig = field(default_factory=LogConfig)  # effective settings


def validate_topic_name(name: str) -> None:
    """Kafka's Topic.validate: [a-zA-Z0-9._-], at most 249 characters, not "." or ".."."""
    if not name:
        raise InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(f"topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise InvalidTopicError(f"topic name {name!r} has characters other than [a-zA-Z0-9._-]")


def _encode_metadata(info: TopicInfo) -> bytes:
    data = {
        "version": _METADATA_VERSION,
        "name": info.name,
        "topic_id": str(info.topic_id),
        "num_partitions": info.num_partitions,
        "configs": dict(sorted(info.configs.items())),
    }
    return json.dumps(data, indent=1).encode()


def _collision_key(name: str) -> str:
    # Kafka refuses topics that differ only in '.' vs '_' (they clash in metric names).
    return name.replace(".", "_")


class TopicBeingCreatedError(OnceStreamError):
    """The topic's creation has begun but not finished: LEADER_NOT_AVAILABLE, as Kafka answers
    a Metadata request for a topic whose partitions have no leader yet (clients retry)."""

    code = ErrorCode.leader_not_available


class TopicCreation:
    """The files of a new topic (or of a topic's new partitions): made by ``run()`` on any
    thread, installed by ``LogManager.finish_creation`` on the owner's. ``run()`` touches no
    state of the manager; creating hundreds of partitions is slow disk work (files, fsyncs) that
    must not stall the broker's event loop."""

    def __init__(self, manager: LogManager, info: TopicInfo, partitions: range, now_ms: int) -> None:
        self.info = info
        self.partitions = partitions
        self.opened: list[PartitionLog] = []
        self._data_dir = manager.data_dir
        self._directories = [manager._partition_dir(info.name, p) for p in partitions]
        self._metadata_path = manager._metadata_path(info)
        # The new logs' files are bounded by a cache of their own while on the creating thread
        # (the broker's is the loop's alone); finish_creation moves them to the broker's.
        self._own_descriptors = SegmentDescriptors(manager.descriptors.max_open)
        self._now_ms = now_ms

    def run(self) -> None:
        """Create the partition directories and logs, then the metadata file (the commit point:
        a partition directory without it is an orphan, removed at the next start). On failure
        everything made is removed again and StorageError raised."""
        try:
            for directory in self._directories:
                if directory.exists():
                    shutil.rmtree(directory)  # an orphan of an unfinished create: start empty
                self.opened.append(
                    PartitionLog.open(directory, self.info.config, self._now_ms, descriptors=self._own_descriptors)
                )
            fsync_directory(self._data_dir)
            write_file_atomically(self._metadata_path, _encode_metadata(self.info))
        except BaseException as exc:
            self.discard()
            if isinstance(exc, OSError):
                raise StorageError(f"cannot create partitions of {self.info.name!r}: {exc}") from exc
            raise

    def discard(self) -> None:
        """Remove what ``run()`` made (not the metadata of an existing topic being grown)."""
        for partition_log in self.opened:
            partition_log.abandon()
        self.opened = []
        for directory in self._directories:
            shutil.rmtree(directory, ignore_errors=True)


@dataclass(slots=True)
class TopicConfigChange:
    """A topic's new configs whose metadata file is still to be written (``run``, any thread).

    Crash safety is ``write_file_atomically``'s, as when it ran on the owner's thread: until the
    rename the old file holds, after the directory fsync the new one does, and the logs apply the
    new configs only after ``run`` returned."""

    info: TopicInfo
    path: Path
    data: bytes

    def run(self, fsync: Callable[[int], None] | None = None) -> None:
        """Write the metadata file durably; StorageError on failure."""
        try:
            write_file_atomically(self.path, self.data, fsync=fsync)
        except OSError as exc:
            raise StorageError(f"cannot persist configs of {self.info.name!r}: {exc}") from exc


@dataclass(slots=True)
class TopicDeletion:
    """A topic whose metadata file is still to be removed (``run``, any thread).

    The order is the one the owner's thread kept: the unlink is made durable (directory fsync)
    before any log closes or any partition directory is removed, so a crash in between leaves
    either the whole topic or orphan directories that the next start removes."""

    info: TopicInfo
    path: Path

    def run(self, fsync: Callable[[int], None] | None = None) -> None:
        """Remove the metadata file durably; StorageError on failure."""
        try:
            self.path.unlink()
            fsync_directory(self.path.parent, fsync=fsync)
        except OSError as exc:
            raise StorageError(f"cannot delete topic {self.info.name!r}: {exc}") from exc


class LogManager:
    """Creates, opens, alters and deletes topics and hands out their partition logs."""

    def __init__(self, data_dir: Path, base_config: LogConfig, descriptors: SegmentDescriptors | None = None) -> None:
        # Use LogManager.open().
        self.data_dir = data_dir
        # One bound on the open segment files of every log (issue 10: bounded file handles).
        self.descriptors = descriptors if descriptors is not None else SegmentDescriptors()
        self.base_config = base_config
        self._topics: dict[str, TopicInfo] = {}
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._creating: dict[str, TopicCreation] = {}  # names reserved by unfinished creations
        self._altering: dict[str, TopicConfigChange] = {}  # topics whose new metadata is being written
        self._deleting: dict[str, TopicDeletion] = {}  # topics whose metadata is being removed
        self._removing: dict[str, FileRemoval] = {}  # deleted topics whose directories are being removed
        self._closed = False
        # Latest broker time seen (open/tick); new partitions start their clocks from it.
        self._now_ms = 0

    @property
    def _topics_dir(self) -> Path:
        return self.data_dir / TOPICS_DIR

    # --- open -----------------------------------------------------------------------------------

    @classmethod
    def open(
        cls, data_dir: Path, base_config: LogConfig, now_ms: int, *, descriptors: SegmentDescriptors | None = None
    ) -> LogManager:
        """Open every topic under ``data_dir`` (created if missing), cleaning up unfinished work.
        ``descriptors`` bounds the open files of sealed segments across all logs."""
        data_dir = Path(data_dir)
        manager = cls(data_dir, base_config, descriptors)
        manager._now_ms = now_ms
        try:
            manager._topics_dir.mkdir(parents=True, exist_ok=True)
            manager._load_topics()
            manager._remove_orphan_partition_dirs()
            for info in manager._topics.values():
                for partition in range(info.num_partitions):
                    manager._logs[(info.name, partition)] = PartitionLog.open(
                        manager._partition_dir(info.name, partition), info.config, now_ms,
                        descriptors=manager.descriptors,
                    )
        except OSError as exc:
            manager._abandon_logs()
            raise StorageError(f"cannot open data directory {data_dir}: {exc}") from exc
        except BaseException:
            manager._abandon_logs()
            raise
        return manager

    def _load_topics(self) -> None:
        for path in sorted(self._topics_dir.iterdir()):
            if path.name.endswith(".tmp"):
                path.unlink(missing_ok=True)  # an unfinished metadata write: never committed
                continue
            if not path.name.endswith(".json"):
                continue
            try:
                data = json.loads(path.read_text())
                if data.get("version") != _METADATA_VERSION:
                    raise ValueError(f"unsupported version {data.get('version')!r}")
                configs = {str(k): str(v) for k, v in data["configs"].items()}
                info = TopicInfo(
                    name=str(data["name"]),
                    topic_id=uuid.UUID(data["topic_id"]),
                    num_partitions=int(data["num_partitions"]),
                    configs=configs,
                    config=self._stored_config(path, configs),
                )
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                # Written atomically, so this is real damage: refuse to guess (and delete data).
                raise StorageError(f"topic metadata {path} is unreadable: {exc}") from exc
            if path != self._metadata_path(info):
                raise StorageError(f"topic metadata {path} holds topic id {info.topic_id}")
            if info.name in self._topics:
                raise StorageError(f"topic {info.name!r} is described by two metadata files")
            self._topics[info.name] = info

    def _stored_config(self, path: Path | str, configs: Mapping[str, str]) -> LogConfig:
        """A stored topic's settings. An override this version refuses (e.g. one an older version
        accepted unchecked) is ignored with a warning rather than keeping the broker down; the
        file keeps it until the topic's configs are next altered."""
        try:
            return LogConfig.from_topic_configs(configs, self.base_config)
        except InvalidConfigError as exc:
            log.warning("topic metadata %s: %s; ignoring the invalid overrides", path, exc)
        usable: dict[str, str] = {}
        for name, value in configs.items():
            try:
                LogConfig.from_topic_configs({name: value})
            except InvalidConfigError:
                continue
            usable[name] = value
        return LogConfig.from_topic_configs(usable, self.base_config)

    def _remove_orphan_partition_dirs(self) -> None:
        for path in self.data_dir.iterdir():
            if not path.is_dir() or path.name == TOPICS_DIR:
                continue
            try:
                topic, partition = parse_partition_dir_name(path.name)
            except ValueError:
                continue  # not ours
            info = self._topics.get(topic)
            if info is None or partition >= info.num_partitions:
                log.warning("removing %s: left over from an unfinished topic create or delete", path)
                shutil.rmtree(path, ignore_errors=True)

    def _partition_dir(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    # --- topics ---------------------------------------------------------------------------------

    def topics(self) -> dict[str, TopicInfo]:
        """Every topic by name."""
        return dict(self._topics)

    def create_topic(
        self, name: str, num_partitions: int, configs: Mapping[str, str], now_ms: int | None = None
    ) -> TopicInfo:
        """CreateTopics for one topic, all on the calling thread (``begin_create_topic`` splits
        it so the file work can run elsewhere). Raises InvalidTopicError, InvalidPartitionsError,
        TopicAlreadyExistsError, InvalidConfigError or StorageError; nothing persists on error.
        TopicBeingCreatedError while a CreateTopics of the same name is still making its files
        (what auto-creation by a Metadata request meets)."""
        if name in self._creating:
            raise TopicBeingCreatedError(f"topic {name!r} is being created")
        return self._run_inline(self.begin_create_topic(name, num_partitions, configs, now_ms))

    def create_partitions(self, name: str, total_partitions: int, now_ms: int | None = None) -> TopicInfo:
        """CreatePartitions: grow ``name`` to ``total_partitions`` (InvalidPartitionsError if not more)."""
        return self._run_inline(self.begin_create_partitions(name, total_partitions, now_ms))

    def _run_inline(self, creation: TopicCreation) -> TopicInfo:
        try:
            creation.run()
        except BaseException:
            self.abort_creation(creation)
            raise
        return self.finish_creation(creation)

    def begin_create_topic(
        self, name: str, num_partitions: int, configs: Mapping[str, str], now_ms: int | None = None
    ) -> TopicCreation:
        """Step 1 of CreateTopics, on the owner's thread: validate and reserve the name (until
        ``finish_creation`` or ``abort_creation``, a second creation of it is refused). The
        returned job's ``run()`` makes the files on any thread (the broker: a disk thread)."""
        self._check_open()
        now_ms = self._now_ms if now_ms is None else now_ms
        validate_topic_name(name)
        if name in self._topics or name in self._creating:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        if name in self._removing:  # Kafka: "marked for deletion"
            raise TopicAlreadyExistsError(f"topic {name!r} is being deleted")
        clashes = [other for other in [*self._topics, *self._creating] if _collision_key(other) == _collision_key(name)]
        if clashes:
            raise InvalidTopicError(f"topic {name!r} collides with existing topic {clashes[0]!r}")
        if not 1 <= num_partitions <= MAX_PARTITIONS:
            raise InvalidPartitionsError(f"number of partitions must be in [1, {MAX_PARTITIONS}], not {num_partitions}")
        overrides = {str(k): str(v) for k, v in configs.items()}
        config = LogConfig.from_topic_configs(overrides, self.base_config)
        info = TopicInfo(name, uuid.uuid4(), num_partitions, overrides, config)
        return self._reserve(TopicCreation(self, info, range(num_partitions), now_ms))

    def begin_create_partitions(self, name: str, total_partitions: int, now_ms: int | None = None) -> TopicCreation:
        """Step 1 of CreatePartitions (see ``begin_create_topic``)."""
        self._check_open()
        now_ms = self._now_ms if now_ms is None else now_ms
        info = self._topic(name)
        if name in self._creating:
            raise InvalidPartitionsError(f"partitions of topic {name!r} are being created")
        self._check_not_growing(name)  # nor while its configs are being written
        if not info.num_partitions < total_partitions <= MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"topic {name!r} has {info.num_partitions} partitions; cannot change to {total_partitions}"
            )
        new_info = TopicInfo(name, info.topic_id, total_partitions, info.configs, info.config)
        return self._reserve(TopicCreation(self, new_info, range(info.num_partitions, total_partitions), now_ms))

    def partitions_being_created(self) -> int:
        """Partitions of unfinished creations (they count against a partition budget already)."""
        return sum(len(creation.partitions) for creation in self._creating.values())

    def _reserve(self, creation: TopicCreation) -> TopicCreation:
        self._creating[creation.info.name] = creation
        return creation

    def finish_creation(self, creation: TopicCreation) -> TopicInfo:
        """Step 3, back on the owner's thread after ``creation.run()`` succeeded: the topic (or
        its new partitions) becomes visible. StorageError if the manager closed, or the topic
        was deleted, meanwhile (the new files are removed again)."""
        self._creating.pop(creation.info.name, None)
        name = creation.info.name
        current = self._topics.get(name)
        growing = creation.partitions.start > 0
        if self._closed or (growing and (current is None or current.topic_id != creation.info.topic_id)):
            creation.discard()
            raise StorageError(f"topic {name!r} changed while its partitions were being created")
        # The broker defaults may have changed while the files were made (rebase_configs).
        info = creation.info
        config = LogConfig.from_topic_configs(info.configs, self.base_config)
        info = TopicInfo(info.name, info.topic_id, info.num_partitions, info.configs, config)
        self._topics[name] = info
        for partition, partition_log in zip(creation.partitions, creation.opened, strict=True):
            partition_log.move_descriptors_to(self.descriptors)
            partition_log.update_config(config)
            self._logs[(name, partition)] = partition_log
        if growing:
            for partition in range(creation.partitions.start):
                self._logs[(name, partition)].update_config(config)
        return info

    def abort_creation(self, creation: TopicCreation) -> None:
        """Step 3 after ``creation.run()`` failed (it removed its files): release the name."""
        if self._creating.get(creation.info.name) is creation:
            del self._creating[creation.info.name]

    def delete_topic(self, name: str) -> None:
        """DeleteTopics: forget the topic (durably) and remove its files, all on the calling
        thread (``begin_delete_topic`` splits it so the fsync can run elsewhere)."""
        deletion = self.begin_delete_topic(name)
        try:
            deletion.run()
        except BaseException:
            self.abort_delete_topic(deletion)
            raise
        removal = self.finish_delete_topic(deletion)
        if removal is not None:
            try:
                removal.run()
            except StorageError as exc:
                log.warning("topic %r deleted, but not all its files: %s (removed at the next start)", name, exc)
            finally:
                self.finish_topic_removal(name, removal)

    def begin_delete_topic(self, name: str) -> TopicDeletion:
        """Step 1 of DeleteTopics, on the owner's thread: reserve the topic (deleting, growing
        or altering it is refused with "retry" until ``finish_delete_topic`` or
        ``abort_delete_topic``; it keeps being served meanwhile). The returned job's ``run()``
        removes its metadata file durably on any thread (the broker: a disk thread)."""
        self._check_open()
        info = self._topic(name)
        self._check_not_growing(name)
        deletion = TopicDeletion(info, self._metadata_path(info))
        self._deleting[name] = deletion
        return deletion

    def finish_delete_topic(self, deletion: TopicDeletion) -> FileRemoval | None:
        """Step 3, after ``deletion.run()`` succeeded (the topic is gone for good on disk): its
        logs close. Returns the removal of its directories, to ``run`` on any thread (the
        broker: a disk thread; a topic of many segments takes long to unlink) and then
        ``finish_topic_removal`` here: until then the name stays taken, so a new topic of that
        name never shares a directory with the removal. None if the manager closed meanwhile
        (the next start removes the orphan directories)."""
        self.abort_delete_topic(deletion)  # releases the reservation
        name, info = deletion.info.name, deletion.info
        if self._closed:
            return None
        if self._topics.get(name) is not info:
            raise LogInvariantError(f"topic {name!r} changed while reserved for deletion")
        del self._topics[name]
        for partition in range(info.num_partitions):
            partition_log = self._logs.pop((name, partition), None)
            if partition_log is not None:
                partition_log.abandon()
        removal = FileRemoval(directories=[self._partition_dir(name, p) for p in range(info.num_partitions)])
        self._removing[name] = removal
        return removal

    def finish_topic_removal(self, name: str, removal: FileRemoval) -> None:
        """After the deleted topic's ``removal`` ran (or failed: a directory left behind is an
        orphan, removed at the next start): its name is free again."""
        if self._removing.get(name) is removal:
            del self._removing[name]

    def abort_delete_topic(self, deletion: TopicDeletion) -> None:
        """Release the reservation of ``deletion`` (its ``run()`` failed: the topic stays)."""
        if self._deleting.get(deletion.info.name) is deletion:
            del self._deleting[deletion.info.name]

    def alter_topic_configs(
        self, name: str, configs: Mapping[str, str | None], *, merge: bool = False
    ) -> TopicInfo:
        """Set a topic's config overrides, persist them and apply them to its open logs.

        By default ``configs`` becomes the whole override set (the broker computes it for both
        AlterConfigs and IncrementalAlterConfigs). With ``merge=True`` it is merged into the current
        overrides instead. Either way a ``None`` value removes that override. InvalidConfigError
        leaves everything unchanged. All on the calling thread; ``begin_alter_topic_configs``
        splits it so the metadata write can run elsewhere.
        """
        change = self.begin_alter_topic_configs(name, configs, merge=merge)
        try:
            change.run()
        except BaseException:
            self.abort_alter_topic_configs(change)
            raise
        return self.finish_alter_topic_configs(change)

    def begin_alter_topic_configs(
        self, name: str, configs: Mapping[str, str | None], *, merge: bool = False
    ) -> TopicConfigChange:
        """Step 1 of ``alter_topic_configs``, on the owner's thread: validate and reserve the
        topic (until ``finish_alter_topic_configs`` or ``abort_alter_topic_configs``, deleting,
        growing or altering it again is refused with "retry", as during a growth). The returned
        job's ``run()`` writes the metadata file on any thread (the broker: a disk thread)."""
        self._check_open()
        info = self._topic(name)
        self._check_not_growing(name)
        overrides = dict(info.configs) if merge else {}
        for key, value in configs.items():
            if value is None:
                overrides.pop(key, None)
            else:
                overrides[str(key)] = str(value)
        config = LogConfig.from_topic_configs(overrides, self.base_config)
        new_info = TopicInfo(name, info.topic_id, info.num_partitions, overrides, config)
        change = TopicConfigChange(new_info, self._metadata_path(new_info), _encode_metadata(new_info))
        self._altering[name] = change
        return change

    def finish_alter_topic_configs(self, change: TopicConfigChange) -> TopicInfo:
        """Step 3, back on the owner's thread after ``change.run()`` succeeded: the new configs
        apply to the topic's logs."""
        self.abort_alter_topic_configs(change)  # releases the reservation
        name = change.info.name
        current = self._topics.get(name)
        if self._closed or current is None or current.topic_id != change.info.topic_id:
            raise StorageError(f"topic {name!r} changed while its configs were being written")
        # The broker defaults may have changed while the file was written (rebase_configs).
        info = change.info
        info = TopicInfo(info.name, info.topic_id, info.num_partitions, info.configs,
                         LogConfig.from_topic_configs(info.configs, self.base_config))
        self._topics[name] = info
        for partition in range(info.num_partitions):
            self._logs[(name, partition)].update_config(info.config)
        return info

    def rebase_configs(self, base_config: LogConfig) -> None:
        """New broker-level topic defaults (dynamic broker configs): every topic's config is
        recomputed from its own overrides over ``base_config`` and applied to its logs at once;
        nothing is written (the overrides did not change)."""
        self._check_open()
        self.base_config = base_config
        for name, info in list(self._topics.items()):
            config = self._stored_config(f"of topic {name!r}", info.configs)
            self._topics[name] = TopicInfo(info.name, info.topic_id, info.num_partitions, info.configs, config)
            for partition in range(info.num_partitions):
                log_ = self._logs.get((name, partition))
                if log_ is not None:
                    log_.update_config(config)

    def abort_alter_topic_configs(self, change: TopicConfigChange) -> None:
        """Release the reservation of ``change`` (its ``run()`` failed: the old configs stay)."""
        if self._altering.get(change.info.name) is change:
            del self._altering[change.info.name]

    def _write_metadata(self, info: TopicInfo) -> None:
        write_file_atomically(self._metadata_path(info), _encode_metadata(info))

    def _metadata_path(self, info: TopicInfo) -> Path:
        return self._topics_dir / f"{info.topic_id}.json"

    def _check_not_growing(self, name: str) -> None:
        # A creation or a config change running on another thread rewrites the topic's metadata
        # file: a second writer could leave the older content last, and a deletion would be
        # undone by the late write.
        if name in self._creating:
            raise InvalidRequestError(f"partitions of topic {name!r} are being created; retry")
        if name in self._altering:
            raise InvalidRequestError(f"configs of topic {name!r} are being written; retry")
        if name in self._deleting:
            raise InvalidRequestError(f"topic {name!r} is being deleted; retry")

    def _topic(self, name: str) -> TopicInfo:
        info = self._topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        return info

    # --- partitions -----------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> PartitionLog:
        """The log of one partition; UnknownTopicOrPartitionError if there is none."""
        partition_log = self._logs.get((topic, partition))
        if partition_log is None:
            raise UnknownTopicOrPartitionError(f"unknown partition {topic}-{partition}")
        return partition_log

    def logs(self) -> dict[tuple[str, int], PartitionLog]:
        """Every open partition log by (topic, partition)."""
        return dict(self._logs)

    # --- housekeeping and lifecycle -------------------------------------------------------------

    def tick(self, now_ms: int, *, defer_removal: bool = False) -> int:
        """Retention and producer-id expiry on every log (the flushes they make due are for the
        caller to run, see ``logs_wanting_flush``; with ``defer_removal`` so are the deleted
        segments' file removals, see ``take_file_removals``).

        Returns the number of segments deleted. One failing log does not stop the others; the
        first error is raised after all were visited.
        """
        self._check_open()
        self._now_ms = max(self._now_ms, now_ms)
        deleted = 0
        first_error: BaseException | None = None
        for partition_log in list(self._logs.values()):
            try:
                deleted += partition_log.apply_retention(now_ms, defer_removal=defer_removal)
                partition_log.expire_producers(now_ms)
            except (StorageError, OSError) as exc:
                log.error("housekeeping of %s failed: %s", partition_log.directory, exc)
                first_error = first_error or exc
        if first_error is not None:
            raise first_error
        return deleted

    def take_file_removals(self) -> list[FileRemoval]:
        """The files of every log's deleted segments, to remove on any thread."""
        return [removal for partition_log in self._logs.values() if (removal := partition_log.take_file_removal())]

    def logs_wanting_flush(self) -> list[PartitionLog]:
        """The logs whose ``wants_flush()`` says a flush is due (rolled segments, flush.messages)."""
        self._check_open()
        return [partition_log for partition_log in self._logs.values() if partition_log.wants_flush()]

    def flush(self) -> None:
        """fsync every log."""
        self._check_open()
        for partition_log in self._logs.values():
            partition_log.flush()

    def close(self) -> None:
        """Close every log cleanly (flush, snapshot, clean-shutdown marker)."""
        if self._closed:
            return
        self._closed = True
        first_error: BaseException | None = None
        for partition_log in self._logs.values():
            try:
                partition_log.close()
            except (StorageError, OSError) as exc:
                log.error("closing %s failed: %s", partition_log.directory, exc)
                first_error = first_error or exc
        self._logs.clear()
        if first_error is not None:
            raise first_error

    def _abandon_logs(self) -> None:
        for partition_log in self._logs.values():
            partition_log.abandon()
        self._logs.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"log manager for {self.data_dir} is closed")
