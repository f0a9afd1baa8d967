"""Completed batches waiting for their delivery callbacks, which run in the user's thread inside
``poll()`` / ``flush()`` (confluent-kafka semantics), never in the I/O thread.
"""

from __future__ import annotations

import collections
import threading
import time

from oncestream.client.common.message import OFFSET_INVALID, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Message
from oncestream.client.producer.accumulator import ProducerBatch


class DeliveryReports:
    """A queue of finished batches plus a condition that also wakes ``flush`` waiters."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self._done: collections.deque[ProducerBatch] = collections.deque()

    def put(self, batch: ProducerBatch) -> None:
        """Called by the sender for every finished batch (acknowledged or failed)."""
        with self.cond:
            if batch.reports:
                self._done.append(batch)
            self.cond.notify_all()

    def pending(self) -> int:
        """Batches whose callbacks have not run yet."""
        return len(self._done)

    def pending_records(self) -> int:
        """Delivery reports not served yet."""
        return sum(len(b.reports or ()) for b in list(self._done))

    def serve(self, timeout_s: float | None) -> int:
        """Run callbacks of finished batches, waiting up to ``timeout_s`` for the first one;
        return the number of callbacks run."""
        done = self._done
        if not done and timeout_s != 0:
            deadline = None if timeout_s is None or timeout_s < 0 else time.monotonic() + timeout_s
            with self.cond:
                while not done:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        break
                    self.cond.wait(remaining if remaining is None else min(remaining, 1.0))
        served = 0
        while done:
            try:
                batch = done.popleft()
            except IndexError:
                break
            served += run_callbacks(batch)
        return served


def run_callbacks(batch: ProducerBatch) -> int:
    """Invoke ``callback(err, msg)`` for every record of ``batch`` that asked for one."""
    reports = batch.reports
    if not reports:
        return 0
    error = batch.error
    base = batch.base_offset
    topic, partition = batch.topic, batch.partition
    log_append = batch.log_append_time_ms
    ts_type = TIMESTAMP_LOG_APPEND_TIME if log_append >= 0 else TIMESTAMP_CREATE_TIME
    for index, callback, key, value, headers, timestamp in reports:
        if error is None:
            offset = base + index if base >= 0 else OFFSET_INVALID
        else:
            offset = OFFSET_INVALID
        msg = Message(topic, partition, offset, log_append if log_append >= 0 else timestamp, ts_type,
                      key, value, headers, error)
        callback(error, msg)
    return len(reports)
