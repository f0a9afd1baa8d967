"""The zero-copy Fetch response reader (protocol/fetch_response_view.py) against kio's reader.

Protocol rules checked (FetchResponse v4-v12 of the Kafka protocol guide): the field order of
every version, nullable ``aborted_transactions`` and ``records``, compact lengths and tagged
fields in v12 (KIP-482: a reader skips tagged fields it does not know), and that a truncated or
malformed body is refused with one typed error, never a crash or a giant allocation.
"""

from __future__ import annotations

import datetime
import io
import struct
import tracemalloc

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from oncestream.protocol.codec import build, reader_for, writer_for
from oncestream.protocol.fetch_response_view import (
    MAX_VERSION,
    MIN_VERSION,
    FetchResponseView,
    MalformedFetchResponseError,
    parse_fetch_response,
)
from oncestream.protocol.schemas import response_class, response_module
from oncestream.protocol.varint import encode_uvarint, read_uvarint

VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)
FETCH = 1
FLEXIBLE = 12
KNOWN_PARTITION_TAGS = {0, 1, 2}  # diverging_epoch, current_leader, snapshot_id (v12)
PROPERTY = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)


# --- building responses with kio ----------------------------------------------------------------


@st.composite
def responses(draw, version: int):
    """A random kio FetchResponse of ``version``: 0-3 topics of 0-3 partitions, null or empty or
    filled aborted lists and records, and (v12) the known tagged fields set at random."""
    m = response_module(FETCH, version)

    def partition():
        fields = dict(
            partition_index=draw(I32), error_code=draw(st.sampled_from(list(ErrorCode))),
            high_watermark=draw(I64), last_stable_offset=draw(I64), log_start_offset=draw(I64),
            aborted_transactions=draw(st.none() | st.lists(st.tuples(I64, I64), max_size=3).map(
                lambda pairs: tuple(build(m.AbortedTransaction, producer_id=a, first_offset=b) for a, b in pairs))),
            preferred_read_replica=draw(I32) if version >= 11 else -1,  # v11+, not ignorable
            records=draw(st.none() | st.binary(max_size=64)),
        )
        if version >= FLEXIBLE and draw(st.booleans()):
            fields["diverging_epoch"] = build(m.EpochEndOffset, epoch=draw(I32), end_offset=draw(I64))
        if version >= FLEXIBLE and draw(st.booleans()):
            fields["current_leader"] = build(m.LeaderIdAndEpoch, leader_id=draw(I32), leader_epoch=draw(I32))
        if version >= FLEXIBLE and draw(st.booleans()):
            fields["snapshot_id"] = build(m.SnapshotId, end_offset=draw(I64), epoch=draw(I32))
        return build(m.PartitionData, **fields)

    topics = tuple(
        build(m.FetchableTopicResponse, topic=draw(st.text(max_size=12)),
              partitions=tuple(partition() for _ in range(draw(st.integers(0, 3)))))
        for _ in range(draw(st.integers(0, 3)))
    )
    return build(m.FetchResponse, throttle_time=datetime.timedelta(milliseconds=draw(st.integers(0, 2**31 - 1))),
                 error_code=draw(st.sampled_from(list(ErrorCode))),
                 session_id=draw(I32) if version >= 7 else 0, responses=topics)  # SessionId: v7+


def _kio_body(entity) -> bytes:
    buf = io.BytesIO()
    writer_for(type(entity))(buf, entity)
    return buf.getvalue()


def _kio_read(version: int, body: bytes):
    response, size = reader_for(response_class(FETCH, version))(memoryview(body).toreadonly(), 0)
    assert size == len(body)
    return response


def _expected(version: int, response) -> tuple:
    """What the view must return, from kio's decoded response (fields a version lacks: -1/0)."""
    return (
        response.throttle_time // datetime.timedelta(milliseconds=1),
        int(getattr(response, "error_code", 0)),
        int(getattr(response, "session_id", 0)),
        tuple(
            (t.topic, tuple(
                (int(p.partition_index), int(p.error_code), int(p.high_watermark), int(p.last_stable_offset),
                 int(getattr(p, "log_start_offset", -1)),
                 None if p.aborted_transactions is None
                 else tuple((int(a.producer_id), int(a.first_offset)) for a in p.aborted_transactions),
                 int(getattr(p, "preferred_read_replica", -1)),
                 None if p.records is None else bytes(p.records))
                for p in t.partitions))
            for t in response.responses),
    )


def _got(view: FetchResponseView) -> tuple:
    return (
        view.throttle_time_ms, view.error_code, view.session_id,
        tuple(
            (t.topic, tuple(
                (p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset, p.log_start_offset,
                 p.aborted_transactions, p.preferred_read_replica,
                 None if p.records is None else bytes(p.records))
                for p in t.partitions))
            for t in view.topics),
    )


# --- unknown tagged fields (v12): kio's reader refuses them, so they are spliced into kio's output ---


def _tag_section(known: list[tuple[int, bytes]], unknown: list[tuple[int, bytes]]) -> bytes:
    """A tagged-field section holding both lists, in tag order (KIP-482)."""
    entries = sorted(known + unknown)
    return encode_uvarint(len(entries)) + b"".join(
        encode_uvarint(tag) + encode_uvarint(len(data)) + data for tag, data in entries)


def _split_tags(section: bytes) -> list[tuple[int, bytes]]:
    count, pos = read_uvarint(section, 0)
    out = []
    for _ in range(count):
        tag, pos = read_uvarint(section, pos)
        size, pos = read_uvarint(section, pos)
        out.append((tag, section[pos:pos + size]))
        pos += size
    assert pos == len(section)
    return out


def _compact_string(text: str) -> bytes:
    raw = text.encode()
    return encode_uvarint(len(raw) + 1) + raw


def _v12_with_unknown_tags(response, draw_tags) -> bytes:
    """kio's v12 encoding of ``response`` with ``draw_tags()`` unknown tagged fields added at
    every level that has a tag section (response, topic, partition, aborted transaction).

    Put together from kio's writer output for each nested entity; with no unknown tags it must
    equal kio's own encoding of the whole response (checked by the caller)."""
    m = response_module(FETCH, FLEXIBLE)
    out = bytearray(struct.pack(">ihi", response.throttle_time // datetime.timedelta(milliseconds=1),
                                int(response.error_code), response.session_id))
    out += encode_uvarint(len(response.responses) + 1)
    for topic in response.responses:
        out += _compact_string(topic.topic) + encode_uvarint(len(topic.partitions) + 1)
        for part in topic.partitions:
            plain = _kio_body(build(m.PartitionData, **{**{f: getattr(part, f) for f in part.__slots__},
                                                      "aborted_transactions": None}))
            head = 4 + 2 + 8 + 8 + 8  # index, error, hw, lso, log start: then the null aborted byte
            assert plain[head] == 0
            aborted = b"\x00"
            if part.aborted_transactions is not None:
                aborted = encode_uvarint(len(part.aborted_transactions) + 1) + b"".join(
                    _kio_body(a)[:-1] + _tag_section([], draw_tags()) for a in part.aborted_transactions)
            rest = plain[head + 1:]
            records_len, after = read_uvarint(rest, 4)  # after preferred_read_replica
            tags_at = after + max(records_len - 1, 0)
            out += plain[:head] + aborted + rest[:tags_at]
            out += _tag_section(_split_tags(rest[tags_at:]), draw_tags())
        out += _tag_section([], draw_tags())
    out += _tag_section([], draw_tags())
    return bytes(out)


def _unknown_tags(draw):
    def tags() -> list[tuple[int, bytes]]:
        numbers = draw(st.lists(st.integers(3, 100_000), max_size=3, unique=True))
        return [(n, draw(st.binary(max_size=6))) for n in numbers]
    return tags


# --- properties ---------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@PROPERTY
@given(data=st.data())
def test_view_reads_what_kio_reads_for_every_version(version: int, data) -> None:
    """For random responses of every version 4-12 encoded by kio's writer, the view returns
    exactly kio's reading (records bytes, aborted lists, null vs empty, several topics)."""
    response = data.draw(responses(version))
    body = _kio_body(response)
    view = parse_fetch_response(version, body)
    assert _got(view) == _expected(version, _kio_read(version, body))


@PROPERTY
@given(data=st.data())
def test_v12_unknown_tagged_fields_are_skipped(data) -> None:
    """KIP-482: tagged fields a reader does not know are skipped at every level; the view of a
    body carrying them equals kio's reading of the same body without them."""
    response = data.draw(responses(FLEXIBLE))
    body = _kio_body(response)
    assert _v12_with_unknown_tags(response, lambda: []) == body  # the splicing itself is kio's encoding
    spliced = _v12_with_unknown_tags(response, _unknown_tags(data.draw))
    assert _got(parse_fetch_response(FLEXIBLE, spliced)) == _expected(FLEXIBLE, _kio_read(FLEXIBLE, body))


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=10, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_truncation_and_trailing_byte_is_refused(version: int, data) -> None:
    """A body cut at any byte, or followed by an extra byte, raises the typed error."""
    body = _kio_body(data.draw(responses(version)))
    for cut in range(len(body)):
        with pytest.raises(MalformedFetchResponseError):
            parse_fetch_response(version, body[:cut])
    with pytest.raises(MalformedFetchResponseError):
        parse_fetch_response(version, body + b"\x00")


@pytest.mark.parametrize("version", VERSIONS)
@PROPERTY
@given(data=st.data())
def test_any_corrupted_byte_parses_or_raises_the_typed_error(version: int, data) -> None:
    """Overwriting bytes of a valid body never leaks IndexError, struct.error or the like."""
    body = bytearray(_kio_body(data.draw(responses(version))))
    for _ in range(data.draw(st.integers(1, 4))):
        body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
    try:
        view = parse_fetch_response(version, bytes(body))
    except MalformedFetchResponseError:
        return  # refused: the one acceptable failure
    assert isinstance(view, FetchResponseView)  # or read as some other well-formed body


# --- zero copy ----------------------------------------------------------------------------------


def _one_partition_body(version: int, records: bytes) -> bytes:
    m = response_module(FETCH, version)
    part = build(m.PartitionData, partition_index=3, error_code=ErrorCode.none, high_watermark=10,
                 last_stable_offset=9, log_start_offset=1, aborted_transactions=(
                     build(m.AbortedTransaction, producer_id=7, first_offset=2),),
                 preferred_read_replica=-1, records=records)
    return _kio_body(build(m.FetchResponse, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                           session_id=0, responses=(build(m.FetchableTopicResponse, topic="t", partitions=(part,)),)))


@pytest.mark.parametrize("version", [4, 11, 12])
def test_records_are_a_view_of_the_received_buffer_not_a_copy(version: int) -> None:
    """``records`` is a slice of the caller's buffer: a change to the buffer shows through it."""
    frame = bytearray(b"HEAD" + _one_partition_body(version, b"original-records"))
    (part,) = parse_fetch_response(version, memoryview(frame).toreadonly(), 4).topics[0].partitions
    assert part.records is not None
    assert part.records.obj is frame
    at = frame.index(b"original")
    frame[at:at + 8] = b"CHANGED!"
    assert bytes(part.records) == b"CHANGED!-records"
    assert part.aborted_transactions == ((7, 2),)


def test_a_pyarrow_buffer_is_read_as_unsigned_bytes() -> None:
    """A pyarrow buffer exports signed bytes (format "b"); lengths above 127 must still read right."""
    records = bytes(range(256)) * 2
    body = _one_partition_body(12, records)
    (part,) = parse_fetch_response(12, pa.py_buffer(body)).topics[0].partitions
    assert part.records is not None
    assert bytes(part.records) == records


# --- length fields that claim more than the body holds --------------------------------------------


def _peak_bytes_while(call) -> int:
    tracemalloc.start()
    try:
        call()
    except MalformedFetchResponseError:
        pass
    else:
        raise AssertionError("the impossible length was accepted")
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


_V4_PARTITION_HEAD = struct.pack(">ihqq", 0, 0, 5, 5)
_V12_PARTITION_HEAD = struct.pack(">ihqqq", 0, 0, 5, 5, 0)
_HUGE = 2**31 - 1
_PAD = b"\x00" * 64  # enough bytes that the enclosing arrays' own counts fit
CLAIMS = {  # name: (version, body, the field the error must name)
    "v4 topics": (4, struct.pack(">ii", 0, _HUGE), "topics: 2147483647 elements"),
    "v4 topic name": (4, struct.pack(">iih", 0, 1, 32767) + b"t" + _PAD, "topic name needs 32767 bytes"),
    "v4 partitions": (4, struct.pack(">iih", 0, 1, 1) + b"t" + struct.pack(">i", _HUGE), "partitions: 2147483647"),
    "v4 aborted": (4, struct.pack(">iih", 0, 1, 1) + b"t" + struct.pack(">i", 1) + _V4_PARTITION_HEAD
                   + struct.pack(">i", _HUGE) + _PAD, "aborted_transactions: 2147483647 elements"),
    "v4 records": (4, struct.pack(">iih", 0, 1, 1) + b"t" + struct.pack(">i", 1) + _V4_PARTITION_HEAD
                   + struct.pack(">ii", -1, _HUGE) + _PAD, "records needs 2147483647 bytes"),
    "v12 topics": (12, struct.pack(">ihi", 0, 0, 0) + encode_uvarint(2**31), "topics: 2147483647 elements"),
    "v12 partitions": (12, struct.pack(">ihi", 0, 0, 0) + b"\x02" + _compact_string("t") + encode_uvarint(2**32 - 1),
                       "partitions: 4294967294 elements"),
    "v12 aborted": (12, struct.pack(">ihi", 0, 0, 0) + b"\x02" + _compact_string("t") + b"\x02" + _V12_PARTITION_HEAD
                    + encode_uvarint(2**31) + _PAD, "aborted_transactions: 2147483647 elements"),
    "v12 records": (12, struct.pack(">ihi", 0, 0, 0) + b"\x02" + _compact_string("t") + b"\x02" + _V12_PARTITION_HEAD
                    + b"\x00" + struct.pack(">i", -1) + encode_uvarint(2**31) + _PAD, "records needs 2147483647 bytes"),
    "v12 tagged fields": (12, struct.pack(">ihi", 0, 0, 0) + b"\x01" + encode_uvarint(2**31),
                          "2147483648 tagged fields"),
    "v12 tagged field size": (12, struct.pack(">ihi", 0, 0, 0) + b"\x01\x01\x05" + encode_uvarint(2**31),
                              "needs 2147483648 bytes"),
    "v12 six-byte varint": (12, struct.pack(">ihi", 0, 0, 0) + b"\xff\xff\xff\xff\xff\x01", "longer than 5 bytes"),
}


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_a_length_claiming_two_billion_is_refused_without_allocating(name: str) -> None:
    """Counts and sizes of 2**31 (or a 32767-byte topic name) in a short body are refused, naming
    the field, before anything is built: the parse allocates under 64 KiB."""
    version, body, message = CLAIMS[name]
    with pytest.raises(MalformedFetchResponseError, match=message):
        parse_fetch_response(version, body)
    assert _peak_bytes_while(lambda: parse_fetch_response(version, body)) < 64 * 1024


def test_null_topic_name_and_negative_lengths_are_refused() -> None:
    """Topic names are not nullable; an array or bytes length below -1 is malformed."""
    cases = [
        struct.pack(">iih", 0, 1, -1),
        struct.pack(">ii", 0, -2),
        struct.pack(">iih", 0, 1, 1) + b"t" + struct.pack(">i", 1) + _V4_PARTITION_HEAD + struct.pack(">ii", -5, 0),
    ]
    for body in cases:
        with pytest.raises(MalformedFetchResponseError):
            parse_fetch_response(4, body)


def test_topic_name_must_be_utf8() -> None:
    with pytest.raises(MalformedFetchResponseError, match="UTF-8"):
        parse_fetch_response(4, struct.pack(">iih", 0, 1, 1) + b"\xff" + struct.pack(">i", 0))


def test_versions_outside_4_to_12_are_not_read_here() -> None:
    """v13+ names topics by id (the Spark log client caps Fetch at v12); below v4 there is no LSO."""
    for version in (3, 13):
        with pytest.raises(ValueError, match="not read here"):
            parse_fetch_response(version, b"")
