"""Consumers of the KIP-848 consumer group protocol (librdkafka ``group.protocol=consumer``) for the
interop tests, plus wire-level ConsumerGroupHeartbeat/ConsumerGroupDescribe calls.

``ProtocolMember`` runs one confluent-kafka consumer's poll loop on a thread, commits each record
synchronously after reading it (and the position of revoked partitions in its revoke callback),
and records what it consumed and every assignment and revocation librdkafka reported.

Run as a module it is a member in a process of its own (for SIGKILL tests)::

    python -m tests.support.consumer_protocol --bootstrap B --group G --topic T --out FILE

appending one JSON line ``{"assigned": [[topic, partition], ...]}`` per assignment change.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tests.support.clients import COORDINATOR_MOVING
from tests.support.narrow import message_position, present

ROOT = Path(__file__).resolve().parents[2]
WAIT_TIMEOUT_S = 60.0
# Broker properties: short heartbeats and sessions so rebalances and expiries are quick.
CONSUMER_PROTOCOL_BROKER_CONFIG = {
    "group.consumer.heartbeat.interval.ms": "300",
    "group.consumer.min.heartbeat.interval.ms": "100",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "1000",
}
# ILLEGAL_GENERATION and REBALANCE_IN_PROGRESS are the classic protocol's STALE_MEMBER_EPOCH: a
# cooperative member keeps committing while it rejoins, and a commit sent with the old generation
# while its JoinGroup is in flight reaches the coordinator after the join phase completed (Kafka's
# ClassicGroup.validateOffsetCommit answers the same). A commit costs a PostgreSQL transaction on
# a cluster, so one is nearly always in flight there; the retry carries the generation of the
# SyncGroup that follows, and the partition cannot move meanwhile (see _commit).
_RETRIED_COMMIT_ERRORS = frozenset({
    KafkaError.STALE_MEMBER_EPOCH, KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT,
    KafkaError._WAIT_COORD, KafkaError._ALL_BROKERS_DOWN,
}) | COORDINATOR_MOVING
CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69


@pytest.fixture(scope="module")
def consumer_protocol_broker(module_our_broker_factory):
    """One broker per test module with CONSUMER_PROTOCOL_BROKER_CONFIG (tests use unique group ids):
    our broker, or three cluster brokers under the cluster kind (tests/conftest.py)."""
    return module_our_broker_factory(CONSUMER_PROTOCOL_BROKER_CONFIG, name="cg-broker")


def consumer_config(bootstrap: str, group_id: str, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "group.id": group_id, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra}


def wait_until(predicate: Callable[[], bool], what: Callable[[], str] | str, timeout_s: float = WAIT_TIMEOUT_S) -> None:
    """Poll ``predicate`` until it holds; fail with ``what`` (a liveness bound)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(what() if callable(what) else what)
        time.sleep(0.05)


class ProtocolMember:
    """One consumer of the consumer group protocol on its own thread (see the module docstring)."""

    def __init__(self, bootstrap: str, group_id: str, topics: list[str], name: str, **extra: Any) -> None:
        self.name = name
        self.config = consumer_config(bootstrap, group_id, **extra)
        self.topics = topics
        self.lock = threading.Lock()
        self.consumed: list[tuple[str, int, int]] = []
        self.assignment: set[tuple[str, int]] = set()
        self.revoked: list[set[tuple[str, int]]] = []
        self.assigned: list[set[tuple[str, int]]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)
        self.closed = threading.Event()

    def start(self) -> ProtocolMember:
        self._thread.start()
        return self

    def _run(self) -> None:
        consumer = Consumer(self.config)

        def on_assign(c: Consumer, partitions: list[TopicPartition]) -> None:
            with self.lock:
                added = {(p.topic, p.partition) for p in partitions}
                self.assigned.append(added)
                self.assignment |= added

        def on_revoke(c: Consumer, partitions: list[TopicPartition]) -> None:
            gone = {(p.topic, p.partition) for p in partitions}
            with self.lock:
                self.revoked.append(gone)
                self.assignment -= gone

        try:
            consumer.subscribe(self.topics, on_assign=on_assign, on_revoke=on_revoke)
            while not self._stop.is_set():
                msg = consumer.poll(0.1)
                if msg is None:
                    continue
                if msg.error():
                    with self.lock:
                        self.errors.append(str(msg.error()))
                    continue
                topic = present(msg.topic(), "topic")
                partition, offset = message_position(msg)
                self._commit(consumer, TopicPartition(topic, partition, offset + 1))
                with self.lock:
                    self.consumed.append((topic, partition, offset))
        except KafkaException as exc:  # recorded for the test's failure message
            with self.lock:
                self.errors.append(repr(exc))
        finally:
            consumer.close()
            self.closed.set()

    @staticmethod
    def _commit(consumer: Consumer, position: TopicPartition) -> None:
        """Commit synchronously, retrying what a retry can fix: STALE_MEMBER_EPOCH (a heartbeat
        answer with a newer epoch crossed the commit, as with Kafka 4.0: librdkafka has the new
        epoch by then), ILLEGAL_GENERATION and REBALANCE_IN_PROGRESS (the same for a classic
        member: a JoinGroup answer crossed it) and a broker that is away (the chaos tests restart it). The partition
        cannot move meanwhile: its revocation waits for this thread's poll."""
        deadline = time.monotonic() + WAIT_TIMEOUT_S
        while True:
            try:
                consumer.commit(offsets=[position], asynchronous=False)
                return
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() not in _RETRIED_COMMIT_ERRORS and not error.retriable():
                    raise
                if time.monotonic() > deadline:
                    raise AssertionError(f"commit of {position} kept failing: {error}") from exc
                time.sleep(0.05)

    def owned(self) -> set[tuple[str, int]]:
        with self.lock:
            return set(self.assignment)

    def close(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise AssertionError(f"member {self.name} did not close within {timeout_s}s")


def close_all(members: list[ProtocolMember]) -> None:
    for m in members:
        if not m.closed.is_set():
            m.close()


# --- wire-level calls ------------------------------------------------------------------------------


def connection(bootstrap: str) -> Any:
    """A connection to the first broker of ``bootstrap``."""
    from oncestream.client.common.connection import BrokerConnection, parse_bootstrap

    host, port = parse_bootstrap(bootstrap)
    return BrokerConnection(host, port, client_id="cg-tests", timeout_s=30.0)


def group_connection(bootstrap: str, group_id: str) -> Any:
    """A connection to ``group_id``'s coordinator (tests/support/coordinators.py): the broker
    itself when there is one, the owner of the group's lease on a cluster."""
    from oncestream.client.common.connection import BrokerConnection
    from tests.support.coordinators import find_coordinator

    host, port = find_coordinator(bootstrap, group_id)
    return BrokerConnection(host, port, client_id="cg-tests", timeout_s=30.0)


def heartbeat(bootstrap: str, group_id: str, member_id: str, member_epoch: int, **fields: Any) -> Any:
    """One ConsumerGroupHeartbeat at the newest version both sides have."""
    import datetime

    rebalance_ms = fields.pop("rebalance_timeout_ms", -1)

    def make(m: Any) -> Any:
        owned = fields.pop("topic_partitions", None)
        return m.ConsumerGroupHeartbeatRequest(
            group_id=group_id, member_id=member_id, member_epoch=member_epoch,
            rebalance_timeout=datetime.timedelta(milliseconds=rebalance_ms),
            topic_partitions=None if owned is None else tuple(
                m.TopicPartitions(topic_id=t, partitions=tuple(ps)) for t, ps in owned.items()),
            **fields)

    with group_connection(bootstrap, group_id) as conn:
        return conn.call(CONSUMER_GROUP_HEARTBEAT, make)


def describe(bootstrap: str, group_id: str) -> Any:
    """ConsumerGroupDescribe of one group (at its coordinator): its DescribedGroup."""
    with group_connection(bootstrap, group_id) as conn:
        response = conn.call(CONSUMER_GROUP_DESCRIBE, lambda m: m.ConsumerGroupDescribeRequest(
            group_ids=(group_id,), include_authorized_operations=False))
    (group,) = response.groups
    return group


# --- a member in a child process -------------------------------------------------------------------


class MemberProcess:
    """``python -m tests.support.consumer_protocol`` in a child process (SIGKILL-able)."""

    def __init__(self, bootstrap: str, group_id: str, topic: str, out: Path) -> None:
        self.out = out
        self.argv = [sys.executable, "-m", "tests.support.consumer_protocol", "--bootstrap", bootstrap,
                     "--group", group_id, "--topic", topic, "--out", str(out)]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> MemberProcess:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
        with open(self.out.with_suffix(".log"), "ab") as log:
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=env, cwd=ROOT)
        return self

    def assigned(self) -> set[tuple[str, int]] | None:
        """The latest assignment the child reported (None before the first)."""
        if not self.out.exists():
            return None
        lines = [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]
        return {(t, p) for t, p in lines[-1]["assigned"]} if lines else None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if self.process is not None:
            self.process.wait(30)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    out = Path(args.out)
    owned: set[tuple[str, int]] = set()

    def report() -> None:
        with out.open("a") as f:
            f.write(json.dumps({"assigned": sorted(owned)}) + "\n")

    def on_assign(c: Consumer, partitions: list[TopicPartition]) -> None:
        owned.update((tp.topic, tp.partition) for tp in partitions)
        report()

    def on_revoke(c: Consumer, partitions: list[TopicPartition]) -> None:
        owned.difference_update((tp.topic, tp.partition) for tp in partitions)
        report()

    consumer = Consumer(consumer_config(args.bootstrap, args.group))
    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    while True:  # until SIGKILLed
        consumer.poll(0.1)


if __name__ == "__main__":
    sys.exit(main())
