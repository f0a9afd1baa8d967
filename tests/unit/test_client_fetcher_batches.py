"""The consumer's fetcher learns its next fetch position from batch headers alone
(``protocol.batch_walk``), and hands corrupt data to the application instead of losing it."""

from __future__ import annotations

import asyncio
import collections
import struct
import threading
from types import SimpleNamespace

from oncestream.client.consumer.fetcher import Fetcher, PartitionState
from oncestream.protocol.records import NewRecord, encode_batch

CONF = {
    "fetch.wait.max.ms": 500, "fetch.min.bytes": 1, "fetch.max.bytes": 1 << 20,
    "max.partition.fetch.bytes": 1 << 20, "isolation.level": "read_committed",
    "queued.max.messages.kbytes": 1024, "retry.backoff.ms": 100,
}


def _fetcher() -> tuple[Fetcher, PartitionState, collections.deque]:
    state = PartitionState("t", 0)
    state.position = state.fetch_position = 5
    completed: collections.deque = collections.deque()
    fetcher = Fetcher(CONF, None, {("t", 0): state}, threading.Lock(), completed, lambda: None)  # type: ignore[arg-type]
    return fetcher, state, completed


def _response(records: bytes) -> SimpleNamespace:
    part = SimpleNamespace(partition_index=0, error_code=0, records=records, high_watermark=100,
                           last_stable_offset=100, log_start_offset=0,
                           aborted_transactions=[SimpleNamespace(producer_id=7, first_offset=5)])
    return SimpleNamespace(error_code=0, responses=[SimpleNamespace(topic="t", partitions=[part])])


def test_next_fetch_starts_after_the_last_complete_batch() -> None:
    fetcher, state, completed = _fetcher()
    whole = encode_batch([NewRecord(value=b"a"), NewRecord(value=b"b")], now_ms=1, base_offset=5)
    cut = encode_batch([NewRecord(value=b"c")], now_ms=1, base_offset=7)[:30]
    fetcher._handle_response(_response(whole + cut), [(state, 0, 5)])
    assert state.fetch_position == 7
    (fetch,) = completed
    assert fetch.aborted == [(7, 5)]


def test_a_corrupt_batch_length_reaches_the_application() -> None:
    """A batch whose length field is below the header size is corruption: the fetch position
    stays, and the records go to the user's thread, whose decoder raises CorruptRecordError
    (instead of the whole response being dropped and fetched again forever)."""
    fetcher, state, completed = _fetcher()
    bad = bytearray(encode_batch([NewRecord(value=b"a")], now_ms=1, base_offset=5))
    struct.pack_into(">i", bad, 8, 10)
    fetcher._handle_response(_response(bytes(bad)), [(state, 0, 5)])
    assert state.fetch_position == 5
    (fetch,) = completed
    assert fetch.records == bytes(bad)


class InjectedCrash(BaseException):
    """Escapes the fetcher's per-iteration ``except Exception``: the task itself dies."""


def test_a_crashed_fetch_task_is_kept_for_the_consumer_and_the_user_is_woken() -> None:
    """A fetch task that dies is logged with its traceback and kept in ``crash_error`` (the
    consumer's poll reports it as a fatal error event); close() does not raise it again."""
    woken: list[bool] = []

    class BrokenCluster:
        def leader_for(self, topic: str, partition: int) -> int:
            raise InjectedCrash("injected: the cluster view broke")

    state = PartitionState("t", 0)
    state.position = state.fetch_position = 0
    fetcher = Fetcher(CONF, BrokenCluster(), {("t", 0): state}, threading.Lock(),  # type: ignore[arg-type]
                      collections.deque(), lambda: woken.append(True))

    async def scenario() -> None:
        fetcher.start()
        for _ in range(50):
            await asyncio.sleep(0)
        assert isinstance(fetcher.crash_error, InjectedCrash)
        assert woken, "the user's thread is woken to report it"
        await fetcher.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))
