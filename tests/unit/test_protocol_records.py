"""Record batch v2 encoding, the header view, and the request framing rules of the protocol guide."""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode

from oncestream.errors import CorruptRecordError, InvalidRecordError, UnsupportedMagicError
from oncestream.protocol import record_batch as rb
from oncestream.protocol.codec import (
    MalformedRequestError,
    decode_request,
    encode_response,
    parse_request_header,
)
from oncestream.protocol.compression import COMPRESSION_BY_NAME
from oncestream.protocol.markers import CONTROL_COMMIT
from oncestream.protocol.records import (
    NewRecord,
    control_marker_type,
    decode_batch,
    decode_batches,
    encode_batch,
    encode_control_batch,
)


@pytest.mark.parametrize("codec", sorted(COMPRESSION_BY_NAME))
def test_batch_round_trip_with_every_codec(codec: str) -> None:
    records = [NewRecord(value=b"v%d" % i, key=b"k%d" % (i % 3), headers=[("h", b"x")]) for i in range(50)]
    blob = encode_batch(records, now_ms=1_000, compression=COMPRESSION_BY_NAME[codec], base_offset=10)
    decoded = decode_batch(blob)
    assert [r.value for r in decoded.records] == [r.value for r in records]
    assert [r.offset for r in decoded.records] == list(range(10, 60))
    assert decoded.records[4].headers == (("h", b"x"),)
    assert decoded.header.compression == COMPRESSION_BY_NAME[codec]


def test_crc_does_not_cover_base_offset() -> None:
    """Offsets are assigned by patching bytes 0..8; the CRC32C stays valid (KIP-98 batch format)."""
    blob = bytearray(encode_batch([NewRecord(value=b"x")], now_ms=5))
    rb.patch_base_offset(blob, 123456)
    ((header, _),) = list(rb.iter_batches(blob))
    assert header.base_offset == 123456
    assert rb.compute_crc(blob) == header.crc


def test_flipped_byte_fails_crc() -> None:
    blob = bytearray(encode_batch([NewRecord(value=b"hello world")], now_ms=5))
    blob[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        list(rb.iter_batches(blob))


def test_old_magic_rejected() -> None:
    blob = bytearray(encode_batch([NewRecord(value=b"x")], now_ms=5))
    blob[rb.MAGIC_OFFSET] = 1
    with pytest.raises(UnsupportedMagicError):
        list(rb.iter_batches(blob))


def test_truncated_batch_rejected_but_skippable_in_fetch_data() -> None:
    one = encode_batch([NewRecord(value=b"a")], now_ms=5)
    two = encode_batch([NewRecord(value=b"b")], now_ms=5, base_offset=1)
    with pytest.raises(CorruptRecordError):
        list(rb.iter_batches(one + two[:-4]))
    assert [b.records[0].value for b in decode_batches(one + two[:-4], allow_partial=True)] == [b"a"]


def test_sequence_wraps_at_int32_max() -> None:
    assert rb.increment_sequence(2**31 - 1, 1) == 0
    assert rb.increment_sequence(2**31 - 2, 3) == 1
    assert rb.increment_sequence(5, 3) == 8


def test_control_batch_is_marked() -> None:
    blob = encode_control_batch(marker=CONTROL_COMMIT, producer_id=7, producer_epoch=2, coordinator_epoch=0, now_ms=9)
    batch = decode_batch(blob)
    assert batch.header.is_control
    assert batch.header.is_transactional
    assert control_marker_type(batch.records[0]) == CONTROL_COMMIT


def _frame(api_key: int, version: int, correlation_id: int, body: bytes, flexible: bool) -> bytes:
    client = b"cli"
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client)) + client
    if flexible:
        header += b"\x00"
    return header + body


def test_request_header_v2_for_flexible_versions() -> None:
    # ApiVersions v3 is flexible: compact strings for name/version and a tagged-field byte.
    body = b"\x02x\x021\x00"
    frame = _frame(18, 3, 42, body, flexible=True)
    header = parse_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (18, 3, 42, "cli")
    request = decode_request(header, frame)
    assert request.client_software_name == "x"


def test_malformed_header_and_body_raise() -> None:
    with pytest.raises(MalformedRequestError):
        parse_request_header(b"\x00\x01")
    frame = _frame(18, 3, 1, b"\x7f", flexible=True)  # compact string length runs past the frame
    with pytest.raises(MalformedRequestError):
        decode_request(parse_request_header(frame), frame)


def test_api_versions_response_uses_header_v0() -> None:
    """KIP-511: ApiVersions responses carry header v0 even in flexible versions."""
    from oncestream.broker.handlers import api_versions
    from oncestream.protocol.schemas import response_class

    cls = response_class(18, 3)
    import datetime

    resp = cls(error_code=ErrorCode.none, api_keys=(), throttle_time=datetime.timedelta(0))
    frame = encode_response(18, 3, 77, resp)
    size, corr = struct.unpack_from(">ii", frame)
    assert size == len(frame) - 4
    assert corr == 77
    # Straight after the correlation id comes the error code (no tagged-field byte).
    assert struct.unpack_from(">h", frame, 8)[0] == 0
    v0 = api_versions.unsupported_version_response(5)
    assert struct.unpack_from(">iih", v0)[1:] == (5, ErrorCode.unsupported_version)


def test_an_empty_batch_is_refused_with_a_typed_error() -> None:
    """A batch of no records would carry last offset delta -1: refused even under ``python -O``."""
    from oncestream.client.producer.record_batch_builder import SealedBatch
    from oncestream.errors import InvalidRecordError

    with pytest.raises(InvalidRecordError):
        encode_batch([], now_ms=1)
    with pytest.raises(InvalidRecordError):
        SealedBatch(b"", 0, 1, 1, 0)


def test_a_batch_with_offset_gaps_keeps_each_record_at_its_offset_and_ends_where_told():
    """As compaction leaves a batch (and the cluster's internal-topic reads build one): records
    at offsets 10, 13, 14 of a batch running to 19; decoded offsets and the range are exact."""
    records = [NewRecord(b"a", b"k1"), NewRecord(b"b", b"k2"), NewRecord(None, b"k3")]
    blob = encode_batch(records, now_ms=5, base_offset=10, offset_deltas=[0, 3, 4], last_offset_delta=9)
    [batch] = list(decode_batches(blob))
    assert [(r.offset, r.key, r.value) for r in batch.records] == [(10, b"k1", b"a"), (13, b"k2", b"b"), (14, b"k3", None)]
    assert (batch.header.base_offset, batch.header.last_offset_delta) == (10, 9)


def test_a_header_only_batch_covers_its_range_with_no_record():
    blob = encode_batch([], now_ms=-1, base_offset=7, last_offset_delta=2)
    [batch] = list(decode_batches(blob))
    assert batch.records == []
    assert (batch.header.base_offset, batch.header.last_offset_delta) == (7, 2)


@pytest.mark.parametrize(("deltas", "last"), [([1, 1], 3), ([2, 1], 3), ([-1, 0], 3), ([0, 4], 3), ([0], -1)])
def test_offset_deltas_that_do_not_fit_the_batch_are_refused(deltas, last):
    records = [NewRecord(b"v", b"k") for _ in deltas]
    with pytest.raises(InvalidRecordError):
        encode_batch(records, now_ms=0, offset_deltas=deltas, last_offset_delta=last)
