"""Client invariants that keep records correct raise ClientInvariantError, not ``assert``
(``python -O`` strips asserts, and a producer that went on would duplicate or misorder records)."""

from __future__ import annotations

import pytest

from oncestream.client.common.errors import ClientInvariantError
from oncestream.client.producer.accumulator import ProducerBatch, RecordAccumulator
from oncestream.client.producer.partitioner import partition_for_key
from oncestream.client.producer.sender import PartitionSequences


def test_an_open_batch_cannot_be_sealed_or_sent() -> None:
    batch = ProducerBatch("t", 0, created_ms=0, timestamp_ms=0)
    with pytest.raises(ClientInvariantError):
        batch.seal(0)
    with pytest.raises(ClientInvariantError):
        batch.wire_parts()


def test_only_closed_batches_go_back_to_their_queue() -> None:
    acc = RecordAccumulator(batch_size=1000, batch_num_messages=10, linger_ms=0, buffer_memory=10_000)
    with pytest.raises(ClientInvariantError):
        acc.reenqueue([ProducerBatch("t", 0, created_ms=0, timestamp_ms=0)])


def test_sequences_do_not_restart_under_a_batch_in_flight() -> None:
    """KIP-360: a new producer identity restarts sequences at 0, which is only safe when no batch
    of the old identity can still be acknowledged."""
    sequences = PartitionSequences()
    sequences.in_flight.append(ProducerBatch("t", 0, created_ms=0, timestamp_ms=0))
    with pytest.raises(ClientInvariantError):
        sequences.reset()


def test_bad_limits_and_partition_counts_are_value_errors() -> None:
    with pytest.raises(ValueError, match=r"batch_size, batch_num_messages and buffer_memory must be positive"):
        RecordAccumulator(batch_size=0, batch_num_messages=10, linger_ms=0, buffer_memory=10)
    with pytest.raises(ValueError, match=r"a topic has at least one partition, not 0"):
        partition_for_key(b"k", 0)
