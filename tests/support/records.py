"""Record generators and the exactly-once / per-key-order checks every interop test applies.

Values carry the key and a per-key sequence number (``"k3:000017"``), so a received record says by
itself which send it came from and where it must sit in its key's order.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SentRecord:
    """One record as the test produced it (bytes, as every client ends up sending bytes)."""

    key: bytes
    value: bytes


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """One record as a consumer returned it, with its position in the log."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes


def keyed_records(count: int, key_count: int, *, tag: str = "", seed: int = 0) -> list[SentRecord]:
    """``count`` records spread over ``key_count`` keys in a shuffled interleaving.

    The interleaving is random (seeded, so reproducible) to make per-key order a real check: a
    round-robin pattern would let some reordering bugs slip through.
    """
    assert count > 0
    assert key_count > 0
    rng = random.Random(seed)
    next_seq: dict[int, int] = defaultdict(int)
    records = []
    for _ in range(count):
        key_index = rng.randrange(key_count)
        seq = next_seq[key_index]
        next_seq[key_index] += 1
        key = f"{tag}k{key_index}".encode()
        records.append(SentRecord(key=key, value=key + b":" + f"{seq:06d}".encode()))
    return records


def sequenced_values(count: int, *, tag: str = "") -> list[bytes]:
    """Values ``b"<tag>000000"`` .. in send order, for single-stream order checks."""
    return [f"{tag}{seq:06d}".encode() for seq in range(count)]


def assert_exactly_once_in_key_order(
    sent: list[SentRecord], consumed: list[ConsumedRecord]
) -> None:
    """Every sent record was consumed exactly once, and each key's records are in send order.

    Order is judged by log position (partition, offset), not by the order a consumer happened to
    hand records over, and every key must live in exactly one partition (keyed partitioning).
    """
    positions = Counter((record.partition, record.offset) for record in consumed)
    repeated_positions = [pos for pos, n in positions.items() if n > 1]
    assert not repeated_positions, f"consumer returned a log position twice: {repeated_positions[:5]}"

    sent_counts = Counter((record.key, record.value) for record in sent)
    assert all(n == 1 for n in sent_counts.values()), "test bug: sent values must be unique"
    got_counts = Counter((record.key, record.value) for record in consumed)
    duplicated = sorted(item for item, n in got_counts.items() if n > 1)
    missing = sorted(set(sent_counts) - set(got_counts))
    unexpected = sorted(set(got_counts) - set(sent_counts))
    assert not duplicated, f"{len(duplicated)} records delivered more than once, e.g. {duplicated[:5]}"
    assert not missing, f"{len(missing)} of {len(sent)} records missing, e.g. {missing[:5]}"
    assert not unexpected, f"{len(unexpected)} records never sent, e.g. {unexpected[:5]}"

    partitions_of_key: dict[bytes | None, set[int]] = defaultdict(set)
    by_key: dict[bytes | None, list[bytes]] = defaultdict(list)
    for record in sorted(consumed, key=lambda r: (r.partition, r.offset)):
        partitions_of_key[record.key].add(record.partition)
        by_key[record.key].append(record.value)
    split_keys = {key: parts for key, parts in partitions_of_key.items() if len(parts) > 1}
    assert not split_keys, f"keys spread over several partitions: {split_keys}"

    sent_by_key: dict[bytes, list[bytes]] = defaultdict(list)
    for sent_record in sent:
        sent_by_key[sent_record.key].append(sent_record.value)
    for key, values in sent_by_key.items():
        assert by_key[key] == values, f"key {key!r} out of send order: {by_key[key][:10]} ..."


def assert_offsets_dense(consumed: list[ConsumedRecord]) -> None:
    """Offsets in each partition are 0..n-1 with no gaps (no control records in these tests)."""
    by_partition: dict[int, list[int]] = defaultdict(list)
    for record in consumed:
        by_partition[record.partition].append(record.offset)
    for partition, offsets in by_partition.items():
        assert sorted(offsets) == list(range(len(offsets))), (
            f"partition {partition} offsets are not dense from 0: {sorted(offsets)[:10]} ..."
        )
