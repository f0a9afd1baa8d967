"""What a share consumer hands out: the records of a ShareFetch answer (which to hand out, which
are gaps), the message type with its delivery count, the batch ``poll`` returns, and the error
for calls the consumer's state does not allow.

A ShareFetch answer carries whole record batches plus the offset ranges the broker acquired for
this member (with each range's delivery count). Only records inside an acquired range are this
member's to process; an acquired offset with no data record (a control record, a record
compacted away, an aborted one under read_committed) is a gap, acknowledged as GAP so the broker
can move on (Kafka's ShareCompletedFetch does the same).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

from oncestream.client.common.message import Message
from oncestream.client.consumer.fetch_decoder import decode_partition


class ShareMessage(Message):
    """A record delivered by a share group: a ``Message`` plus how many times it was delivered."""

    __slots__ = ("_delivery_count",)
    _delivery_count: int

    def delivery_count(self) -> int | None:
        """Times this record was delivered (1 the first time), as confluent-kafka's Message."""
        return self._delivery_count


class IllegalStateException(RuntimeError):
    """A call the consumer's state does not allow (confluent-kafka's IllegalStateException)."""


class Messages:
    """The batch ``ShareConsumer.poll`` returns: a read-only sequence of messages."""

    __slots__ = ("_messages",)

    def __init__(self, messages: Any = ()) -> None:
        self._messages: list[Message] = list(messages)

    def __len__(self) -> int:
        return len(self._messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(self._messages)

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> Messages: ...
    def __getitem__(self, index: int | slice) -> Message | Messages:
        if isinstance(index, slice):
            return Messages(self._messages[index])
        return self._messages[index]

    def count(self) -> int:
        """Number of messages in this batch."""
        return len(self._messages)

    def is_empty(self) -> bool:
        """Whether this batch holds no message."""
        return not self._messages

    def records(self) -> list[Message]:
        """A copy of the messages."""
        return list(self._messages)

    def __repr__(self) -> str:
        return f"Messages({len(self._messages)} messages)"


def acquired_records(data: bytes | None, topic: str, partition: int,
                     acquired: Sequence[tuple[int, int, int]], *,
                     check_crcs: bool = False) -> tuple[list[ShareMessage], list[int]]:
    """Messages for the acquired offsets of ``data`` and the acquired offsets without a record.

    ``acquired`` holds (first offset, last offset, delivery count) ranges. Control batches are
    never returned (``decode_partition`` drops them); aborted records need no filter here because
    a read_committed share group's broker does not acquire them.
    """
    if not acquired:
        return [], []
    decoded = decode_partition(data, topic, partition, acquired[0][0], check_crcs=check_crcs).messages if data else []
    by_offset = {m._offset: m for m in decoded}
    messages: list[ShareMessage] = []
    gaps: list[int] = []
    for first, last, count in sorted(acquired):
        for offset in range(first, last + 1):
            m = by_offset.get(offset)
            if m is None:
                gaps.append(offset)
                continue
            share = ShareMessage.__new__(ShareMessage)
            share._info = m._info
            share._offset = offset
            share._timestamp = m._timestamp
            share._key = m._key
            share._value = m._value
            share._headers = m._headers
            share._error = None
            share._delivery_count = count
            messages.append(share)
    return messages, gaps
