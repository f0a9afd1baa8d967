"""The command topic's transactional single-writer protocol (issue 12 point 5), on its own: two
writers sharing a service id (so a transactional.id) over a real broker, each with its own
replaying runner and its own copy of a small name registry standing in for the metastore.

The SQL statements, the real metastore and the server processes are exercised by
test_node_server.py and tests/chaos/sql/; this file pins the protocol rules: fencing decides
between concurrent conflicting writes (exactly one wins, every replica agrees), a write returns
only once its own runner applied it, and an unreadable record degrades the replay instead of
being skipped.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from confluent_kafka import Producer as ConfluentProducer

from oncestream.client import Admin
from oncestream.sql.errors import DegradedError, StatementError
from oncestream.sql.server.command_runner import Applied, CommandRunner, CommandState
from oncestream.sql.server.command_topic import CommandWriter, PreparedCommand, command_topic_name, ensure_command_topic

pytestmark = pytest.mark.interop


class Unreadable(Exception):
    """The registry's IncompatibleCommandError."""


@dataclass
class Registry:
    """A deterministic name -> schema map (the metastore's role in this test)."""

    names: dict[str, str] = field(default_factory=dict)
    order: list[tuple[int, str]] = field(default_factory=list)

    def copy(self) -> Registry:
        return Registry(dict(self.names), list(self.order))

    def validate(self, name: str, schema: str) -> PreparedCommand:
        if name in self.names:
            raise StatementError(f"Cannot add stream '{name}': A stream with the same name already exists",
                                 statement_text=name)
        return PreparedCommand(f"stream/`{name}`/create", json.dumps({"name": name, "schema": schema}).encode())

    def apply(self, command: dict, offset: int) -> Applied:
        if command["name"] in self.names:
            raise StatementError("already exists")
        self.names[command["name"]] = command["schema"]
        self.order.append((offset, command["name"]))
        return Applied("Stream created")


def decode(key: bytes | None, value: bytes | None) -> dict:
    try:
        doc = json.loads(value or b"")
        return {"name": doc["name"], "schema": doc["schema"]}
    except (ValueError, KeyError, TypeError) as exc:
        raise Unreadable(str(exc)) from exc


class ToyNode:
    def __init__(self, bootstrap: str, service_id: str) -> None:
        self.registry = Registry()
        conf = {"bootstrap.servers": bootstrap}
        self.topic = command_topic_name(service_id)
        self.admin = Admin(conf)
        ensure_command_topic(self.admin, self.topic)
        self.runner = CommandRunner(topic=self.topic, client_conf=conf, decode=decode, apply=self.registry.apply,
                                    incompatible=(Unreadable,))
        self.runner.start()
        assert self.runner.wait_replayed(30)
        self.writer = CommandWriter(topic=self.topic, service_id=service_id, client_conf=conf, runner=self.runner,
                                    admin=self.admin, timeout_ms=60_000)

    def create(self, name: str, schema: str):
        def snapshot() -> Registry:
            with self.runner.lock:
                return self.registry.copy()

        return self.writer.write(lambda snap: snap.validate(name, schema), snapshot)

    def close(self) -> None:
        self.runner.stop()
        self.admin.close()


@pytest.fixture
def two_nodes(broker) -> Iterator[tuple[ToyNode, ToyNode]]:
    service_id = f"svc_{uuid.uuid4().hex[:8]}_"
    a, b = ToyNode(broker.bootstrap, service_id), ToyNode(broker.bootstrap, service_id)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def test_command_topic_name_is_ksqldbs() -> None:
    """ksqlDB: internal prefix + service id + ``command_topic`` (default id ``default_``)."""
    assert command_topic_name("default_") == "_confluent-ksql-default__command_topic"


def test_concurrent_conflicting_creates_exactly_one_wins(two_nodes: tuple[ToyNode, ToyNode]) -> None:
    """Issue 12: the same name created concurrently on two nodes with different schemas: one
    succeeds, the other is refused by validation; both replicas end up identical."""
    a, b = two_nodes
    names = [f"S{i}" for i in range(20)]
    for name in names:
        outcomes: dict[str, object] = {}
        start = threading.Barrier(2)

        def run(node: ToyNode, schema: str, name: str = name, start: threading.Barrier = start,
                outcomes: dict[str, object] = outcomes) -> None:
            start.wait()
            try:
                outcomes[schema] = node.create(name, schema)
            except StatementError as exc:
                outcomes[schema] = exc

        threads = [threading.Thread(target=run, args=(a, "A")), threading.Thread(target=run, args=(b, "B"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        wins = [s for s, r in outcomes.items() if not isinstance(r, Exception)]
        losses = [s for s, r in outcomes.items() if isinstance(r, StatementError)]
        assert len(wins) == 1, outcomes
        assert len(losses) == 1, outcomes
        result = outcomes[wins[0]]
        assert result.status.state is CommandState.SUCCESS  # type: ignore[attr-defined]
    assert b.runner.wait_position(a.runner.position, 30)
    assert a.runner.wait_position(b.runner.position, 30)
    with a.runner.lock, b.runner.lock:
        assert a.registry == b.registry
        assert sorted(a.registry.names) == sorted(names)


def test_write_returns_after_own_runner_applied_it(two_nodes: tuple[ToyNode, ToyNode]) -> None:
    """The answer carries the command's real status and its offset (commandSequenceNumber)."""
    a, b = two_nodes
    result = a.create("T1", "A")
    assert a.runner.status_at(result.offset) == result.status
    assert result.status.command_id == "stream/`T1`/create"
    with a.runner.lock:
        assert ("T1" in a.registry.names)
        assert a.registry.order[-1] == (result.offset, "T1")
    with pytest.raises(StatementError):
        b.create("T1", "B")  # b caught up before validating: it sees a's command


def test_unreadable_record_degrades_without_skipping(broker) -> None:
    """A garbage record committed to the command topic (by another client, transactionally):
    the replay stops there, the node refuses statements saying why, and never applies what
    follows it."""
    service_id = f"svc_{uuid.uuid4().hex[:8]}_"
    node = ToyNode(broker.bootstrap, service_id)
    try:
        node.create("BEFORE", "A")
        producer = ConfluentProducer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"garbage-{service_id}"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(node.topic, b"\x00\xffnot json", b"stream/`X`/create", partition=0)
        producer.produce(node.topic, json.dumps({"name": "AFTER", "schema": "A"}).encode(), b"stream/`AFTER`/create",
                         partition=0)
        producer.commit_transaction(30)
        assert not node.runner.wait_position(10**9, 30)  # returns as soon as degraded
        assert node.runner.degraded_reason is not None
        assert "cannot be read" in node.runner.degraded_reason
        with pytest.raises(DegradedError, match="degraded mode"):
            node.create("NEW", "A")
        with node.runner.lock:
            assert sorted(node.registry.names) == ["BEFORE"]
    finally:
        node.close()
