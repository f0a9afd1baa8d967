"""The broker's log cleaner task (broker/cleaner.py) driven in-process against a real BrokerState:
it compacts every compacted topic (internal ones included) off the event loop thread, ranks logs
by dirtiness, survives failing cleans, and stops cleanly when cancelled."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

import pytest

from oncestream.broker.cleaner import FailureTracker, LogCleaner
from oncestream.broker.config import BrokerConfig
from oncestream.broker.state import BrokerState
from oncestream.errors import InvalidConfigError, StorageError
from oncestream.log import compaction, log_cleaning
from oncestream.protocol.records import NewRecord, decode_batches, encode_batch

T0 = 1_700_000_000_000
WAIT_CAP_S = 30.0  # generous cap for polling loops; never an assertion about speed


class Clock:
    """The broker's only clock, under the test's control."""

    def __init__(self) -> None:
        self.now_ms = T0

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state(tmp_path: Path, clock: Clock):
    props = {"log.cleaner.backoff.ms": "10", "log.cleaner.min.cleanable.ratio": "0.01", "log.segment.bytes": "400"}
    broker_state = BrokerState(tmp_path / "data", BrokerConfig.from_properties("127.0.0.1", 0, props), clock_ms=clock)
    yield broker_state
    broker_state.close()


def fill(state: BrokerState, topic: str, keys: int, rounds: int, now_ms: int = T0) -> dict[bytes, bytes]:
    """Overwrite ``keys`` keys ``rounds`` times, then seal the segment; returns the latest values."""
    partition_log = state.logs.get(topic, 0)
    latest = {}
    for round_number in range(rounds):
        for k in range(keys):
            key, value = f"key-{k}".encode(), f"v{round_number}".encode()
            partition_log.append(encode_batch([NewRecord(value=value, key=key)], now_ms=now_ms), now_ms)
            latest[key] = value
    before = partition_log.segment_count
    while partition_log.segment_count == before:
        value = f"filler-{partition_log.log_end_offset}".encode() + b"x" * 40
        partition_log.append(encode_batch([NewRecord(value=value, key=b"filler")], now_ms=now_ms), now_ms)
        latest[b"filler"] = value
    return latest


def contents(state: BrokerState, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    partition_log = state.logs.get(topic, 0)
    result = partition_log.read(partition_log.log_start_offset, 2**30)
    return [(r.key, r.value) for b in decode_batches(b"".join(result.chunks)) for r in b.records]


def assert_compacted(state: BrokerState, topic: str, latest: dict[bytes, bytes], written: int) -> None:
    """Every key's latest value exactly once, fewer records than were written (the active
    segment, never cleaned, may still hold an older value next to the newest)."""
    records = contents(state, topic)
    for key, value in latest.items():
        assert records.count((key, value)) == 1, (topic, key)
    assert {key for key, _ in records} == set(latest)
    assert len(records) < written


def test_properties_configure_the_cleaner(state: BrokerState) -> None:
    cleaner = LogCleaner.for_state(state)
    assert (cleaner.backoff_ms, cleaner.enabled) == (10, True)
    assert cleaner.max_map_bytes == 128 * 1024 * 1024
    sized = LogCleaner.from_properties(state.logs, state.now_ms, {"log.cleaner.dedupe.buffer.size": "1000"})
    assert sized.max_map_bytes == 1000
    assert LogCleaner.from_properties(state.logs, state.now_ms, {}).backoff_ms == 15_000
    assert not LogCleaner.from_properties(state.logs, state.now_ms, {"log.cleaner.enable": "false"}).enabled
    with pytest.raises(InvalidConfigError):
        LogCleaner.from_properties(state.logs, state.now_ms, {"log.cleaner.backoff.ms": "soon"})


def test_clean_once_compacts_compacted_topics_off_the_loop_thread(
    state: BrokerState, monkeypatch: pytest.MonkeyPatch
) -> None:
    state.logs.create_topic("table", 1, {"cleanup.policy": "compact"})
    # The broker's own internal topic, created compacted by the group coordinator's service.
    assert state.logs.topics()["__consumer_offsets"].config.compacts
    state.logs.create_topic("stream", 1, {})
    latest = {"table": fill(state, "table", keys=3, rounds=5)}
    fill(state, "stream", keys=3, rounds=5)
    stream_before = contents(state, "stream")
    build_threads = []
    real_build = compaction.build_cleaned

    def recording_build(plan):
        build_threads.append(threading.get_ident())
        return real_build(plan)

    monkeypatch.setattr(compaction, "build_cleaned", recording_build)

    cleaner = LogCleaner.for_state(state)
    try:
        assert asyncio.run(cleaner.clean_once()) == 1
    finally:
        cleaner.close()

    assert len(build_threads) == 1
    assert threading.get_ident() not in build_threads
    for topic, expected in latest.items():
        assert_compacted(state, topic, expected, written=15)
    assert contents(state, "stream") == stream_before, "delete-policy topics are left alone"


def test_dirtiest_log_first(state: BrokerState) -> None:
    state.logs.create_topic("a", 1, {"cleanup.policy": "compact"})
    state.logs.create_topic("b", 1, {"cleanup.policy": "compact"})
    fill(state, "a", keys=20, rounds=1)
    fill(state, "b", keys=20, rounds=1)
    cleaner = LogCleaner.for_state(state)
    try:
        asyncio.run(cleaner.clean_once())
        fill(state, "a", keys=2, rounds=1)  # a little new dirt in a
        fill(state, "b", keys=2, rounds=8)  # much more in b
        assert [log.topic for log in cleaner.eligible_logs()] == ["b", "a"]
    finally:
        cleaner.close()


class Monotonic:
    """The cleaner's backoff clock, under the test's control."""

    def __init__(self) -> None:
        self.now_ms = 0.0

    def __call__(self) -> float:
        return self.now_ms


def _disk_full(plan):
    raise OSError(28, "No space left on device")


def test_a_failing_clean_is_logged_with_its_traceback_and_retried_after_a_backoff(
    state: BrokerState, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    state.logs.create_topic("table", 1, {"cleanup.policy": "compact"})
    expected = fill(state, "table", keys=3, rounds=5)
    partition_log = state.logs.get("table", 0)
    monotonic = Monotonic()
    cleaner = LogCleaner.for_state(state)
    cleaner.monotonic_ms = monotonic
    try:
        with monkeypatch.context() as patch:
            patch.setattr(compaction, "build_cleaned", _disk_full)
            with caplog.at_level(logging.ERROR, logger="oncestream.cleaner"):
                assert asyncio.run(cleaner.clean_once()) == 0
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1
        assert "No space left" in errors[0].getMessage()
        assert "table-0" in errors[0].getMessage()
        assert "\n" not in errors[0].getMessage()
        assert errors[0].exc_info is not None, "the traceback is recorded, not swallowed"
        failure = cleaner.failures.failures[("table", 0)]
        assert failure.count == 1
        assert "_disk_full" in failure.traceback
        # The plan was given back, but the partition backs off: the next pass leaves it alone...
        assert partition_log.compaction_candidate(state.now_ms()) is not None
        assert asyncio.run(cleaner.clean_once()) == 0
        # ...until its backoff has passed on the monotonic clock; a success ends the streak.
        monotonic.now_ms = failure.retry_at_ms
        assert asyncio.run(cleaner.clean_once()) == 1
        assert cleaner.failures.failures == {}
    finally:
        cleaner.close()
    assert_compacted(state, "table", expected, written=15)


def test_backoff_doubles_per_failure_up_to_its_cap() -> None:
    tracker = FailureTracker(base_backoff_ms=1000, max_backoff_ms=5000, max_failures=10)
    assert [tracker.backoff_ms(n) for n in range(1, 6)] == [1000, 2000, 4000, 5000, 5000]
    assert tracker.backoff_ms(10_000) == 5000
    error = OSError("bad")
    assert tracker.record(("t", 0), error, now_ms=100).retry_at_ms == 1100
    assert not tracker.may_try(("t", 0), 1099)
    assert tracker.may_try(("t", 0), 1100)
    assert tracker.record(("t", 0), error, now_ms=2000).retry_at_ms == 4000
    assert tracker.may_try(("t", 1), 0), "other partitions are not held back"


def test_a_partition_that_keeps_failing_is_marked_uncleanable_and_the_others_are_still_cleaned(
    state: BrokerState, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """As Kafka's LogCleanerManager: a partition whose cleaning keeps failing is given up on
    (uncleanable) instead of being retried forever; the cleaner goes on with every other one."""
    state.logs.create_topic("broken", 1, {"cleanup.policy": "compact"})
    state.logs.create_topic("fine", 1, {"cleanup.policy": "compact"})
    fill(state, "broken", keys=3, rounds=5)
    broken_before = contents(state, "broken")
    monotonic = Monotonic()
    cleaner = LogCleaner.from_properties(state.logs, state.now_ms, state.config.raw)
    cleaner.monotonic_ms = monotonic
    cleaner.failures.max_failures = 3
    real_build = compaction.build_cleaned
    attempts: list[str] = []

    def failing_for_broken(plan):
        topic = plan.directory.name.rsplit("-", 1)[0]  # a partition directory is <topic>-<partition>
        attempts.append(topic)
        if topic == "broken":
            return _disk_full(plan)
        return real_build(plan)

    monkeypatch.setattr(compaction, "build_cleaned", failing_for_broken)
    fine_latest: dict[bytes, bytes] = {}
    try:
        with caplog.at_level(logging.ERROR, logger="oncestream.cleaner"):
            for _ in range(3):
                fine_latest.update(fill(state, "fine", keys=3, rounds=3))  # new dirt every pass
                assert asyncio.run(cleaner.clean_once()) == 1, "the healthy partition is cleaned"
                monotonic.now_ms += cleaner.failures.max_backoff_ms  # past any backoff
        assert set(cleaner.uncleanable()) == {("broken", 0)}
        failure = cleaner.uncleanable()[("broken", 0)]
        assert failure.count == 3
        assert "No space left" in failure.error
        assert "Traceback" in failure.traceback
        assert "marked uncleanable" in caplog.records[-1].getMessage()
        # Given up on: later passes never try it again, and still clean the other partition.
        tries = attempts.count("broken")
        fine_latest.update(fill(state, "fine", keys=3, rounds=3))
        assert asyncio.run(cleaner.clean_once()) == 1
        assert attempts.count("broken") == tries == 3
    finally:
        cleaner.close()
    assert contents(state, "broken") == broken_before
    assert_compacted(state, "fine", fine_latest, written=3 * 4 * 3)


def test_a_re_created_topic_starts_without_the_old_failures(
    state: BrokerState, monkeypatch: pytest.MonkeyPatch
) -> None:
    state.logs.create_topic("table", 1, {"cleanup.policy": "compact"})
    fill(state, "table", keys=3, rounds=5)
    cleaner = LogCleaner.for_state(state)
    cleaner.failures.max_failures = 1
    try:
        with monkeypatch.context() as patch:
            patch.setattr(compaction, "build_cleaned", _disk_full)
            asyncio.run(cleaner.clean_once())
        assert set(cleaner.uncleanable()) == {("table", 0)}
        state.logs.delete_topic("table")
        state.logs.create_topic("table", 1, {"cleanup.policy": "compact"})
        expected = fill(state, "table", keys=3, rounds=5)
        assert asyncio.run(cleaner.clean_once()) == 1
        assert cleaner.uncleanable() == {}
    finally:
        cleaner.close()
    assert_compacted(state, "table", expected, written=15)


def test_run_cleans_in_the_background_and_stops_when_cancelled(
    state: BrokerState, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    state.logs.create_topic("table", 1, {"cleanup.policy": "compact"})
    expected = fill(state, "table", keys=3, rounds=5)
    cleaner = LogCleaner.for_state(state)
    real_clean_once = cleaner.clean_once

    async def scenario() -> None:
        pass_done = asyncio.Event()

        async def clean_once_and_tell() -> int:
            cleaned = await real_clean_once()
            pass_done.set()
            return cleaned

        async def until_cleaned(count: int) -> None:
            while cleaner.cleaned_count < count:
                pass_done.clear()
                await pass_done.wait()

        monkeypatch.setattr(cleaner, "clean_once", clean_once_and_tell)
        task = asyncio.create_task(cleaner.run())
        await asyncio.wait_for(until_cleaned(1), WAIT_CAP_S)
        # More dirt while it runs is picked up at a later pass.
        expected.update(fill(state, "table", keys=3, rounds=2))
        await asyncio.wait_for(until_cleaned(2), WAIT_CAP_S)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert_compacted(state, "table", expected, written=15 + 6)


async def cancel_once_building(cleaner: LogCleaner, started: threading.Event) -> None:
    """Run the cleaner, cancel it once a build has started, and wait for run() to return."""
    task = asyncio.create_task(cleaner.run())
    assert await asyncio.to_thread(started.wait, WAIT_CAP_S)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_cancel_during_a_build_aborts_it_and_waits_for_it(
    state: BrokerState, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    state.logs.create_topic("table", 1, {"cleanup.policy": "compact"})
    fill(state, "table", keys=3, rounds=5)
    before = contents(state, "table")
    partition_log = state.logs.get("table", 0)
    started = threading.Event()
    finished = threading.Event()
    real_build = compaction.build_cleaned

    def slow_build(plan):
        started.set()
        try:
            # Blocks until the cleaner asks it to stop; then the real build sees the abort flag.
            assert plan.abort.wait(WAIT_CAP_S)
            return real_build(plan)
        finally:
            finished.set()

    monkeypatch.setattr(compaction, "build_cleaned", slow_build)
    cleaner = LogCleaner.for_state(state)

    asyncio.run(cancel_once_building(cleaner, started))
    # run() returned only after the worker finished: the logs can be closed safely now.
    assert finished.is_set()
    assert contents(state, "table") == before
    assert not list(partition_log.directory.glob("*.cleaned"))
    assert partition_log.compaction_candidate(state.now_ms()) is not None, "the plan was given back"


def test_a_build_that_fails_while_being_cancelled_is_logged_and_recorded_not_dropped(
    state: BrokerState, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Shutdown aborts a running build; a build that then fails with an error of its own (not the
    abort) reports it: logged with its traceback and recorded against the partition."""
    state.logs.create_topic("table", 1, {"cleanup.policy": "compact"})
    fill(state, "table", keys=3, rounds=5)
    started = threading.Event()

    def failing_build(plan):
        started.set()
        assert plan.abort.wait(WAIT_CAP_S)
        raise StorageError("injected: the disk failed under the build")

    monkeypatch.setattr(compaction, "build_cleaned", failing_build)
    cleaner = LogCleaner.for_state(state)

    with caplog.at_level(logging.ERROR, logger="oncestream.cleaner"):
        asyncio.run(cancel_once_building(cleaner, started))
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "injected: the disk failed" in errors[0].getMessage()
    assert errors[0].exc_info is not None, "the traceback is logged"
    failure = cleaner.failures.failures[("table", 0)]
    assert failure.count == 1
    assert "failing_build" in failure.traceback


def test_disabled_cleaner_does_nothing(state: BrokerState) -> None:
    state.logs.create_topic("table", 1, {"cleanup.policy": "compact"})
    fill(state, "table", keys=3, rounds=5)
    before = contents(state, "table")
    cleaner = LogCleaner.from_properties(state.logs, state.now_ms, {"log.cleaner.enable": "false"})
    asyncio.run(cleaner.run())
    assert contents(state, "table") == before


def test_topic_deleted_during_a_build_discards_it(state: BrokerState) -> None:
    state.logs.create_topic("table", 1, {"cleanup.policy": "compact"})
    fill(state, "table", keys=3, rounds=5)
    cleaner = LogCleaner.for_state(state)
    partition_log = state.logs.get("table", 0)

    async def scenario() -> bool:
        plan_future = asyncio.ensure_future(cleaner.clean_log(partition_log))
        await asyncio.sleep(0)  # the plan is taken and the build handed to the worker
        state.logs.delete_topic("table")
        return await plan_future

    try:
        assert asyncio.run(scenario()) is False
    finally:
        cleaner.close()
    assert not partition_log.directory.exists() or not list(partition_log.directory.glob("*.cleaned"))


def test_a_segment_deleted_between_plan_and_build_abandons_the_clean_without_a_failure(
    state: BrokerState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan holds paths, not descriptors: DeleteRecords deleting a planned segment before the
    worker opens it makes the plan stale. The clean is abandoned (plan given back, no .cleaned
    file), and the partition is not counted as failing toward "uncleanable"."""
    state.logs.create_topic("table", 1, {"cleanup.policy": "compact"})
    fill(state, "table", keys=3, rounds=5)
    fill(state, "table", keys=3, rounds=5)
    partition_log = state.logs.get("table", 0)
    planned = threading.Event()
    deleted = threading.Event()
    outcomes: list[BaseException] = []
    real_build = compaction.build_cleaned

    def build_after_deletion(plan):
        planned.set()
        assert deleted.wait(WAIT_CAP_S)
        try:
            return real_build(plan)
        except BaseException as exc:
            outcomes.append(exc)
            raise

    monkeypatch.setattr(compaction, "build_cleaned", build_after_deletion)
    cleaner = LogCleaner.for_state(state)

    async def scenario() -> int:
        task = asyncio.ensure_future(cleaner.clean_once())
        assert await asyncio.to_thread(planned.wait, WAIT_CAP_S)
        # On the loop, as a DeleteRecords request would: the first planned segment goes.
        partition_log.delete_records(partition_log.segment_base_offsets()[1])
        deleted.set()
        return await task

    try:
        assert asyncio.run(scenario()) == 0
    finally:
        cleaner.close()
    assert len(outcomes) == 1
    assert isinstance(outcomes[0], compaction.StalePlan)
    assert ("table", 0) not in cleaner.failures.failures, "a stale plan is not a failure"
    assert not list(partition_log.directory.glob("*.cleaned"))
    assert partition_log.compaction_candidate(state.now_ms()) is not None, "the plan was given back"
    # And the next pass plans afresh and cleans.
    monkeypatch.setattr(compaction, "build_cleaned", real_build)
    assert asyncio.run(cleaner.clean_once()) == 1


def test_a_failing_install_gives_the_plan_back(state: BrokerState, monkeypatch: pytest.MonkeyPatch) -> None:
    """install_cleaned raising (a disk error before it took the plan) must not leave the log
    holding a plan that nobody builds: it would never be a candidate again."""
    state.logs.create_topic("table", 1, {"cleanup.policy": "compact"})
    fill(state, "table", keys=3, rounds=5)
    partition_log = state.logs.get("table", 0)

    def broken_check(config, result):
        raise StorageError("injected: cannot check the plan")

    cleaner = LogCleaner.for_state(state)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(partition_log._cleaning, "_plan_still_valid", broken_check)
            assert asyncio.run(cleaner.clean_once()) == 0
        assert cleaner.failures.failures[("table", 0)].count == 1, "a real failure is still counted"
        assert partition_log.compaction_candidate(state.now_ms()) is not None, "the plan was given back"
    finally:
        cleaner.close()


def test_topic_deleted_while_the_install_tail_runs_is_not_a_failure(
    state: BrokerState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The install's fsyncs run on the disk threads; a DeleteTopics on the loop meanwhile removes
    the directory under them. That is the topic going away, not the partition failing."""
    state.logs.create_topic("table", 1, {"cleanup.policy": "compact"})
    fill(state, "table", keys=3, rounds=5)
    partition_log = state.logs.get("table", 0)
    started = threading.Event()
    deleted = threading.Event()
    real_run = log_cleaning.SwapTail.run

    def run_after_deletion(tail, fsync=None):
        started.set()
        assert deleted.wait(WAIT_CAP_S)
        return real_run(tail, fsync)

    monkeypatch.setattr(log_cleaning.SwapTail, "run", run_after_deletion)
    cleaner = LogCleaner.for_state(state)

    async def scenario() -> int:
        task = asyncio.ensure_future(cleaner.clean_once())
        assert await asyncio.to_thread(started.wait, WAIT_CAP_S)
        state.logs.delete_topic("table")
        deleted.set()
        return await task

    try:
        assert asyncio.run(scenario()) == 0
    finally:
        cleaner.close()
    assert ("table", 0) not in cleaner.failures.failures
    assert partition_log.closed
    assert not partition_log.directory.exists()
