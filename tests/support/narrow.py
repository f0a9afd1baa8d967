"""Narrowing for tests: a value that may be None (or of a wider type) becomes the one the test
expects, or the test fails saying which value was not what it expected.

The type checker then sees the narrowed type, and a surprise is a test failure with a message
instead of an ``AttributeError`` on ``None`` further down.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

import pytest

from tests.support.records import ConsumedRecord

T = TypeVar("T")


class ClientMessage(Protocol):
    """A record as confluent-kafka's or our client's consumer returns it (fields may be None)."""

    def partition(self) -> int | None: ...
    def offset(self) -> int | None: ...
    def key(self) -> bytes | None: ...
    def value(self) -> bytes | None: ...


def present(value: T | None, what: str) -> T:
    """``value``, which the test expects to be there; a test failure naming ``what`` if None."""
    if value is None:
        pytest.fail(f"{what}: expected a value, got None")
    return value


def of_type(value: object, expected: type[T], what: str = "value") -> T:
    """``value`` as an instance of ``expected``; a test failure naming ``what`` otherwise."""
    if not isinstance(value, expected):
        pytest.fail(f"{what}: expected {expected.__name__}, got {type(value).__name__}: {value!r}")
    return value


def message_position(msg: ClientMessage) -> tuple[int, int]:
    """(partition, offset) of a consumed message that is a record (not an error event)."""
    return present(msg.partition(), "message partition"), present(msg.offset(), "message offset")


def message_value(msg: ClientMessage) -> bytes:
    """The value of a consumed record; a record without a value (a tombstone) fails the test."""
    return present(msg.value(), f"value of the record at {msg.partition()}/{msg.offset()}")


def consumed_record(msg: ClientMessage) -> ConsumedRecord:
    """A consumed record as a :class:`ConsumedRecord` (position, key and value)."""
    partition, offset = message_position(msg)
    return ConsumedRecord(partition, offset, msg.key(), message_value(msg))
