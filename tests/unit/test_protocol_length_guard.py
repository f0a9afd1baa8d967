"""The array-length guard in front of kio's native decoder (protocol/length_guard.py).

kio 0.6.5 reserves memory for a whole array from its length field before reading the elements;
an impossible length makes the allocation fail and Rust aborts the process. These tests run the
decoder in this process on purpose: if the guard ever let such a body through, the test run
itself would die with SIGABRT, which fails the suite as surely as an assertion.

Kafka protocol rule checked: a request that cannot be parsed is answered by closing the
connection (MalformedRequestError here), never by a dead broker.
"""

from __future__ import annotations

import datetime
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.static.primitive import Records

from oncestream.protocol.api_keys import API_VERSIONS
from oncestream.protocol.codec import MalformedRequestError, RequestHeader, decode_request
from oncestream.protocol.kio_loading import register_kio_strategies
from oncestream.protocol.length_guard import ArrayLengthError, check_array_lengths
from oncestream.protocol.schemas import request_class

# kio's integer/string/time types get their strategies here even when oncestream.protocol loaded
# kio before hypothesis was imported (protocol/kio_loading.py keeps hypothesis out of start-up).
register_kio_strategies()
# Record bytes are opaque to the codec: any bytes will do.
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

SUPPORTED = sorted((key, version) for key, (low, high) in API_VERSIONS.items() for version in range(low, high + 1))
PRODUCE, METADATA, FETCH, JOIN_GROUP = 0, 3, 1, 11


def _header(api_key: int, version: int) -> RequestHeader:
    return RequestHeader(api_key, version, correlation_id=1, client_id=None, body_offset=0)


def _encode(entity) -> bytes:
    import io

    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


@pytest.mark.parametrize(("api_key", "version"), SUPPORTED)
@settings(max_examples=8, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_guard_walks_every_well_formed_request_to_its_exact_end(api_key: int, version: int, data) -> None:
    """For every API and version we serve, bodies kio's own writer encodes (arrays, nested
    structs, nullable fields and tagged fields filled at random) pass the guard, which walks
    exactly to their end: the guard never refuses a body a client may send."""
    cls = request_class(api_key, version)
    try:
        entity = data.draw(st.from_type(cls))
        body = _encode(entity)
    except (ValueError, OverflowError, struct.error, TypeError):
        return  # a drawn value the writer cannot encode (out of the field's range): no body
    assert check_array_lengths(cls, body, 0) == len(body)
    try:
        decoded = decode_request(_header(api_key, version), body)
    except MalformedRequestError as exc:
        refused: MalformedRequestError | None = exc
    else:
        refused = None
    if refused is not None:
        # kio writes some values its reader refuses (e.g. a timedelta beyond Python's range);
        # what matters here is that the guard was not the one refusing.
        assert not isinstance(refused.__cause__, ArrayLengthError), refused
        return
    assert decoded == entity


def test_legacy_array_claiming_two_billion_elements_is_refused_not_allocated() -> None:
    """Metadata v1 (non-flexible): an int32 topic count of 2**31-1 in a 4-byte body."""
    body = struct.pack(">i", 2**31 - 1)
    with pytest.raises(ArrayLengthError):
        check_array_lengths(request_class(METADATA, 1), body, 0)
    with pytest.raises(MalformedRequestError, match="elements"):
        decode_request(_header(METADATA, 1), body)


def test_compact_array_nested_inside_an_element_is_refused() -> None:
    """Produce v9 (flexible): one topic whose partition array claims ~2**35 elements."""
    body = (
        b"\x00"  # transactional id: null compact string
        + struct.pack(">hi", -1, 1000)  # acks, timeout
        + b"\x02"  # topic_data: one element
        + b"\x02t"  # topic name "t"
        + b"\xff\xff\xff\xff\x7f"  # partition_data: a huge compact length
    )
    with pytest.raises(MalformedRequestError, match="elements"):
        decode_request(_header(PRODUCE, 9), body)


def test_compact_array_of_a_flexible_fetch_is_refused_in_place() -> None:
    """Fetch v12 (flexible, with tagged fields): the guard walks the fixed fields to the topics
    array of a real encoded request, and the same request with that array's length replaced by
    a huge one is refused."""
    cls = request_class(FETCH, 12)
    good = _encode(cls(
        replica_id=-1, max_wait=datetime.timedelta(milliseconds=100), min_bytes=1,
        max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1, topics=(),
        forgotten_topics_data=(), rack_id="",
    ))
    assert check_array_lengths(cls, good, 0) == len(good)
    # Replace the empty topics array (compact length 1) by a huge one: find it after the fixed
    # fields (replica 4, max_wait 4, min_bytes 4, max_bytes 4, isolation 1, session 4, epoch 4).
    topics_at = 25
    assert good[topics_at] == 1
    bad = good[:topics_at] + b"\xff\xff\xff\xff\x0f" + good[topics_at + 1:]
    with pytest.raises(MalformedRequestError, match="elements"):
        decode_request(_header(FETCH, 12), bad)


def test_element_count_is_bounded_by_the_smallest_element_not_by_one_byte() -> None:
    """JoinGroup v5 protocols: each element is at least a 2-byte name length plus a 4-byte
    metadata length, so 3 elements cannot fit in 12 bytes even though 3 < 12."""
    cls = request_class(JOIN_GROUP, 5)
    prefix = (
        struct.pack(">h", 1) + b"g"  # group id
        + struct.pack(">ii", 10_000, 10_000)  # session and rebalance timeouts
        + struct.pack(">h", 0)  # member id ""
        + struct.pack(">h", -1)  # group instance id null
        + struct.pack(">h", 8) + b"consumer"  # protocol type
    )
    body = prefix + struct.pack(">i", 3) + bytes(12)
    with pytest.raises(ArrayLengthError):
        check_array_lengths(cls, body, 0)


@settings(max_examples=1500, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SUPPORTED), st.binary(max_size=300))
def test_random_bodies_for_every_api_decode_or_raise_cleanly(api_version, body: bytes) -> None:
    """Garbage after a valid header, in process: the decoder returns an entity or raises
    MalformedRequestError; it never takes the process down."""
    api_key, version = api_version
    try:
        decode_request(_header(api_key, version), body)
    except MalformedRequestError:
        pass
