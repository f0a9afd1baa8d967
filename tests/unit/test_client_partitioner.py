"""The producer's partitioners: Kafka's murmur2 (Java ``Utils.murmur2`` / librdkafka
``murmur2_random``) bit for bit, plus the librdkafka partitioners we also offer."""

from __future__ import annotations

import zlib

import pytest

from oncestream.client.producer.partitioner import (
    consistent_partition,
    fnv1a_partition,
    key_partitioner,
    murmur2,
    null_key_partition,
    partition_for_key,
)

# Kafka's UtilsTest.testMurmur2 vectors.
KAFKA_MURMUR2_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("key", "expected"), KAFKA_MURMUR2_VECTORS)
def test_murmur2_matches_kafka_published_vectors(key: bytes, expected: int) -> None:
    """Java's Utils.murmur2 results for Kafka's own test keys (every tail length 0..3 occurs)."""
    assert murmur2(key) == expected


def _reference_murmur2(data: bytes) -> int:
    """A byte-at-a-time transcription of Java's loop, to cross-check the word-unpacking version."""
    m, h = 0x5BD1E995, (0x9747B28C ^ len(data)) & 0xFFFFFFFF
    for i in range(0, len(data) - len(data) % 4, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail, extra = len(data) & ~3, len(data) % 4
    if extra == 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def test_murmur2_equals_reference_for_all_lengths_up_to_300() -> None:
    """The fast path (struct-unpacked words) agrees with the plain loop for every length,
    including keys longer than the precompiled word structs."""
    for length in range(300):
        key = bytes((i * 37 + length) & 0xFF for i in range(length))
        assert murmur2(key) == _reference_murmur2(key), length


def test_partition_for_key_uses_positive_murmur2_modulo() -> None:
    """Java: toPositive(murmur2(key)) % numPartitions (mask the sign bit, not abs())."""
    for key, hashed in KAFKA_MURMUR2_VECTORS:
        for n in (1, 3, 7, 100):
            assert partition_for_key(key, n) == (hashed & 0x7FFFFFFF) % n


def test_consistent_partitioner_is_crc32() -> None:
    """librdkafka 'consistent': crc32(key) % partitions."""
    assert consistent_partition(b"hello", 7) == (zlib.crc32(b"hello") & 0xFFFFFFFF) % 7


def test_fnv1a_partitioner_matches_reference_values() -> None:
    """librdkafka 'fnv1a' (32-bit FNV-1a, abs of the signed value)."""
    # The FNV-1a 32-bit test vector for "a" is 0xE40C292C; librdkafka takes abs() of it as int32.
    signed = 0xE40C292C - (1 << 32)
    assert fnv1a_partition(b"a", 1000) == abs(signed) % 1000


def test_partitioner_names_and_null_keys() -> None:
    """*_random partitioners spread null keys (None: sticky); the others hash the empty key."""
    assert key_partitioner("murmur2_random") is partition_for_key
    assert key_partitioner("random") is None
    assert null_key_partition("murmur2_random", partition_for_key, 5) is None
    assert null_key_partition("murmur2", partition_for_key, 5) == partition_for_key(b"", 5)
    with pytest.raises(ValueError, match=r"unknown partitioner 'nope'"):
        key_partitioner("nope")
