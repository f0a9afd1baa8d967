"""Which __consumer_offsets partition stores a group: Kafka's ``abs(groupId.hashCode) % n``.

The mapping must match Kafka's bit for bit so that a group keeps its partition whichever broker
implementation wrote the log, hence a faithful port of Java's ``String.hashCode`` (over UTF-16 code
units, 32-bit signed wrap-around) and of Kafka's ``Utils.abs`` (which maps Integer.MIN_VALUE to 0).
"""

from __future__ import annotations

from oncestream.errors import CoordinatorInvariantError

_INT32_MASK = 0xFFFF_FFFF
_INT32_MIN = -(2**31)


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()``: ``sum(s[i] * 31^(n-1-i))`` over UTF-16 units, as int32."""
    h = 0
    data = text.encode("utf-16-be", errors="surrogatepass")
    for i in range(0, len(data), 2):
        # Characters outside the BMP are two UTF-16 code units in Java, so hash the units, not
        # Python's code points.
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _INT32_MASK
    return h - (1 << 32) if h & 0x8000_0000 else h


def kafka_abs(value: int) -> int:
    """Kafka's ``Utils.abs``: like ``abs`` but Integer.MIN_VALUE (whose abs overflows) maps to 0."""
    return 0 if value == _INT32_MIN else abs(value)


def partition_for(group_id: str, num_partitions: int) -> int:
    """The __consumer_offsets partition that owns ``group_id`` among ``num_partitions``."""
    if num_partitions <= 0:
        raise CoordinatorInvariantError("offsets.topic.num.partitions must be positive")
    return kafka_abs(java_string_hash(group_id)) % num_partitions
