"""Where a benchmark's topic ends now (shared by the bench scripts)."""

from __future__ import annotations


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """The high watermark of each of ``topic``'s ``partitions`` (partition -> offset), by
    ListOffsets through our client."""
    from oncestream.client import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    finally:
        consumer.close()
