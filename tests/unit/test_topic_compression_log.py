"""Topic-level compression.type (Kafka's LogValidator): the log recompresses a batch whose codec
differs from the topic's, keeping everything the header says (offset deltas, timestamps, producer
id/epoch/sequence, transactional flag), so idempotence and transactions behave as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncestream.errors import CorruptRecordError, MessageTooLargeError
from oncestream.log.config import LogConfig
from oncestream.log.partition_log import PartitionLog
from oncestream.protocol import record_batch as rb
from oncestream.protocol.compression import (
    COMPRESSION_BY_NAME,
    COMPRESSION_GZIP,
    COMPRESSION_NONE,
    COMPRESSION_ZSTD,
    recompress_batch,
)
from oncestream.protocol.records import NewRecord, decode_batch, decode_batches, encode_batch

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
TOPIC_TYPES = {"uncompressed": "none", "gzip": "gzip", "snappy": "snappy", "lz4": "lz4", "zstd": "zstd"}


def _records(count: int = 20) -> list[NewRecord]:
    return [
        NewRecord(value=b"value-%d " % i * 10, key=b"key-%d" % i, headers=[("h", b"%d" % i)], timestamp_ms=1000 + i * 7)
        for i in range(count)
    ]


def _batch(codec: str, **kwargs) -> bytes:
    return encode_batch(_records(), now_ms=1000, compression=COMPRESSION_BY_NAME[codec], **kwargs)


def _comparable(batch: bytes) -> tuple:
    decoded = decode_batch(batch)
    h = decoded.header
    header_facts = (h.last_offset_delta, h.base_timestamp, h.max_timestamp, h.producer_id, h.producer_epoch,
                    h.base_sequence, h.record_count, h.is_transactional, h.is_control,
                    h.attributes & ~rb.ATTR_COMPRESSION_MASK)
    return header_facts, [(r.offset, r.timestamp_ms, r.key, r.value, r.headers) for r in decoded.records]


@pytest.mark.parametrize("source", CODECS)
@pytest.mark.parametrize("target", CODECS)
def test_recompress_batch_changes_only_codec_length_and_crc(source: str, target: str) -> None:
    original = _batch(source, producer_id=42, producer_epoch=3, base_sequence=17, transactional=True)
    rewritten = recompress_batch(original, COMPRESSION_BY_NAME[target])
    header = rb.parse_header(rewritten)
    assert header.compression == COMPRESSION_BY_NAME[target]
    assert header.crc == rb.compute_crc(rewritten)  # decode_batch verifies it again below
    assert header.size_bytes == len(rewritten)
    assert _comparable(rewritten) == _comparable(original)


def test_recompress_batch_of_undecodable_records_is_corrupt() -> None:
    batch = bytearray(_batch("gzip"))
    batch[rb.HEADER_SIZE_BYTES + 12 :] = b"\x00" * (len(batch) - rb.HEADER_SIZE_BYTES - 12)
    rb.write_crc(batch)
    with pytest.raises(CorruptRecordError):
        recompress_batch(bytes(batch), COMPRESSION_ZSTD)


def _open(tmp_path: Path, **config) -> PartitionLog:
    return PartitionLog.open(tmp_path / "t-0", LogConfig(**config), 0)


def _stored(plog: PartitionLog) -> list:
    return list(decode_batches(b"".join(plog.read(plog.log_start_offset, 2**31).chunks)))


@pytest.mark.parametrize("topic_type", sorted(TOPIC_TYPES))
def test_log_stores_the_topic_codec_whatever_the_producer_used(tmp_path: Path, topic_type: str) -> None:
    plog = _open(tmp_path, compression_type=topic_type)
    sent = [_batch(codec) for codec in CODECS]
    for batch in sent:
        plog.append(batch, 5000)
    stored = _stored(plog)
    want = COMPRESSION_BY_NAME[TOPIC_TYPES[topic_type]]
    assert [b.header.compression for b in stored] == [want] * len(CODECS)
    assert [b.header.base_offset for b in stored] == [i * 20 for i in range(len(CODECS))]
    for index, (batch, original) in enumerate(zip(stored, sent)):
        _, original_records = _comparable(original)
        assert [(r.offset - index * 20, r.timestamp_ms, r.key, r.value, r.headers) for r in batch.records] == \
            original_records
    plog.close()


def test_compression_type_producer_stores_batches_verbatim(tmp_path: Path) -> None:
    plog = _open(tmp_path)  # the default: producer
    sent = [_batch(codec) for codec in CODECS]
    for batch in sent:
        plog.append(batch, 5000)
    data = b"".join(plog.read(0, 2**31).chunks)
    assert [bytes(batch)[8:] for _, batch in rb.iter_batches(data)] == [batch[8:] for batch in sent]
    plog.close()


def test_idempotent_retry_of_a_recompressed_batch_is_a_duplicate(tmp_path: Path) -> None:
    """KIP-98 idempotence: the retry is recognised by producer id/epoch/sequence, which the rewrite keeps."""
    plog = _open(tmp_path, compression_type="zstd")
    first = _batch("none", producer_id=7, producer_epoch=0, base_sequence=0)
    result = plog.append(first, 5000)
    retry = plog.append(first, 6000)
    assert retry.duplicate
    assert (retry.base_offset, retry.last_offset) == (result.base_offset, result.last_offset)
    nxt = plog.append(_batch("gzip", producer_id=7, producer_epoch=0, base_sequence=20), 7000)
    assert nxt.base_offset == 20
    assert not nxt.duplicate
    assert [b.header.base_sequence for b in _stored(plog)] == [0, 20]
    plog.close()


def test_transactional_batch_recompressed_keeps_the_transaction_open_until_its_marker(tmp_path: Path) -> None:
    """KIP-98: the rewritten batch is still transactional (LSO held back); the COMMIT marker the
    broker writes stays an uncompressed control batch, as in Kafka."""
    plog = _open(tmp_path, compression_type="lz4")
    plog.append(_batch("none", producer_id=9, producer_epoch=1, base_sequence=0, transactional=True), 5000)
    assert plog.last_stable_offset == 0
    assert plog.high_watermark == 20
    plog.append_marker(producer_id=9, producer_epoch=1, commit=True, coordinator_epoch=0, now_ms=6000)
    assert plog.last_stable_offset == plog.high_watermark == 21
    data, marker = _stored(plog)
    assert data.header.is_transactional
    assert data.header.compression == COMPRESSION_BY_NAME["lz4"]
    assert marker.header.is_control
    assert marker.header.compression == COMPRESSION_NONE
    plog.close()


def test_config_change_applies_from_the_next_append(tmp_path: Path) -> None:
    plog = _open(tmp_path)
    plog.append(_batch("none"), 5000)
    plog.update_config(LogConfig(compression_type="gzip", compression_gzip_level=9))
    plog.append(_batch("none"), 5000)
    assert [b.header.compression for b in _stored(plog)] == [COMPRESSION_NONE, COMPRESSION_GZIP]
    plog.close()


def test_max_message_bytes_applies_after_recompression(tmp_path: Path) -> None:
    """Kafka re-checks the size of a rewritten batch (RecordTooLargeException)."""
    compressible = encode_batch([NewRecord(value=b"a" * 5000)], now_ms=0, compression=COMPRESSION_ZSTD)
    plog = _open(tmp_path, compression_type="uncompressed", max_message_bytes=1000)
    with pytest.raises(MessageTooLargeError):
        plog.append(compressible, 5000)
    assert plog.log_end_offset == 0
    plog.close()


@pytest.mark.parametrize(("name", "value"), [("compression.type", "brotli"), ("compression.zstd.level", "23"),
                                        ("compression.lz4.level", "0"), ("compression.gzip.level", "0")])
def test_bad_compression_configs_are_invalid_config(name: str, value: str) -> None:
    from oncestream.errors import InvalidConfigError

    with pytest.raises(InvalidConfigError):
        LogConfig.from_topic_configs({name: value})


def test_compression_levels_are_used(tmp_path: Path) -> None:
    """compression.<codec>.level (KIP-390) reaches the codec: level 1 and level 9 gzip differ."""
    data = _batch("none")
    fast = recompress_batch(data, COMPRESSION_GZIP, 1)
    best = recompress_batch(data, COMPRESSION_GZIP, 9)
    assert _comparable(fast) == _comparable(best)
    assert fast != best
    assert LogConfig(compression_type="gzip", compression_gzip_level=1).target_compression == (COMPRESSION_GZIP, 1)
    assert LogConfig(compression_type="zstd").target_compression == (COMPRESSION_ZSTD, 3)
    assert LogConfig(compression_type="uncompressed").target_compression == (COMPRESSION_NONE, None)
    assert LogConfig().target_compression is None


# --- recompression ahead of the append (the broker's codec threads) ------------------------------


def test_recompressed_records_rewrites_one_good_batch() -> None:
    from oncestream.log.recompression import recompressed_records

    config = LogConfig(compression_type="zstd")
    original = _batch("none", producer_id=5, producer_epoch=0, base_sequence=0)
    out = recompressed_records(config, original)
    assert out is not None
    assert rb.parse_header(out).compression == COMPRESSION_ZSTD
    assert _comparable(out) == _comparable(original)


def test_recompressed_records_leaves_to_the_log_what_it_must_refuse_or_keep() -> None:
    """Nothing is rewritten ahead that the log would refuse on the original bytes (bad CRC: a
    rewrite would hide the corruption behind a fresh CRC; over max.message.bytes; several
    batches), nor what needs no rewrite (right codec, producer, control batches)."""
    from oncestream.log.recompression import recompressed_records

    zstd = LogConfig(compression_type="zstd")
    bad_crc = bytearray(_batch("none"))
    bad_crc[-1] ^= 0xFF
    marker = encode_batch([NewRecord(value=b"\x00\x00\x00\x00\x00\x00", key=b"\x00\x00\x00\x01")], now_ms=0,
                          producer_id=1, producer_epoch=0, transactional=True, control=True)
    assert recompressed_records(zstd, bytes(bad_crc)) is None
    assert recompressed_records(LogConfig(compression_type="zstd", max_message_bytes=100), _batch("none")) is None
    assert recompressed_records(zstd, _batch("none") + _batch("none")) is None
    assert recompressed_records(zstd, _batch("zstd")) is None
    assert recompressed_records(LogConfig(), _batch("none")) is None
    assert recompressed_records(zstd, marker) is None
    assert recompressed_records(zstd, b"\x00\x01garbage") is None


def test_log_refuses_a_corrupt_batch_on_a_recompressing_topic(tmp_path: Path) -> None:
    plog = _open(tmp_path, compression_type="gzip")
    bad_crc = bytearray(_batch("none"))
    bad_crc[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        plog.append(bytes(bad_crc), 0)
    assert plog.log_end_offset == 0
    plog.close()
