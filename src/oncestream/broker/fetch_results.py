"""One partition's Fetch answer from a read: the local log's and the diskless reader's alike."""

from __future__ import annotations

from oncestream.log.read_path import ReadResult
from oncestream.protocol.fetch_response import PartitionFetchResult


def fill_fetch_result(result: PartitionFetchResult, read: ReadResult, read_committed: bool) -> int:
    """Copy ``read`` (records, offsets, aborted transactions for read_committed) into ``result``;
    the bytes it adds to the response."""
    # A zero-copy read's file ranges (the local log's Fetch), else the bytes read.
    result.chunks = read.file_chunks if read.file_chunks is not None else read.chunks
    result.size_bytes = read.size_bytes
    result.high_watermark = read.high_watermark
    result.last_stable_offset = read.last_stable_offset
    result.log_start_offset = read.log_start_offset
    if read_committed:
        result.aborted_transactions = list(read.aborted_transactions or ())
    return read.size_bytes
