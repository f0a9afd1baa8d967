"""A consumer's offset commits (OffsetCommit) and committed-offset lookups (OffsetFetch).

:class:`OffsetCommitter` sends the offsets the :class:`~oncestream.client.consumer.consumer.Consumer`
chose through its group membership, synchronously or asynchronously, and hands the outcomes to
``on_commit`` as librdkafka does: a synchronous commit right away, an asynchronous one from the
caller's thread on its next poll (:meth:`OffsetCommitter.serve_results`), the final commit of an
assignment given up (rebalance, close) always, failures included. Which offsets to commit
(positions or stored offsets) stays with the consumer.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from typing import Any

from oncestream.client.common.errors import (
    _STATE,
    _TIMED_OUT,
    BrokerResponseError,
    ConnectionLostError,
    KafkaError,
    KafkaException,
    RequestTimedOutError,
)
from oncestream.client.common.io_thread import IoThread
from oncestream.client.common.message import OFFSET_INVALID, TopicPartition
from oncestream.client.consumer.group import GroupMembership

TP = tuple[str, int]
log = logging.getLogger("oncestream.client")


def require_group(group: GroupMembership | None) -> GroupMembership:
    """``group``, or KafkaException(_STATE) without one (callers check group.id first; raised,
    not asserted, so it holds under python -O)."""
    if group is None:
        raise KafkaException(KafkaError(_STATE, "no consumer group (group.id not set)"))
    return group


class OffsetCommitter:
    """Commits offsets and fetches committed ones for one consumer; see the module docstring.

    ``on_commit`` is the consumer's ``on_commit`` callback (or None); ``notify`` wakes the
    consumer's poll when an asynchronous commit has finished.
    """

    def __init__(self, io: IoThread, on_commit: Callable[..., Any] | None, notify: Callable[[], None]) -> None:
        self._io = io
        self._on_commit = on_commit
        self._notify = notify
        # Outcomes of asynchronous commits, handed to on_commit in the caller's thread.
        self._results: collections.deque[tuple[Any, Any]] = collections.deque()

    def commit(self, group: GroupMembership | None, offsets: list[TopicPartition], asynchronous: bool, *,
               subscribed: bool, timeout_s: float = 60.0) -> list[TopicPartition] | None:
        """Commit ``offsets`` (as a group member when ``subscribed`` and joined). Synchronous:
        the partitions with ``error`` set on failures, KafkaException if every one failed.
        Asynchronous: None; the outcome reaches ``on_commit`` through :meth:`serve_results`."""
        group = require_group(group)
        in_group = subscribed and group.generation_id >= 0
        items = [(tp.topic, tp.partition, tp.offset, tp.metadata,
                  tp.leader_epoch if tp.leader_epoch is not None else -1) for tp in offsets]

        def result_of(errors: dict[TP, int]) -> list[TopicPartition]:
            out = []
            for tp in offsets:
                r = TopicPartition(tp.topic, tp.partition, tp.offset, tp.metadata)
                code = errors.get((tp.topic, tp.partition), 0)
                if code:
                    r.error = KafkaError(code)
                out.append(r)
            return out

        if asynchronous:
            future = self._io.submit(group.commit(items, in_group=in_group))

            def done(f: Any) -> None:
                try:
                    result = result_of(f.result())
                    errors = [r.error for r in result if r.error is not None]
                    self._results.append((errors[0] if errors else None, result))
                except Exception as exc:  # noqa: BLE001 - delivered to on_commit like librdkafka does
                    error = exc.args[0] if isinstance(exc, KafkaException) else KafkaError(-1, repr(exc))
                    self._results.append((error, []))
                self._notify()

            future.add_done_callback(done)
            return None
        try:
            errors = self._io.run(group.commit(items, in_group=in_group), timeout_s)
        except TimeoutError:
            raise KafkaException(KafkaError(_TIMED_OUT, "commit timed out", retriable=True)) from None
        result = result_of(errors)
        failed = [r for r in result if r.error is not None]
        first_error = failed[0].error if failed else None
        if first_error is not None and len(failed) == len(result):
            raise KafkaException(first_error)
        if self._on_commit is not None:
            self._on_commit(failed[0].error if failed else None, result)
        return result

    def final_commit(self, group: GroupMembership | None, offsets: list[TopicPartition], timeout_s: float, *,
                     subscribed: bool) -> None:
        """The auto-commit of an assignment given up (rebalance, close). As librdkafka does, its
        outcome goes to ``on_commit``, a failure included (the error on every partition), and
        it never raises; without ``on_commit`` a failure is logged, never dropped silently."""
        try:
            # reports to on_commit
            self.commit(group, offsets, asynchronous=False, subscribed=subscribed, timeout_s=timeout_s)
            return
        except KafkaException as exc:
            error = exc.args[0]
        except (ConnectionLostError, RequestTimedOutError, BrokerResponseError) as exc:
            error = KafkaError(getattr(exc, "code", _TIMED_OUT), str(exc))
        failed = [TopicPartition(tp.topic, tp.partition, tp.offset, tp.metadata) for tp in offsets]
        for tp in failed:
            tp.error = error
        if self._on_commit is not None:
            self._on_commit(error, failed)
        else:
            log.warning("final offset commit of %d partitions failed: %s", len(failed), error)

    def serve_results(self) -> None:
        """Caller's thread: hand finished asynchronous commits to ``on_commit``."""
        while self._results:
            error, partitions = self._results.popleft()
            if self._on_commit is not None:
                self._on_commit(error, partitions)

    def committed(self, group: GroupMembership, partitions: list[TopicPartition], timeout_s: float | None, *,
                  require_stable: bool) -> list[TopicPartition]:
        """Committed offsets of ``partitions`` (OFFSET_INVALID where none, ``error`` per
        partition); ``require_stable`` waits out pending transactional offsets (KIP-447)."""
        keys = [(tp.topic, tp.partition) for tp in partitions]
        try:
            answers = self._io.run(group.fetch_committed(keys, require_stable=require_stable), timeout_s)
        except TimeoutError:
            raise KafkaException(KafkaError(_TIMED_OUT, "committed() timed out", retriable=True)) from None
        out = []
        for tp in partitions:
            offset, metadata, code = answers.get((tp.topic, tp.partition), (-1, None, 0))
            r = TopicPartition(tp.topic, tp.partition, offset if offset >= 0 else OFFSET_INVALID, metadata)
            if code:
                r.error = KafkaError(code)
            out.append(r)
        return out
