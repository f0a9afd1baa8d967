"""oncestream's Kafka client: ``Producer`` (idempotent, transactional, KIP-939 two-phase commit),
``Consumer`` (groups, read_committed), ``ShareConsumer`` (KIP-932 share groups) and ``Admin``,
configured with Kafka property names and shaped like confluent-kafka's API.

The public names are imported on first use (PEP 562 ``__getattr__``), so a process that only
consumes does not import the producer and admin machinery at start-up (``from oncestream.client
import Consumer`` loads the consumer's modules alone). ``oncestream.protocol`` is imported first:
it loads kio without hypothesis (see ``oncestream.protocol.kio_loading``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from oncestream.protocol.kio_loading import load_kio

load_kio()  # before any client module imports kio (already done by oncestream.protocol; explicit)

if TYPE_CHECKING:
    from oncestream.client.admin.admin import (
        AbortTransactionSpec,
        Admin,
        AdminClient,
        ClusterDescription,
        NewTopic,
        TopicDescription,
        TransactionDescription,
    )
    from oncestream.client.admin.admin_groups import (
        ConsumerGroupState,
        ConsumerGroupTopicPartitions,
        ConsumerGroupType,
        GroupDescription,
    )
    from oncestream.client.common.errors import KafkaError, KafkaException, QueueFullError
    from oncestream.client.common.message import (
        OFFSET_BEGINNING,
        OFFSET_END,
        OFFSET_INVALID,
        OFFSET_STORED,
        TIMESTAMP_CREATE_TIME,
        TIMESTAMP_LOG_APPEND_TIME,
        TIMESTAMP_NOT_AVAILABLE,
        ConsumerGroupMetadata,
        Message,
        TopicPartition,
    )
    from oncestream.client.consumer.consumer import Consumer
    from oncestream.client.consumer.share_acks import AcknowledgeType
    from oncestream.client.consumer.share_consumer import ShareConsumer
    from oncestream.client.consumer.share_records import IllegalStateException, Messages
    from oncestream.client.producer.prepared_txn import PreparedTxnState
    from oncestream.client.producer.producer import Producer

# Public name -> the module defining it.
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("AbortTransactionSpec", "Admin", "AdminClient", "ClusterDescription", "NewTopic",
                     "TopicDescription", "TransactionDescription"), "oncestream.client.admin.admin"),
    **dict.fromkeys(("ConsumerGroupState", "ConsumerGroupTopicPartitions", "ConsumerGroupType", "GroupDescription"),
                    "oncestream.client.admin.admin_groups"),
    "Consumer": "oncestream.client.consumer.consumer",
    "AcknowledgeType": "oncestream.client.consumer.share_acks",
    **dict.fromkeys(("IllegalStateException", "Messages"), "oncestream.client.consumer.share_records"),
    "ShareConsumer": "oncestream.client.consumer.share_consumer",
    **dict.fromkeys(("KafkaError", "KafkaException", "QueueFullError"), "oncestream.client.common.errors"),
    **dict.fromkeys(("OFFSET_BEGINNING", "OFFSET_END", "OFFSET_INVALID", "OFFSET_STORED", "TIMESTAMP_CREATE_TIME",
                     "TIMESTAMP_LOG_APPEND_TIME", "TIMESTAMP_NOT_AVAILABLE", "ConsumerGroupMetadata", "Message",
                     "TopicPartition"), "oncestream.client.common.message"),
    "PreparedTxnState": "oncestream.client.producer.prepared_txn",
    "Producer": "oncestream.client.producer.producer",
}

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "OFFSET_STORED",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_NOT_AVAILABLE",
    "AbortTransactionSpec",
    "AcknowledgeType",
    "Admin",
    "AdminClient",
    "ClusterDescription",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerGroupState",
    "ConsumerGroupTopicPartitions",
    "ConsumerGroupType",
    "GroupDescription",
    "IllegalStateException",
    "KafkaError",
    "KafkaException",
    "Message",
    "Messages",
    "NewTopic",
    "PreparedTxnState",
    "Producer",
    "QueueFullError",
    "ShareConsumer",
    "TopicDescription",
    "TopicPartition",
    "TransactionDescription",
]


def __getattr__(name: str) -> object:
    """Import a public name's module on first use and cache the name in this package."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
