"""Zero-copy reader of Fetch response bodies (v4-v12): each partition's records stay a view.

Why it exists beside kio: kio's reader copies every partition's ``records`` field into a new
``bytes`` object. For the Spark source's reads that is a 4 MB copy into fresh memory per Fetch
(page faults and memcpy in the Python worker, whose CPU decides the read speed: issue 11). This is
the one place that reads Fetch responses without copying: ``records`` is a ``memoryview`` slice of
the buffer the response was received into, which it keeps alive. Every other response (and every
request) still goes through kio.

The field order follows the protocol guide's FetchResponse schema for v4-v12 (the versions the
Spark log client negotiates; v13+ names topics by id). v12 is flexible: compact lengths, and
tagged fields after each aborted transaction, partition and topic and at the end of the body,
which are skipped (this reader needs none of them; their presence changes nothing it returns).
The response header (correlation id and, in v12, its own tagged fields) is the connection's:
the body starts after it (``BrokerConnection.call_raw`` returns where).

Every malformed or truncated body raises ``MalformedFetchResponseError`` and nothing else: lengths
are checked against the bytes left before anything is sliced or any array is built, so a length
field claiming 2**31 elements or bytes fails at once without allocating.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MIN_VERSION, MAX_VERSION = 4, 12
FLEXIBLE_FROM_VERSION = 12

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART_HEAD = struct.Struct(">ihqq")  # partition_index, error_code, high_watermark, last_stable_offset
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")  # producer_id, first_offset
_MAX_UVARINT_BYTES = 5  # a 32-bit unsigned varint, as Kafka's ByteUtils.readUnsignedVarint


class MalformedFetchResponseError(ValueError):
    """A Fetch response body is truncated or malformed (a broker bug or a damaged frame)."""


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One partition of a Fetch response; ``records`` is a view into the received frame (no copy),
    None when the broker sent null."""

    partition_index: int
    error_code: int  # raw code: the caller maps it (an unknown code is not malformed)
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int  # -1 below v5
    aborted_transactions: tuple[tuple[int, int], ...] | None  # (producer id, first offset); None: null
    preferred_read_replica: int  # -1 below v11
    records: memoryview | None


@dataclass(frozen=True, slots=True)
class TopicView:
    """One topic of a Fetch response."""

    topic: str
    partitions: tuple[PartitionView, ...]


@dataclass(frozen=True, slots=True)
class FetchResponseView:
    """A Fetch response body; ``error_code`` and ``session_id`` are 0 below v7."""

    throttle_time_ms: int
    error_code: int
    session_id: int
    topics: tuple[TopicView, ...]


def _minimum_partition_bytes(version: int) -> int:
    """Fewest bytes one partition can take on the wire (bounds a partition count)."""
    flexible = version >= FLEXIBLE_FROM_VERSION
    size = _PART_HEAD.size
    size += 8 if version >= 5 else 0  # log_start_offset
    size += 1 if flexible else 4  # aborted_transactions length
    size += 4 if version >= 11 else 0  # preferred_read_replica
    size += 1 if flexible else 4  # records length
    size += 1 if flexible else 0  # tagged fields
    return size


class _Reader:
    """A cursor over one body; every read checks the bytes left first."""

    __slots__ = ("buf", "end", "flexible", "pos")

    def __init__(self, buf: memoryview, pos: int, flexible: bool) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)
        self.flexible = flexible

    def need(self, size: int, what: str) -> None:
        if size > self.end - self.pos:
            raise MalformedFetchResponseError(
                f"{what} needs {size} bytes at byte {self.pos}, {self.end - self.pos} left")

    def unpack(self, fmt: struct.Struct, what: str) -> tuple[int, ...]:
        self.need(fmt.size, what)
        values = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return values

    def uvarint(self, what: str) -> int:
        buf, pos, end = self.buf, self.pos, self.end
        result = 0
        for shift in range(0, 7 * _MAX_UVARINT_BYTES, 7):
            if pos >= end:
                raise MalformedFetchResponseError(f"{what}: varint runs past the end at byte {pos}")
            byte = buf[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                self.pos = pos
                return result
        raise MalformedFetchResponseError(f"{what}: varint longer than {_MAX_UVARINT_BYTES} bytes at byte {self.pos}")

    def length(self, what: str, *, nullable: bool, int16: bool = False) -> int:
        """A string/bytes/array length: -1 for null (refused unless ``nullable``); ``int16``: a
        non-flexible string's length."""
        if self.flexible:
            n = self.uvarint(what) - 1
        elif int16:
            (n,) = self.unpack(_I16, what)
        else:
            (n,) = self.unpack(_I32, what)
        if n < -1 or (n == -1 and not nullable):
            raise MalformedFetchResponseError(f"{what}: invalid length {n}")
        return n

    def count(self, what: str, minimum_element_bytes: int, *, nullable: bool) -> int:
        """An array length, checked against the bytes left before any element is read."""
        n = self.length(what, nullable=nullable)
        if n > 0 and n * minimum_element_bytes > self.end - self.pos:
            raise MalformedFetchResponseError(
                f"{what}: {n} elements cannot fit in the {self.end - self.pos} bytes left")
        return n

    def skip_tagged_fields(self, what: str) -> None:
        count = self.uvarint(what)
        if count > self.end - self.pos:  # each field takes at least a tag and a size byte
            raise MalformedFetchResponseError(f"{what}: {count} tagged fields in {self.end - self.pos} bytes")
        for _ in range(count):
            self.uvarint(what)  # tag: none of them is needed here
            size = self.uvarint(what)
            self.need(size, what)
            self.pos += size


def parse_fetch_response(version: int, buf: bytes | bytearray | memoryview, offset: int = 0) -> FetchResponseView:
    """Read the Fetch response body of ``version`` that starts at ``offset`` and ends with ``buf``.

    Records are slices of ``buf`` (no copy). Raises MalformedFetchResponseError on anything that
    is not exactly one well-formed body, trailing bytes included."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Fetch v{version} is not read here (v{MIN_VERSION}-v{MAX_VERSION})")
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")  # e.g. a pyarrow buffer exports signed bytes ("b")
    if not 0 <= offset <= len(view):
        raise MalformedFetchResponseError(f"body offset {offset} outside a {len(view)}-byte frame")
    r = _Reader(view, offset, version >= FLEXIBLE_FROM_VERSION)
    (throttle_time_ms,) = r.unpack(_I32, "throttle_time_ms")
    error_code = session_id = 0
    if version >= 7:
        (error_code,) = r.unpack(_I16, "error_code")
        (session_id,) = r.unpack(_I32, "session_id")
    topic_minimum = (1 + 1 + 1) if r.flexible else (2 + 4)
    topics = [_topic(r, version) for _ in range(r.count("topics", topic_minimum, nullable=False))]
    if r.flexible:
        r.skip_tagged_fields("response tagged fields")
    if r.pos != r.end:
        raise MalformedFetchResponseError(f"{r.end - r.pos} bytes after the end of the Fetch v{version} body")
    return FetchResponseView(throttle_time_ms, error_code, session_id, tuple(topics))


def _topic(r: _Reader, version: int) -> TopicView:
    size = r.length("topic name", nullable=False, int16=True)
    r.need(size, "topic name")
    try:
        name = str(r.buf[r.pos:r.pos + size], "utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedFetchResponseError(f"topic name is not UTF-8: {exc}") from exc
    r.pos += size
    count = r.count("partitions", _minimum_partition_bytes(version), nullable=False)
    partitions = tuple(_partition(r, version) for _ in range(count))
    if r.flexible:
        r.skip_tagged_fields("topic tagged fields")
    return TopicView(name, partitions)


def _partition(r: _Reader, version: int) -> PartitionView:
    index, error_code, high_watermark, last_stable_offset = r.unpack(_PART_HEAD, "partition")
    log_start_offset = r.unpack(_I64, "log_start_offset")[0] if version >= 5 else -1
    count = r.count("aborted_transactions", _ABORTED.size + (1 if r.flexible else 0), nullable=True)
    aborted: tuple[tuple[int, int], ...] | None = None
    if count >= 0:
        entries = []
        for _ in range(count):
            entries.append(r.unpack(_ABORTED, "aborted transaction"))
            if r.flexible:
                r.skip_tagged_fields("aborted transaction tagged fields")
        aborted = tuple(entries)  # type: ignore[arg-type]  # each entry is a (producer_id, first_offset) pair
    preferred_read_replica = r.unpack(_I32, "preferred_read_replica")[0] if version >= 11 else -1
    size = r.length("records", nullable=True)
    records = None
    if size >= 0:
        r.need(size, "records")
        records = r.buf[r.pos:r.pos + size]
        r.pos += size
    if r.flexible:
        r.skip_tagged_fields("partition tagged fields")
    return PartitionView(index, error_code, high_watermark, last_stable_offset, log_start_offset, aborted,
                         preferred_read_replica, records)
