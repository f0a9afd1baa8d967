"""Replay of the command topic: one thread per node reads it read_committed from the beginning and
applies every command, in order, to the node's metastore.

Every node of a service id runs this loop over the same single-partition topic, so every node
builds the same metastore from the same committed prefix. Rules (ksqlDB's CommandRunner):

- a committed command is never skipped: a record that cannot be decoded, or one written by a newer
  version (``commands.IncompatibleCommandError``), stops the replay there and puts the node in
  degraded mode (reads and running queries go on; new statements are refused, saying why);
- a command the metastore rejects when applying it (``StatementError``: deterministic, so every node
  rejects it the same way) gets status ERROR and the replay goes on;
- an unexpected failure while applying (a bug) also degrades the node rather than skipping;
- each command's status (``/status/{commandId}``) is kept, and the offset it was read at is its
  ``commandSequenceNumber``.

What applying a command does beyond the metastore (starting/stopping queries) is the node's
business: it passes ``apply`` (command, offset) -> ``Applied``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from oncestream.client import OFFSET_BEGINNING, Admin, Consumer, KafkaException, TopicPartition
from oncestream.sql.errors import KsqlError

log = logging.getLogger("oncestream.sql")

_POLL_S = 0.1
_STATUS_HISTORY = 10_000   # statuses kept per node (oldest dropped first)


class CommandState(Enum):
    """ksqlDB's CommandStatus.Status values a client can see."""

    QUEUED = "QUEUED"
    EXECUTING = "EXECUTING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


@dataclass(frozen=True)
class Applied:
    """What applying one command gave: its status message, the query it created, if any, and
    whether the metastore refused it (status ERROR; deterministic on every node)."""

    message: str
    query_id: str | None = None
    refused: bool = False


@dataclass(frozen=True)
class CommandStatus:
    """The status of one command of the topic (``/status/{commandId}``)."""

    command_id: str
    offset: int
    state: CommandState
    message: str
    query_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """ksqlDB's CommandStatus JSON: ``{"status", "message", "queryId"}``."""
        return {"status": self.state.value, "message": self.message, "queryId": self.query_id}


class CommandRunner:
    """Reads the command topic from the beginning in a thread and applies each command.

    ``decode(key, value)`` turns a record into a command (raising ``IncompatibleCommandError``
    for what this version cannot read); ``apply(command, offset)`` applies it to the metastore and
    runs its effects, under ``lock`` (readers of the metastore take the same lock)."""

    def __init__(self, *, topic: str, client_conf: Mapping[str, Any],
                 decode: Callable[[bytes | None, bytes | None], Any],
                 apply: Callable[[Any, int], Applied],
                 incompatible: tuple[type[BaseException], ...]) -> None:
        self.topic = topic
        self._client_conf = dict(client_conf)
        self._decode = decode
        self._apply = apply
        self._incompatible = incompatible
        self.lock = threading.RLock()
        self._cond = threading.Condition(self.lock)
        self._statuses: dict[str, CommandStatus] = {}
        self._by_offset: dict[int, CommandStatus] = {}
        self.position = 0                 # next offset to read (every offset below it is applied)
        self.last_applied_offset = -1     # offset of the last command applied (any status)
        self.degraded_reason: str | None = None
        self.replayed = False             # caught up with the end offset seen at start
        self.error: str | None = None     # the loop itself failed (no broker...), shown in health
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sql-command-runner", daemon=True)

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Start replaying (returns at once; see ``wait_replayed``)."""
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the replay thread."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        conf = {**self._client_conf, "isolation.level": "read_committed", "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "client.id": "oncestream-sql-command-runner"}
        while not self._stop.is_set():
            try:
                start_end = self._end_offset()
                consumer = Consumer(conf)
            except (KafkaException, TimeoutError, OSError) as exc:
                self.error = f"cannot reach the command topic: {exc}"
                log.warning("oncestream sql: %s", self.error)
                self._stop.wait(1.0)
                continue
            try:
                consumer.assign([TopicPartition(self.topic, 0, self.position if self.position else OFFSET_BEGINNING)])
                self._consume(consumer, start_end)
                return
            except (KafkaException, TimeoutError, OSError) as exc:
                self.error = f"command topic consumer failed: {exc}"
                log.warning("oncestream sql: %s; reconnecting", self.error)
                self._stop.wait(1.0)
            finally:
                consumer.close()

    def _end_offset(self) -> int:
        admin = Admin({k: v for k, v in self._client_conf.items()})
        try:
            return end_offset(admin, self.topic)
        finally:
            admin.close()

    def _consume(self, consumer: Consumer, start_end: int) -> None:
        tp = [TopicPartition(self.topic, 0)]
        while not self._stop.is_set():
            if self.degraded_reason is not None:
                # Never skip a committed command: stay where the replay stopped.
                self._stop.wait(_POLL_S * 5)
                continue
            message = consumer.poll(_POLL_S)
            if message is not None:
                error = message.error()
                if error is not None:
                    raise KafkaException(error)
                self._handle(message.key(), message.value(), message.offset())
            else:
                self.error = None
            position = consumer.position(tp)[0].offset
            with self._cond:
                if self.degraded_reason is None and position is not None and position > self.position:
                    self.position = position
                if not self.replayed and self.position >= start_end:
                    self.replayed = True
                self._cond.notify_all()

    def _handle(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        command_id = _command_id(key)
        try:
            command = self._decode(key, value)
        except self._incompatible as exc:
            self._degrade(f"the command topic record at offset {offset} ({command_id}) cannot be read by "
                          f"this server: {exc}. The server is in degraded mode: it keeps serving reads "
                          "and running queries but refuses new statements until it is upgraded or the "
                          "record is repaired")
            return
        with self._cond:
            try:
                applied = self._apply(command, offset)
                state = CommandState.ERROR if applied.refused else CommandState.SUCCESS
                status = CommandStatus(command_id, offset, state, applied.message, applied.query_id)
            except KsqlError as exc:
                # Deterministic rejection: every node rejects this command the same way.
                status = CommandStatus(command_id, offset, CommandState.ERROR, exc.message)
            except Exception as exc:  # a bug while applying must not skip the command
                log.exception("oncestream sql: applying command %s at offset %d failed", command_id, offset)
                self._degrade(f"applying the command at offset {offset} ({command_id}) failed: "
                              f"{type(exc).__name__}: {exc}. The server is in degraded mode")
                return
            self._record(status)
            self.last_applied_offset = offset
            self.position = offset + 1
            self._cond.notify_all()

    def _degrade(self, reason: str) -> None:
        with self._cond:
            if self.degraded_reason is None:
                log.error("oncestream sql: %s", reason)
                self.degraded_reason = reason
            self._cond.notify_all()

    def _record(self, status: CommandStatus) -> None:
        self._statuses.pop(status.command_id, None)
        self._statuses[status.command_id] = status
        self._by_offset[status.offset] = status
        while len(self._by_offset) > _STATUS_HISTORY:
            oldest = min(self._by_offset)
            dropped = self._by_offset.pop(oldest)
            if self._statuses.get(dropped.command_id) is dropped:
                del self._statuses[dropped.command_id]

    # --- queries from other threads ---------------------------------------------------------------

    def status(self, command_id: str) -> CommandStatus | None:
        """The latest status of ``command_id`` (None if this node has not seen it)."""
        with self.lock:
            return self._statuses.get(command_id)

    def status_at(self, offset: int) -> CommandStatus | None:
        """The status of the command read at ``offset`` (None: not applied, or not a command)."""
        with self.lock:
            return self._by_offset.get(offset)

    def wait_position(self, offset: int, timeout_s: float) -> bool:
        """Wait until every command below ``offset`` is applied; False on timeout or degraded."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self.position < offset:
                if self.degraded_reason is not None or self._stop.is_set():
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))
            return True

    def wait_replayed(self, timeout_s: float | None = None) -> bool:
        """Wait until the topic's prefix present at start is replayed (or the node degraded)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while not self.replayed and self.degraded_reason is None and not self._stop.is_set():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(0.5 if left is None else min(left, 0.5))
            return self.replayed


def end_offset(admin: Admin, topic: str, timeout_s: float = 30.0) -> int:
    """The command topic's end offset as a read_committed reader sees it (the LSO)."""
    offsets = admin.list_offsets({(topic, 0): -1}, read_committed=True, timeout=timeout_s)
    return offsets[(topic, 0)]


def _command_id(key: bytes | None) -> str:
    if key is None:
        return "<no key>"
    return key.decode("utf-8", errors="replace")
