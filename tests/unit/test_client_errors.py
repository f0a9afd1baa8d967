"""Error values and their classification (confluent-kafka's KafkaError API; Kafka's
TransactionManager rules for fatal / abortable / retriable, KIP-588)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from oncestream.client import KafkaError, KafkaException, QueueFullError
from oncestream.client.common.errors import _MSG_TIMED_OUT, _QUEUE_FULL, broker_error, error_name, local_error


def test_kafka_error_api_matches_confluent_shape() -> None:
    err = KafkaError(int(ErrorCode.not_coordinator))
    assert err.code() == 16
    assert err.name() == "NOT_COORDINATOR"
    assert err.retriable()
    assert not err.fatal()
    assert not err.txn_requires_abort()
    exc = KafkaException(err)
    assert exc.args[0] is err
    assert exc.error is err
    assert err == 16
    assert err == KafkaError(16)


def test_local_codes_have_librdkafka_names_and_numbers() -> None:
    assert error_name(_MSG_TIMED_OUT) == "_MSG_TIMED_OUT"
    assert _MSG_TIMED_OUT == -192
    assert KafkaError(_MSG_TIMED_OUT).retriable()


@pytest.mark.parametrize(
    "code",
    [ErrorCode.producer_fenced, ErrorCode.transactional_id_authorization_failed,
     ErrorCode.invalid_producer_id_mapping],
)
def test_fencing_and_authorization_are_fatal(code: ErrorCode) -> None:
    """A fenced producer can never commit again: fatal, not abortable, not retriable."""
    err = broker_error(int(code), transactional=True, from_coordinator=True)
    assert err.fatal()
    assert not err.txn_requires_abort()
    assert not err.retriable()


def test_invalid_producer_epoch_is_fatal_from_the_coordinator_only() -> None:
    """KIP-588: INVALID_PRODUCER_EPOCH from the transaction coordinator means fenced (fatal); on a
    produce response it only dooms the current transaction (abortable)."""
    code = int(ErrorCode.invalid_producer_epoch)
    assert broker_error(code, transactional=True, from_coordinator=True).fatal()
    on_produce = broker_error(code, transactional=True)
    assert not on_produce.fatal()
    assert on_produce.txn_requires_abort()


def test_other_errors_in_a_transaction_require_abort() -> None:
    err = broker_error(int(ErrorCode.message_too_large), transactional=True)
    assert err.txn_requires_abort()
    assert not err.fatal()
    assert not err.retriable()
    plain = broker_error(int(ErrorCode.message_too_large))
    assert not plain.txn_requires_abort()


def test_local_error_flags_and_queue_full_is_a_buffer_error() -> None:
    err = local_error(_MSG_TIMED_OUT, "timed out", txn_requires_abort=True)
    assert err.txn_requires_abort()
    assert err.str() == "timed out"
    full = QueueFullError("no space")
    assert isinstance(full, BufferError)
    assert isinstance(full, KafkaException)
    assert full.args[0].code() == _QUEUE_FULL
    assert full.args[0].retriable()
