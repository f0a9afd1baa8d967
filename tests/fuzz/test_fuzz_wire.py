"""Hypothesis fuzzing of a live broker over raw sockets.

Each property sends hostile bytes on fresh connections. Per example the broker must stay alive
and either answer with a well-framed response carrying the request's correlation id or close the
connection. After each property run the broker must still serve a normal produce and fetch
through confluent-kafka, and the logs hold exactly what was acknowledged: nothing the fuzzer sent
may have slipped into a log unacknowledged.
"""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.clients import confluent_consume, confluent_produce, create_topic, unique_topic
from tests.support.records import SentRecord
from tests.support.wire import (
    API_METADATA,
    API_PRODUCE,
    API_VERSIONS,
    BATCH_BASE_OFFSET,
    BATCH_HEADER_FIELDS,
    BATCH_LEADER_EPOCH,
    BATCH_MAGIC,
    ERROR_CORRUPT_MESSAGE,
    ERROR_INVALID_RECORD,
    ERROR_NONE,
    ERROR_UNSUPPORTED_FOR_MESSAGE_FORMAT,
    ERROR_UNSUPPORTED_VERSION,
    PeerClosed,
    WireConnection,
    api_versions_v3_body,
    correlation_id_of,
    frame,
    int32,
    nullable_string,
    parse_api_versions_v0,
    parse_produce_response,
    produce_request_body,
    record_batch,
    request_header,
)

pytestmark = pytest.mark.fuzz

FUZZ_SETTINGS = settings(
    max_examples=200,
    deadline=None,
    database=None,  # no .hypothesis directory in the repository
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Rejections of a batch damaged where only the CRC (or a length check) can notice.
CRC_ONLY_REJECTION_CODES = {ERROR_CORRUPT_MESSAGE, ERROR_INVALID_RECORD}
MAX_RSS_GROWTH_BYTES = 64 * 1024 * 1024


class BrokerHealth:
    """Checks that the broker serves real clients and its logs hold exactly what was acked."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.topic = unique_topic("fuzz-health")
        create_topic(bootstrap, self.topic, partitions=1)
        self.acknowledged: list[bytes] = []

    def check(self, broker) -> None:
        """Alive; one more record produced and every acknowledged record read back, in order."""
        assert broker.is_alive(), f"broker died; stderr:\n{broker.stderr_tail()}"
        value = f"health-{len(self.acknowledged)}-{uuid.uuid4().hex[:6]}".encode()
        [(partition, offset)] = confluent_produce(self.bootstrap, self.topic, [SentRecord(b"h", value)])
        assert (partition, offset) == (0, len(self.acknowledged))
        self.acknowledged.append(value)
        consumed = confluent_consume(self.bootstrap, self.topic, 1)
        assert [(r.offset, r.value) for r in consumed] == list(enumerate(self.acknowledged))


@pytest.fixture(scope="module")
def health(broker) -> BrokerHealth:
    """Per-module health checker (its topic accumulates one record per check)."""
    return BrokerHealth(broker.bootstrap)


@pytest.fixture(scope="module")
def api_table(broker) -> dict[int, tuple[int, int]]:
    """The broker's ApiVersions v0 table."""
    with _connect(broker) as conn:
        response = parse_api_versions_v0(conn.request(API_VERSIONS, 0, 7, b""))
    assert response.correlation_id == 7
    assert response.error_code == ERROR_NONE
    assert API_PRODUCE in response.versions
    assert API_VERSIONS in response.versions
    return response.versions


def _connect(broker) -> WireConnection:
    """A fresh connection, after checking the broker is alive: once a hostile input has killed it,
    every later example fails with the broker's own last words (its stderr), not with a bare
    'connection refused' that hides what happened."""
    assert broker.is_alive(), f"broker died; stderr:\n{broker.stderr_tail()}"
    return WireConnection(broker.host, broker.port)


def _produce_version(api_table: dict[int, tuple[int, int]]) -> int:
    low, high = api_table[API_PRODUCE]
    version = max(low, 3)
    assert version <= min(high, 8), f"broker's Produce versions {low}..{high} miss v3..v8"
    return version


def _assert_answers_or_closes(conn: WireConnection, correlation_id: int | None) -> None:
    """After our EOF the broker closes; any frames it sent first are well-formed responses."""
    conn.finish_sending()
    frames = conn.drain_until_closed()
    if correlation_id is not None:
        for body in frames:
            assert correlation_id_of(body) == correlation_id, "response to a request never sent"


def _valid_requests(produce_version: int, topic: str) -> list[bytes]:
    """A few well-formed request frames to truncate."""
    batch = record_batch([b"never-acked"], timestamp_ms=1_700_000_000_000)
    return [
        frame(request_header(API_VERSIONS, 3, 1, flexible=True) + api_versions_v3_body()),
        frame(request_header(API_VERSIONS, 0, 2, flexible=False)),
        frame(request_header(API_METADATA, 1, 3, flexible=False) + int32(1) + nullable_string(topic)),
        frame(
            request_header(API_PRODUCE, produce_version, 4, flexible=False)
            + produce_request_body(topic, 0, batch)
        ),
    ]


# -- properties ---------------------------------------------------------------------------------
def test_random_byte_streams(broker, health):
    """Arbitrary bytes, size prefix included (huge, negative, short or long sizes)."""

    @FUZZ_SETTINGS
    @given(st.binary(min_size=0, max_size=600))
    def run(data: bytes) -> None:
        with _connect(broker) as conn:
            conn.send(data)
            _assert_answers_or_closes(conn, None)
        assert broker.is_alive(), broker.stderr_tail()

    run()
    health.check(broker)


def test_frames_with_valid_size_and_random_body(broker, health):
    """A correct size prefix around random bytes (a random header and body)."""

    @FUZZ_SETTINGS
    @given(st.binary(min_size=0, max_size=600))
    def run(body: bytes) -> None:
        with _connect(broker) as conn:
            conn.send(frame(body))
            correlation_id = struct.unpack_from(">i", body, 4)[0] if len(body) >= 8 else None
            _assert_answers_or_closes(conn, correlation_id)
        assert broker.is_alive(), broker.stderr_tail()

    run()
    health.check(broker)


def test_valid_header_with_random_body(broker, health, api_table):
    """A well-formed header for a supported API and version, followed by random body bytes:
    the decoder of every API meets garbage."""
    supported = sorted(api_table.items())

    @FUZZ_SETTINGS
    @given(st.sampled_from(supported), st.data(), st.booleans(), st.binary(max_size=400))
    def run(api, data, flexible, body) -> None:
        api_key, (low, high) = api
        version = data.draw(st.integers(low, high), label="version")
        correlation_id = data.draw(st.integers(0, 2**31 - 1), label="correlation_id")
        with _connect(broker) as conn:
            conn.send(frame(request_header(api_key, version, correlation_id, flexible=flexible) + body))
            _assert_answers_or_closes(conn, correlation_id)
        assert broker.is_alive(), broker.stderr_tail()

    run()
    health.check(broker)


def test_truncated_frames(broker, health, api_table):
    """Valid requests cut short, either mid-frame (size prefix promises more) or with the size
    prefix rewritten to the truncated length (a complete frame holding half a request)."""
    topic = unique_topic("fuzz-truncated")
    create_topic(broker.bootstrap, topic, partitions=1)
    requests = _valid_requests(_produce_version(api_table), topic)

    @FUZZ_SETTINGS
    @given(st.sampled_from(requests), st.data(), st.booleans())
    def run(request, data, reframe) -> None:
        cut = data.draw(st.integers(0, len(request) - 1), label="cut")
        payload = frame(request[4:cut]) if reframe and cut >= 4 else request[:cut]
        with _connect(broker) as conn:
            conn.send(payload)
            _assert_answers_or_closes(conn, struct.unpack_from(">i", request, 8)[0])
        assert broker.is_alive(), broker.stderr_tail()

    run()
    health.check(broker)
    # A truncated produce must never append: nothing was acknowledged on this topic.
    assert confluent_consume(broker.bootstrap, topic, 1) == []


def test_unknown_api_keys(broker, health, api_table):
    """A valid header whose API key the broker does not know: close or answer, never crash."""
    unknown = st.integers(-(2**15), 2**15 - 1).filter(lambda key: key not in api_table)

    @FUZZ_SETTINGS
    @given(unknown, st.integers(-(2**15), 2**15 - 1), st.booleans(), st.binary(max_size=64))
    def run(api_key, version, flexible, body) -> None:
        with _connect(broker) as conn:
            conn.send(frame(request_header(api_key, version, 99, flexible=flexible) + body))
            _assert_answers_or_closes(conn, 99)
        assert broker.is_alive(), broker.stderr_tail()

    run()
    health.check(broker)


def test_unsupported_versions_of_known_apis(broker, health, api_table):
    """Known APIs (other than ApiVersions) at versions outside the advertised range."""
    known = sorted(key for key in api_table if key != API_VERSIONS)

    @FUZZ_SETTINGS
    @given(st.sampled_from(known), st.data(), st.booleans(), st.binary(max_size=64))
    def run(api_key, data, flexible, body) -> None:
        low, high = api_table[api_key]
        outside = st.integers(-(2**15), low - 1) | st.integers(high + 1, 2**15 - 1)
        version = data.draw(outside, label="version")
        with _connect(broker) as conn:
            conn.send(frame(request_header(api_key, version, 123, flexible=flexible) + body))
            _assert_answers_or_closes(conn, 123)
        assert broker.is_alive(), broker.stderr_tail()

    run()
    health.check(broker)


def test_api_versions_unknown_version_answers_v0_unsupported_version(broker, health, api_table):
    """KIP-511: ApiVersions at a version the broker does not know is answered in v0 format with
    UNSUPPORTED_VERSION (35) and the broker's version table, and the connection stays usable so
    the client can retry at a version both sides know."""
    _, max_api_versions = api_table[API_VERSIONS]

    @FUZZ_SETTINGS
    @given(st.integers(max_api_versions + 1, 2**15 - 1), st.integers(0, 2**31 - 1))
    def run(version, correlation_id) -> None:
        with _connect(broker) as conn:
            body = conn.request(API_VERSIONS, version, correlation_id, api_versions_v3_body(),
                                flexible_header=True)
            response = parse_api_versions_v0(body)
            assert response.correlation_id == correlation_id
            assert response.error_code == ERROR_UNSUPPORTED_VERSION
            assert response.versions == api_table
            # the same connection still serves a version the broker knows
            retry = parse_api_versions_v0(conn.request(API_VERSIONS, 0, correlation_id ^ 1, b""))
            assert (retry.correlation_id, retry.error_code) == (correlation_id ^ 1, ERROR_NONE)

    run()
    health.check(broker)


@pytest.mark.parametrize(
    "size_prefix",
    [2**31 - 1, 2**30, 100 * 1024 * 1024 + 1, -1, -(2**31)],
    ids=["int32-max", "1GiB", "kafka-default-limit+1", "minus-1", "int32-min"],
)
def test_oversize_or_negative_size_prefix_closes_without_allocating(broker, health, size_prefix):
    """A size prefix beyond socket.request.max.bytes (Kafka default 100 MiB) or negative: the
    broker closes the connection at once, without reading or allocating the announced size."""
    high_water_before = _peak_rss_bytes(broker)
    with _connect(broker) as conn:
        # keep the write side open: the broker must close on the prefix alone, not on our EOF
        conn.send(struct.pack(">i", size_prefix) + request_header(API_VERSIONS, 0, 5, flexible=False))
        try:
            frames = conn.drain_until_closed()
        except AssertionError as error:
            raise AssertionError(f"size prefix {size_prefix}: {error}") from None
        assert frames == [], "the broker answered a frame it should have refused"
    assert broker.is_alive(), broker.stderr_tail()
    growth = _peak_rss_bytes(broker) - high_water_before
    assert growth < MAX_RSS_GROWTH_BYTES, f"peak RSS grew by {growth} bytes"
    health.check(broker)


@pytest.mark.parametrize(
    ("api_key", "version", "body"),
    [
        (API_METADATA, 1, struct.pack(">i", 2**31 - 1)),  # legacy array: int32 count
        # Produce v9: one topic whose compact partition array claims ~2**35 elements.
        (API_PRODUCE, 9, b"\x00" + struct.pack(">hi", -1, 1000) + b"\x02\x02t" + b"\xff\xff\xff\xff\x7f"),
    ],
    ids=["metadata-v1-int32-count", "produce-v9-compact-count"],
)
def test_array_length_beyond_the_frame_closes_and_the_broker_lives(broker, health, api_key, version, body):
    """An array whose length claims billions of elements in a tiny frame. kio's native reader
    reserves the whole array up front and a failed allocation aborts the process (this killed
    the broker once: SIGABRT mid-fuzz); the broker must refuse it before kio sees it, by
    closing the connection, and keep serving."""
    high_water_before = _peak_rss_bytes(broker)
    with _connect(broker) as conn:
        conn.send(frame(request_header(api_key, version, 9, flexible=version >= 9) + body))
        conn.finish_sending()
        assert conn.drain_until_closed() == [], "a body that cannot be decoded was answered"
    assert broker.is_alive(), broker.stderr_tail()
    assert _peak_rss_bytes(broker) - high_water_before < MAX_RSS_GROWTH_BYTES
    health.check(broker)


def _peak_rss_bytes(broker) -> int:
    with open(f"/proc/{broker.pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("VmHWM missing from /proc status")


def _allowed_rejections(changed: set[int]) -> set[int]:
    """Error codes a broker may answer for a batch whose bytes ``changed`` were altered.

    Damage only the CRC can see (records, the CRC itself, the batch length) must be reported as
    CORRUPT_MESSAGE or INVALID_RECORD. A changed magic byte may also be refused as
    UNSUPPORTED_FOR_MESSAGE_FORMAT. A changed header field (attributes .. record count) may be
    judged before the CRC is checked (Kafka itself checks the transactional bit against the
    request's transactional id first), so then any specific error is clean; UNKNOWN_SERVER_ERROR
    (-1) never is: it means the broker did not understand what went wrong.
    """
    allowed = set(CRC_ONLY_REJECTION_CODES)
    if BATCH_MAGIC in changed:
        allowed.add(ERROR_UNSUPPORTED_FOR_MESSAGE_FORMAT)
    if changed & set(BATCH_HEADER_FIELDS):
        allowed |= set(range(1, 200))
    return allowed


def test_mutated_produce_batches(broker, health, api_table):
    """Flip bytes of the record batch in a well-formed Produce (acks=-1). Damage the CRC covers
    (or in magic, CRC or batch length) is answered with a clean error (see
    ``_allowed_rejections``: CORRUPT_MESSAGE for damaged records) and appends nothing; flips only
    in the base offset or partition leader epoch (not CRC-covered, overwritten by the broker) are
    accepted. A shortened batch is rejected the same way. The partition then holds exactly the
    accepted batches, at the offsets acknowledged."""
    version = _produce_version(api_table)
    topic = unique_topic("fuzz-produce")
    create_topic(broker.bootstrap, topic, partitions=1)
    acknowledged: list[bytes] = []
    counter = iter(range(10**9))

    @FUZZ_SETTINGS
    @given(
        st.integers(1, 5),
        st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), min_size=1, max_size=4),
        st.one_of(st.none(), st.integers(0, 10**6)),
    )
    def run(record_count, flips, truncate_at) -> None:
        example = next(counter)
        values = [f"fz{example}-{i}".encode() for i in range(record_count)]
        batch = bytearray(record_batch(values, timestamp_ms=1_700_000_000_000 + example))
        for position, mask in flips:
            batch[position % len(batch)] ^= mask
        # XOR pairs on one byte can cancel out; what matters is whether any byte really changed
        # in a covered range, so compare with the original instead of trusting the flip list.
        original = record_batch(values, timestamp_ms=1_700_000_000_000 + example)
        changed = {i for i in range(len(batch)) if batch[i] != original[i]}
        harmless = all(p in BATCH_BASE_OFFSET or p in BATCH_LEADER_EPOCH for p in changed)
        allowed_errors = _allowed_rejections(changed)
        if truncate_at is not None:
            batch = batch[: truncate_at % len(batch)]
            harmless = False
        body = produce_request_body(topic, 0, bytes(batch), acks=-1)
        with _connect(broker) as conn:
            try:
                response = conn.request(API_PRODUCE, version, example, body)
            except PeerClosed:
                raise AssertionError(
                    f"broker closed the connection on a well-framed Produce (changed bytes "
                    f"{sorted(changed)}, truncated={truncate_at is not None}) instead of answering"
                ) from None
        correlation_id, [result] = parse_produce_response(response, version)
        assert correlation_id == example
        if harmless:
            assert result.error_code == ERROR_NONE, (
                f"bytes {sorted(changed)} are outside the CRC and overwritten by the broker, "
                f"yet the batch was rejected with {result.error_code}"
            )
            assert result.base_offset == len(acknowledged)
            acknowledged.extend(values)
        else:
            assert result.error_code in allowed_errors, (
                f"changed bytes {sorted(changed)} (truncated={truncate_at is not None}) "
                f"got error {result.error_code}, expected one of {sorted(allowed_errors)}"
            )
        assert broker.is_alive(), broker.stderr_tail()

    run()
    health.check(broker)
    consumed = confluent_consume(broker.bootstrap, topic, 1)
    assert [(r.offset, r.value) for r in consumed] == list(enumerate(acknowledged))
