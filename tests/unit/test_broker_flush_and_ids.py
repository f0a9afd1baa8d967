"""Group-commit flushing and durable producer-id blocks (sans sockets)."""

from __future__ import annotations

import asyncio
import errno
import threading

import pytest
from kio.schema.errors import ErrorCode

from oncestream.broker.flusher import GroupCommitFlusher
from oncestream.coordinator.producer_ids import ProducerIdManager
from oncestream.errors import StorageError
from oncestream.log.config import LogConfig
from oncestream.log.flush_job import FdatasyncFn, FlushJob
from oncestream.log.partition_log import PartitionLog
from tests.support.narrow import of_type, present
from tests.support.wire import record_batch


class CountingLog:
    """A Flushable whose rounds count themselves; ``gate`` (if set) holds every round's fsync."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.begun = 0
        self.finished = 0
        self.failed: list[BaseException] = []
        self.running = threading.Event()
        self.gate = gate

    def flush(self) -> None:
        """Only called without a running loop, which these tests always have."""
        pytest.fail("CountingLog.flush called: the flusher flushed outside the event loop")

    def begin_flush(self, fdatasync: FdatasyncFn | None = None) -> FlushJob:
        self.begun += 1
        log = self

        class _Job(FlushJob):
            def run(self) -> None:
                log.running.set()
                if log.gate is not None and not log.gate.wait(30):
                    raise StorageError("gate never opened")

        return _Job([], None, 0)

    def finish_flush(self, job: FlushJob) -> None:
        self.finished += 1

    def fail_flush(self, job: FlushJob, error: BaseException) -> None:
        self.failed.append(error)


def test_requests_in_one_loop_turn_share_one_fsync_per_log() -> None:
    async def scenario() -> tuple[int, int]:
        flusher = GroupCommitFlusher()
        a, b = CountingLog(), CountingLog()
        waits = [flusher.flush_soon(a) for _ in range(10)] + [flusher.flush_soon(b) for _ in range(3)]
        await asyncio.gather(*waits)
        await flusher.flush_soon(a)  # a later request gets a fsync of its own
        return a.finished, b.finished

    assert asyncio.run(scenario()) == (2, 1)


def test_a_request_arriving_during_a_round_waits_for_a_round_of_its_own() -> None:
    """The second round must not start while the first one's fsyncs are running: it would find
    the dirty marks cleared and could answer before the bytes of the first are durable."""
    gate = threading.Event()

    async def scenario() -> list[str]:
        flusher = GroupCommitFlusher()
        log = CountingLog(gate)
        events: list[str] = []
        first = flusher.flush_soon(log)
        first.add_done_callback(lambda _: events.append("first answered"))
        await asyncio.get_running_loop().run_in_executor(None, log.running.wait, 30)
        second = flusher.flush_soon(log)
        second.add_done_callback(lambda _: events.append("second answered"))
        for _ in range(5):  # turns of the loop pass; the first round is still held
            await asyncio.sleep(0)
        events.append(f"rounds begun while held: {log.begun}")
        gate.set()
        await asyncio.gather(first, second)
        events.append(f"rounds: {log.begun}")
        return events

    assert asyncio.run(scenario()) == [
        "rounds begun while held: 1", "first answered", "second answered", "rounds: 2",
    ]


def test_a_failed_fsync_fails_every_waiting_acknowledgement(tmp_path) -> None:
    """Issue 10 point 2: a failed fsync under flush.messages=1 answers every waiting produce with
    KAFKA_STORAGE_ERROR, and the log goes offline (a second fsync would wrongly succeed)."""
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(flush_messages=1), 0)
    log.append(record_batch([b"v"], timestamp_ms=0), 0)

    def broken_disk(fd: int) -> None:
        raise OSError(errno.EIO, "injected I/O error")

    async def scenario() -> list[BaseException | None]:
        flusher = GroupCommitFlusher(fdatasync=broken_disk)
        return list(await asyncio.gather(flusher.flush_soon(log), flusher.flush_soon(log), return_exceptions=True))

    results = asyncio.run(scenario())
    assert [type(r) for r in results] == [StorageError, StorageError]
    assert all(of_type(r, StorageError).code == ErrorCode.kafka_storage_error for r in results)
    with pytest.raises(StorageError, match="offline"):
        log.append(record_batch([b"w"], timestamp_ms=0), 0)
    log.close()  # no clean-shutdown marker for a log whose fsync failed
    assert not (tmp_path / "t-0" / ".clean_shutdown").exists()


def test_a_log_closed_while_its_fsync_failed_unheard_is_not_marked_clean(tmp_path) -> None:
    """The broker's shutdown can close a log before the loop hears that its last round failed."""
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(flush_messages=1), 0)
    log.append(record_batch([b"v"], timestamp_ms=0), 0)

    def broken_disk(fd: int) -> None:
        raise OSError(errno.EIO, "injected I/O error")

    job = present(log.begin_flush(broken_disk), "flush job")
    with pytest.raises(StorageError):
        job.run()
    log.close()
    assert not (tmp_path / "t-0" / ".clean_shutdown").exists()


def test_producer_ids_resume_past_the_reserved_block_after_a_crash(tmp_path) -> None:
    first = ProducerIdManager(tmp_path, block_size=10)
    handed_out = [first.next_id() for _ in range(3)]
    # No clean shutdown: a new manager (a restarted broker) must skip the whole reserved block.
    second = ProducerIdManager(tmp_path, block_size=10)
    later = [second.next_id() for _ in range(12)]
    assert handed_out == [0, 1, 2]
    assert later[0] == 10
    assert later == sorted(set(later))
    assert not set(handed_out) & set(later)


def test_block_reservation_failure_hands_out_nothing(tmp_path, monkeypatch) -> None:
    from oncestream.coordinator import producer_ids

    manager = ProducerIdManager(tmp_path, block_size=10)

    def broken(*_args, **_kwargs) -> None:
        raise OSError("read-only file system")

    with monkeypatch.context() as patch:
        patch.setattr(producer_ids, "write_file_atomically", broken)
        with pytest.raises(StorageError):
            manager.next_id()
        assert manager.available == 0
        assert manager.take_id() is None
    assert manager.next_id() == 0, "the next request reserves again"


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


def test_background_flushes_queue_one_round_however_often_they_are_asked_for() -> None:
    """A roll makes a flush due on every later produce until a round finishes: while one runs
    (held by the gate), asking again queues one next round, not one waiter per request."""
    gate = threading.Event()

    async def scenario() -> tuple[int, int, int]:
        flusher = GroupCommitFlusher()
        log = CountingLog(gate)
        flusher.flush_in_background(log)
        await asyncio.get_running_loop().run_in_executor(None, log.running.wait, 30)
        for _ in range(1000):
            flusher.flush_in_background(log)
        queued = len(flusher._waiting[id(log)][1])
        gate.set()
        waiter = flusher.flush_soon(log)  # joins the queued round
        await waiter
        return queued, log.begun, log.finished

    assert asyncio.run(scenario()) == (1, 2, 2)



def test_no_producer_id_above_the_durable_block_while_the_next_one_is_written(tmp_path) -> None:
    """KIP-98 uniqueness across restarts: the next block is asked for early, but its ids are
    handed out only once its write returned; one write in flight at a time (a second one could
    rename last with a smaller end)."""
    manager = ProducerIdManager(tmp_path, block_size=10)
    assert manager.take_id() is None
    assert manager.reservation_due()
    first = manager.begin_reserve()
    first.run()
    manager.finish_reserve(first)
    taken = [manager.take_id() for _ in range(9)]
    assert taken == list(range(9))
    assert manager.reservation_due()
    second = manager.begin_reserve()
    with pytest.raises(Exception, match="already being reserved"):
        manager.begin_reserve()
    assert manager.take_id() == 9
    assert manager.take_id() is None, "an id of a block whose write has not returned"
    second.run()
    manager.finish_reserve(second)
    manager.finish_reserve(second)  # idempotent
    assert manager.take_id() == 10
    assert ProducerIdManager(tmp_path).next_id() == 20, "a restart resumes past the durable end"


def test_producer_id_waiters_share_one_block_write_and_a_failed_one_is_retried(tmp_path) -> None:
    """ProducerIdService.ready: requests needing a new block await one shared write on the disk
    threads (the loop stays free); a failed write fails them all (nothing handed out) and the
    next request writes again; the next block is asked for before the current one runs out."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    from oncestream.broker.producer_id_service import ProducerIdService

    writes: list[int] = []
    fail_next = [True]

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".tmp"):
            writes.append(fd)
            if fail_next[0]:
                fail_next[0] = False
                raise OSError(errno.EIO, "injected")
        os.fsync(fd)

    executor = ThreadPoolExecutor(1)
    service = ProducerIdService(ProducerIdManager(tmp_path, block_size=10), executor, fsync)

    async def scenario() -> list[int]:
        failed = await asyncio.gather(service.ready(), service.ready(), return_exceptions=True)
        assert all(isinstance(e, StorageError) for e in failed), (failed, writes)
        assert len(writes) == 1, (failed, writes)
        assert service.manager.available == 0
        await asyncio.gather(service.ready(), service.ready())
        ids = [service.next_id() for _ in range(9)]  # the 9th leaves one: the next block is asked for
        await asyncio.sleep(0)
        await service.ready()
        ids.append(service.next_id())
        await service.ready()  # waits for the prefetched block, if it is still being written
        ids.append(service.next_id())
        return ids

    try:
        ids = asyncio.run(scenario())
    finally:
        executor.shutdown(wait=True)
    assert ids == list(range(11))
    assert len(writes) == 3
    assert ProducerIdManager(tmp_path).next_id() == 20
