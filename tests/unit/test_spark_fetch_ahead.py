"""The Spark partition reader fetches ahead (issue 11, fast reads): the next Fetch is in flight
while Spark consumes the Arrow batches of the current response, never two at once on the one
connection, and a failure of the fetch ahead surfaces where the reader would have fetched."""

from __future__ import annotations

import threading

import pytest
from kio.schema.errors import ErrorCode

from oncestream.protocol.records import NewRecord, encode_batch
from oncestream.spark import partition_reader as pr
from oncestream.spark.errors import BrokerRequestError, DataLossError
from oncestream.spark.log_client import FetchResult

NOW_MS = 1_700_000_000_000
WAIT_S = 30  # a deadlock guard only: every wait below ends when an event is set


def _records(first: int, count: int) -> bytes:
    return b"".join(encode_batch([NewRecord(value=b"v%d" % o)], now_ms=NOW_MS, base_offset=o)
                    for o in range(first, first + count))


class FakeLog:
    """Answers fetches from a fixed log of 2 records per response; records every call and
    whether two calls ever overlapped; the fetch at ``gated_offset`` waits for ``release``."""

    def __init__(self, end: int, gated_offset: int = -1, failing_offset: int = -1) -> None:
        self.end = end
        self.calls: list[int] = []
        self.threads: set[str] = set()
        self.overlap = False
        self._busy = threading.Lock()
        self.gated_offset = gated_offset
        self.failing_offset = failing_offset
        self.gate_reached = threading.Event()
        self.release = threading.Event()

    def fetch(self, tp, offset: int, **_kwargs) -> FetchResult:
        if not self._busy.acquire(blocking=False):
            self.overlap = True
            self._busy.acquire()
        try:
            self.calls.append(offset)
            self.threads.add(threading.current_thread().name)
            if offset == self.gated_offset:
                self.gate_reached.set()
                self.release.wait(WAIT_S)
            if offset == self.failing_offset:
                raise BrokerRequestError("broker gone")
            count = max(0, min(2, self.end - offset))
            return FetchResult(ErrorCode.none, memoryview(_records(offset, count)), (), self.end, self.end, 0)
        finally:
            self._busy.release()


def _range(end: int, *, fail_on_data_loss: bool = True) -> pr.OffsetRange:
    return pr.OffsetRange("t", 0, 0, end, "unused:0", read_committed=True, fail_on_data_loss=fail_on_data_loss)


def test_the_next_fetch_is_in_flight_while_spark_holds_the_current_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pr, "ROWS_PER_ARROW_BATCH", 2)  # one Arrow batch per response
    log = FakeLog(end=6, gated_offset=2)
    batches = pr.read_range(_range(6), client=log)  # type: ignore[arg-type]
    first = next(batches)
    assert first.column("offset").to_pylist() == [0, 1]
    # Spark has not asked for the next batch, yet the fetch at 2 has been sent.
    assert log.gate_reached.wait(WAIT_S)
    log.release.set()
    rest = [o for b in batches for o in b.column("offset").to_pylist()]
    assert rest == [2, 3, 4, 5]
    assert log.calls == [0, 2, 4]  # each offset fetched once: every fetch ahead was used
    assert not log.overlap
    assert any(name.startswith("oncestream-fetch-ahead") for name in log.threads)


def test_a_failed_fetch_ahead_is_reported_at_its_offset() -> None:
    """failOnDataLoss: a fetch that cannot be served is data loss, whether it ran ahead or not."""
    log = FakeLog(end=6, failing_offset=2)
    with pytest.raises(DataLossError, match="offset 2"):
        list(pr.read_range(_range(6), client=log))  # type: ignore[arg-type]


def test_closing_the_reader_early_waits_for_the_fetch_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark may stop reading a task early (a LIMIT): the connection is idle before it closes."""
    monkeypatch.setattr(pr, "ROWS_PER_ARROW_BATCH", 2)
    log = FakeLog(end=6, gated_offset=2)
    batches = pr.read_range(_range(6), client=log)  # type: ignore[arg-type]
    next(batches)
    assert log.gate_reached.wait(WAIT_S)
    released_when_closed: list[bool] = []

    def close() -> None:
        batches.close()
        released_when_closed.append(log.release.is_set())

    closer = threading.Thread(target=close)
    closer.start()
    log.release.set()
    closer.join(WAIT_S)
    assert released_when_closed == [True]  # close returned only after the gated fetch was let go
    assert log.calls == [0, 2]
