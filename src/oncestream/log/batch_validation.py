"""What a batch must satisfy before it is given offsets: the one home of the produce checks.

Used by :meth:`~oncestream.log.partition_log.PartitionLog.append` (the single broker's log) and by
cluster mode's diskless produce path (``cluster/diskless/produce_object``), so both refuse the same
batches with the same errors: structure, CRC and magic (``iter_batches``), max.message.bytes,
control batches from clients, record count against the last offset delta, and keyless records on a
compacted topic.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from oncestream.errors import InvalidRecordError, MessageTooLargeError, OnceStreamError
from oncestream.log.batch_records import has_keyless_record
from oncestream.log.config import LogConfig
from oncestream.protocol.record_batch import BatchHeader, check_crc, iter_batches


def validate_batches(
    records: bytes | bytearray | memoryview, config: LogConfig, *, from_client: bool = True,
    split: Sequence[tuple[BatchHeader, memoryview]] | None = None,
) -> list[tuple[BatchHeader, memoryview]]:
    """The (header, batch view) pairs of ``records``, every one checked; at least one.

    ``split``: the pairs of ``records`` as ``iter_batches(records, verify_crc=False)`` already
    returned them (the Produce handler walks the headers for its transactional checks first):
    they are not parsed again, only their CRCs verified, so each batch is walked once.

    Raises CorruptRecordError / UnsupportedMagicError (structure, CRC, magic), MessageTooLargeError
    (a batch above max.message.bytes) or InvalidRecordError (empty data, a record count that
    contradicts the last offset delta, a control batch from a client, a keyless record on a
    compacted topic).
    """
    compacts = config.compacts
    parsed: list[tuple[BatchHeader, memoryview]] = []
    for header, batch in iter_batches(records) if split is None else _crc_checked(split):
        if header.size_bytes > config.max_message_bytes:
            raise MessageTooLargeError(
                f"batch of {header.size_bytes} bytes exceeds max.message.bytes={config.max_message_bytes}"
            )
        if from_client and header.is_control:
            raise InvalidRecordError("clients may not write control batches")
        if header.record_count == 0 or header.record_count != header.last_offset_delta + 1:
            raise InvalidRecordError(
                f"record count {header.record_count} does not match last offset delta {header.last_offset_delta}"
            )
        if compacts and not header.is_control and has_keyless_record(header, batch):
            # Kafka's LogValidator: a record without a key could never be compacted away.
            raise InvalidRecordError("Compacted topic cannot accept message without key")
        parsed.append((header, batch))
    if not parsed:
        raise InvalidRecordError("produce data holds no record batch")
    return parsed


def _crc_checked(split: Iterable[tuple[BatchHeader, memoryview]]) -> Iterator[tuple[BatchHeader, memoryview]]:
    for header, batch in split:
        check_crc(header, batch)
        yield header, batch


def split_produce_data(records: bytes | bytearray | memoryview,
                       into: list[tuple[BatchHeader, memoryview]]) -> None:
    """Split a Produce request's partition data into ``into`` (headers parsed, CRC not yet
    checked: ``validate_batches(split=...)`` does that on the same pairs).

    Raises the first batch's own error (CorruptRecordError, UnsupportedMagicError); when the data
    goes on past a first good batch with bytes that are no batch, InvalidRecordError, as Kafka's
    ProduceRequest answers data that is not exactly one record batch (v3+) — whatever the
    leftover bytes happen to look like (a magic byte of 0 or 1 there is no old-format batch)."""
    try:
        for pair in iter_batches(records, verify_crc=False):
            into.append(pair)
    except OnceStreamError as exc:
        if not into:
            raise
        raise InvalidRecordError(
            f"Produce data must be exactly one record batch per partition; after the first: {exc}") from exc
