"""Group-commit flushing and durable producer-id blocks (sans sockets)."""

from __future__ import annotations

import asyncio

import pytest

from oncestream.broker.flusher import GroupCommitFlusher
from oncestream.coordinator.producer_ids import ProducerIdManager
from oncestream.errors import StorageError


class CountingLog:
    def __init__(self, fail: bool = False) -> None:
        self.flushes = 0
        self.fail = fail

    def flush(self) -> None:
        self.flushes += 1
        if self.fail:
            raise StorageError("disk gone")


def test_requests_in_one_loop_turn_share_one_fsync_per_log() -> None:
    async def scenario() -> tuple[int, int]:
        flusher = GroupCommitFlusher()
        a, b = CountingLog(), CountingLog()
        waits = [flusher.flush_soon(a) for _ in range(10)] + [flusher.flush_soon(b) for _ in range(3)]
        await asyncio.gather(*waits)
        await flusher.flush_soon(a)  # a later request gets a fsync of its own
        return a.flushes, b.flushes

    assert asyncio.run(scenario()) == (2, 1)


def test_a_failed_fsync_fails_every_waiting_acknowledgement() -> None:
    async def scenario() -> list[BaseException | None]:
        flusher = GroupCommitFlusher()
        log = CountingLog(fail=True)
        return await asyncio.gather(flusher.flush_soon(log), flusher.flush_soon(log), return_exceptions=True)

    results = asyncio.run(scenario())
    assert all(isinstance(r, StorageError) for r in results)


def test_producer_ids_resume_past_the_reserved_block_after_a_crash(tmp_path) -> None:
    first = ProducerIdManager(tmp_path, block_size=10)
    handed_out = [first.next_id() for _ in range(3)]
    # No clean shutdown: a new manager (a restarted broker) must skip the whole reserved block.
    second = ProducerIdManager(tmp_path, block_size=10)
    later = [second.next_id() for _ in range(12)]
    assert handed_out == [0, 1, 2]
    assert later[0] == 10 and later == sorted(set(later))
    assert not set(handed_out) & set(later)


def test_block_reservation_failure_hands_out_nothing(tmp_path, monkeypatch) -> None:
    manager = ProducerIdManager(tmp_path, block_size=10)

    def broken(_new_end: int) -> None:
        raise OSError("read-only file system")

    monkeypatch.setattr(manager, "_reserve", broken)
    with pytest.raises(OSError):
        manager.next_id()


def test_a_data_directory_is_used_by_one_broker_at_a_time(tmp_path) -> None:
    """A second broker on a live broker's data directory refuses to start (two writers would
    interleave batches in one segment); the lock goes with close() and with the process."""
    from oncestream.broker.config import BrokerConfig
    from oncestream.broker.state import BrokerState, DataDirInUseError

    config = BrokerConfig.from_properties("127.0.0.1", 0, {})
    first = BrokerState(tmp_path / "data", config)
    try:
        with pytest.raises(DataDirInUseError, match=r"in use by another broker \(pid \d+\)"):
            BrokerState(tmp_path / "data", config)
    finally:
        first.close()
    BrokerState(tmp_path / "data", config).close()
