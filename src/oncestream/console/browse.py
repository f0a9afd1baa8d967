"""The message browser's reading: records of one partition from an offset, a time, or the
newest N, under read_committed or read_uncommitted, with the records of aborted transactions
marked in read_uncommitted mode; and how key, value and headers are shown (text, JSON, hex).

How aborted records are found. A Fetch response lists a partition's aborted transactions
(producer id, first offset) only to a read_committed fetch, and our consumer (as librdkafka)
uses that list to drop those records rather than to expose it. Rather than a second Fetch
decoder here, the browser asks the client what it already knows: under read_uncommitted it
reads the range, then reads the same range again read_committed (which stops at the last stable
offset, LSO). A record below the LSO that the read_committed pass does not return belongs to an
aborted transaction (control records, the transaction markers, are returned by neither); a
record at or past the LSO is not decided yet (its transaction, or one before it, is open). Both
passes are bounded by ``READ_DEADLINE_S``.
"""

from __future__ import annotations

import binascii
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from oncestream.client import Admin, Consumer, TopicPartition
from oncestream.client.common.list_offsets import EARLIEST, LATEST

MODES = ("newest", "offset", "time")
FORMATS = ("text", "json", "hex")
ISOLATIONS = ("read_committed", "read_uncommitted")
MAX_COUNT = 500
DEFAULT_COUNT = 50
# How long one pass may wait for records it knows exist (below the end offset read before it).
READ_DEADLINE_S = 10.0
_POLL_S = 0.5

# Marks of a browsed record.
COMMITTED = "committed"      # read_committed, or a non-transactional / committed record
ABORTED = "aborted"          # part of an aborted transaction (read_uncommitted only)
UNDECIDED = "undecided"      # at or past the LSO: its transaction (or an earlier one) is still open


@dataclass(frozen=True)
class BrowseRequest:
    topic: str
    partition: int
    mode: str = "newest"
    offset: int = 0
    time_ms: int = 0
    count: int = DEFAULT_COUNT
    isolation: str = "read_committed"


@dataclass(frozen=True)
class BrowsedRecord:
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    mark: str = COMMITTED


@dataclass(frozen=True)
class BrowseResult:
    request: BrowseRequest
    start: int          # the partition's start offset
    end: int            # its end offset (high watermark) when the read began
    lso: int            # its last stable offset then
    from_offset: int    # where this read began
    records: list[BrowsedRecord] = field(default_factory=list)
    complete: bool = True   # False: the deadline passed before every record up to the end arrived


def read(admin: Admin, consumer_conf: Callable[..., dict[str, Any]], request: BrowseRequest) -> BrowseResult:
    """Read ``request`` (blocking; run it in a worker thread)."""
    tp = (request.topic, request.partition)
    start = admin.list_offsets({tp: EARLIEST})[tp]
    end = admin.list_offsets({tp: LATEST})[tp]
    lso = admin.list_offsets({tp: LATEST}, read_committed=True)[tp]
    count = max(1, min(request.count, MAX_COUNT))
    if request.mode == "offset":
        first = min(max(request.offset, start), end)
    elif request.mode == "time":
        found = admin.list_offsets({tp: request.time_ms})[tp]
        first = end if found < 0 else max(found, start)
    else:
        first = max(start, end - count)
    committed_only = request.isolation == "read_committed"
    # read_committed stops at the LSO: nothing past it can arrive.
    stop = min(end, lso) if committed_only else end
    records, complete = _read_range(consumer_conf(**{"isolation.level": request.isolation}), request, first, stop, count)
    if not committed_only and records:
        last = records[-1].offset + 1
        committed, _ = _read_range(consumer_conf(**{"isolation.level": "read_committed"}), request, first,
                                   min(last, lso), MAX_COUNT * 4)
        kept = {r.offset for r in committed}
        records = [_marked(r, lso, kept) for r in records]
    return BrowseResult(request, start, end, lso, first, records, complete)


def _marked(record: BrowsedRecord, lso: int, committed: set[int]) -> BrowsedRecord:
    if record.offset >= lso:
        mark = UNDECIDED
    elif record.offset in committed:
        mark = COMMITTED
    else:
        mark = ABORTED
    return BrowsedRecord(record.partition, record.offset, record.timestamp_ms, record.key, record.value,
                         record.headers, mark)


def _read_range(conf: dict[str, Any], request: BrowseRequest, first: int, stop: int,
                count: int) -> tuple[list[BrowsedRecord], bool]:
    """Records of [first, stop) (at most ``count``), whether the read reached ``stop``."""
    if first >= stop:
        return [], True
    consumer = Consumer({**conf, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    out: list[BrowsedRecord] = []
    deadline = time.monotonic() + READ_DEADLINE_S
    try:
        consumer.assign([TopicPartition(request.topic, request.partition, first)])
        position = first
        while len(out) < count and position < stop and time.monotonic() < deadline:
            for message in consumer.consume(min(count - len(out), 500), timeout=_POLL_S):
                if message.error() is not None:
                    continue
                position = message.offset() + 1
                if message.offset() >= stop:
                    break
                out.append(BrowsedRecord(message.partition(), message.offset(), message.timestamp()[1],
                                         message.key(), message.value(), list(message.headers() or [])))
                if len(out) >= count:
                    break
            else:
                # consume() returned nothing new: a read_committed consumer may have moved past
                # aborted records and markers without returning any; its position says so.
                moved = consumer.position([TopicPartition(request.topic, request.partition)])[0].offset
                position = max(position, moved)
    finally:
        consumer.close()
    return out, len(out) >= count or position >= stop


# --- how bytes are shown ----------------------------------------------------------------------


@dataclass(frozen=True)
class Shown:
    """A key, value or header as the page shows it: the text, and a note when the bytes are not
    what the chosen format expects (e.g. not UTF-8, not JSON)."""

    text: str
    note: str = ""


def show(data: bytes | None, fmt: str) -> Shown:
    if data is None:
        return Shown("", "null")
    if fmt == "hex":
        return Shown(binascii.hexlify(data, " ", 1).decode("ascii"))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Shown(binascii.hexlify(data, " ", 1).decode("ascii"), "not UTF-8: shown as hex")
    if fmt == "json":
        try:
            return Shown(json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=False))
        except ValueError:
            return Shown(text, "not JSON: shown as text")
    return Shown(text)


def show_key(data: bytes | None, fmt: str) -> Shown:
    """A key: as ``show``, except that a key that is not JSON under the JSON format is plain text
    without a note (keys are usually ids, values the documents)."""
    shown = show(data, fmt)
    return Shown(shown.text) if fmt == "json" and shown.note.startswith("not JSON") else shown


def parse_headers(text: str) -> list[tuple[str, bytes]]:
    """``name=value`` lines (value may be empty; a line without ``=`` is a header with an empty
    value); blank lines ignored."""
    out: list[tuple[str, bytes]] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        name, _, value = raw.partition("=")
        out.append((name.strip(), value.encode("utf-8")))
    return out


def header_names(records: Iterable[BrowsedRecord]) -> list[str]:
    return sorted({name for r in records for name, _ in r.headers})
