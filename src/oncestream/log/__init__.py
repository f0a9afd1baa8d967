"""Partition storage: segmented logs, indexes, recovery, retention and idempotent-producer state.

The broker talks to two objects: ``LogManager`` (topics in a data directory) and ``PartitionLog``
(one partition). Both are synchronous and take the current time as ``now_ms``.
"""

from oncestream.log.config import LogConfig
from oncestream.log.manager import LogManager, TopicInfo
from oncestream.log.partition_log import AppendResult, PartitionLog
from oncestream.log.producer_state import ProducerStateInfo
from oncestream.log.read_path import ReadResult

__all__ = [
    "AppendResult",
    "LogConfig",
    "LogManager",
    "PartitionLog",
    "ProducerStateInfo",
    "ReadResult",
    "TopicInfo",
]
