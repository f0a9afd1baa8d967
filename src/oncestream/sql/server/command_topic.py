"""The command topic and its transactional single-writer protocol (ksqlDB's, step for step).

Every node of a service id shares one single-partition topic,
``_confluent-ksql-<service id>_command_topic`` (ksqlDB's name, ReservedInternalTopics: its
internal-topic prefix ``_confluent-ksql-``, the service id, ``_``, then ``command_topic``; its
default service id ``default_`` gives ``_confluent-ksql-default__command_topic``), with infinite
retention. A statement is written by the node that received it:

1. create a transactional producer whose ``transactional.id`` is the service id, and call
   ``init_transactions``: this fences any other node in the middle of writing (its commit fails)
   and finishes or aborts whatever transaction the id left open;
2. begin a transaction;
3. read the topic's end offset (read_committed: the last stable offset);
4. wait until this node's command runner has applied every command below it;
5. validate the statement against a snapshot of the metastore (a copy, never mutated);
6. produce the command, and commit.

Between steps 4 and 6 nobody else can commit: a writer that ran ``init_transactions`` after ours
fenced us (our commit fails and we start over with a fresh producer); one that ran it before ours
was fenced by us. So the validation in step 5 saw every command before ours, and the topic holds
only statements that were valid at their place in it. The node then waits until its runner has
applied the command, so the answer carries the real status and ``commandSequenceNumber`` (the
command's offset). One writer at a time per node (a lock); many nodes contend through fencing.

A commit whose outcome is unknown (the connection dropped during EndTxn) is never retried blindly:
the next attempt's ``init_transactions`` completes or aborts it, and the runner then shows whether
the record at the offset we produced is there (committed) or not (aborted).

A ``WriteStepObserver`` (injected into the node, none by default) is told each step of a write
(``WRITE_STEPS``), so a test can stop the node exactly there and check what a restart makes of it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from oncestream.client import Admin, KafkaException, NewTopic, Producer
from oncestream.sql.errors import COMMAND_QUEUE_CATCHUP_TIMEOUT, DegradedError, KsqlError
from oncestream.sql.server.command_runner import CommandRunner, CommandStatus, end_offset

log = logging.getLogger("oncestream.sql")

INTERNAL_TOPIC_PREFIX = "_confluent-ksql-"
COMMAND_TOPIC_SUFFIX = "command_topic"

# The steps of one write, in order (what a WriteStepObserver is told).
WRITE_STEPS = ("init", "begun", "end-offset", "caught-up", "validated", "produced", "committed", "applied")


class WriteStepObserver(Protocol):
    """Told when a statement being written reaches a step of ``WRITE_STEPS``."""

    def reached(self, step: str) -> None:
        """The write is at ``step`` (called on the writing thread, under the writer's lock)."""
        ...


class _NoObserver:
    def reached(self, step: str) -> None:
        pass

_RETRY_BACKOFF_S = 0.1
_RETRY_BACKOFF_MAX_S = 1.0


def internal_topic_name(service_id: str, suffix: str) -> str:
    """ksqlDB's internal names: ``_confluent-ksql-<service id>_<suffix>``."""
    return f"{INTERNAL_TOPIC_PREFIX}{service_id}_{suffix}"


def command_topic_name(service_id: str) -> str:
    """ksqlDB's command topic name for ``service_id``."""
    return internal_topic_name(service_id, COMMAND_TOPIC_SUFFIX)


def ensure_command_topic(admin: Admin, topic: str, replication_factor: int = 1, timeout_s: float = 30.0) -> None:
    """Create the command topic (1 partition, infinite retention) unless it exists; refuse one
    with more than one partition (the order of commands would be lost)."""
    config = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"}
    result = admin.create_topics([NewTopic(topic, 1, replication_factor, config)], timeout=timeout_s)
    error = result.get(topic)
    if error is not None and error.code() != ErrorCode.topic_already_exists:
        raise KsqlError(f"cannot create the command topic {topic}: {error}")
    description = admin.describe_topics([topic], timeout=timeout_s).get(topic)
    if description is not None and len(description.partitions) != 1:
        raise KsqlError(f"the command topic {topic} has {len(description.partitions)} partitions; it must have 1")


@dataclass
class PreparedCommand:
    """A validated statement ready to write: the record, and what to do around the commit
    (creating the sink topic before it, deleting a dropped topic after it: ksqlDB's injectors)."""

    key: bytes | str
    value: bytes
    before_commit: Callable[[], None] | None = None
    after_commit: Callable[[], None] | None = None


@dataclass(frozen=True)
class WriteResult:
    """A command applied by this node: its offset (``commandSequenceNumber``) and status."""

    offset: int
    status: CommandStatus


class CommandWriter:
    """Writes statements to the command topic with the protocol above (thread-safe)."""

    def __init__(self, *, topic: str, service_id: str, client_conf: Mapping[str, Any], runner: CommandRunner,
                 admin: Admin, steps: WriteStepObserver | None = None, timeout_ms: int = 60_000) -> None:
        self.topic = topic
        self._service_id = service_id
        self._client_conf = dict(client_conf)
        self._runner = runner
        self._admin = admin
        self._steps: WriteStepObserver = steps or _NoObserver()
        self._timeout_s = timeout_ms / 1000
        self._lock = threading.Lock()  # one writer at a time on this node

    def _step(self, name: str) -> None:
        self._steps.reached(name)

    def _check_degraded(self) -> None:
        reason = self._runner.degraded_reason
        if reason is not None:
            raise DegradedError(f"The server is not accepting statements: {reason}")

    def _new_producer(self) -> Producer:
        conf = {**self._client_conf, "transactional.id": self._service_id,
                "client.id": f"oncestream-sql-{self._service_id}-command-writer",
                "transaction.timeout.ms": max(10_000, int(self._timeout_s * 1000)),
                "linger.ms": 0}
        return Producer(conf)

    def write(self, prepare: Callable[[Any], PreparedCommand], snapshot: Callable[[], Any]) -> WriteResult:
        """Validate (``prepare(snapshot())``, which raises ``StatementError`` to refuse) and write
        one statement; return once this node has applied it."""
        with self._lock:
            self._check_degraded()
            deadline = time.monotonic() + self._timeout_s
            backoff_s = _RETRY_BACKOFF_S
            pending: int | None = None   # offset of a record whose commit outcome is unknown
            prepared: PreparedCommand | None = None
            while True:
                producer: Producer | None = None
                try:
                    producer = self._new_producer()
                    producer.init_transactions(self._left(deadline))
                    self._step("init")
                    if pending is not None:
                        done = self._settle(pending, deadline)
                        if done is not None and prepared is not None:
                            return self._finish(done, prepared, deadline)
                        pending = None
                    producer.begin_transaction()
                    self._step("begun")
                    end = end_offset(self._admin, self.topic, self._left(deadline))
                    self._step("end-offset")
                    self._catch_up(end, deadline)
                    self._step("caught-up")
                    try:
                        prepared = prepare(snapshot())
                        self._step("validated")
                        if prepared.before_commit is not None:
                            prepared.before_commit()
                    except KsqlError:
                        producer.abort_transaction(self._left(deadline))  # nothing written: let go at once
                        raise
                    offsets: list[int] = []
                    errors: list[Any] = []

                    def delivered(err: Any, msg: Any, offsets: list[int] = offsets, errors: list[Any] = errors) -> None:
                        if err is not None:
                            errors.append(err)
                        else:
                            offsets.append(msg.offset())

                    key = prepared.key.encode() if isinstance(prepared.key, str) else prepared.key
                    producer.produce(self.topic, prepared.value, key, partition=0,
                                     on_delivery=delivered)
                    producer.flush(self._left(deadline))
                    if errors or not offsets:
                        raise KafkaException(errors[0]) if errors else TimeoutError("command record not delivered")
                    pending = offsets[0]
                    self._step("produced")
                    producer.commit_transaction(self._left(deadline))
                    self._step("committed")
                    return self._finish(pending, prepared, deadline)
                except (KafkaException, TimeoutError) as exc:
                    # Fenced by another node's init_transactions, or a broker hiccup: start the
                    # whole step over with a fresh producer (which settles ``pending`` first).
                    if time.monotonic() + backoff_s >= deadline:
                        raise KsqlError(f"could not write the statement to the command topic: {exc}",
                                        error_code=COMMAND_QUEUE_CATCHUP_TIMEOUT) from exc
                    log.info("oncestream sql: command write attempt failed (%s); retrying", exc)
                    time.sleep(backoff_s)
                    backoff_s = min(backoff_s * 2, _RETRY_BACKOFF_MAX_S)
                finally:
                    if producer is not None:
                        _close_quietly(producer)

    def _left(self, deadline: float) -> float:
        return max(0.1, deadline - time.monotonic())

    def _catch_up(self, offset: int, deadline: float) -> None:
        if not self._runner.wait_position(offset, self._left(deadline)):
            self._check_degraded()
            raise KsqlError("timed out waiting for this server to catch up with the command topic",
                            error_code=COMMAND_QUEUE_CATCHUP_TIMEOUT)

    def _settle(self, pending: int, deadline: float) -> int | None:
        """After a fresh ``init_transactions``: was the record at ``pending`` committed?"""
        self._catch_up(end_offset(self._admin, self.topic, self._left(deadline)), deadline)
        return pending if self._runner.status_at(pending) is not None else None

    def _finish(self, offset: int, prepared: PreparedCommand, deadline: float) -> WriteResult:
        self._catch_up(offset + 1, deadline)
        self._step("applied")
        status = self._runner.status_at(offset)
        if status is None:  # the runner moved past our offset without a command there
            raise KsqlError(f"the command written at offset {offset} was not found in the command topic")
        if prepared.after_commit is not None and status.state.value == "SUCCESS":
            prepared.after_commit()
        return WriteResult(offset, status)


def _close_quietly(producer: Producer) -> None:
    try:
        producer.close(5)
    except (KafkaException, TimeoutError, RuntimeError) as exc:
        log.debug("oncestream sql: closing the command producer: %s", exc)
