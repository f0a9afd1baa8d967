"""Record batch compression: the codec ids of a batch's attributes and their (de)compression.

Codecs come from ``cramjam``. Every reader of records decompresses through ``decompress`` (the
record codec, the log's compaction rewrite, the client's and the Spark reader's fetch decoders),
so a codec failure is always a CorruptRecordError.
"""

from __future__ import annotations

import struct

import cramjam

from oncestream.errors import CorruptRecordError

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

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_INT32 = struct.Struct(">i")


def compress(codec: int, data: bytes) -> bytes:
    """Compress a records section with the batch codec id."""
    if codec == COMPRESSION_NONE:
        return data
    if codec == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == COMPRESSION_SNAPPY:
        # Raw snappy, as librdkafka writes it; Java's reader accepts raw as well as xerial frames.
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == COMPRESSION_LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise CorruptRecordError(f"unknown compression codec {codec}")


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
