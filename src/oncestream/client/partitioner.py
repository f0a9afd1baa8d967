"""Kafka's default partitioner: murmur2 of the key (Java's Utils.murmur2 / librdkafka murmur2).

Written here because it is twenty lines and must match Java bit for bit; tests carry Kafka's
published vectors and check against librdkafka's murmur2 partitioner.
"""

from __future__ import annotations

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Java-compatible murmur2 (seed 0x9747b28c) as a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    for i in range(0, length - length % 4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    tail = length & ~3
    extra = length % 4
    if extra == 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition Java's and librdkafka's default partitioners choose for a non-null key."""
    assert num_partitions > 0
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions
