"""Wake long-poll fetches of diskless partitions when new batches may have been committed.

Every commit transaction sends ``NOTIFY oncestream_appends, 'topic_id:partition,...'`` (delivered
when it commits; '' means "anything may have changed"). One LISTEN connection per broker turns
those into wake-ups of the fetches waiting on the named partitions. A notification is a wake-up
only: the woken fetch reads again, and its read is the truth.

Notifications are lost when the LISTEN connection is (PostgreSQL restarted, a network cut), so
a poll backs them up: every ``poll_interval_ms``, while anyone waits, one query reads the high
watermarks of the waited partitions and wakes the waiters whose partition moved past the HW they
saw. A lost notification therefore delays a fetch by at most that interval. The same poll closes
the race of a commit landing between a fetch's read and its ``wait``: its notification woke no
one, the HW it moved wakes the waiter at the next poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Mapping
from typing import Any

import psycopg

from oncestream.async_wait import wait_event
from oncestream.cluster.diskless.coordinates import PartitionKey
from oncestream.cluster.diskless.metadata_access import NotificationSource, TransactionSource
from oncestream.cluster.diskless.partition_rows import APPENDS_CHANNEL
from oncestream.cluster.pg.errors import MetadataStoreError

log = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL_MS = 500
# After the listen iterator itself failed (not a reconnect it handles): wait before listening again.
_RELISTEN_DELAY_S = 1.0

_HIGH_WATERMARKS = """
SELECT p.topic_id, p.partition, p.high_watermark
  FROM partitions p JOIN unnest(%(topics)s::uuid[], %(partitions)s::int[]) AS w(topic_id, partition)
    ON p.topic_id = w.topic_id AND p.partition = w.partition
"""


def parse_appends_payload(payload: str) -> set[PartitionKey] | None:
    """The partitions a notification names; None for "anything may have changed" ('' or a
    payload this broker cannot read: waking everyone is always safe)."""
    if not payload:
        return None
    named: set[PartitionKey] = set()
    for item in payload.split(","):
        topic_text, sep, partition_text = item.strip().rpartition(":")
        try:
            if not sep:
                return None
            named.add((uuid.UUID(topic_text), int(partition_text)))
        except ValueError:
            return None
    return named


class _Waiter:
    __slots__ = ("event", "seen")

    def __init__(self, seen: Mapping[PartitionKey, int]) -> None:
        self.event = asyncio.Event()
        self.seen = dict(seen)


class AppendWakeups:
    """LISTEN/NOTIFY wake-ups with a poll fallback (see the module doc). ``start()`` once on the
    broker's loop, ``close()`` at shutdown."""

    def __init__(self, notifications: NotificationSource, source: TransactionSource, *,
                 poll_interval_ms: int = DEFAULT_POLL_INTERVAL_MS, channel: str = APPENDS_CHANNEL) -> None:
        self._notifications = notifications
        self._source = source
        self._poll_interval_s = poll_interval_ms / 1000
        self._channel = channel
        self._waiters: dict[PartitionKey, set[_Waiter]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._notifications_seen = 0

    @property
    def notifications_seen(self) -> int:
        """Notifications received so far (for metrics)."""
        return self._notifications_seen

    def start(self) -> None:
        """Start listening and polling (idempotent)."""
        if not self._tasks:
            self._tasks = [asyncio.create_task(self._listen_loop(), name="diskless-append-listen"),
                           asyncio.create_task(self._poll_loop(), name="diskless-append-poll")]

    async def close(self) -> None:
        """Stop both tasks and wake every waiter (their fetches answer with what they have)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._wake_all()

    async def wait(self, high_watermarks: Mapping[PartitionKey, int], timeout_ms: int) -> bool:
        """Wait until one of the partitions may have new data (a notification names it, or the
        poll finds its HW past the one given here: the HW the caller's last read returned), or
        ``timeout_ms`` passes. True when woken; the caller reads again either way."""
        if not high_watermarks:
            return False
        waiter = _Waiter(high_watermarks)
        for key in waiter.seen:
            self._waiters.setdefault(key, set()).add(waiter)
        try:
            return await wait_event(waiter.event, timeout_ms / 1000)
        finally:
            for key in waiter.seen:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._waiters[key]

    def notify_local(self, partitions: set[PartitionKey] | None) -> None:
        """Wake the waiters of ``partitions`` (None: all) now: this broker committed to them, so
        its own fetches need not wait for the notification's round trip."""
        if partitions is None:
            self._wake_all()
        else:
            for key in partitions:
                for waiter in self._waiters.get(key, ()):
                    waiter.event.set()

    def _wake_all(self) -> None:
        for waiters in self._waiters.values():
            for waiter in waiters:
                waiter.event.set()

    async def _listen_loop(self) -> None:
        while True:
            try:
                async for payload in self._notifications.listen(self._channel):
                    self._notifications_seen += 1
                    self.notify_local(parse_appends_payload(payload))
            except (MetadataStoreError, psycopg.Error, OSError) as exc:
                log.warning("listening on %s failed (the poll keeps fetches going): %s", self._channel, exc)
            else:
                return  # the source ended the iteration: it was closed (the broker is stopping)
            await asyncio.sleep(_RELISTEN_DELAY_S)

    async def _poll_loop(self) -> None:
        while True:
            await asyncio.sleep(self._poll_interval_s)
            if not self._waiters:
                continue
            try:
                current = await self._read_high_watermarks(list(self._waiters))
            except (MetadataStoreError, psycopg.Error, OSError) as exc:
                log.debug("polling high watermarks failed: %s", exc)
                continue
            for key, high_watermark in current.items():
                for waiter in self._waiters.get(key, ()):
                    if high_watermark != waiter.seen[key]:
                        waiter.event.set()

    async def _read_high_watermarks(self, keys: list[PartitionKey]) -> dict[PartitionKey, int]:
        params: dict[str, Any] = {"topics": [t for t, _ in keys], "partitions": [p for _, p in keys]}
        async with self._source.transaction() as conn:
            cursor = await conn.execute(_HIGH_WATERMARKS, params)
            rows = await cursor.fetchall()
        return {(row[0], int(row[1])): int(row[2]) for row in rows}
