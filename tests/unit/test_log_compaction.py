"""Log compaction (cleanup.policy=compact) of one partition log: what survives, offsets, tombstones
(KIP-534 delete horizon), min.compaction.lag.ms, keyless records, producer state, stale plans and
the crash-safe swap.

Batches are built and read back with ``oncestream.protocol.records`` (the encoder clients use),
never with the cleaner's own record code in ``oncestream.log.batch_records``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from oncestream.errors import InvalidRecordError, StorageError
from oncestream.log import compaction
from oncestream.log.config import LogConfig
from oncestream.log.partition_log import PartitionLog
from oncestream.protocol.compression import COMPRESSION_GZIP, COMPRESSION_NONE, COMPRESSION_ZSTD
from oncestream.protocol.markers import CONTROL_COMMIT
from oncestream.protocol.record_batch import ATTR_DELETE_HORIZON
from oncestream.protocol.records import NewRecord, decode_batches, encode_batch, encode_control_batch
from tests.support.narrow import present

T0 = 1_000_000
SEGMENT_BYTES = 400  # a few small batches per segment
DIR_NAME = "compacted-0"


def compact_config(**overrides) -> LogConfig:
    settings: dict[str, Any] = dict(
        cleanup_policy="compact",
        segment_bytes=SEGMENT_BYTES,
        min_cleanable_dirty_ratio=0.0,
        delete_retention_ms=10_000,
        index_interval_bytes=100,
    )
    settings.update(overrides)
    return LogConfig(**settings)


def open_log(tmp_path: Path, now_ms: int = T0, **overrides) -> PartitionLog:
    return PartitionLog.open(tmp_path / DIR_NAME, compact_config(**overrides), now_ms)


def keyed(key: str, value: str | None, *, now_ms: int = T0, **kwargs) -> bytes:
    """One batch with one record."""
    return encode_batch(
        [NewRecord(value=None if value is None else value.encode(), key=key.encode(), timestamp_ms=now_ms)],
        now_ms=now_ms,
        **kwargs,
    )


def keyed_many(pairs: list[tuple[str, str | None]], *, now_ms: int = T0, **kwargs) -> bytes:
    """One batch with several records."""
    records = [NewRecord(value=None if v is None else v.encode(), key=k.encode(), timestamp_ms=now_ms) for k, v in pairs]
    return encode_batch(records, now_ms=now_ms, **kwargs)


def read_all(partition_log: PartitionLog, from_offset: int | None = None):
    """Every decoded batch from ``from_offset`` (default: the log start) to the end."""
    start = partition_log.log_start_offset if from_offset is None else from_offset
    result = partition_log.read(start, 2**30)
    return list(decode_batches(b"".join(result.chunks)))


def records_of(partition_log: PartitionLog, from_offset: int | None = None) -> list[tuple[int, bytes, bytes | None]]:
    return [(r.offset, r.key, r.value) for batch in read_all(partition_log, from_offset) for r in batch.records]


def clean(partition_log: PartitionLog, now_ms: int, **plan_kwargs) -> compaction.CleanedResult | None:
    """plan -> build -> install, as the broker's cleaner does (build on this thread)."""
    plan = partition_log.compaction_plan(now_ms, **plan_kwargs)
    if plan is None:
        return None
    result = compaction.build_cleaned(plan)
    assert partition_log.install_cleaned(result, now_ms)
    return result


def write_overwrites(
    partition_log: PartitionLog, keys: int, rounds: int, *, now_ms: int = T0
) -> dict[int, tuple[bytes, bytes | None]]:
    """``rounds`` values for each of ``keys`` keys, one record per batch; returns offset -> (key, value)."""
    written: dict[int, tuple[bytes, bytes | None]] = {}
    for round_number in range(rounds):
        for k in range(keys):
            key, value = f"key-{k}", f"value-{k}-{round_number}"
            result = partition_log.append(keyed(key, value, now_ms=now_ms), now_ms)
            written[result.base_offset] = (key.encode(), value.encode())
    return written


def latest_per_key(
    written: dict[int, tuple[bytes, bytes | None]], below_offset: int | None = None
) -> dict[bytes, tuple[int, bytes | None]]:
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for offset in sorted(written):
        if below_offset is None or offset < below_offset:
            key, value = written[offset]
            latest[key] = (offset, value)
    return latest


def roll(partition_log: PartitionLog, now_ms: int = T0) -> None:
    """Seal the active segment by appending a record that does not fit (key 'roll-filler')."""
    before = partition_log.segment_count
    while partition_log.segment_count == before:
        partition_log.append(keyed("roll-filler", "x" * 50, now_ms=now_ms), now_ms)


# --- what survives ---------------------------------------------------------------------------


def test_latest_value_per_key_survives_across_sealed_segments(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    written = write_overwrites(partition_log, keys=4, rounds=6)
    roll(partition_log)
    assert partition_log.segment_count > 4
    size_before = partition_log.size_bytes

    result = clean(partition_log, T0 + 1)

    assert result is not None
    assert result.stats.records_removed > 0
    assert partition_log.size_bytes < size_before
    survivors = [(o, k, v) for o, k, v in records_of(partition_log) if k != b"roll-filler"]
    expected = latest_per_key(written)
    # Exactly the latest value of every key, once, at its original offset.
    assert sorted(survivors) == sorted((offset, key, value) for key, (offset, value) in expected.items())


def test_offsets_of_survivors_are_the_original_ones_and_batches_keep_their_last_offset(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    offsets = {}
    # Multi-record batches: the first records are overwritten later, the last ones are not.
    for round_number in range(3):
        batch = keyed_many([(f"a{round_number}", "old"), ("shared", f"s{round_number}"), (f"z{round_number}", "keep")])
        offsets[round_number] = partition_log.append(batch, T0)
    roll(partition_log)
    end_before = partition_log.log_end_offset

    clean(partition_log, T0 + 1)

    batches = read_all(partition_log)
    by_offset = {r.offset: (r.key, r.value) for batch in batches for r in batch.records}
    for round_number, appended in offsets.items():
        assert by_offset[appended.base_offset] == (f"a{round_number}".encode(), b"old")
        assert by_offset[appended.base_offset + 2] == (f"z{round_number}".encode(), b"keep")
        # "shared" survives only in the last round's batch, at its original offset.
        assert (appended.base_offset + 1 in by_offset) == (round_number == 2)
    # A batch that lost a record still ends at its original last offset (Kafka keeps the last
    # offset delta so the producer's last sequence does not move).
    first = next(batch for batch in batches if batch.header.base_offset == offsets[0].base_offset)
    assert first.header.last_offset == offsets[0].last_offset
    assert first.header.record_count == 2
    assert partition_log.log_end_offset == end_before


def test_active_segment_is_never_touched(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    write_overwrites(partition_log, keys=2, rounds=4)
    roll(partition_log)
    # The active segment holds newer values of keys that also live in sealed segments.
    partition_log.append(keyed("key-0", "in-active"), T0)
    partition_log.append(keyed("key-0", "in-active-2"), T0)
    active_base = partition_log.segment_base_offsets()[-1]
    active_file = tmp_path / DIR_NAME / f"{active_base:020d}.log"
    active_bytes = active_file.read_bytes()

    clean(partition_log, T0 + 1)

    assert active_file.read_bytes() == active_bytes
    values = [(k, v) for _, k, v in records_of(partition_log)]
    assert (b"key-0", b"in-active") in values
    assert (b"key-0", b"in-active-2") in values
    # The sealed part still has key-0's latest sealed value: the active segment supersedes nothing.
    sealed = [(k, v) for o, k, v in records_of(partition_log) if o < active_base]
    assert (b"key-0", b"value-0-3") in sealed


def test_compressed_batches_are_rewritten_with_their_codec(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, segment_bytes=2000)
    first = partition_log.append(
        keyed_many([("a", "1"), ("b", "1"), ("c", "1")], compression=COMPRESSION_GZIP), T0
    )
    partition_log.append(keyed_many([("a", "2"), ("c", None)], compression=COMPRESSION_ZSTD), T0)
    roll(partition_log)

    clean(partition_log, T0 + 1)

    batches = read_all(partition_log)
    first_batch = next(b for b in batches if b.header.base_offset == first.base_offset)
    assert first_batch.header.compression == COMPRESSION_GZIP
    assert [(r.offset, r.key, r.value) for r in first_batch.records] == [(first.base_offset + 1, b"b", b"1")]
    assert (b"c", None) in [(r.key, r.value) for b in batches for r in b.records]


def test_repeated_cleans_merge_small_segments_without_moving_offsets(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    written = write_overwrites(partition_log, keys=3, rounds=8)
    roll(partition_log)
    clean(partition_log, T0 + 1)
    segments_after_first = partition_log.segment_count
    partition_log.append(keyed("key-0", "newest"), T0)
    written[partition_log.log_end_offset - 1] = (b"key-0", b"newest")
    roll(partition_log)
    log_start = partition_log.log_start_offset

    clean(partition_log, T0 + 2)

    # The first clean left mostly empty segments; the second merges them (Kafka's grouping).
    assert partition_log.segment_count < segments_after_first
    assert partition_log.log_start_offset == log_start
    survivors = {k: (o, v) for o, k, v in records_of(partition_log) if k != b"roll-filler"}
    assert survivors == {k: (o, v) for k, (o, v) in latest_per_key(written).items()}


# --- tombstones ------------------------------------------------------------------------------


def test_tombstone_survives_delete_retention_after_first_clean_then_goes(tmp_path: Path) -> None:
    retention_ms = 10_000
    partition_log = open_log(tmp_path, delete_retention_ms=retention_ms)
    partition_log.append(keyed("gone", "v1"), T0)
    partition_log.append(keyed("kept", "v1"), T0)
    tombstone_offset = partition_log.append(keyed("gone", None), T0).base_offset
    roll(partition_log)

    first_clean_ms = T0 + 5
    clean(partition_log, first_clean_ms)
    # The old value is gone at once; the tombstone stays, its batch stamped with the horizon.
    assert [(o, k, v) for o, k, v in records_of(partition_log) if k == b"gone"] == [(tombstone_offset, b"gone", None)]
    stamped = next(b for b in read_all(partition_log) if b.header.base_offset == tombstone_offset)
    assert stamped.header.attributes & ATTR_DELETE_HORIZON
    assert stamped.header.base_timestamp == first_clean_ms + retention_ms
    assert stamped.records[0].timestamp_ms == T0  # the record keeps its own timestamp

    # Before the horizon: nothing is due and a forced clean would keep it too.
    assert partition_log.compaction_candidate(first_clean_ms + retention_ms - 1) is None
    assert (b"gone", None) in [(k, v) for _, k, v in records_of(partition_log)]

    # At the horizon the log is cleanable without new dirty data, and the tombstone goes.
    candidate = partition_log.compaction_candidate(first_clean_ms + retention_ms)
    assert candidate is not None
    assert candidate.tombstones_due
    clean(partition_log, first_clean_ms + retention_ms)
    keys = [k for _, k, _ in records_of(partition_log)]
    assert b"gone" not in keys
    assert b"kept" in keys


def test_tombstone_horizon_survives_a_restart(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, delete_retention_ms=1_000)
    partition_log.append(keyed("gone", "v1"), T0)
    partition_log.append(keyed("gone", None), T0)
    roll(partition_log)
    clean(partition_log, T0)
    partition_log.close()

    reopened = open_log(tmp_path, now_ms=T0 + 2_000)
    assert reopened.compaction_candidate(T0 + 999) is None
    assert present(reopened.compaction_candidate(T0 + 1_000), "compaction candidate").tombstones_due
    clean(reopened, T0 + 1_000)
    assert b"gone" not in [k for _, k, _ in records_of(reopened)]


# --- eligibility -----------------------------------------------------------------------------


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path: Path) -> None:
    lag_ms = 60_000
    partition_log = open_log(tmp_path, min_compaction_lag_ms=lag_ms)
    old = write_overwrites(partition_log, keys=2, rounds=3, now_ms=T0)
    roll(partition_log, now_ms=T0)
    young_start = partition_log.log_end_offset
    write_overwrites(partition_log, keys=2, rounds=3, now_ms=T0 + lag_ms)
    roll(partition_log, now_ms=T0 + lag_ms)

    # At T0 + lag/2 even the old segments are too young.
    assert partition_log.compaction_candidate(T0 + lag_ms // 2) is None

    clean_ms = T0 + lag_ms + 1  # old segments are older than the lag, young ones are not
    result = clean(partition_log, clean_ms)
    assert result is not None
    assert result.cleaned_offset <= young_start
    young = [(o, k, v) for o, k, v in records_of(partition_log) if o >= young_start and k != b"roll-filler"]
    assert len(young) == 6, "records younger than min.compaction.lag.ms are all still there"
    # The old part is compacted on its own: latest old value per key only.
    old_part = [(o, k, v) for o, k, v in records_of(partition_log) if o < result.cleaned_offset and k != b"roll-filler"]
    assert sorted(old_part) == sorted((o, k, v) for k, (o, v) in latest_per_key(old).items())


def test_dirty_ratio_threshold(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, min_cleanable_dirty_ratio=0.5)
    write_overwrites(partition_log, keys=30, rounds=1)  # distinct keys: the clean part stays big
    roll(partition_log)
    assert present(partition_log.compaction_candidate(T0), "compaction candidate").dirty_ratio == 1.0
    clean(partition_log, T0)
    assert partition_log.compaction_candidate(T0) is None, "nothing dirty after a clean"
    # One small new sealed segment next to a larger clean part stays below the threshold.
    partition_log.append(keyed("key-0", "late"), T0)
    roll(partition_log)
    candidate = compaction.evaluate_candidate(
        partition_log._segments.segments,
        cleaned_offset=partition_log.cleaned_offset,
        last_stable_offset=partition_log.last_stable_offset,
        tombstone_horizon_ms=compaction.NO_HORIZON,
        min_compaction_lag_ms=0,
        min_cleanable_dirty_ratio=0.0,
        now_ms=T0,
    )
    assert 0 < present(candidate, "compaction candidate").dirty_ratio < 0.5
    assert partition_log.compaction_candidate(T0) is None


def test_delete_policy_logs_are_never_cleaned(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, cleanup_policy="delete")
    write_overwrites(partition_log, keys=2, rounds=6)
    roll(partition_log)
    assert partition_log.compaction_candidate(T0) is None
    assert partition_log.compaction_plan(T0) is None


def test_broker_and_topic_properties_configure_the_cleaner() -> None:
    broker = LogConfig.from_broker_configs(
        {"log.cleaner.min.cleanable.ratio": "0.01", "log.cleaner.min.compaction.lag.ms": "5"}
    )
    assert (broker.min_cleanable_dirty_ratio, broker.min_compaction_lag_ms) == (0.01, 5)
    topic = LogConfig.from_topic_configs({"min.cleanable.dirty.ratio": "0.2", "cleanup.policy": "compact,delete"}, broker)
    assert topic.min_cleanable_dirty_ratio == 0.2
    assert topic.compacts
    assert topic.deletes_by_retention
    assert topic.to_topic_configs()["min.cleanable.dirty.ratio"] == "0.2"
    assert LogConfig().min_cleanable_dirty_ratio == 0.5
    assert LogConfig().min_compaction_lag_ms == 0


# --- appends to compacted topics -------------------------------------------------------------


def test_compacted_topic_rejects_records_without_key(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    keyless = encode_batch([NewRecord(value=b"v", key=b"k"), NewRecord(value=b"v", key=None)], now_ms=T0)
    with pytest.raises(InvalidRecordError, match="without key") as caught:
        partition_log.append(keyless, T0)
    assert caught.value.code.name == "invalid_record"
    assert partition_log.log_end_offset == 0, "nothing of the rejected request was written"
    partition_log.append(keyed("k", "v"), T0)

    delete_log = PartitionLog.open(tmp_path / "plain-0", LogConfig(), T0)
    assert delete_log.append(keyless, T0).base_offset == 0, "only compacted topics require keys"


def test_control_batches_need_no_key_check_and_survive_cleaning(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    txn = partition_log.append(
        keyed("t", "txn-old", producer_id=7, producer_epoch=0, base_sequence=0, transactional=True), T0
    )
    marker = encode_control_batch(marker=CONTROL_COMMIT, producer_id=7, producer_epoch=0, coordinator_epoch=0, now_ms=T0)
    marker_offset = partition_log.append(marker, T0, from_client=False).base_offset
    partition_log.append(keyed("t", "plain-new"), T0)
    roll(partition_log)

    clean(partition_log, T0 + 1)

    batches = read_all(partition_log)
    offsets = {b.header.base_offset for b in batches}
    # The marker stays; the committed record is superseded, its batch kept (empty) because it is
    # producer 7's last one.
    assert txn.base_offset in offsets
    assert marker_offset in offsets
    assert [r.value for b in batches if not b.header.is_control for r in b.records
            if r.key == b"t"] == [b"plain-new"]


def _txn(partition_log: PartitionLog, producer_id: int, sequence: int, pairs, *, commit: bool) -> int:
    """One transaction of one batch and its marker; returns the data batch's offset."""
    offset = partition_log.append(
        keyed_many(pairs, producer_id=producer_id, producer_epoch=0, base_sequence=sequence, transactional=True), T0
    ).base_offset
    partition_log.append_marker(producer_id=producer_id, producer_epoch=0, commit=commit, coordinator_epoch=0,
                                now_ms=T0)
    return offset


def _data(partition_log: PartitionLog) -> dict[bytes, bytes | None]:
    """Key -> value of every data record left, read in offset order (the last one wins)."""
    latest: dict[bytes, bytes | None] = {}
    for batch in read_all(partition_log):
        if not batch.header.is_control:
            for record in batch.records:
                latest[record.key] = record.value
    return latest


def _values_of(partition_log: PartitionLog, key: bytes) -> list[bytes | None]:
    return [r.value for b in read_all(partition_log) if not b.header.is_control for r in b.records if r.key == key]


def test_committed_transactional_records_compact_and_aborted_ones_are_dropped(tmp_path: Path) -> None:
    """Decided transactional data is cleaned: committed records supersede and are superseded by
    key; aborted records are removed and hide nothing; every marker and abort entry stays."""
    partition_log = open_log(tmp_path, segment_bytes=4096)
    _txn(partition_log, 7, 0, [("a", "committed"), ("b", "committed")], commit=True)
    aborted_offset = _txn(partition_log, 8, 0, [("a", "aborted"), ("c", "aborted")], commit=False)
    partition_log.append(keyed("b", "plain-later"), T0)
    _txn(partition_log, 7, 2, [("d", "committed-2")], commit=True)  # 7's and 8's last batches come later
    _txn(partition_log, 8, 2, [("e", "committed-3")], commit=True)
    markers_before = [b.header.base_offset for b in read_all(partition_log) if b.header.is_control]
    roll(partition_log)

    result = clean(partition_log, T0 + 1)

    assert result is not None
    assert result.stats.records_removed >= 3
    assert _values_of(partition_log, b"a") == [b"committed"]  # the aborted a never hid it
    assert _values_of(partition_log, b"b") == [b"plain-later"]
    assert _values_of(partition_log, b"c") == []
    assert aborted_offset not in {b.header.base_offset for b in read_all(partition_log)}
    assert [b.header.base_offset for b in read_all(partition_log) if b.header.is_control] == markers_before
    assert partition_log.read(0, 2**30, with_aborted=True).aborted_transactions == [(8, aborted_offset)]
    expected = {b"a": b"committed", b"b": b"plain-later", b"d": b"committed-2", b"e": b"committed-3"}
    assert {k: v for k, v in _data(partition_log).items() if k != b"roll-filler"} == expected
    partition_log.close()
    for snapshot in (tmp_path / DIR_NAME).glob("*.snapshot"):
        snapshot.unlink()  # producer state rebuilt from the cleaned log alone
    reopened = open_log(tmp_path, now_ms=T0 + 2, segment_bytes=4096)
    assert {k: v for k, v in _data(reopened).items() if k != b"roll-filler"} == expected
    assert reopened.read(0, 2**30, with_aborted=True).aborted_transactions == [(8, aborted_offset)]
    assert reopened.last_stable_offset == reopened.log_end_offset  # no transaction looks open
    states = {s.producer_id: s.last_sequence for s in reopened.producer_states()}
    assert states == {7: 2, 8: 2}


def test_data_aborted_by_a_marker_in_the_active_segment_is_dropped(tmp_path: Path) -> None:
    """Whether sealed data was aborted may be known only from a later segment's abort entry."""
    partition_log = open_log(tmp_path, segment_bytes=4096)
    aborted_offset = partition_log.append(
        keyed_many([("x", "aborted")], producer_id=9, producer_epoch=0, base_sequence=0, transactional=True), T0
    ).base_offset
    partition_log.append(keyed("x", "plain"), T0)
    roll(partition_log)  # the transaction's data is sealed, still open
    assert partition_log.compaction_plan(T0 + 1) is None  # beyond the last stable offset: untouchable
    partition_log.append_marker(producer_id=9, producer_epoch=0, commit=False, coordinator_epoch=0, now_ms=T0)
    _txn(partition_log, 9, 1, [("y", "later")], commit=True)  # producer 9's last batch is elsewhere

    clean(partition_log, T0 + 1)

    assert aborted_offset not in {b.header.base_offset for b in read_all(partition_log)}
    assert _values_of(partition_log, b"x") == [b"plain"]


# --- reading a compacted log -----------------------------------------------------------------


def test_reads_inside_removed_ranges_return_the_next_batch(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    written = write_overwrites(partition_log, keys=2, rounds=10)
    roll(partition_log)
    clean(partition_log, T0 + 1)
    survivors = sorted(o for o, _, _ in records_of(partition_log))
    gaps = [o for o in range(survivors[-1]) if o not in survivors]
    assert gaps, "the clean left offset gaps"

    for offset in gaps:
        batches = read_all(partition_log, offset)
        assert batches, f"a read at {offset} returns data"
        assert batches[0].records[0].offset == min(o for o in survivors if o > offset)
    # Reads from the log start and with tiny byte limits (one batch at a time) walk the same data.
    position, walked = partition_log.log_start_offset, list[int]()
    while position < partition_log.log_end_offset:
        result = partition_log.read(position, 1)
        (batch,) = decode_batches(b"".join(result.chunks))
        walked.extend(r.offset for r in batch.records)
        position = batch.header.next_offset
    assert walked == survivors
    assert len(written) > len(survivors)


def test_read_at_a_gap_left_at_the_end_of_a_segment(tmp_path: Path) -> None:
    # segment.ms=1: an append 10 ms later rolls, so each time step below is one segment.
    partition_log = open_log(tmp_path, segment_ms=1, segment_bytes=200)  # no merging of segments
    partition_log.append(keyed("unique", "u"), T0)
    tail = partition_log.append(keyed("hot", "old"), T0).base_offset  # last batch of segment 1
    partition_log.append(keyed("hot", "new"), T0 + 10)
    partition_log.append(keyed("filler", "f"), T0 + 20)
    assert partition_log.segment_base_offsets() == [0, 2, 3]
    clean(partition_log, T0 + 30)

    assert partition_log.segment_base_offsets() == [0, 2, 3], "segment 1 ends in a gap"
    assert records_of(partition_log) == [(0, b"unique", b"u"), (2, b"hot", b"new"), (3, b"filler", b"f")]
    assert records_of(partition_log, tail) == [(2, b"hot", b"new"), (3, b"filler", b"f")]
    partition_log.close()
    reopened = open_log(tmp_path, segment_ms=1, segment_bytes=200)
    assert records_of(reopened, tail)[0] == (2, b"hot", b"new")
    assert reopened.log_end_offset == 4


def test_offset_for_timestamp_and_delete_records_on_a_compacted_log(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    for i in range(12):
        partition_log.append(keyed(f"k{i % 3}", f"v{i}", now_ms=T0 + i), T0 + i)
    roll(partition_log, now_ms=T0 + 100)
    clean(partition_log, T0 + 200)
    offset, timestamp_ms = present(partition_log.offset_for_timestamp(T0), "offset for T0")
    assert offset == min(o for o, _, _ in records_of(partition_log))
    assert timestamp_ms >= T0
    # DeleteRecords to an offset inside a gap: reads from the new start return the next batch.
    first_two = sorted(o for o, _, _ in records_of(partition_log))[:2]
    partition_log.delete_records(first_two[0] + 1)
    assert records_of(partition_log)[0][0] == first_two[1]


# --- producer state --------------------------------------------------------------------------


def test_idempotent_dedup_survives_compaction_and_a_restart_without_snapshots(tmp_path: Path) -> None:
    pid = 4242
    partition_log = open_log(tmp_path)
    batches = [
        keyed_many([(f"p{seq}", "x"), ("hot", f"h{seq}")], producer_id=pid, producer_epoch=3, base_sequence=2 * seq)
        for seq in range(3)
    ]
    appended = [partition_log.append(batch, T0) for batch in batches]
    # Another producer overwrites every key the idempotent producer wrote.
    for key in ["p0", "p1", "p2", "hot"]:
        partition_log.append(keyed(key, "overwritten"), T0)
    roll(partition_log)

    clean(partition_log, T0 + 1)

    # The producer's last batch has no live record left but stays as an empty batch.
    kept = {b.header.base_offset: b for b in read_all(partition_log)}
    assert appended[0].base_offset not in kept
    last = kept[appended[2].base_offset]
    assert last.records == []
    assert last.header.producer_id == pid
    assert last.header.last_offset == appended[2].last_offset

    partition_log.close()
    for snapshot in (tmp_path / DIR_NAME).glob("*.snapshot"):
        snapshot.unlink()
    reopened = open_log(tmp_path, now_ms=T0 + 2)
    (state,) = reopened.producer_states()
    assert (state.producer_id, state.producer_epoch, state.last_sequence) == (pid, 3, 5)
    retry = reopened.append(batches[2], T0 + 2)
    assert retry.duplicate
    assert retry.base_offset == appended[2].base_offset
    following = keyed_many([("p3", "x"), ("hot", "h3")], producer_id=pid, producer_epoch=3, base_sequence=6)
    assert not reopened.append(following, T0 + 2).duplicate


def test_batches_of_expired_producers_may_go_entirely(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, producer_id_expiration_ms=1_000)
    old = partition_log.append(keyed("k", "old", producer_id=5, producer_epoch=0, base_sequence=0), T0)
    partition_log.append(keyed("k", "new"), T0)
    roll(partition_log)
    partition_log.expire_producers(T0 + 5_000)
    clean(partition_log, T0 + 5_000)
    assert old.base_offset not in {b.header.base_offset for b in read_all(partition_log)}


# --- stale plans -----------------------------------------------------------------------------


def test_plan_invalidated_by_retention_is_discarded(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path, cleanup_policy="compact,delete", retention_ms=1_000)
    write_overwrites(partition_log, keys=2, rounds=5, now_ms=T0)
    roll(partition_log, now_ms=T0)
    write_overwrites(partition_log, keys=2, rounds=5, now_ms=T0 + 10_000)
    roll(partition_log, now_ms=T0 + 10_000)
    plan = present(partition_log.compaction_plan(T0 + 10_000), "compaction plan")
    result = compaction.build_cleaned(plan)
    assert result.groups
    before = records_of(partition_log)

    # While the build ran, retention deleted the oldest planned segments.
    assert partition_log.apply_retention(T0 + 10_000) > 0
    after_retention = records_of(partition_log)

    assert partition_log.install_cleaned(result, T0 + 10_000) is False
    assert records_of(partition_log) == after_retention != before
    assert not list((tmp_path / DIR_NAME).glob("*.cleaned")), "discarded files are removed"
    assert not (tmp_path / DIR_NAME / compaction.MANIFEST_FILE).exists()
    # The log can be planned again.
    assert clean(partition_log, T0 + 10_001) is not None


def test_plan_invalidated_by_delete_records_or_policy_change_is_discarded(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    write_overwrites(partition_log, keys=2, rounds=8)
    roll(partition_log)
    plan = present(partition_log.compaction_plan(T0), "compaction plan")
    result = compaction.build_cleaned(plan)
    partition_log.delete_records(partition_log.segment_base_offsets()[2])
    assert partition_log.install_cleaned(result, T0) is False

    plan = present(partition_log.compaction_plan(T0), "compaction plan")
    result = compaction.build_cleaned(plan)
    partition_log.update_config(dataclasses.replace(partition_log.config, cleanup_policy="delete"))
    assert partition_log.install_cleaned(result, T0) is False
    assert not list((tmp_path / DIR_NAME).glob("*.cleaned"))


def test_only_one_plan_at_a_time_and_cancel_gives_it_back(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    write_overwrites(partition_log, keys=2, rounds=8)
    roll(partition_log)
    plan = partition_log.compaction_plan(T0)
    assert plan is not None
    assert partition_log.compaction_plan(T0) is None
    partition_log.cancel_compaction(plan)
    assert clean(partition_log, T0) is not None


def test_closed_log_discards_a_finished_build(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    write_overwrites(partition_log, keys=2, rounds=8)
    roll(partition_log)
    result = compaction.build_cleaned(present(partition_log.compaction_plan(T0), "compaction plan"))
    partition_log.close()
    assert partition_log.install_cleaned(result, T0) is False
    assert not list((tmp_path / DIR_NAME).glob("*.cleaned"))


def test_the_key_map_bound_cleans_in_steps(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    written = write_overwrites(partition_log, keys=12, rounds=2)
    roll(partition_log)
    end = partition_log.segment_base_offsets()[-1]
    three_keys = 3 * (len(b"key-00") + compaction.MAP_ENTRY_OVERHEAD_BYTES)
    result = clean(partition_log, T0, max_map_bytes=three_keys)
    assert result is not None
    assert result.cleaned_offset < end
    steps = 1
    while (result := clean(partition_log, T0, max_map_bytes=three_keys)) is not None:
        steps += 1
        assert steps < 50
    assert partition_log.cleaned_offset == end
    assert steps > 1
    survivors = {k: (o, v) for o, k, v in records_of(partition_log) if k != b"roll-filler"}
    # Earlier steps saw only part of the keys' history, so older values may remain; the latest
    # value of every key is always there, exactly once.
    for key, (offset, value) in latest_per_key(written).items():
        assert survivors[key] == (offset, value)


# --- crash safety ----------------------------------------------------------------------------


class SimulatedCrash(Exception):
    """Raised by the patched file operations: the process 'dies' here."""


def prepared_log(tmp_path: Path) -> tuple[PartitionLog, dict[int, tuple[bytes, bytes | None]]]:
    partition_log = open_log(tmp_path)
    written = write_overwrites(partition_log, keys=3, rounds=6)
    partition_log.append(keyed("dropped", "x"), T0)
    offset = partition_log.append(keyed("dropped", None), T0).base_offset
    written[offset - 1] = (b"dropped", b"x")
    written[offset] = (b"dropped", None)
    roll(partition_log)
    return partition_log, written


def assert_latest_values_once(partition_log: PartitionLog, written: dict[int, tuple[bytes, bytes | None]]) -> None:
    records = [(o, k, v) for o, k, v in records_of(partition_log) if k != b"roll-filler"]
    latest = latest_per_key(written)
    for key, (offset, value) in latest.items():
        assert [(o, v) for o, k, v in records if k == key and o == offset] == [(offset, value)]
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets)), "offsets are unique and increasing"
    assert all(written[o] == (k, v) for o, k, v in records), "every record is one that was written, at its offset"


def run_swap_with_crash(directory: Path, monkeypatch: pytest.MonkeyPatch, crash_at: int | None) -> int:
    """Prepare a log in ``directory`` and clean it, 'crashing' before the swap's file operation
    number ``crash_at`` (None: no crash). Returns how many swap file operations ran."""
    partition_log, _ = prepared_log(directory)
    real_rename, real_remove = compaction._rename, compaction._remove
    count = 0

    def counted(real):
        def operation(*args):
            nonlocal count
            if count == crash_at:
                raise SimulatedCrash(f"crash before file operation {crash_at}")
            count += 1
            return real(*args)

        return operation

    with monkeypatch.context() as patch:
        patch.setattr(compaction, "_rename", counted(real_rename))
        patch.setattr(compaction, "_remove", counted(real_remove))
        plan = present(partition_log.compaction_plan(T0 + 1), "compaction plan")
        result = compaction.build_cleaned(plan)
        assert len(result.groups) > 1
        if crash_at is None:
            assert partition_log.install_cleaned(result, T0 + 1)
            partition_log.close()
        else:
            with pytest.raises((SimulatedCrash, StorageError)):
                partition_log.install_cleaned(result, T0 + 1)
            partition_log.abandon()  # like SIGKILL: no flush, no snapshot, no clean-shutdown marker
    return count


def test_crash_at_every_step_of_the_swap_leaves_a_valid_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stop the swap before each of its file operations in turn (the manifest rename that commits
    it, every rename of a .cleaned file, every deletion of a replaced segment, the manifest
    removal), as SIGKILL would, then open the log again: it must be valid, hold every key's
    latest value exactly once, and be fully swapped exactly when the manifest was committed."""
    total = run_swap_with_crash(tmp_path / "no-crash", monkeypatch, None)
    assert total > 5
    _, written = prepared_log(tmp_path / "reference")
    for crash_at in range(total):
        directory = tmp_path / f"crash-{crash_at}"
        assert run_swap_with_crash(directory, monkeypatch, crash_at) == crash_at
        reopened = open_log(directory, now_ms=T0 + 2)
        assert reopened.log_end_offset == max(written) + 1 + 1  # + the roll filler record
        assert_latest_values_once(reopened, written)
        names = [p.name for p in (directory / DIR_NAME).iterdir()]
        assert not [n for n in names if n.endswith(".cleaned") or n.startswith(compaction.MANIFEST_FILE)], crash_at
        committed = crash_at > 0  # operation 0 is the manifest rename
        values = [(k, v) for _, k, v in records_of(reopened)]
        assert ((b"key-0", b"value-0-0") not in values) == committed, crash_at
        # The log keeps working: append, clean again, restart.
        reopened.append(keyed("key-0", "after-crash"), T0 + 2)
        roll(reopened, now_ms=T0 + 2)
        clean(reopened, T0 + 3)
        reopened.close()
        final = open_log(directory, now_ms=T0 + 4)
        assert (b"key-0", b"after-crash") in [(k, v) for _, k, v in records_of(final)]
        final.close()


def test_crash_after_the_build_leaves_the_old_log(tmp_path: Path) -> None:
    partition_log, written = prepared_log(tmp_path)
    before = records_of(partition_log)
    result = compaction.build_cleaned(present(partition_log.compaction_plan(T0 + 1), "compaction plan"))
    assert list((tmp_path / DIR_NAME).glob("*.cleaned"))
    # A half-written manifest temp file: the rename (the commit) never happened.
    (tmp_path / DIR_NAME / (compaction.MANIFEST_FILE + ".tmp")).write_bytes(b'{"version": 1, "repl')
    partition_log.abandon()

    reopened = open_log(tmp_path, now_ms=T0 + 2)
    assert records_of(reopened) == before
    assert not list((tmp_path / DIR_NAME).glob("*.cleaned"))
    assert not list((tmp_path / DIR_NAME).glob(compaction.MANIFEST_FILE + "*"))
    assert result.groups
    assert_latest_values_once(reopened, written)


def test_truncated_cleaned_file_of_an_unfinished_build_is_ignored(tmp_path: Path) -> None:
    partition_log, _written = prepared_log(tmp_path)
    before = records_of(partition_log)
    result = compaction.build_cleaned(present(partition_log.compaction_plan(T0 + 1), "compaction plan"))
    cleaned = compaction.cleaned_path(tmp_path / DIR_NAME, result.groups[0].base_offset, ".log")
    cleaned.write_bytes(cleaned.read_bytes()[:7])  # the build died mid-write
    partition_log.abandon()
    assert records_of(open_log(tmp_path, now_ms=T0 + 2)) == before


def test_crash_while_recovery_finishes_a_swap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second crash right after recovery removed the manifest must not lose the cleaned offset
    (the gaps the swap made are only legal below it)."""
    directory = tmp_path / "log"
    assert run_swap_with_crash(directory, monkeypatch, 1) == 1  # committed, nothing renamed yet
    _, written = prepared_log(tmp_path / "reference")
    with monkeypatch.context() as patch:
        def crash(_directory):
            raise SimulatedCrash("crash during recovery")

        patch.setattr(compaction, "remove_leftover_cleaned_files", crash)
        with pytest.raises(SimulatedCrash):
            open_log(directory, now_ms=T0 + 2)
    assert not (directory / DIR_NAME / compaction.MANIFEST_FILE).exists()
    reopened = open_log(directory, now_ms=T0 + 3)
    assert reopened.log_end_offset == max(written) + 2
    assert_latest_values_once(reopened, written)


def test_cancelled_build_removes_its_files(tmp_path: Path) -> None:
    partition_log, _ = prepared_log(tmp_path)
    before = records_of(partition_log)
    plan = present(partition_log.compaction_plan(T0 + 1), "compaction plan")
    plan.abort.set()
    with pytest.raises(compaction.CompactionAborted):
        compaction.build_cleaned(plan)
    partition_log.cancel_compaction(plan)
    assert not list((tmp_path / DIR_NAME).glob("*.cleaned"))
    assert records_of(partition_log) == before
    assert clean(partition_log, T0 + 1) is not None


def test_unreadable_manifest_refuses_to_guess(tmp_path: Path) -> None:
    partition_log, _ = prepared_log(tmp_path)
    partition_log.close()
    (tmp_path / DIR_NAME / compaction.MANIFEST_FILE).write_bytes(b"not json")
    with pytest.raises(StorageError, match="manifest"):
        open_log(tmp_path)


def test_crash_after_install_before_any_flush_recovers_compacted_segments(tmp_path: Path) -> None:
    """Unflushed compacted segments are scanned by recovery: their gaps must not look like damage."""
    partition_log, written = prepared_log(tmp_path)
    clean(partition_log, T0 + 1)
    after = records_of(partition_log)
    end = partition_log.log_end_offset
    partition_log.abandon()  # recovery point is still 0: every segment is scanned on open

    reopened = open_log(tmp_path, now_ms=T0 + 2)
    assert reopened.log_end_offset == end
    assert records_of(reopened) == after
    assert_latest_values_once(reopened, written)


def test_a_gap_above_the_cleaned_offset_is_still_damage(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    write_overwrites(partition_log, keys=2, rounds=10)
    bases = partition_log.segment_base_offsets()
    assert len(bases) > 3
    partition_log.close()
    # Lose a middle segment of a never-compacted log: later segments cannot follow it.
    for path in (tmp_path / DIR_NAME).glob(f"{bases[2]:020d}.*"):
        path.unlink()
    reopened = open_log(tmp_path)
    assert reopened.segment_base_offsets() == bases[:2]
    assert reopened.log_end_offset == bases[2]


def test_uncompressed_default_codec_is_kept(tmp_path: Path) -> None:
    partition_log = open_log(tmp_path)
    partition_log.append(keyed_many([("a", "1"), ("b", "1")]), T0)
    partition_log.append(keyed("a", "2"), T0)
    roll(partition_log)
    clean(partition_log, T0)
    first = read_all(partition_log)[0]
    assert first.header.compression == COMPRESSION_NONE
    assert [(r.key, r.value) for r in first.records] == [(b"b", b"1")]


def test_aborted_transactions_stay_indexed_when_segments_merge(tmp_path: Path) -> None:
    """KIP-98 read_committed needs the aborted-transaction index of a cleaned segment to hold the
    aborts of every segment it replaced (the cleaner keeps every marker)."""
    partition_log = open_log(tmp_path)
    aborted_first = partition_log.append(
        keyed("t", "aborted", producer_id=9, producer_epoch=0, base_sequence=0, transactional=True), T0
    ).base_offset
    partition_log.append_marker(producer_id=9, producer_epoch=0, commit=False, coordinator_epoch=0, now_ms=T0)
    write_overwrites(partition_log, keys=3, rounds=6)  # several segments after the abort
    roll(partition_log)
    assert partition_log.read(0, 2**30, with_aborted=True).aborted_transactions == [(9, aborted_first)]
    segments_before = partition_log.segment_count

    clean(partition_log, T0 + 1)
    partition_log.append(keyed("t", "later"), T0 + 1)
    roll(partition_log)
    clean(partition_log, T0 + 2)  # the second clean merges the now small segments

    assert partition_log.segment_count < segments_before
    assert partition_log.read(0, 2**30, with_aborted=True).aborted_transactions == [(9, aborted_first)]
    partition_log.close()
    reopened = open_log(tmp_path, now_ms=T0 + 3)
    assert reopened.read(0, 2**30, with_aborted=True).aborted_transactions == [(9, aborted_first)]
    names = {p.name for p in (tmp_path / DIR_NAME).iterdir()}
    for base in reopened.segment_base_offsets():
        assert f"{base:020d}.txnindex" in names
    assert len([n for n in names if n.endswith(".txnindex")]) == reopened.segment_count
