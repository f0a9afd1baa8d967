"""A minimal hand-written Kafka wire client for fuzzing a broker over raw sockets.

Deliberately independent of the broker's codec (and of kio): a fuzz oracle that shared the
broker's encoder would share its bugs. Only what the raw-wire suites need is here: request
framing, ApiVersions v0 parsing, a Produce v3-v8 request/response pair, a record batch v2 builder,
a Fetch v4-v11 request/response pair with a decoder for uncompressed batches (long poll and
KIP-227 session tests), and the compact (flexible-version) primitives other raw-wire tests build
their request bodies and response parsers from.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

import crc32c

API_PRODUCE = 0
API_FETCH = 1
API_METADATA = 3
API_VERSIONS = 18

ERROR_NONE = 0
ERROR_CORRUPT_MESSAGE = 2
ERROR_UNSUPPORTED_VERSION = 35
ERROR_UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
ERROR_INVALID_RECORD = 87

RECV_TIMEOUT_S = 10.0

# Byte ranges of a v2 record batch the CRC does not cover and the broker overwrites on append:
# baseOffset [0, 8) and partitionLeaderEpoch [12, 16). Mutating only these must not be an error.
BATCH_BASE_OFFSET = range(0, 8)
BATCH_LENGTH = range(8, 12)
BATCH_LEADER_EPOCH = range(12, 16)
BATCH_MAGIC = 16
BATCH_CRC = range(17, 21)
# attributes, lastOffsetDelta, timestamps, producer id/epoch, base sequence, record count
BATCH_HEADER_FIELDS = range(21, 61)


# -- primitive encoders ------------------------------------------------------------------------
def int16(value: int) -> bytes:
    """Big-endian int16."""
    return struct.pack(">h", value)


def int32(value: int) -> bytes:
    """Big-endian int32."""
    return struct.pack(">i", value)


def nullable_string(value: str | None) -> bytes:
    """Kafka STRING / NULLABLE_STRING: int16 length (-1 for null) + UTF-8 bytes."""
    if value is None:
        return int16(-1)
    data = value.encode()
    return int16(len(data)) + data


def unsigned_varint(value: int) -> bytes:
    """Protobuf-style unsigned varint (compact lengths in flexible versions)."""
    assert value >= 0
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def compact_string(value: str | None) -> bytes:
    """COMPACT_STRING / COMPACT_NULLABLE_STRING: unsigned varint length + 1 (0 for null) + UTF-8."""
    if value is None:
        return unsigned_varint(0)
    data = value.encode()
    return unsigned_varint(len(data) + 1) + data


def compact_array(items: list[bytes]) -> bytes:
    """COMPACT_ARRAY of already-encoded elements: unsigned varint count + 1, then the elements."""
    return unsigned_varint(len(items) + 1) + b"".join(items)


# An empty tagged-field section, which ends every flexible-version structure.
NO_TAGGED_FIELDS = b"\x00"


def varint(value: int) -> bytes:
    """Zig-zag signed varint, as used inside records."""
    return unsigned_varint((value << 1) ^ (value >> 63))


def request_header(
    api_key: int, api_version: int, correlation_id: int, *, flexible: bool, client_id: str = "fuzz"
) -> bytes:
    """Request header v1 (``flexible=False``) or v2 (adds an empty tagged-field section)."""
    header = int16(api_key) + int16(api_version) + int32(correlation_id) + nullable_string(client_id)
    return header + (b"\x00" if flexible else b"")


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its int32 size."""
    return int32(len(payload)) + payload


# -- record batch v2 ---------------------------------------------------------------------------
def record_batch(
    values: list[bytes], *, timestamp_ms: int, key: bytes | None = b"fuzz",
    producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
) -> bytes:
    """A valid uncompressed magic-2 batch holding ``values`` (base offset 0, CRC32C set)."""
    assert values
    records = b""
    for delta, value in enumerate(values):
        body = (
            b"\x00"  # record attributes
            + varint(0)  # timestamp delta
            + varint(delta)  # offset delta
            + (varint(-1) if key is None else varint(len(key)) + key)
            + varint(len(value)) + value
            + varint(0)  # header count
        )
        records += varint(len(body)) + body
    after_crc = struct.pack(
        ">hiqqqhii",
        0,  # attributes: no compression, CreateTime, not transactional
        len(values) - 1,  # lastOffsetDelta
        timestamp_ms,
        timestamp_ms,
        producer_id,
        producer_epoch,
        base_sequence,
        len(values),
    ) + records
    crc = crc32c.crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)  # leader epoch + magic + crc + rest
    return struct.pack(">qiibI", 0, batch_length, -1, 2, crc) + after_crc


# -- requests ----------------------------------------------------------------------------------
def produce_request_body(topic: str, partition: int, records: bytes, *, acks: int = -1,
                         timeout_ms: int = 30000) -> bytes:
    """Produce v3..v8 request body (these versions share one layout); one topic, one partition."""
    return (
        nullable_string(None)  # transactional_id (v3+)
        + int16(acks)
        + int32(timeout_ms)
        + int32(1) + nullable_string(topic)
        + int32(1) + int32(partition) + int32(len(records)) + records
    )


def api_versions_v3_body() -> bytes:
    """ApiVersions v3+ body: compact client software name and version, empty tagged fields."""
    name, version = b"oncestream-fuzz", b"0.1"
    return unsigned_varint(len(name) + 1) + name + unsigned_varint(len(version) + 1) + version + b"\x00"


# -- responses ---------------------------------------------------------------------------------
class ResponseReader:
    """Cursor over a response body; every read checks bounds."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: str) -> int:
        size = struct.calcsize(fmt)
        assert self.pos + size <= len(self.data), f"response truncated at byte {self.pos}"
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(value)

    def string(self) -> str | None:
        length = self.take(">h")
        if length < 0:
            return None
        assert self.pos + length <= len(self.data), "string runs past the response"
        value = self.data[self.pos : self.pos + length].decode()
        self.pos += length
        return value

    def nullable_bytes(self) -> bytes | None:
        """BYTES / NULLABLE_BYTES: int32 length (-1 for null) + data."""
        length = self.take(">i")
        if length < 0:
            return None
        assert self.pos + length <= len(self.data), "bytes run past the response"
        value = self.data[self.pos : self.pos + length]
        self.pos += length
        return value

    def remaining(self) -> int:
        return len(self.data) - self.pos

    # -- flexible versions (KIP-482): compact lengths are unsigned varints holding length + 1 --
    def uvarint(self) -> int:
        """An unsigned varint."""
        shift = value = 0
        while True:
            byte = self.take(">B")
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            assert shift < 35, "unsigned varint longer than 5 bytes"

    def compact_string(self) -> str | None:
        """COMPACT_STRING / COMPACT_NULLABLE_STRING (None for null)."""
        length = self.uvarint() - 1
        if length < 0:
            return None
        assert self.pos + length <= len(self.data), "string runs past the response"
        value = self.data[self.pos : self.pos + length].decode()
        self.pos += length
        return value

    def compact_array_length(self) -> int:
        """COMPACT_ARRAY length (-1 for null)."""
        return self.uvarint() - 1

    def skip_tagged_fields(self) -> None:
        """A tagged-field section: count, then (tag, size, data) per field; contents ignored."""
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            size = self.uvarint()
            assert self.pos + size <= len(self.data), "tagged field runs past the response"
            self.pos += size


@dataclass(frozen=True)
class ApiVersionsV0:
    """An ApiVersions response in v0 format: error code and {api_key: (min, max)}."""

    correlation_id: int
    error_code: int
    versions: dict[int, tuple[int, int]]


def parse_api_versions_v0(frame_body: bytes) -> ApiVersionsV0:
    """Parse response header v0 + ApiVersions v0 body; the whole frame must be consumed."""
    reader = ResponseReader(frame_body)
    correlation_id = reader.take(">i")
    error_code = reader.take(">h")
    count = reader.take(">i")
    assert 0 <= count <= 1000, f"absurd api count {count}"
    versions = {}
    for _ in range(count):
        api_key, min_version, max_version = reader.take(">h"), reader.take(">h"), reader.take(">h")
        versions[api_key] = (min_version, max_version)
    assert reader.remaining() == 0, f"{reader.remaining()} bytes after an ApiVersions v0 body"
    return ApiVersionsV0(correlation_id, error_code, versions)


@dataclass(frozen=True)
class ProducePartitionResult:
    """One partition's result in a Produce response."""

    partition: int
    error_code: int
    base_offset: int


def parse_produce_response(frame_body: bytes, version: int) -> tuple[int, list[ProducePartitionResult]]:
    """Parse response header v0 + Produce v3..v8 body; returns (correlation id, results)."""
    assert 3 <= version <= 8
    reader = ResponseReader(frame_body)
    correlation_id = reader.take(">i")
    results = []
    for _ in range(reader.take(">i")):
        reader.string()
        for _ in range(reader.take(">i")):
            partition = reader.take(">i")
            error_code = reader.take(">h")
            base_offset = reader.take(">q")
            reader.take(">q")  # log_append_time_ms
            if version >= 5:
                reader.take(">q")  # log_start_offset
            if version >= 8:
                for _ in range(reader.take(">i")):  # record_errors
                    reader.take(">i")
                    reader.string()
                reader.string()  # error_message
            results.append(ProducePartitionResult(partition, error_code, base_offset))
    reader.take(">i")  # throttle_time_ms
    assert reader.remaining() == 0, f"{reader.remaining()} unread bytes in a Produce v{version} response"
    return correlation_id, results


# -- connection --------------------------------------------------------------------------------
class PeerClosed(Exception):
    """The broker closed the connection (EOF or reset)."""


class WireConnection:
    """A blocking TCP connection to a broker, speaking raw size-prefixed frames."""

    def __init__(self, host: str, port: int, timeout_s: float = RECV_TIMEOUT_S) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, data: bytes) -> bool:
        """Send bytes; False if the broker already closed the connection."""
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def finish_sending(self) -> None:
        """Half-close: the broker sees EOF after what was sent."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _recv_exactly(self, size: int) -> bytes:
        chunks = []
        remaining = size
        while remaining:
            try:
                chunk = self.sock.recv(min(remaining, 1 << 20))
            except ConnectionResetError as error:
                raise PeerClosed("connection reset") from error
            if not chunk:
                raise PeerClosed(f"EOF with {remaining} of {size} bytes outstanding")
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)

    def recv_frame(self) -> bytes:
        """The next response frame's body; PeerClosed on EOF/reset; socket.timeout if silent."""
        size = struct.unpack(">i", self._recv_exactly(4))[0]
        assert 4 <= size <= 64 * 1024 * 1024, f"broker sent an implausible frame size {size}"
        return self._recv_exactly(size)

    def drain_until_closed(self, timeout_s: float = RECV_TIMEOUT_S) -> list[bytes]:
        """Read whole frames until the broker closes the connection; returns the frames.

        Fails if the broker keeps the connection open past ``timeout_s`` after our EOF, or sends
        a partial frame before closing.
        """
        frames: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while True:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                head = self.sock.recv(4)
            except ConnectionResetError:
                return frames
            except TimeoutError:
                raise AssertionError(f"broker did not close the connection within {timeout_s}s") from None
            if not head:
                return frames
            if len(head) < 4:
                head += self._recv_exactly(4 - len(head))
            size = struct.unpack(">i", head)[0]
            assert 4 <= size <= 64 * 1024 * 1024, f"broker sent an implausible frame size {size}"
            frames.append(self._recv_exactly(size))

    def request(self, api_key: int, version: int, correlation_id: int, body: bytes,
                *, flexible_header: bool = False) -> bytes:
        """Send one request and return its response frame body."""
        payload = request_header(api_key, version, correlation_id, flexible=flexible_header) + body
        if not self.send(frame(payload)):
            raise PeerClosed("closed before the request was sent")
        return self.recv_frame()

    def close(self) -> None:
        """Close the socket."""
        self.sock.close()

    def __enter__(self) -> WireConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def correlation_id_of(frame_body: bytes) -> int:
    """The correlation id that starts every response frame."""
    assert len(frame_body) >= 4, "response frame shorter than its header"
    return int(struct.unpack_from(">i", frame_body)[0])


# -- fetch (v4..v11, the non-flexible versions) ------------------------------------------------
# KIP-227 session fields of a Fetch request: session id 0 with epoch -1 is a sessionless full
# fetch; epoch 0 asks for a new session; any other epoch is an incremental fetch on a session.
SESSIONLESS_ID, FINAL_EPOCH, INITIAL_EPOCH = 0, -1, 0


def int64(value: int) -> bytes:
    """Big-endian int64."""
    return struct.pack(">q", value)


def fetch_request_body(
    version: int, topic: str, partition: int, fetch_offset: int, *, max_wait_ms: int, min_bytes: int,
    max_bytes: int = 64 * 1024 * 1024, partition_max_bytes: int = 16 * 1024 * 1024,
    isolation_level: int = 0, session_id: int = SESSIONLESS_ID, session_epoch: int = FINAL_EPOCH,
) -> bytes:
    """A consumer's Fetch v4..v11 request body for one partition (replica id -1).

    The session fields exist from v7 on; asking for a session on an older version is a test bug.
    """
    assert 4 <= version <= 11, "v12+ are flexible; not spoken here"
    if version < 7:
        assert (session_id, session_epoch) == (SESSIONLESS_ID, FINAL_EPOCH), "no sessions before v7"
    body = int32(-1) + int32(max_wait_ms) + int32(min_bytes) + int32(max_bytes) + struct.pack(">b", isolation_level)
    if version >= 7:
        body += int32(session_id) + int32(session_epoch)
    part = int32(partition)
    if version >= 9:
        part += int32(-1)  # current_leader_epoch: unknown, so the broker does not check it
    part += int64(fetch_offset)
    if version >= 5:
        part += int64(-1)  # log_start_offset: only followers send one
    part += int32(partition_max_bytes)
    body += int32(1) + nullable_string(topic) + int32(1) + part
    if version >= 7:
        body += int32(0)  # forgotten_topics_data: only meaningful in an incremental fetch
    if version >= 11:
        body += nullable_string("")  # rack_id
    return body


@dataclass(frozen=True)
class FetchedPartition:
    """One partition of a Fetch response; ``records`` is the raw record-batch bytes (b"" if null)."""

    topic: str
    partition: int
    error_code: int
    high_watermark: int
    records: bytes


@dataclass(frozen=True)
class FetchResponse:
    """A Fetch v4..v11 response (``error_code``/``session_id`` are 0 before v7, where they do not exist)."""

    correlation_id: int
    error_code: int
    session_id: int
    partitions: list[FetchedPartition]


def parse_fetch_response(frame_body: bytes, version: int) -> FetchResponse:
    """Parse response header v0 + Fetch v4..v11 body; the whole frame must be consumed."""
    assert 4 <= version <= 11
    reader = ResponseReader(frame_body)
    correlation_id = reader.take(">i")
    reader.take(">i")  # throttle_time_ms
    error_code = session_id = 0
    if version >= 7:
        error_code = reader.take(">h")
        session_id = reader.take(">i")
    partitions = []
    for _ in range(reader.take(">i")):
        topic = reader.string()
        assert topic is not None, "null topic name in a Fetch response"
        for _ in range(reader.take(">i")):
            partition = reader.take(">i")
            part_error = reader.take(">h")
            high_watermark = reader.take(">q")
            reader.take(">q")  # last_stable_offset
            if version >= 5:
                reader.take(">q")  # log_start_offset
            aborted = reader.take(">i")
            for _ in range(max(aborted, 0)):
                reader.take(">q")  # producer_id
                reader.take(">q")  # first_offset
            if version >= 11:
                reader.take(">i")  # preferred_read_replica
            size = reader.take(">i")
            records = b""
            if size > 0:
                assert reader.pos + size <= len(reader.data), "records run past the response"
                records = reader.data[reader.pos : reader.pos + size]
                reader.pos += size
            partitions.append(FetchedPartition(topic, partition, part_error, high_watermark, records))
    assert reader.remaining() == 0, f"{reader.remaining()} unread bytes in a Fetch v{version} response"
    return FetchResponse(correlation_id, error_code, session_id, partitions)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Zig-zag signed varint at ``pos``; returns (value, next position)."""
    shift = raw = 0
    while True:
        assert pos < len(data), "varint runs past the record"
        byte = data[pos]
        pos += 1
        raw |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def decode_batches(records: bytes) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record in uncompressed v2 batches, in log order.

    A broker may end a Fetch answer with a partial batch (it cuts at ``max_bytes``); that tail is
    ignored, as clients ignore it. Control batches (transaction markers) are skipped.
    """
    out: list[tuple[int, bytes | None, bytes | None]] = []
    pos = 0
    while pos + 12 <= len(records):
        base_offset, batch_length = struct.unpack_from(">qi", records, pos)
        end = pos + 12 + batch_length
        if end > len(records):
            break  # partial trailing batch
        magic = records[pos + BATCH_MAGIC]
        assert magic == 2, f"magic {magic} batch at offset {base_offset}"
        attributes, _, _, _, _, _, _, count = struct.unpack_from(">hiqqqhii", records, pos + 21)
        assert attributes & 0x07 == 0, "compressed batch: this decoder reads uncompressed ones only"
        at = pos + 61
        for _ in range(count):
            length, at = _read_varint(records, at)
            record_end = at + length
            at += 1  # record attributes
            _, at = _read_varint(records, at)  # timestamp delta
            offset_delta, at = _read_varint(records, at)
            fields: list[bytes | None] = []
            for _ in range(2):  # key, value
                size, at = _read_varint(records, at)
                fields.append(None if size < 0 else records[at : at + size])
                at += max(size, 0)
            if not attributes & 0x20:  # control batches carry markers, not data
                out.append((base_offset + offset_delta, fields[0], fields[1]))
            at = record_end
        pos = end
    return out
