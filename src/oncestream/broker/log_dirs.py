"""What DescribeLogDirs (API key 35) reports, sans-io: the broker's log directory with every
partition's local size, and (our extension, docs/tiered-storage.md) the remote store as a second
log directory listing each tiered partition's remote size.

Kafka's ReplicaManager.describeLogDirs: one entry per log directory, each with the requested
partitions that live there (all of them for a null topic list; a partition that does not exist is
left out, not an error), their size, offset lag (0 here: one replica, so the high watermark is the
log end) and ``is_future_key`` (false: no AlterReplicaLogDirs), plus the volume's total and usable
bytes (v4+).

Kafka has no API that reports the size of a partition's tiered data. The remote entry's
``log_dir`` is ``remote:`` followed by the store's description (``remote:s3://bucket/prefix``), its
total and usable bytes -1 (unknown, as Kafka answers below v4), its partitions those with data in the
remote store. Clients that know nothing of it see one more log directory, which they already
handle (Kafka brokers with several ``log.dirs`` answer several entries).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from oncestream.errors import StorageError
from oncestream.remote.object_store import ObjectStore

REMOTE_LOG_DIR_PREFIX = "remote:"
# Tiered storage's state as ``oncestream.remote.log.storage.status`` reports it when it is off.
STATUS_DISABLED = "disabled"


@dataclass(frozen=True, slots=True)
class PartitionDirEntry:
    """One partition of a log directory: its bytes there."""

    topic: str
    partition: int
    size_bytes: int
    offset_lag: int = 0
    is_future: bool = False


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log directory: absolute path (or ``remote:<store>``), volume bytes (-1: unknown)."""

    path: str
    partitions: tuple[PartitionDirEntry, ...]
    total_bytes: int = -1
    usable_bytes: int = -1


@dataclass(frozen=True, slots=True)
class RemoteLogDir:
    """The remote store as DescribeLogDirs shows it: its description (the uri without
    credentials) and the bytes each tiered partition holds there (COPY_SEGMENT_FINISHED segments)."""

    description: str
    sizes: Mapping[tuple[str, int], int] = field(default_factory=dict)


class RemoteTiering(Protocol):
    """What DescribeConfigs and DescribeLogDirs read of the broker's RemoteLogManager
    (remote/manager.py; ``BrokerState.remote``, None without tiered storage)."""

    @property
    def status(self) -> str:
        """``ok``, or the last error of the remote store in words (e.g. wrong credentials)."""
        ...

    @property
    def store(self) -> ObjectStore:
        """The remote store (its ``description`` names it without credentials)."""
        ...

    def remote_info(self, topic: str, partition: int) -> tuple[int, int, int]:
        """(bytes of the partition's copied segments, earliest remote offset, last copied
        offset); offsets -1 when nothing is copied."""
        ...


def remote_status(remote: RemoteTiering | None) -> str:
    """The value of ``oncestream.remote.log.storage.status``."""
    return STATUS_DISABLED if remote is None else remote.status


def remote_log_dir(remote: RemoteTiering | None, wanted: Iterable[tuple[str, int]],
                   tiered_topics: Iterable[str]) -> RemoteLogDir | None:
    """The remote store's entry: every wanted partition of a tiered topic (even with nothing
    copied yet: 0 bytes) and any other with remote data (a topic whose tiering is being turned
    off); None without tiered storage."""
    if remote is None:
        return None
    tiered = set(tiered_topics)
    sizes: dict[tuple[str, int], int] = {}
    for topic, partition in wanted:
        size = remote.remote_info(topic, partition)[0]
        if size > 0 or topic in tiered:
            sizes[(topic, partition)] = size
    return RemoteLogDir(remote.store.description, sizes)


def volume_bytes(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the filesystem holding ``path`` (Kafka's FileStore
    getTotalSpace / getUsableSpace: usable counts what an unprivileged writer may use)."""
    try:
        stat = os.statvfs(path)
    except OSError as exc:
        raise StorageError(f"cannot stat the volume of {path}: {exc}") from exc
    return stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize


def wanted_partitions(requested: Iterable[tuple[str, Iterable[int]]] | None,
                      existing: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """The (topic, partition) pairs to describe: all of ``existing`` for a null request, else
    the requested ones that exist (Kafka leaves unknown ones out), sorted, without repeats."""
    present = set(existing)
    if requested is None:
        return sorted(present)
    asked = {(topic, partition) for topic, partitions in requested for partition in partitions}
    return sorted(asked & present)


def describe_log_dirs(wanted: Iterable[tuple[str, int]], local_path: str, local_sizes: Mapping[tuple[str, int], int],
                      volume: tuple[int, int], remote: RemoteLogDir | None) -> list[LogDirDescription]:
    """The log directories of a DescribeLogDirs answer: the local one (every wanted partition
    with its local size) and, with tiered storage, the remote one (the wanted partitions that
    have remote data)."""
    wanted = list(wanted)
    out = [LogDirDescription(
        path=local_path,
        partitions=tuple(PartitionDirEntry(topic, partition, local_sizes[(topic, partition)])
                         for topic, partition in wanted),
        total_bytes=volume[0], usable_bytes=volume[1],
    )]
    if remote is not None:
        out.append(LogDirDescription(
            path=REMOTE_LOG_DIR_PREFIX + remote.description,
            partitions=tuple(PartitionDirEntry(topic, partition, remote.sizes[(topic, partition)])
                             for topic, partition in wanted if (topic, partition) in remote.sizes),
        ))
    return out
