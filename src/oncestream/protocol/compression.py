"""Record batch compression: the codec ids of a batch's attributes and their (de)compression.

Codecs come from ``cramjam``. Every reader of records decompresses through ``decompress`` (the
record codec, the log's compaction rewrite, the client's and the Spark reader's fetch decoders),
so a codec failure is always a CorruptRecordError. ``recompress_batch`` is the broker's rewrite of
a whole batch to a topic's ``compression.type`` (Kafka's LogValidator does the same).
"""

from __future__ import annotations

import struct

import cramjam

from oncestream.errors import CorruptRecordError
from oncestream.protocol import record_batch as rb

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
COMPRESSION_BY_NAME = {
    "none": COMPRESSION_NONE,
    "gzip": COMPRESSION_GZIP,
    "snappy": COMPRESSION_SNAPPY,
    "lz4": COMPRESSION_LZ4,
    "zstd": COMPRESSION_ZSTD,
}

# Kafka's compression levels (KIP-390): the defaults and the accepted ranges of the topic configs
# compression.gzip.level (-1: zlib's default, 6), compression.lz4.level and compression.zstd.level.
GZIP_LEVEL_DEFAULT, GZIP_LEVEL_RANGE = -1, (1, 9)
LZ4_LEVEL_DEFAULT, LZ4_LEVEL_RANGE = 9, (1, 17)
ZSTD_LEVEL_DEFAULT, ZSTD_LEVEL_RANGE = 3, (-131072, 22)
_ZLIB_DEFAULT_LEVEL = 6

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_BATCH_LENGTH_OFFSET = 8


def compress(codec: int, data: bytes, level: int | None = None) -> bytes:
    """Compress a records section with the batch codec id; ``level`` None is cramjam's default
    for the codec (snappy has no level). Kafka's level numbers: gzip -1 means zlib's default."""
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        if level is None:
            return bytes(cramjam.gzip.compress(data))
        return bytes(cramjam.gzip.compress(data, level=_ZLIB_DEFAULT_LEVEL if level == -1 else level))
    if codec == COMPRESSION_SNAPPY:
        # Raw snappy, as librdkafka writes it; Java's reader accepts raw as well as xerial frames.
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == COMPRESSION_LZ4:
        return bytes(cramjam.lz4.compress(data) if level is None else cramjam.lz4.compress(data, level=level))
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data) if level is None else cramjam.zstd.compress(data, level=level))
    raise CorruptRecordError(f"unknown compression codec {codec}")


def recompress_batch(batch: bytes | bytearray | memoryview, codec: int, level: int | None = None) -> bytes:
    """A copy of one record batch v2 whose records section is compressed with ``codec``.

    Everything the header says about the records is kept (base offset, producer id and epoch,
    base sequence, transactional and control flags, timestamp type, base and max timestamps,
    last offset delta, record count) and the records themselves are byte for byte the same once
    decompressed, so offsets, sequences and timestamps do not move: only the codec bits of the
    attributes, the batch length and the CRC change. This is how Kafka's broker honours a
    topic's ``compression.type`` when the producer used another codec. The CRC of ``batch`` is
    the caller's to have checked; CorruptRecordError if its records do not decompress.
    """
    view = memoryview(batch)
    header = rb.parse_header(view)
    records = decompress(header.compression, view[rb.HEADER_SIZE_BYTES : header.size_bytes])
    payload = compress(codec, records, level)
    out = bytearray(rb.HEADER_SIZE_BYTES + len(payload))
    out[: rb.HEADER_SIZE_BYTES] = view[: rb.HEADER_SIZE_BYTES]
    out[rb.HEADER_SIZE_BYTES :] = payload
    attributes = (header.attributes & ~rb.ATTR_COMPRESSION_MASK) | codec
    _INT16.pack_into(out, rb.ATTRIBUTES_OFFSET, attributes)
    _INT32.pack_into(out, _BATCH_LENGTH_OFFSET, len(out) - rb.LOG_OVERHEAD_BYTES)
    rb.write_crc(out)
    return bytes(out)


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """Decompress a records section; raise CorruptRecordError on any codec failure."""
    try:
        if codec == COMPRESSION_NONE:
            return bytes(data)
        if codec == COMPRESSION_GZIP:
            return bytes(cramjam.gzip.decompress(bytes(data)))
        if codec == COMPRESSION_SNAPPY:
            raw = bytes(data)
            if raw.startswith(_XERIAL_MAGIC):
                return _decompress_xerial(raw)
            return bytes(cramjam.snappy.decompress_raw(raw))
        if codec == COMPRESSION_LZ4:
            return bytes(cramjam.lz4.decompress(bytes(data)))
        if codec == COMPRESSION_ZSTD:
            return bytes(cramjam.zstd.decompress(bytes(data)))
    except CorruptRecordError:
        raise
    except Exception as exc:  # cramjam raises its own DecompressionError types
        raise CorruptRecordError(f"cannot decompress batch: {exc}") from exc
    raise CorruptRecordError(f"unknown compression codec {codec}")


def _decompress_xerial(raw: bytes) -> bytes:
    """Java's snappy-java stream framing: 16-byte header, then (int32 length, raw block)*."""
    out = bytearray()
    pos = 16
    while pos < len(raw):
        (length,) = _INT32.unpack_from(raw, pos)
        pos += 4
        out += cramjam.snappy.decompress_raw(raw[pos : pos + length])
        pos += length
    return bytes(out)
