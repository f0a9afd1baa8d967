"""InitProducerId's producer-identity rules (KIP-360, KIP-939) and its response builders.

Pure functions used by :class:`~oncestream.coordinator.txn.coordinator.TransactionCoordinator`:
which (producer id, epoch) a request carries, whether it may claim the transactional id's
current identity, and the responses sent once an InitProducerId transition is durable.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from oncestream.coordinator.txn import metadata as m
from oncestream.coordinator.txn.messages import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, InitProducerIdResponse
from oncestream.coordinator.txn.metadata import TxnSnapshot
from oncestream.errors import InvalidRequestError


def expected_identity(producer_id: int, producer_epoch: int) -> tuple[int, int] | None:
    """The (producer id, epoch) an InitProducerId carries, None when it carries none (KIP-360)."""
    if producer_id == NO_PRODUCER_ID and producer_epoch == NO_PRODUCER_EPOCH:
        return None
    if producer_id == NO_PRODUCER_ID or producer_epoch == NO_PRODUCER_EPOCH:
        raise InvalidRequestError("producer id and epoch must be given together")
    return (producer_id, producer_epoch)


def is_valid_expected_producer_id(s: TxnSnapshot, expected: tuple[int, int]) -> bool:
    """Kafka's isValidProducerId: a fresh id (no epoch yet) accepts anything; otherwise the id must
    be the current one, or the previous one after an epoch-exhaustion rotation being retried."""
    if s.producer_epoch == NO_PRODUCER_EPOCH or expected[0] == s.producer_id:
        return True
    return expected[0] == s.last_producer_id and m.is_epoch_exhausted(expected[1])


def init_response(snap: TxnSnapshot) -> InitProducerIdResponse:
    """The InitProducerId answer once the bumped (or rotated) identity ``snap`` is durable."""
    return InitProducerIdResponse(ErrorCode.none, snap.producer_id, snap.producer_epoch)


def keep_prepared_response(snap: TxnSnapshot) -> InitProducerIdResponse:
    """The KIP-939 keepPreparedTxn answer: the new client identity plus the kept transaction's."""
    return InitProducerIdResponse(
        ErrorCode.none,
        snap.producer_id,
        snap.producer_epoch,
        snap.ongoing_txn_producer_id,
        snap.ongoing_txn_producer_epoch,
    )
