"""Transaction coordinator (sans-io): state machine, log records, markers, timeouts, 2PC.

Entry point: :class:`TransactionCoordinator`; see ``coordinator.py`` for how to drive it.
"""

from oncestream.coordinator.txn.config import TxnCoordinatorConfig
from oncestream.coordinator.txn.coordinator import TransactionCoordinator
from oncestream.coordinator.txn.messages import (
    CONSUMER_OFFSETS_TOPIC,
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TRANSACTION_STATE_TOPIC,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    AddPartitionsResponse,
    EndTxnResponse,
    InitProducerIdResponse,
    ListTransactionsResponse,
    MarkerJob,
    Outcome,
    PendingWrite,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
    VerifyPartitionsResponse,
)
from oncestream.coordinator.txn.state import TxnState

__all__ = [
    "CONSUMER_OFFSETS_TOPIC",
    "MAX_PRODUCER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "TRANSACTION_STATE_TOPIC",
    "TWO_PHASE_COMMIT_TIMEOUT_MS",
    "AddPartitionsResponse",
    "EndTxnResponse",
    "InitProducerIdResponse",
    "ListTransactionsResponse",
    "MarkerJob",
    "Outcome",
    "PendingWrite",
    "TopicPartition",
    "TransactionCoordinator",
    "TransactionDescription",
    "TransactionListing",
    "TxnCoordinatorConfig",
    "TxnState",
    "VerifyPartitionsResponse",
]
