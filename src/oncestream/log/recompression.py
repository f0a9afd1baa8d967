"""When the log rewrites a batch to the topic's compression.type, and doing it ahead of the append.

Kafka's LogValidator recompresses a batch whose codec differs from the topic's ``compression.type``
(unless that is ``producer``); transaction markers (control batches) are never rewritten. The
rule is ``needs_recompression``; ``PartitionLog.append`` applies it to every batch, so a batch is
always stored right whatever the caller did.

Recompressing costs milliseconds per MiB (zstd level 3 about 10 ms, lz4's default level 9, a high
compression level as in Kafka, far more), and cramjam releases the GIL while it works, so the
broker's Produce handler calls ``recompressed_records`` on a worker thread before it checks and
appends: the event loop keeps serving other connections meanwhile, and the append then finds the
batch already in the topic's codec. Only the codec work moves; the checks and the append stay one
uninterrupted step on the loop (no await between the transaction check and the append).
"""

from __future__ import annotations

from oncestream.errors import OnceStreamError
from oncestream.log.config import LogConfig
from oncestream.protocol import record_batch as rb
from oncestream.protocol.compression import recompress_batch


def needs_recompression(config: LogConfig, header: rb.BatchHeader) -> bool:
    """Whether the log stores ``header``'s batch rewritten to the topic's codec."""
    target = config.target_compression
    return target is not None and not header.is_control and header.compression != target[0]


def recompressed_records(config: LogConfig, records: bytes) -> bytes | None:
    """``records`` (one produce partition's data) with its single batch rewritten to the topic's
    codec, or None when there is nothing to do ahead of the append: not exactly one batch, a bad
    CRC, a batch over max.message.bytes (the log refuses those, as Kafka does, on the original),
    a codec already right, or records that do not decompress (the log reports that). Pure: safe
    on any thread, with ``config`` the log's settings when the request arrived."""
    try:
        batches = list(rb.iter_batches(records))
    except OnceStreamError:
        return None
    if len(batches) != 1:
        return None
    header, batch = batches[0]
    if header.size_bytes > config.max_message_bytes or not needs_recompression(config, header):
        return None
    target = config.target_compression
    if target is None:  # for the type checker: needs_recompression said there is one
        return None
    try:
        return recompress_batch(batch, target[0], target[1])
    except OnceStreamError:
        return None
