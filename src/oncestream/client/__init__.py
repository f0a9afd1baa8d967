"""oncestream's Kafka client: ``Producer`` (idempotent, transactional, KIP-939 two-phase commit),
``Consumer`` (groups, read_committed) and ``Admin``, configured with Kafka property names and
shaped like confluent-kafka's API.
"""

from oncestream.client.admin import (
    AbortTransactionSpec,
    Admin,
    AdminClient,
    GroupDescription,
    NewTopic,
    TopicDescription,
    TransactionDescription,
)
from oncestream.client.consumer import Consumer
from oncestream.client.errors import KafkaError, KafkaException, QueueFullError
from oncestream.client.message import (
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
from oncestream.client.prepared_txn import PreparedTxnState
from oncestream.client.producer import Producer

__all__ = [
    "AbortTransactionSpec",
    "Admin",
    "AdminClient",
    "GroupDescription",
    "NewTopic",
    "TopicDescription",
    "TransactionDescription",
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "OFFSET_INVALID",
    "OFFSET_STORED",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "TIMESTAMP_NOT_AVAILABLE",
    "Consumer",
    "ConsumerGroupMetadata",
    "KafkaError",
    "KafkaException",
    "Message",
    "PreparedTxnState",
    "Producer",
    "QueueFullError",
    "TopicPartition",
]
